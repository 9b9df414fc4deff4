//! The crate README's example, as a library for a Cortex-M target (`cargo build -p runtime
//! --example firmware --target thumbv7em-none-eabihf`, in CI): a board's program body with the
//! blob in flash and the buffers in statics sized by `SessionSizes`. The code below this header
//! is the README's code block without its hidden doctest lines (a test checks that they agree).

#![no_std]

use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicBool, Ordering};

use runtime::generate::{generate, Control, GenerateOptions, Summary};
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::tokenizer::Utf8Stream;
use runtime::{Config, Error, KvDType, Model, Session, SessionSizes};

/// 16-byte alignment, which the runtime needs to read the blob's tensors in place.
#[repr(C, align(16))]
pub struct Aligned<T: ?Sized>(pub T);
/// The model blob, compiled into flash.
pub static BLOB: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../models/default/model-q8.blob")));

/// The shipped model's shape, so that the buffers are sized at compile time.
pub const CONFIG: Config = Config { n_inner: 288, ..Config::gpt2(3072, 128, 112, 4, 4) };
/// Tokens the KV cache holds.
pub const CAPACITY: usize = 128;
/// The buffers' sizes: int8 keys and values, one token per prefill batch.
pub const SIZES: SessionSizes = SessionSizes::with_kv(&CONFIG, CAPACITY, 1, KvDType::I8);

static mut ARENA: [f32; SIZES.arena_len] = [0.0; SIZES.arena_len]; // activations + logits
static mut KV: [f32; SIZES.kv_len] = [0.0; SIZES.kv_len]; // (n_layer, 2, CAPACITY, n_embd) int8 + scales
static mut WINDOW: [u32; CAPACITY] = [0; CAPACITY]; // the token ids in the cache
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The static buffers, the first time only.
pub fn buffers() -> Option<(&'static mut [f32], &'static mut [f32], &'static mut [u32])> {
    if TAKEN.swap(true, Ordering::Relaxed) {
        return None;
    }
    // SAFETY: TAKEN lets this line run once, so these are the only references to the buffers.
    unsafe { Some((&mut *addr_of_mut!(ARENA), &mut *addr_of_mut!(KV), &mut *addr_of_mut!(WINDOW))) }
}

/// Up to 48 tokens after `prompt` (at most 64 bytes), each piece of text passed to `emit` as
/// soon as it is drawn.
pub fn tell(
    arena: &mut [f32],
    kv: &mut [f32],
    window: &mut [u32],
    prompt: &str,
    mut emit: impl FnMut(&str),
) -> Result<Summary, Error> {
    // validate the blob once: magic, version, CRC-32, every shape and byte range
    let model = Model::from_blob(&BLOB.0)?;
    // the buffers as SessionSizes sized them (a blob of another shape: ArenaTooSmall, ...)
    let mut session = Session::with_kv_dtype(&model, arena, kv, CAPACITY, KvDType::I8)?;
    let tok = model.tokenizer().ok_or(Error::NoTokenizer)?;
    // a SentencePiece (Llama) tokenizer starts a prompt with BOS; GPT-2's has no prefix
    let mut ids = [0u32; 66];
    let n = tok.encode_prompt(prompt, &mut ids)?;
    let settings = SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.0, seed: 42 };
    let mut sampler = Sampler::<40>::new(settings)?; // 40 candidates: 640 bytes
    let opts = GenerateOptions { max_tokens: 48, stop_at_eos: true, context_shift: false };
    let mut text = Utf8Stream::new(); // a token can end inside a UTF-8 character
    let mut prev = ids[..n].last().copied(); // SentencePiece drops a word's ▁ after BOS
    let summary = generate(&mut session, &mut sampler, &ids[..n], window, &opts, |id| {
        for piece in text.push(tok.token_text(prev.replace(id), id).unwrap_or(&[])) {
            emit(piece);
        }
        Control::Continue
    })?;
    emit(text.finish());
    Ok(summary)
}
