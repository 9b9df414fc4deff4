//! Encoding arbitrary text (`from_utf8_lossy` of the input) with the GPT-2 tokenizer, the
//! 300-token one and two SentencePiece ones, with buffers that suffice and buffers that do not.
//!
//! Checked besides "no panic": `decode(encode(text)) == text`; a short buffer either gives the
//! same ids or `BufferTooSmall { needed, available }` with `available < needed <= text.len()`
//! (`text.len() + 1` for SentencePiece);
//! the tagged merge loop (2-byte ids) and the reference loop (4-byte ids) give the same ids.

#![no_main]

use libfuzzer_sys::fuzz_target;
use runtime::Error;

mod common;
use common::{encode_round_trip, gpt2, section};

fuzz_target!(|data: &[u8]| {
    let Some((&knob, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let tok = gpt2();
    let ids = encode_round_trip(tok, &text);

    // a short buffer: anything from empty to one slot short of the text
    let short_len = match knob >> 6 {
        0 => usize::from(knob & 0x3f),
        1 => ids.len().saturating_sub(usize::from(knob & 0x3f)),
        _ => text.len().saturating_sub(1 + usize::from(knob & 0x3f)),
    };
    let mut short = vec![0u32; short_len];
    match tok.encode(&text, &mut short) {
        Ok(n) => assert_eq!(&short[..n], &ids[..], "a shorter buffer changed the ids"),
        Err(Error::BufferTooSmall { needed, available }) => {
            assert_eq!(available, short_len);
            assert!(available < needed && needed <= text.len().max(1), "needed {needed}, available {available}, text {}", text.len());
        }
        Err(e) => panic!("unexpected error {e:?}"),
    }

    // the same small vocabulary through both merge loops
    let narrow = section("tok300");
    let wide = section("tok300-w4");
    let a = encode_round_trip(&narrow, &text);
    let b = encode_round_trip(&wide, &text);
    assert_eq!(a, b, "tagged and reference merge loops disagree");

    // SentencePiece: Llama's settings, and <unk> with remove_extra_whitespaces
    for name in ["sp", "sp-rew"] {
        let sp = section(name);
        let ids = encode_round_trip(&sp, &text);
        let mut short = vec![0u32; short_len.min(text.len())];
        match sp.encode(&text, &mut short) {
            Ok(n) => assert_eq!(&short[..n], &ids[..], "{name}: a shorter buffer changed the ids"),
            Err(Error::BufferTooSmall { needed, available }) => {
                assert!(available < needed && needed <= text.len() + 1, "{name}: needed {needed}, available {available}, text {}", text.len());
            }
            Err(e) => panic!("{name}: unexpected error {e:?}"),
        }
    }
});
