//! The firmware's one job: load the blob, generate from the fixed prompt with the fixed settings
//! through `runtime::generate::generate` (the code path `host` runs), print what `host` prints on
//! stdout, and report the measurements on stderr. Where stdout and stderr go, what the counter
//! counts and how the program ends is the board's [`Platform`].
//!
//! stdout, exactly as `host --print-ids` prints it:
//! ```text
//! <prompt><generated text>        (only if the blob has a tokenizer)
//! <id>,<id>,...,<id>               (always the last line)
//! ```
//! stderr: board, model, memory, prompt ids, the equivalent `host` arguments, then counts
//! (instructions under QEMU, cycles on hardware) for load, encode, prefill and decode per token,
//! stop reason and stack high-water mark; on hardware also milliseconds and tokens per second.
//! With feature `trace`, also one `digest: pos P layer L resid_post crc32 XXXXXXXX` line per
//! layer per token processed, during generation (what `host trace --digest` prints).

use core::fmt::Write;

use runtime::generate::{generate_observed, Control, GenerateOptions, StopReason};
use runtime::sampler::Sampler;
use runtime::tokenizer::Utf8Stream;
use runtime::{Error, Model, Session};

use crate::counter::{self, spin};
use crate::io::{Counts, Platform, Sink};
use crate::kernels;
use crate::settings::{self, FALLBACK_PROMPT_IDS, MAX_NEW_TOKENS, PROMPT, SAMPLER, TOP_K_CAPACITY};
use crate::{stack, Board};

/// Runs the fixed generation and ends the program: status 0 on success, 1 on any error.
///
/// `arena` and `kv` must hold `SessionSizes::new(config, capacity, 1)`'s `arena_len` and
/// `kv_len` f32 (the board's build script sizes them from the blob), `window` `capacity` ids.
pub fn run<P: Platform>(
    board: &Board,
    blob: &'static [u8],
    arena: &'static mut [f32],
    kv: &'static mut [f32],
    window: &'static mut [u32],
    capacity: usize,
) -> ! {
    // Self-test of the failure paths (build with FIRMWARE_FAULT=panic or =hardfault): the
    // runner must exit with status 1, never hang.
    match option_env!("FIRMWARE_FAULT") {
        Some("panic") => panic!("FIRMWARE_FAULT=panic"),
        Some("hardfault") => cortex_m::asm::udf(), // undefined instruction -> HardFault
        _ => {}
    }
    let mut err = P::stderr();
    let ok = match cortex_m::Peripherals::take() {
        Some(mut p) => {
            P::start_counter(&mut p);
            generate_and_report::<P>(board, blob, arena, kv, window, capacity, &mut err)
                .map_err(|e| writeln!(err, "error: {e}"))
                .is_ok()
        }
        None => false,
    };
    drop(err); // sends what is buffered
    P::exit(ok)
}

/// Converts counter values for the report and names their unit.
struct Clock {
    counts: Counts,
    sysclk_hz: u32,
}

impl Clock {
    /// Counter ticks in the report's unit.
    fn count(&self, ticks: u64) -> u64 {
        match self.counts {
            Counts::Instructions => counter::instructions(ticks, self.sysclk_hz),
            Counts::Cycles => ticks,
        }
    }

    fn unit(&self) -> &'static str {
        match self.counts {
            Counts::Instructions => "instructions",
            Counts::Cycles => "cycles",
        }
    }
}

