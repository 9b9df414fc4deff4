//! Decoding arbitrary token ids (in and out of range) with the GPT-2 tokenizer and a
//! SentencePiece one (whose text of a token depends on the token before: `token_text`).
//!
//! Input: a mode byte, then little-endian u32 ids. Mode bit 0 maps ids into `0..V + 2` so most
//! are valid; otherwise they are used as they come. Checked: `decode` fails exactly with
//! `InvalidToken` for the first id `>= V`; otherwise it writes the concatenated token texts,
//! a short buffer gets `BufferTooSmall` with the exact total, and `Utf8Stream` fed token by
//! token yields `from_utf8_lossy` of those bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use runtime::tokenizer::{Tokenizer, Utf8Stream};
use runtime::Error;

mod common;
use common::{gpt2, section};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    check(gpt2(), mode, rest);
    check(&section("sp"), mode, rest);
});

fn check(tok: &Tokenizer<'_>, mode: u8, rest: &[u8]) {
    let v = tok.vocab_size() as u32;
    let ids: Vec<u32> = rest
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .map(|id| if mode & 1 == 1 { id % (v + 2) } else { id })
        .collect();

    let first_bad = ids.iter().copied().find(|&id| id >= v);
    let mut prev = None;
    let expected: Vec<u8> =
        ids.iter().flat_map(|&id| tok.token_text(prev.replace(id), id).unwrap_or(&[]).iter().copied()).collect();
    let mut out = vec![0u8; expected.len() + usize::from(mode >> 1)];
    match (tok.decode(&ids, &mut out), first_bad) {
        (Ok(n), None) => assert_eq!(&out[..n], &expected[..]),
        (Err(e), Some(id)) => assert_eq!(e, Error::InvalidToken { id, vocab_size: v }),
        (r, bad) => panic!("decode gave {r:?} with first invalid id {bad:?}"),
    }

    // one byte short (or empty): the exact total, unless an id is invalid
    if !expected.is_empty() {
        let short_len = if mode & 2 == 0 { expected.len() - 1 } else { 0 };
        let mut short = vec![0u8; short_len];
        let want = match first_bad {
            Some(id) => Error::InvalidToken { id, vocab_size: v },
            None => Error::BufferTooSmall { needed: expected.len(), available: short_len },
        };
        assert_eq!(tok.decode(&ids, &mut short), Err(want));
    }

    // streaming text, token by token (invalid ids skipped)
    let mut stream = Utf8Stream::new();
    let mut text = String::new();
    let mut prev = None;
    for &id in &ids {
        for piece in stream.push(tok.token_text(prev.replace(id), id).unwrap_or(&[])) {
            text.push_str(piece);
        }
        assert!(stream.pending_len() <= 3);
    }
    text.push_str(stream.finish());
    assert_eq!(text, String::from_utf8_lossy(&expected));
}
