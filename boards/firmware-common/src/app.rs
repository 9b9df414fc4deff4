//! The firmware's one job: load the blob, generate from the fixed prompt with the fixed settings
//! through `runtime::generate::generate` (the code path `host` runs), print what `host` prints on
//! stdout, and report the measurements on stderr.
//!
//! stdout, exactly as `host --print-ids` prints it:
//! ```text
//! <prompt><generated text>        (only if the blob has a tokenizer)
//! <id>,<id>,...,<id>               (always the last line)
//! ```
//! stderr: board, model, memory, prompt ids, the equivalent `host` arguments, then instruction
//! counts (load, encode, prefill, decode per token), stop reason and stack high-water mark.

use core::fmt::Write;

use runtime::generate::{generate, Control, GenerateOptions, StopReason};
use runtime::sampler::Sampler;
use runtime::tokenizer::Utf8Stream;
use runtime::{Error, Model, Session};

use crate::counter::{self, now};
use crate::io::{exit, Out};
use crate::settings::{self, FALLBACK_PROMPT_IDS, MAX_NEW_TOKENS, PROMPT, SAMPLER, TOP_K_CAPACITY};
use crate::{stack, Board};

/// Runs the fixed generation and exits QEMU: status 0 on success, 1 on any error.
///
/// `arena` and `kv` must hold `SessionSizes::new(config, capacity, 1)`'s `arena_len` and
/// `kv_len` f32 (the board's build script sizes them from the blob), `window` `capacity` ids.
pub fn run(
    board: &Board,
    blob: &'static [u8],
    arena: &'static mut [f32],
    kv: &'static mut [f32],
    window: &'static mut [u32],
    capacity: usize,
) -> ! {
    let mut err = Out::stderr();
    // Self-test of the failure paths (build with FIRMWARE_FAULT=panic or =hardfault): QEMU must
    // exit with status 1, never hang.
    match option_env!("FIRMWARE_FAULT") {
        Some("panic") => panic!("FIRMWARE_FAULT=panic"),
        Some("hardfault") => cortex_m::asm::udf(), // undefined instruction -> HardFault
        _ => {}
    }
    let ok = match cortex_m::Peripherals::take() {
        Some(mut p) => {
            counter::start(&mut p.SYST);
            match generate_and_report(board, blob, arena, kv, window, capacity, &mut err) {
                Ok(()) => true,
                Err(e) => {
                    let _ = writeln!(err, "error: {e}");
                    false
                }
            }
        }
        None => false,
    };
    err.flush();
    exit(ok)
}

/// Per-phase tick counts, converted to instructions when printed.
struct Clock {
    sysclk_hz: u32,
}

impl Clock {
    fn insns(&self, ticks: u64) -> u64 {
        counter::instructions(ticks, self.sysclk_hz)
    }
}

