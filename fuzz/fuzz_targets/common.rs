//! Shared by the fuzz targets: the base inputs made by build.rs, aligned buffers, the byte-edit
//! scheme, and a routine that drives a successfully loaded model through every public path.
//!
//! Edits: after a selector byte, the input is read as 4-byte records `[sel, lo, hi, value]`.
//! `sel & 3` picks the region the 16-bit position `lo | hi << 8` points into (0 and 1: the
//! preamble's checked fields and the header, 2: anywhere, scaled to the length, 3: the last 4 KiB,
//! where the tokenizer section lives); `sel & 0x80` XORs the byte with `value` instead of setting
//! it. Two leftover bytes truncate the buffer to a 16-bit fraction of its length.

#![allow(dead_code)]

use std::sync::OnceLock;

use runtime::blob::{self, Preamble};
use runtime::generate::{generate, Control, GenerateOptions};
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::tokenizer::{Tokenizer, Utf8Stream};
use runtime::{Error, KvDType, Model, Session, SessionSizes};

include!(concat!(env!("OUT_DIR"), "/bases.rs"));

/// Bytes in 16-byte aligned memory (the runtime reads blobs in place and checks this).
pub struct Aligned {
    words: Vec<u128>,
    len: usize,
}

impl Aligned {
    pub fn new(bytes: &[u8]) -> Self {
        let mut words = vec![0u128; bytes.len().div_ceil(16)];
        bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Self { words, len: bytes.len() }
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u128, u8>(&self.words)[..self.len]
    }
}

/// Rewrites the preamble's CRC-32 so that edits reach the structural checks (no-op when the
/// preamble itself does not parse).
pub fn fix_crc(bytes: &mut [u8]) {
    let Ok(mut pre) = Preamble::parse(bytes) else { return };
    let Some(covered) = bytes.get(blob::CRC_START..pre.file_len as usize) else { return };
    pre.crc32 = blob::crc32(covered);
    bytes[..blob::PREAMBLE_LEN].copy_from_slice(&pre.to_bytes());
}

/// Applies the edit records of `edits` to `buf` (see the module docs). `header_end` bounds
/// regions 0 and 1.
pub fn apply_edits(buf: &mut Vec<u8>, header_end: usize, edits: &[u8]) {
    let mut records = edits.chunks_exact(4);
    for r in &mut records {
        let (sel, pos, value) = (r[0], u16::from_le_bytes([r[1], r[2]]) as usize, r[3]);
        if buf.is_empty() {
            return;
        }
        let len = buf.len();
        let at = match sel & 3 {
            0 | 1 => {
                let end = header_end.clamp(17, len);
                16 + pos % (end - 16).max(1)
            }
            2 => ((pos * len) >> 16) + usize::from(sel >> 2 & 0x1f),
            _ => len - 1 - pos % len.min(4096),
        };
        if let Some(b) = buf.get_mut(at.min(len - 1)) {
            *b = if sel & 0x80 != 0 { *b ^ value } else { value };
        }
    }
    if let [lo, hi, ..] = *records.remainder() {
        let cut = (u16::from_le_bytes([lo, hi]) as usize * buf.len()) >> 16;
        buf.truncate(cut);
    }
}

/// The GPT-2 tokenizer (validated once per process).
pub fn gpt2() -> &'static Tokenizer<'static> {
    static TOK: OnceLock<Tokenizer<'static>> = OnceLock::new();
    TOK.get_or_init(|| section("gpt2"))
}

/// A base tokenizer section by name, validated.
pub fn section(name: &str) -> Tokenizer<'static> {
    let bytes = SECTIONS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b).expect("known section");
    Tokenizer::from_bytes(bytes).expect("base sections are valid")
}

/// What `decode(encode(text))` gives: the text itself for byte-level BPE and for a SentencePiece
/// section with Llama's settings (byte fallback, a dummy prefix that decoding strips, spaces
/// kept; a literal `▁` comes back as a space); `None` for other SentencePiece settings.
pub fn round_trip_text(tok: &Tokenizer<'_>, text: &str) -> Option<String> {
    use runtime::tokenizer::sentencepiece::format::*;
    let Some(sp) = tok.as_sentencepiece() else { return Some(text.to_string()) };
    let llama = FLAG_BYTE_FALLBACK | FLAG_ADD_DUMMY_PREFIX | FLAG_STRIP_LEADING_SPACE;
    let normalizing = llama | FLAG_REMOVE_EXTRA_WHITESPACES | FLAG_DUMMY_PREFIX_UNLESS_SPACE;
    (sp.flags() & normalizing == llama).then(|| text.replace('\u{2581}', " "))
}

