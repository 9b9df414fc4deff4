//! `Tokenizer::from_bytes` on untrusted bytes, then encode and decode with whatever it accepts.
//!
//! Input: a mode byte, then
//! - mode % 4 == 0: the rest is the section;
//! - otherwise: byte edits (see `common.rs`) on a base section (the 300-token tables with 2- or
//!   4-byte ids, a SentencePiece section, or, rarely, GPT-2's), so the checks past the header
//!   are reached.
//!
//! An accepted section must keep its promise: every id decodes, and `decode(encode(text))`
//! gives the text back (see `round_trip_text`), for fixed texts and for text taken from the
//! input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use runtime::tokenizer::{format, Tokenizer};
use runtime::Error;

mod common;
use common::{apply_edits, encode_round_trip, SECTIONS};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let (bytes, text) = if mode % 4 == 0 {
        (rest.to_vec(), String::new())
    } else {
        // GPT-2's section is 900 KB: pick it for 1 mode in 16 only
        let name = match mode >> 2 {
            0 => "gpt2",
            m if m % 4 == 1 => "sp",
            m if m % 4 == 3 => "sp-rew",
            m if m % 2 == 0 => "tok300",
            _ => "tok300-w4",
        };
        let base = SECTIONS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b).expect("known section");
        let mut bytes = base.to_vec();
        // the edit records come first; any bytes past 64 records are text to encode
        let (edits, text) = rest.split_at(rest.len().min(256));
        apply_edits(&mut bytes, format::HEADER_BYTES + 2 * format::N_BYTES, edits);
        (bytes, String::from_utf8_lossy(text).into_owned())
    };
    let tok = match Tokenizer::from_bytes(&bytes) {
        Ok(t) => t,
        Err(Error::BadTokenizer { offset }) => {
            assert!(offset as usize <= bytes.len(), "error offset {offset} past the section ({})", bytes.len());
            return;
        }
        Err(e) => panic!("unexpected error {e:?}"),
    };
    let v = tok.vocab_size() as u32;
    let mut out = [0u8; 256];
    for id in 0..v.min(2048) {
        let b = tok.token_text(None, id).expect("ids below vocab_size have bytes");
        if b.len() <= out.len() {
            assert_eq!(tok.decode(&[id], &mut out), Ok(b.len()));
        }
    }
    assert_eq!(tok.decode(&[v], &mut out), Err(Error::InvalidToken { id: v, vocab_size: v }));
    for b in 0..=255u8 {
        if let Some(bl) = tok.as_byte_level() {
            assert_eq!(tok.token_bytes(bl.byte_token(b)), Some(&[b][..]));
        }
    }
    encode_round_trip(&tok, "Hello, world! It's the end — naïve café 🙂\n\n  x");
    encode_round_trip(&tok, &text);
});