fn generate_and_report(
    board: &Board,
    blob: &'static [u8],
    arena: &'static mut [f32],
    kv: &'static mut [f32],
    window: &'static mut [u32],
    capacity: usize,
    err: &mut Out,
) -> Result<(), Error> {
    let clock = Clock { sysclk_hz: board.sysclk_hz };
    let _ = writeln!(err, "gpt2-mcu firmware: {} ({}, {})", board.name, board.machine, board.cpu);
    let check = clock.insns(counter::loop_ticks(500_000));
    let _ = writeln!(err, "counter check: a 1000000-instruction loop counts as {check} instructions");

    // Validate the whole blob once, CRC-32 included (the build script already did the same on
    // the host; this catches flash that differs from what was built).
    let t = now();
    let model = Model::from_blob(blob)?;
    let load_ticks = now() - t;
    let cfg = *model.config();
    let tok = model.tokenizer();
    let _ = writeln!(
        err,
        "model: {} layers, n_embd {}, n_head {}, vocab {}, n_ctx {}, {} weights, tokenizer: {}",
        cfg.n_layer,
        cfg.n_embd,
        cfg.n_head,
        cfg.vocab_size,
        cfg.n_ctx,
        model.weight_dtype().name(),
        if tok.is_some() { "yes" } else { "no" }
    );
    let _ = writeln!(err, "blob: {} B at {:#010x} ({})", blob.len(), blob.as_ptr() as usize, board.model_region);
    let (arena_at, kv_at) = (arena.as_ptr() as usize, kv.as_ptr() as usize);

    let mut session = Session::with_kv_dtype(&model, arena, kv, capacity, settings::KV_DTYPE)?;
    let (arena_bytes, kv_bytes) = session.memory_bytes();
    let _ = writeln!(
        err,
        "memory: arena {arena_bytes} B at {arena_at:#010x} + KV cache {kv_bytes} B at {kv_at:#010x} ({}), capacity {capacity} tokens",
        board.buffer_region
    );

    // The prompt: encode the text (with a tokenizer) or take the fixed ids.
    let mut prompt_buf = [0u32; PROMPT.len()];
    let (prompt, encode_ticks) = match tok {
        Some(tok) => {
            let t = now();
            let n = tok.encode(PROMPT, &mut prompt_buf)?;
            (&prompt_buf[..n], Some(now() - t))
        }
        None => {
            for (slot, &id) in prompt_buf.iter_mut().zip(&FALLBACK_PROMPT_IDS) {
                *slot = id % cfg.vocab_size;
            }
            (&prompt_buf[..FALLBACK_PROMPT_IDS.len()], None)
        }
    };
    if tok.is_some() {
        let _ = writeln!(err, "prompt: {PROMPT}");
    }
    let _ = write!(err, "prompt ids: ");
    write_ids(err, prompt);
    let _ = write!(err, "host args: ");
    let _ = settings::write_host_args(err, capacity);
    let _ = writeln!(err);
    err.flush();

    // Generate, streaming the text as host does. The instruction counts exclude the printing:
    // each token's count runs from the end of the previous callback to the start of this one.
    let mut sampler = Sampler::<TOP_K_CAPACITY>::new(SAMPLER)?;
    let opts = GenerateOptions { max_tokens: MAX_NEW_TOKENS, stop_at_eos: settings::STOP_AT_EOS, context_shift: false };
    let mut out = Out::stdout();
    if tok.is_some() {
        out.write_bytes(PROMPT.as_bytes());
    }
    let mut utf8 = Utf8Stream::new();
    let mut generated = [0u32; MAX_NEW_TOKENS];
    let mut n_generated = 0;
    let (mut prefill_ticks, mut decode_ticks, mut decode_min, mut decode_max) = (0u64, 0u64, u64::MAX, 0u64);
    let t_start = now();
    let mut t_prev = t_start;
    let summary = generate(&mut session, &mut sampler, prompt, window, &opts, |id| {
        let t_in = now();
        let ticks = t_in - t_prev;
        if n_generated == 0 {
            prefill_ticks = ticks;
        } else {
            decode_ticks += ticks;
            decode_min = decode_min.min(ticks);
            decode_max = decode_max.max(ticks);
        }
        if let Some(slot) = generated.get_mut(n_generated) {
            *slot = id;
            n_generated += 1;
        }
        if let Some(tok) = tok {
            for piece in utf8.push(tok.token_bytes(id).unwrap_or(&[])) {
                out.write_bytes(piece.as_bytes());
            }
            out.flush();
        }
        t_prev = now();
        Control::Continue
    })?;
    if tok.is_some() {
        out.write_bytes(utf8.finish().as_bytes());
        out.write_bytes(b"\n");
    }
    write_ids(&mut out, &generated[..n_generated]);
    out.flush();
    let (stack_used, stack_size) = stack::high_water();

    // Where a decode step goes: one more step after the run (nothing printed above depends on
    // it), timed as the forward pass alone and then one draw from its logits.
    let mut breakdown = None;
    if let (Some(&last), true) = (generated[..n_generated].last(), session.pos() < session.capacity()) {
        let pos = session.pos();
        let t = now();
        let logits = session.decode(last)?;
        let forward = now() - t;
        let t = now();
        sampler.sample(logits, &[])?;
        breakdown = Some((pos, forward, now() - t));
    }

    // Measurements.
    let per = |ticks: u64, n: usize| clock.insns(ticks) / (n.max(1) as u64);
    let _ = writeln!(err, "---");
    let _ = writeln!(
        err,
        "load: {} instructions (Model::from_blob, CRC-32 of {} B included)",
        clock.insns(load_ticks),
        blob.len()
    );
    if let Some(t) = encode_ticks {
        let _ = writeln!(err, "encode: {} instructions ({} prompt tokens)", clock.insns(t), prompt.len());
    }
    let _ = writeln!(
        err,
        "prefill: {} tokens, {} instructions, {} per token (first token sampled included)",
        prompt.len(),
        clock.insns(prefill_ticks),
        per(prefill_ticks, prompt.len())
    );
    let decoded = n_generated.saturating_sub(1);
    if decoded > 0 {
        let _ = writeln!(
            err,
            "decode: {} tokens, {} instructions per token (min {}, max {}; sampling included)",
            decoded,
            per(decode_ticks, decoded),
            clock.insns(decode_min),
            clock.insns(decode_max)
        );
    }
    if let Some((pos, forward, sampling)) = breakdown {
        let _ = writeln!(
            err,
            "decode step at position {pos}: forward pass {} + sampling {} instructions",
            clock.insns(forward),
            clock.insns(sampling)
        );
    }
    let _ = writeln!(err, "stack: high-water {stack_used} B of {stack_size} B");
    let _ =
        writeln!(err, "instruction counts: SysTick ticks x 1e9 / {} Hz (valid under -icount shift=0)", board.sysclk_hz);
    let _ = match summary.reason {
        StopReason::Eos => writeln!(err, "stopped: end-of-text token after {} tokens", summary.generated),
        StopReason::MaxTokens => writeln!(err, "stopped: {} tokens generated", summary.generated),
        StopReason::Stopped => writeln!(err, "stopped: by the caller"),
        StopReason::ContextFull { capacity } => writeln!(err, "stopped: context full ({capacity} tokens)"),
        StopReason::Error(e) => return Err(e),
    };
    Ok(())
}

/// `a,b,c\n`
fn write_ids(w: &mut Out, ids: &[u32]) {
    for (i, id) in ids.iter().enumerate() {
        let _ = if i == 0 { write!(w, "{id}") } else { write!(w, ",{id}") };
    }
    let _ = writeln!(w);
}
