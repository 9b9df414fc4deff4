//! The fixed run every firmware performs: prompt, sampling settings, token budget, context.
//! They are also where the serial console starts ([`console_settings`]).
//!
//! The firmware prints these on stderr as the equivalent `host` arguments (see
//! [`write_host_args`]), and `boards/qemu-check.sh` runs `host` with exactly those arguments, so
//! this file is the one place the settings live.

use runtime::sampler::SamplerConfig;

/// Prompt text, used when the blob has a tokenizer. Printable ASCII only (checked below), so the
/// check script can pass it to `host --prompt` verbatim.
pub const PROMPT: &str = "To be, or not to be, that is the question:";

/// Prompt ids when the blob has no tokenizer (GPT-2's ids of "The quick brown fox"), each taken
/// modulo the model's `vocab_size`.
pub const FALLBACK_PROMPT_IDS: [u32; 4] = [464, 2068, 7586, 21831];

/// New tokens to generate at most (fewer if the model emits end-of-text or the context fills).
pub const MAX_NEW_TOKENS: usize = 48;

/// Sampling: temperature 0.8, top-k 40, top-p 0.95, no repetition penalty, seed 42.
pub const SAMPLER: SamplerConfig =
    SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.0, seed: 42 };

/// Capacity `K` of the board's `Sampler<K>` (2·K candidates, 16·K bytes): exactly the top-k in
/// use. The host's sampler is larger (`Sampler<1024>`); with `top_k <= K` both keep the same
/// `2·top_k` candidates, so they draw the same tokens.
pub const TOP_K_CAPACITY: usize = 40;

/// Capacity `K` of the console's `Sampler<K>` (16 KiB of stack while a reply runs), on the
/// boards and in `host console`: the same as `host --prompt`'s, so that every `/top-k` up to it
/// is accepted and, with top-k off and top-p below 1 too (where `K` decides which kept tokens
/// the draw walks), each reply is what `host --prompt` prints.
pub const CONSOLE_TOP_K_CAPACITY: usize = 1024;

/// The console's chat template (`/chat on`).
pub const CHAT_TEMPLATE: &str = gpt2_console::DEFAULT_TEMPLATE;

/// The settings the console starts with: the fixed run's ([`MAX_NEW_TOKENS`], [`SAMPLER`]),
/// chat off; `echo` is the port's (on for a terminal on a real board's UART, off for QEMU and
/// the desktop, whose input is a pipe or a terminal that echoes itself).
pub const fn console_settings(echo: bool) -> gpt2_console::Settings {
    gpt2_console::Settings { max_tokens: MAX_NEW_TOKENS, sampler: SAMPLER, chat: false, echo }
}

/// KV-cache capacity in tokens: this, or the model's `n_ctx` if smaller.
pub const CTX_MAX: usize = 128;

/// Context capacity for a model with `n_ctx` positions.
pub const fn capacity(n_ctx: usize) -> usize {
    if n_ctx < CTX_MAX {
        n_ctx
    } else {
        CTX_MAX
    }
}

/// Tokens per prefill batch: the arena holds this many rows, and each weight row is read once
/// per batch (the runtime's prefill kernels block 4 tokens per weight load).
pub const PREFILL_BATCH: usize = 1;

/// Stop at the end-of-text token, as `host` does by default.
pub const STOP_AT_EOS: bool = true;

/// Storage of the KV cache: int8 with a scale per head per position, the setting that fits
/// the default model in 192 KiB of RAM on a real board (`host --kv-dtype int8`).
pub const KV_DTYPE: runtime::KvDType = runtime::KvDType::I8;

/// The `host --kv-dtype` value for [`KV_DTYPE`].
pub const fn kv_dtype_arg() -> &'static str {
    match KV_DTYPE {
        runtime::KvDType::F32 => "f32",
        runtime::KvDType::F16 => "f16",
        runtime::KvDType::I8 => "int8",
    }
}

const fn printable_ascii(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] < 0x20 || b[i] > 0x7e {
            return false;
        }
        i += 1;
    }
    !b.is_empty()
}
const _: () = assert!(printable_ascii(PROMPT), "PROMPT must be non-empty printable ASCII");
const _: () = assert!(SAMPLER.top_k <= TOP_K_CAPACITY, "top_k exceeds the sampler capacity");

/// Writes the `host` arguments that reproduce this run (everything but `--model` and the
/// prompt), e.g. `-n 48 --temperature 0.8 --top-k 40 --top-p 0.95 --repetition-penalty 1
/// --seed 42 --ctx 128`.
pub fn write_host_args(w: &mut impl core::fmt::Write, capacity: usize) -> core::fmt::Result {
    let s = &SAMPLER;
    write!(w, "-n {MAX_NEW_TOKENS} --temperature ")?;
    write_decimal(w, s.temperature)?;
    write!(w, " --top-k {} --top-p ", s.top_k)?;
    write_decimal(w, s.top_p)?;
    w.write_str(" --repetition-penalty ")?;
    write_decimal(w, s.repetition_penalty)?;
    write!(w, " --seed {} --ctx {capacity} --kv-dtype {}", s.seed, kv_dtype_arg())?;
    if !STOP_AT_EOS {
        w.write_str(" --ignore-eos")?;
    }
    Ok(())
}

/// Writes a non-negative `x` with at most 6 decimals, trailing zeros dropped (`0.8`, `0.95`,
/// `1`): integer arithmetic only, so the firmware does not link core's float formatting
/// (about 15 KB). The board build script checks that `host` parses each setting written this
/// way back to the same f32 (`check_round_trip`). (The console prints its settings the same
/// way; the one definition is `gpt2_console::text::write_decimal`.)
pub use gpt2_console::text::write_decimal;

/// Checks that every f32 setting survives [`write_decimal`] and parsing (what `host` does with
/// the printed arguments). Run by the board build scripts.
#[cfg(feature = "build")]
pub fn check_round_trip() -> Result<(), String> {
    let s = &SAMPLER;
    for (name, x) in [("temperature", s.temperature), ("top_p", s.top_p), ("repetition_penalty", s.repetition_penalty)]
    {
        let mut text = String::new();
        write_decimal(&mut text, x).map_err(|e| e.to_string())?;
        if text.parse::<f32>() != Ok(x) || !(x >= 0.0) {
            return Err(format!("settings::SAMPLER.{name} = {x:?} prints as {text}, which parses to another f32"));
        }
    }
    Ok(())
}