/// Encodes `text` with a buffer that always suffices, checks the round trip through `decode`
/// and through a [`Utf8Stream`] token by token (see [`round_trip_text`]), and returns the ids.
pub fn encode_round_trip(tok: &Tokenizer<'_>, text: &str) -> Vec<u32> {
    let mut ids = vec![0u32; tok.max_encoded_len(text.len())];
    let n = tok.encode(text, &mut ids).expect("out.len() >= max_encoded_len(text.len()) always suffices");
    ids.truncate(n);
    let mut bytes = vec![0u8; 5 * text.len() + 8];
    let m = tok.decode(&ids, &mut bytes).expect("encoded ids decode");
    let mut stream = Utf8Stream::new();
    let mut streamed = String::new();
    let mut prev = None;
    for &id in &ids {
        for piece in stream.push(tok.token_text(prev.replace(id), id).expect("encoded ids are in the vocabulary")) {
            streamed.push_str(piece);
        }
    }
    streamed.push_str(stream.finish());
    assert_eq!(streamed, String::from_utf8_lossy(&bytes[..m]), "Utf8Stream over the tokens != decode");
    if let Some(expected) = round_trip_text(tok, text) {
        assert_eq!(&bytes[..m], expected.as_bytes(), "decode(encode(text)) != text");
    }
    ids
}

/// Drives a model that `from_blob` accepted through every public path with small buffers:
/// accessors, a session per KV dtype (prefill, decode to a full context, the errors at its
/// edges), a short generation with context shifts, and the tokenizer if there is one. Only
/// errors are allowed; a panic here is a bug.
pub fn exercise(model: &Model<'_>, knob: u8) {
    let cfg = *model.config();
    let _ = (model.data_bytes(), model.weight_bytes_per_token(), model.weight_dtype(), model.provenance());
    let _ = (model.wte(), model.wpe(), model.lm_head(), model.ln_f());
    for l in 0..=cfg.n_layer() {
        let _ = model.layer(l);
    }
    let v = cfg.vocab_size;
    // the source vocabulary (a pruned blob's ids back to the checkpoint's; else the identity)
    for id in 0..v.min(512) {
        let src = model.source_id(id).expect("every token has a source id");
        assert!(src < model.source_vocab_size());
        assert_eq!(model.id_from_source(src), Some(id));
    }
    assert_eq!((model.source_id(v), model.id_from_source(model.source_vocab_size())), (None, None));
    if !model.is_pruned() {
        assert_eq!((model.source_vocab_size(), model.source_id(v - 1)), (v, Some(v - 1)));
    }
    let kv = [KvDType::F32, KvDType::F16, KvDType::I8][usize::from(knob % 3)];
    let capacity = cfg.n_ctx().min(4);
    let batch = 1 + usize::from(knob >> 2 & 3);
    let sizes = SessionSizes::with_kv(&cfg, capacity, batch, kv);
    let (mut arena, mut kv_buf) = (vec![0.0f32; sizes.arena_len], vec![0.0f32; sizes.kv_len]);
    {
        let mut s = Session::with_kv_dtype(model, &mut arena, &mut kv_buf, capacity, kv).expect("sized by SessionSizes");
        let prompt = [0, v / 2, v - 1];
        let prompt = &prompt[..capacity.min(3)];
        let logits = s.prefill(prompt).expect("valid prompt");
        assert_eq!(logits.len(), cfg.vocab_size());
        assert_eq!(s.prefill(&[v]), Err(Error::InvalidToken { id: v, vocab_size: v }));
        assert_eq!(s.prefill(&[]), Err(Error::EmptyInput));
        while s.pos() < capacity {
            let _ = s.decode(cfg.eos_token_id).expect("room left");
        }
        assert_eq!(s.decode(0), Err(Error::ContextFull { used: capacity, adding: 1, capacity }));
        s.reset();
        let mut seen = 0;
        s.prefill_each(prompt, |i, l| {
            assert_eq!((i, l.len()), (seen, cfg.vocab_size()));
            seen += 1;
        })
        .expect("valid prompt");
    }
    {
        let mut s = Session::with_kv_dtype(model, &mut arena, &mut kv_buf, capacity, kv).expect("sized by SessionSizes");
        let sampler_cfg = if knob & 0x10 != 0 {
            SamplerConfig { temperature: 0.9, top_k: 8, top_p: 0.9, repetition_penalty: 1.1, seed: u64::from(knob), ..SamplerConfig::greedy() }
        } else {
            SamplerConfig::greedy()
        };
        let mut sampler = Sampler::<8>::new(sampler_cfg).expect("valid sampler config");
        let mut window = vec![0u32; capacity];
        let opts = GenerateOptions { max_tokens: 2 * capacity + 1, stop_at_eos: knob & 0x20 != 0, context_shift: true };
        let mut n = 0;
        let summary = generate(&mut s, &mut sampler, &[0], &mut window, &opts, |id| {
            assert!(id < v, "generated id {id} outside the vocabulary {v}");
            n += 1;
            Control::Continue
        })
        .expect("valid prompt and window");
        assert_eq!(summary.generated, n);
    }
    if let Some(tok) = model.tokenizer() {
        encode_round_trip(tok, "Hello, world! It's 2024 — naïve café 🙂\n\n  x");
    }
}