fn generate_and_report<P: Platform>(
    board: &Board,
    blob: &'static [u8],
    arena: &'static mut [f32],
    kv: &'static mut [f32],
    window: &'static mut [u32],
    capacity: usize,
    err: &mut P::Err,
) -> Result<(), Error> {
    let now = P::now;
    let clock = Clock { counts: P::COUNTS, sysclk_hz: board.sysclk_hz };
    let unit = clock.unit();
    let _ = writeln!(err, "gpt2-mcu firmware: {} ({}, {})", board.name, board.machine, board.cpu);
    let check = clock.count(loop_ticks::<P>(500_000));
    let verb = if P::COUNTS == Counts::Instructions { "counts as" } else { "takes" };
    let _ = writeln!(err, "counter check: a 1000000-instruction loop {verb} {check} {unit}");

    // The integer kernels this build runs (inline assembly with the arm-dsp / arm-helium
    // features) against naive references; a difference ends the run with status 1.
    match kernels::self_check() {
        Ok(cases) => {
            let _ = writeln!(err, "kernels: {}; self-check: {cases} cases equal the naive references", kernels::KERNELS);
        }
        Err(m) => {
            let _ = writeln!(err, "error: kernel self-check ({}): {m}", kernels::KERNELS);
            err.flush();
            P::exit(false)
        }
    }
    // `linear` (on these builds q8 rows run whole in assembly) on random shapes, in the KV
    // cache's memory before the session takes it.
    match kernels::linear_check(kv) {
        Ok(outputs) => {
            let _ = writeln!(err, "linear self-check: {outputs} q8/q4 outputs equal the naive references");
        }
        Err(m) => {
            let _ = writeln!(err, "error: linear self-check ({}): {m}", kernels::KERNELS);
            err.flush();
            P::exit(false)
        }
    }

    // Validate the whole blob once, CRC-32 included (the build script already did the same on
    // the host; this catches flash that differs from what was built).
    let t = now();
    let model = Model::from_blob(blob)?;
    let load_ticks = now() - t;
    let cfg = model.config();
    let tok = model.tokenizer();
    let _ = write!(err, "model: ");
    if cfg.arch != runtime::config::Arch::Gpt2 {
        let _ = write!(err, "{}, ", cfg.arch.name());
    }
    let _ = write!(err, "{} layers", cfg.n_layer);
    if !cfg.local_layers.is_empty() {
        let _ = write!(err, " ({} local, window {})", cfg.local_layers.count(), cfg.attn_window);
    }
    let _ = writeln!(
        err,
        ", n_embd {}, n_head {}, vocab {}, n_ctx {}, {} weights, tokenizer: {}",
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

    // The prompt: encode the text (with a tokenizer; after BOS where the tokenizer says, as a
    // SentencePiece one with add_bos_token does, and as `host --prompt` does) or take the fixed
    // ids. Room for the BOS and for SentencePiece's dummy-prefix space.
    let mut prompt_buf = [0u32; PROMPT.len() + 2];
    let (prompt, encode_ticks) = match tok {
        Some(tok) => {
            let t = now();
            let n = tok.encode_prompt(PROMPT, &mut prompt_buf)?;
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
    let mut out = P::stdout();
    if tok.is_some() {
        out.write_bytes(PROMPT.as_bytes());
    }
    let mut utf8 = Utf8Stream::new();
    let mut prev = prompt.last().copied();
    let mut generated = [0u32; MAX_NEW_TOKENS];
    let mut n_generated = 0;
    let (mut prefill_ticks, mut decode_ticks, mut decode_min, mut decode_max) = (0u64, 0u64, u64::MAX, 0u64);
    let t_start = now();
    let mut t_prev = t_start;
    // The `trace` build: the same run, with one digest line per layer per token on stderr
    // (`host trace --digest` prints the same lines; boards/qemu-digest.sh compares them).
    #[cfg(not(feature = "trace"))]
    let mut observer = runtime::observe::NoObserver;
    #[cfg(feature = "trace")]
    let mut observer = runtime::observe::Digests(|pos, layer, crc| {
        let _ = runtime::observe::write_digest_line(err, pos, layer, crc);
    });
    let summary = generate_observed(&mut session, &mut sampler, prompt, window, &opts, &mut observer, |id| {
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
            // After the token before (the prompt's last for the first): SentencePiece drops a
            // word's ▁ after BOS.
            for piece in utf8.push(tok.token_text(prev.replace(id), id).unwrap_or(&[])) {
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
    // The q8/q4 mat-vec alone: one decode-step call of layer 0's mlp.c_fc (I x C).
    let layer0 = model.layer(0)?;
    let linear_timing = kernels::time_linear(&layer0.mlp_c_fc, layer0.mlp_c_fc_bias.unwrap_or_default(), now);

    // Measurements.
    let per = |ticks: u64, n: usize| clock.count(ticks) / (n.max(1) as u64);
    let _ = writeln!(err, "---");
    let _ = writeln!(
        err,
        "load: {} {unit} (Model::from_blob, CRC-32 of {} B included)",
        clock.count(load_ticks),
        blob.len()
    );
    if let Some(t) = encode_ticks {
        let _ = writeln!(err, "encode: {} {unit} ({} prompt tokens)", clock.count(t), prompt.len());
    }
    let _ = writeln!(
        err,
        "prefill: {} tokens, {} {unit}, {} per token (first token sampled included)",
        prompt.len(),
        clock.count(prefill_ticks),
        per(prefill_ticks, prompt.len())
    );
    let decoded = n_generated.saturating_sub(1);
    if decoded > 0 {
        let _ = writeln!(
            err,
            "decode: {} tokens, {} {unit} per token (min {}, max {}; sampling included)",
            decoded,
            per(decode_ticks, decoded),
            clock.count(decode_min),
            clock.count(decode_max)
        );
    }
    if let Some((pos, forward, sampling)) = breakdown {
        let _ = writeln!(
            err,
            "decode step at position {pos}: forward pass {} + sampling {} {unit}",
            clock.count(forward),
            clock.count(sampling)
        );
    }
    if let Some(t) = linear_timing {
        // Counts per multiply-accumulate, in hundredths.
        let per_mac = |ticks: u64| clock.count(ticks) * 100 / (t.macs.max(1) as u64);
        let (count, centi) = (clock.count(t.linear_ticks), per_mac(t.linear_ticks));
        let _ = write!(
            err,
            "linear: layer 0 mlp.c_fc ({}x{} {}, {} multiply-accumulates): {count} {unit}, {}.{:02} per multiply-accumulate",
            layer0.mlp_c_fc.rows,
            layer0.mlp_c_fc.cols,
            model.weight_dtype().name(),
            t.macs,
            centi / 100,
            centi % 100
        );
        if let Some(dots) = t.dots_ticks {
            let centi = per_mac(dots);
            let _ = write!(err, "; group by group with the group kernels {} ({}.{:02})", clock.count(dots), centi / 100, centi % 100);
        }
        let _ = writeln!(err);
    }
    let _ = writeln!(err, "stack: high-water {stack_used} B of {stack_size} B");
    let hz = board.sysclk_hz;
    let _ = match P::COUNTS {
        Counts::Instructions => {
            writeln!(err, "instruction counts: SysTick ticks x 1e9 / {hz} Hz (valid under -icount shift=0)")
        }
        Counts::Cycles => {
            let _ = writeln!(err, "cycle counts: DWT CYCCNT at {hz} Hz");
            let _ = write!(err, "time: prefill ");
            write_millis(err, per(prefill_ticks, prompt.len()), hz);
            let _ = write!(err, " ms per token, decode ");
            write_millis(err, per(decode_ticks, decoded), hz);
            let _ = write!(err, " ms per token = ");
            write_rate(err, per(decode_ticks, decoded), hz);
            writeln!(err, " tokens/s")
        }
    };
    let _ = match summary.reason {
        StopReason::Eos => writeln!(err, "stopped: end-of-text token after {} tokens", summary.generated),
        StopReason::MaxTokens => writeln!(err, "stopped: {} tokens generated", summary.generated),
        StopReason::Stopped => writeln!(err, "stopped: by the caller"),
        StopReason::ContextFull { capacity } => writeln!(err, "stopped: context full ({capacity} tokens)"),
        StopReason::Error(e) => return Err(e),
    };
    Ok(())
}

/// Counter ticks of [`spin`]`(iterations)`: `2 * iterations` instructions.
#[inline(never)]
fn loop_ticks<P: Platform>(iterations: u32) -> u64 {
    let t = P::now();
    spin(iterations);
    P::now() - t
}

/// `a,b,c\n`
fn write_ids(w: &mut impl Sink, ids: &[u32]) {
    for (i, id) in ids.iter().enumerate() {
        let _ = if i == 0 { write!(w, "{id}") } else { write!(w, ",{id}") };
    }
    let _ = writeln!(w);
}

/// `cycles` at `hz` as milliseconds with 2 decimals, e.g. `61.13` (integer arithmetic: the
/// firmware does not link core's float formatting).
fn write_millis(w: &mut impl Sink, cycles: u64, hz: u32) {
    let centi_ms = cycles.saturating_mul(100_000) / u64::from(hz.max(1));
    let _ = write!(w, "{}.{:02}", centi_ms / 100, centi_ms % 100);
}

/// How many `cycles`-long steps fit in a second at `hz`, with 2 decimals, e.g. `16.36`.
fn write_rate(w: &mut impl Sink, cycles: u64, hz: u32) {
    let centi = u64::from(hz).saturating_mul(100) / cycles.max(1);
    let _ = write!(w, "{}.{:02}", centi / 100, centi % 100);
}
