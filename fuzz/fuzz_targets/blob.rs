//! `Model::from_blob` on untrusted bytes, then the forward pass on whatever it accepts.
//!
//! Input: a mode byte, then
//! - mode % 4 == 0: the rest is the blob, copied into 16-byte aligned memory and given to both
//!   `from_blob` and `from_blob_prechecked` (which skips the CRC, so random bytes reach the
//!   header decoder and the tensor-table checks);
//! - otherwise: byte edits (see `common.rs`) on base blob number `mode / 4 % 7` (a converted
//!   fixture); then, when mode bit 7 is set, the CRC is recomputed and `from_blob` runs, else
//!   `from_blob_prechecked` (the same checks without the CRC pass): either way the corruption
//!   reaches the structural checks.
//!
//! A blob that loads is run through `common::exercise` (prefill, decode to a full context,
//! generation with context shifts, the tokenizer round trip).

#![no_main]

use libfuzzer_sys::fuzz_target;
use runtime::blob::{Preamble, PREAMBLE_LEN};
use runtime::Model;

mod common;
use common::{apply_edits, exercise, fix_crc, Aligned, BLOBS};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode % 4 == 0 {
        let buf = Aligned::new(rest);
        if let Ok(model) = Model::from_blob(buf.bytes()) {
            exercise(&model, mode >> 2);
        }
        if let Ok(model) = Model::from_blob_prechecked(buf.bytes()) {
            exercise(&model, mode >> 2);
        }
        return;
    }
    let (_, base) = BLOBS[usize::from(mode / 4) % BLOBS.len()];
    let header_end = Preamble::parse(base).map_or(PREAMBLE_LEN, |p| PREAMBLE_LEN + p.header_len as usize);
    let mut bytes = base.to_vec();
    apply_edits(&mut bytes, header_end, rest);
    // With the CRC fixed, `from_blob` is `from_blob_prechecked` after a CRC pass; the pass costs
    // more than everything else here, so most inputs skip it.
    let checked = mode & 0x80 != 0;
    if checked {
        fix_crc(&mut bytes);
    }
    let buf = Aligned::new(&bytes);
    let loaded = if checked { Model::from_blob(buf.bytes()) } else { Model::from_blob_prechecked(buf.bytes()) };
    if let Ok(model) = loaded {
        exercise(&model, mode);
    }
});
