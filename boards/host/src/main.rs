//! `host`: the desktop emulator. Runs the same no_std runtime a board runs (model, session,
//! tokenizer, sampler, generation loop), with std around it for files and the terminal.
//! `host console` (src/console.rs) runs the boards' serial console on stdin and stdout.

mod console;
mod pool;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use host_tools::bandwidth::median;
use host_tools::blob_file::{BlobFile, HugeMem};
use host_tools::plan::{KvArg, Plan, Target};
use runtime::generate::{generate, Control, GenerateOptions, StopMatcher, StopReason};
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::tokenizer::{Tokenizer, Utf8Stream};
use runtime::kv_cache::KvLayout;
use runtime::{KvDType, Model, Session, SessionSizes};

mod trace;
mod tutorial;

/// The default model shipped in the repository.
/// How the demo opens the shipped model's text (`cargo run -p host` with no arguments): the
/// firmware's fixed prompt, so the demo continues what every board prints. The rest of the demo
/// is `-n 256` with context shift and the sampling defaults (the help text names the command).
const DEMO_PROMPT: &str = firmware_common::settings::PROMPT;
const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/default/model.blob");
/// The shipped model as the boards' firmware runs it (q8): `host console`'s and `trace --digest`'s default.
const FIRMWARE_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/default/model-q8.blob");

/// Candidates the host's sampler can keep (upper bound for --top-k).
const MAX_TOP_K: usize = 1024;

#[derive(Parser)]
#[command(
    name = "host",
    version,
    about = "GPT-2 on the desktop, with the same no_std runtime the microcontroller runs",
    args_conflicts_with_subcommands = true,
    allow_negative_numbers = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    gen: GenerateArgs,
}

#[derive(Args, Clone)]
struct ModelArg {
    /// Model blob (made by `host-tools convert`). Default: the model shipped in the repo.
    #[arg(long, default_value = DEFAULT_MODEL, hide_default_value = true)]
    model: PathBuf,
    /// Storage of the KV cache: f32, f16 or int8 (one scale per head per position). Default:
    /// f32; with --board, the firmware's (int8).
    #[arg(long, value_enum)]
    kv_dtype: Option<KvArg>,
}

impl ModelArg {
    /// The KV dtype without --board.
    fn kv(&self) -> KvDType {
        self.kv_dtype.map_or(KvDType::F32, KvArg::dtype)
    }
}

/// The sampler's options, shared by generation and `host trace`.
#[derive(Args, Clone)]
pub(crate) struct SamplingArgs {
    /// Always take the most likely token (same as --temperature 0).
    #[arg(long)]
    greedy: bool,
    /// Softmax temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// Keep the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Nucleus sampling threshold in (0, 1] (1 = off).
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Repetition penalty (1 = off, >1 discourages repeats).
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f32,
    /// PRNG seed (the same seed draws the same tokens on every target).
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

impl SamplingArgs {
    /// The sampler's configuration (`--greedy` is temperature 0).
    pub(crate) fn config(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: if self.greedy { 0.0 } else { self.temperature },
            top_k: self.top_k,
            top_p: self.top_p,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
        }
    }
}

#[derive(Args, Clone)]
struct GenerateArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Prompt text (needs a blob with a tokenizer). Without --prompt or --ids, the shipped model
    /// starts from the demo's prompt and any other blob from its beginning-of-text token.
    #[arg(long, conflicts_with = "ids")]
    prompt: Option<String>,
    /// Prompt token ids, comma-separated.
    #[arg(long, value_delimiter = ',')]
    ids: Option<Vec<u32>>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "max-tokens", default_value_t = 256)]
    n: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Stop when this text is generated (it is not printed).
    #[arg(long)]
    stop: Option<String>,
    /// Keep going past the end of text token.
    #[arg(long)]
    ignore_eos: bool,
    /// When the context is full, keep its last half, re-prefill and continue (else stop). On by
    /// default when neither --prompt nor --ids is given (the demo).
    #[arg(long)]
    context_shift: bool,
    /// KV-cache capacity in tokens (default: the model's n_ctx).
    #[arg(long)]
    ctx: Option<usize>,
    /// Print the generated ids, comma-separated, as the last line of stdout.
    #[arg(long)]
    print_ids: bool,
    #[command(flatten)]
    source: SourceIdsArg,
    #[command(flatten)]
    board: BoardArg,
    #[command(flatten)]
    threads: ThreadsArg,
}

#[derive(Args, Clone)]
struct ThreadsArg {
    /// Threads for the matrix products (results are bit-identical for any count).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
}

impl ThreadsArg {
    /// The pool, or None for one thread.
    fn pool(&self) -> Result<Option<Threads>> {
        let n = usize::from(self.threads);
        if n <= 1 {
            return Ok(None);
        }
        // n - 1 workers: the calling thread runs a share too
        let pool = pool::Pool::new(n).context("starting the worker threads")?;
        Ok(Some(Threads { pool }))
    }
}

/// The desktop's worker threads, lent to a session for its matrix products.
struct Threads {
    pool: pool::Pool,
}

impl runtime::kernels::Parallel for Threads {
    fn threads(&self) -> usize {
        self.pool.threads()
    }

    fn run(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        self.pool.run(n, task);
    }

    fn with_buffer(&self, len: usize, f: &mut dyn FnMut(&mut [f32])) {
        pool::with_buffer(len, f);
    }
}

#[derive(Args, Clone)]
struct SourceIdsArg {
    /// Token ids given and printed are ids of the source vocabulary, the checkpoint's own (a
    /// blob converted with --keep-vocab has its own dense ids; without pruning both are the
    /// same). A source id that pruning dropped is an error.
    #[arg(long)]
    source_ids: bool,
}

impl SourceIdsArg {
    /// The blob's ids of `ids` (source ids with --source-ids, else as they are).
    fn given(&self, model: &Model<'_>, ids: &[u32]) -> Result<Vec<u32>> {
        if !self.source_ids {
            return Ok(ids.to_vec());
        }
        ids.iter().map(|&src| model_id(model, src)).collect()
    }

    /// `ids` as printed: source ids with --source-ids, else as they are.
    fn shown(&self, model: &Model<'_>, ids: &[u32]) -> Vec<u32> {
        if !self.source_ids {
            return ids.to_vec();
        }
        ids.iter().map(|&id| model.source_id(id).unwrap_or(u32::MAX)).collect()
    }
}

/// The blob's id of source-vocabulary id `src`, or an error that names it.
fn model_id(model: &Model<'_>, src: u32) -> Result<u32> {
    let source_vocab = model.source_vocab_size();
    if src >= source_vocab {
        bail!("source token id {src} is out of range (source vocabulary {source_vocab} tokens)");
    }
    model.id_from_source(src).with_context(|| {
        format!(
            "source token id {src} was pruned from this blob's vocabulary ({} of {source_vocab} tokens kept; convert with a --keep-vocab text that uses it)",
            model.config().vocab_size
        )
    })
}

#[derive(Args, Clone)]
struct BoardArg {
    /// Run within a board's memory (`host-tools plan --list-boards`): fail with the byte counts
    /// if the model, arena and KV cache do not fit it, else allocate what its firmware would
    /// (context min(128, n_ctx) unless --ctx, KV cache int8 unless --kv-dtype, prefill batch 1).
    #[arg(long, value_name = "NAME")]
    board: Option<String>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write float32 logits [n_ids, vocab_size] for a sequence of ids to a .npy file (with
    /// --source-ids: [n_ids, source vocab_size], the columns of pruned tokens at -inf).
    Logits {
        #[command(flatten)]
        model: ModelArg,
        /// Token ids, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        ids: Vec<u32>,
        /// Output .npy file.
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        source: SourceIdsArg,
        #[command(flatten)]
        board: BoardArg,
    },
    /// Print the token ids of a text, comma-separated, as the last line of stdout.
    Tokenize {
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        source: SourceIdsArg,
        /// Text to encode.
        #[arg(long, conflicts_with = "file", required_unless_present = "file")]
        text: Option<String>,
        /// File whose contents to encode (UTF-8).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Start with BOS, as a prompt does (the tokenizer's BOS, else the model's
        /// bos_token_id). Without it the ids are the tokenizer's alone (`sp.encode(text)`).
        #[arg(long)]
        bos: bool,
    },
    /// Print the text of a list of token ids.
    Detokenize {
        #[command(flatten)]
        model: ModelArg,
        #[command(flatten)]
        source: SourceIdsArg,
        /// Token ids, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        ids: Vec<u32>,
    },
    /// Mean cross-entropy (nats/token) and perplexity of a text file, with a sliding window
    /// (stride half the window) when it is longer than the context.
    Perplexity {
        #[command(flatten)]
        model: ModelArg,
        /// Text file (UTF-8).
        #[arg(long)]
        file: PathBuf,
        /// Window in tokens (default: the model's n_ctx).
        #[arg(long)]
        ctx: Option<usize>,
    },
    /// Inside the model: every stage of the pass as arrays, JSON and a page (--out DIR); the
    /// tutorial's example from token ids to a sampled next token (--tutorial); per-layer
    /// digests of the firmware's run (--digest).
    #[command(long_about = trace::LONG_ABOUT)]
    Trace(trace::TraceArgs),
    /// The boards' serial console on stdin/stdout: a line is a prompt, /help lists the commands.
    /// Starts with the firmware's settings (48 tokens, T 0.8, top-k 40, top-p 0.95, seed 42,
    /// context min(128, n_ctx), KV cache int8) and prints what the console firmware prints.
    Console(console::ConsoleArgs),
    /// Measure prefill and decode speed (tokens/s, median of several runs).
    Bench {
        #[command(flatten)]
        model: ModelArg,
        /// Prompt length for the prefill measurement.
        #[arg(long, default_value_t = 128)]
        prompt_len: usize,
        /// Tokens to decode after the prompt.
        #[arg(short = 'n', long = "max-tokens", default_value_t = 32)]
        n: usize,
        /// Repetitions (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Tokens per prefill batch (weights are read once per batch).
        #[arg(long, default_value_t = 64)]
        batch: usize,
        #[command(flatten)]
        threads: ThreadsArg,
    },
}

/// Owns the buffers a session borrows (a board uses `static` arrays instead).
/// (On huge pages where Linux gives them: decode streams the KV cache, see `HugeMem`.)
struct Buffers {
    arena: HugeMem,
    kv: HugeMem,
}

impl Buffers {
    fn new(model: &Model<'_>, capacity: usize, batch: usize, kv: KvDType) -> Self {
        let s = SessionSizes::with_kv(model.config(), capacity, batch, kv);
        Self { arena: HugeMem::zeroed_f32(s.arena_len), kv: HugeMem::zeroed_f32(s.kv_len) }
    }

    fn session<'a>(&'a mut self, model: &'a Model<'a>, capacity: usize, kv: KvDType) -> Result<Session<'a>> {
        Ok(Session::with_kv_dtype(model, self.arena.f32s_mut(), self.kv.f32s_mut(), capacity, kv)?)
    }
}

fn load(path: &Path) -> Result<BlobFile> {
    if !path.exists() {
        if path.as_os_str() == DEFAULT_MODEL || path.as_os_str() == FIRMWARE_MODEL {
            bail!("the default model is missing at {} (pass --model BLOB)", path.display());
        }
        bail!("model file {} not found", path.display());
    }
    BlobFile::read(path)
}

fn tokenizer<'m>(model: &'m Model<'_>) -> Result<&'m Tokenizer<'m>> {
    model.tokenizer().context("this blob has no tokenizer; pass token ids with --ids")
}

/// `text` as a prompt ([`Tokenizer::encode_prompt`]: BOS first where the tokenizer says): what
/// `host --prompt`, `host trace --prompt`, `perplexity` and the firmware run.
fn encode_prompt(tok: &Tokenizer<'_>, text: &str) -> Result<Vec<u32>> {
    let mut ids = vec![0u32; tok.max_encoded_len(text.len()) + 1];
    let n = tok.encode_prompt(text, &mut ids)?;
    ids.truncate(n);
    Ok(ids)
}

fn encode(tok: &Tokenizer<'_>, text: &str) -> Result<Vec<u32>> {
    // byte-level BPE never yields more tokens than bytes, SentencePiece one more (its ▁ prefix)
    let mut ids = vec![0u32; tok.max_encoded_len(text.len()).max(1)];
    let n = tok.encode(text, &mut ids)?;
    ids.truncate(n);
    Ok(ids)
}

/// Context, KV dtype and prefill batch of a session.
struct SessionShape {
    capacity: usize,
    kv: KvDType,
    batch: usize,
}

/// With --board: the board's plan at `ctx` (default: the firmware's), an error with the byte
/// counts when it does not fit, else the session the firmware would allocate and one line on
/// stderr with the budget. Without: None.
fn board_shape(file: &BlobFile, board: &BoardArg, ctx: Option<usize>, kv: Option<KvArg>) -> Result<Option<SessionShape>> {
    let Some(name) = &board.board else { return Ok(None) };
    let target = Target::board(host_tools::boards::find(name)?);
    let plan = Plan::new(file.bytes(), target, ctx, kv.map(KvArg::dtype))?;
    if let Some(line) = plan.error_line() {
        bail!("{line}");
    }
    eprintln!("{}", plan.budget_line());
    Ok(Some(SessionShape { capacity: plan.ctx, kv: plan.kv_dtype, batch: plan.run.sizes.batch }))
}

/// The one broken sampling rule, with the flag and the value given: `--top-p 2: must be in (0, 1]`.
fn sampler_error(what: runtime::error::SamplerParam, cfg: &SamplerConfig, max_top_k: usize) -> anyhow::Error {
    use runtime::error::SamplerParam::*;
    match what {
        Temperature => anyhow::anyhow!("--temperature {}: must be a finite number ≥ 0 (0 is greedy)", cfg.temperature),
        TopK => anyhow::anyhow!("--top-k {}: must be at most {max_top_k} (0 turns it off)", cfg.top_k),
        TopP => anyhow::anyhow!("--top-p {}: must be in (0, 1] (1 turns it off)", cfg.top_p),
        RepetitionPenalty => anyhow::anyhow!("--repetition-penalty {}: must be a finite number > 0 (1 turns it off)", cfg.repetition_penalty),
        Logits => anyhow::anyhow!("the logits hold no finite value to sample from"),
    }
}

fn capacity_for(model: &Model<'_>, ctx: Option<usize>) -> Result<usize> {
    let n_ctx = model.config().n_ctx();
    match ctx {
        Some(c) if c == 0 || c > n_ctx => bail!("--ctx {c} must be between 1 and the model's n_ctx ({n_ctx})"),
        Some(c) => Ok(c),
        None => Ok(n_ctx),
    }
}

fn join_ids(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn cmd_logits(m: &ModelArg, ids: &[u32], out: &Path, source: &SourceIdsArg, board: &BoardArg) -> Result<()> {
    let file = load(&m.model)?;
    let model = file.model()?;
    let v = model.config().vocab_size();
    let ids = &source.given(&model, ids)?;
    if ids.len() > model.config().n_ctx() {
        bail!("{} ids do not fit the model's context of {} tokens", ids.len(), model.config().n_ctx());
    }
    let capacity = ids.len().max(1);
    let shape = board_shape(&file, board, Some(capacity), m.kv_dtype)?
        .unwrap_or(SessionShape { capacity, kv: m.kv(), batch: capacity.min(64) });
    let mut buf = Buffers::new(&model, shape.capacity, shape.batch, shape.kv);
    let mut session = buf.session(&model, shape.capacity, shape.kv)?;
    // With --source-ids: a row of the source vocabulary's width, the kept tokens' logits in their
    // source columns, the pruned ones -inf (probability 0).
    let (cols, column): (usize, Vec<usize>) = if source.source_ids {
        let cols = model.source_vocab_size() as usize;
        (cols, (0..v as u32).map(|id| model.source_id(id).map_or(cols, |s| s as usize)).collect())
    } else {
        (v, (0..v).collect())
    };
    let mut all = vec![f32::NEG_INFINITY; ids.len() * cols];
    session.prefill_each(ids, |i, logits| {
        let row = &mut all[i * cols..(i + 1) * cols];
        for (&c, &l) in column.iter().zip(logits) {
            if let Some(slot) = row.get_mut(c) {
                *slot = l;
            }
        }
    })?;
    host_tools::npy::write_f32(out, &[ids.len() as u64, cols as u64], &all)?;
    eprintln!("wrote {} ({} x {} float32)", out.display(), ids.len(), cols);
    Ok(())
}

fn cmd_generate(args: &GenerateArgs) -> Result<()> {
    let file = load(&args.model.model)?;
    let model = file.model()?;
    let cfg = *model.config();
    let shape = match board_shape(&file, &args.board, args.ctx, args.model.kv_dtype)? {
        Some(shape) => shape,
        None => {
            let capacity = capacity_for(&model, args.ctx)?;
            SessionShape { capacity, kv: args.model.kv(), batch: capacity.min(64) }
        }
    };
    let capacity = shape.capacity;
    let tok = model.tokenizer();
    // The demo (no --prompt, no --ids) opens the shipped model's text with DEMO_PROMPT; any
    // other blob starts from its beginning-of-text token.
    let demo = args.prompt.is_none() && args.ids.is_none();
    let demo_prompt = (demo && args.model.model.as_os_str() == DEFAULT_MODEL && tok.is_some()).then_some(DEMO_PROMPT);
    let prompt_text = args.prompt.as_deref().or(demo_prompt);
    let prompt: Vec<u32> = match (prompt_text, &args.ids) {
        // A SentencePiece tokenizer with add_bos_token starts the prompt with BOS.
        (Some(text), _) => {
            encode_prompt(tokenizer(&model)?, text)?
        }
        (None, Some(ids)) => args.source.given(&model, ids)?,
        (None, None) => vec![cfg.bos_token_id],
    };
    if prompt.is_empty() {
        bail!("the prompt is empty (it encodes to no tokens)");
    }
    if prompt.len() > capacity {
        // suggest only what can work: a larger --ctx while the model has room for one
        let n_ctx = cfg.n_ctx();
        if capacity < n_ctx && prompt.len() <= n_ctx {
            bail!("the prompt has {} tokens but the context holds {capacity} (shorten it, or raise --ctx up to the model's {n_ctx})", prompt.len());
        }
        bail!("the prompt has {} tokens but the context holds {capacity} (the model's n_ctx is {n_ctx}: shorten the prompt)", prompt.len());
    }
    let sampler_cfg = args.sampling.config();
    let mut sampler = Sampler::<MAX_TOP_K>::new(sampler_cfg).map_err(|e| match e {
        runtime::Error::BadSamplerParam { what } => sampler_error(what, &sampler_cfg, MAX_TOP_K),
        e => e.into(),
    })?;
    let kv = shape.kv;
    let pool = args.threads.pool()?;
    let mut buf = Buffers::new(&model, capacity, shape.batch, kv);
    let mut session = buf.session(&model, capacity, kv)?;
    if let Some(p) = &pool {
        session.set_parallel(p);
    }
    let (arena_bytes, kv_bytes) = session.memory_bytes();
    let mut window = vec![0u32; capacity];

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // Echo a text prompt so the stream reads as one text.
    if let Some(p) = prompt_text {
        write!(out, "{p}")?;
    }
    let stream_text = tok.is_some();
    let mut utf8 = Utf8Stream::new();
    let mut stop = StopMatcher::new(args.stop.as_deref().unwrap_or("").as_bytes());
    let mut generated = Vec::with_capacity(args.n);
    // The token before the one being printed: SentencePiece drops a word's ▁ after BOS.
    let mut prev = prompt.last().copied();
    // The demo (no prompt at all) streams past the context; explicit runs stop at a full
    // context unless --context-shift is given.
    let context_shift = args.context_shift || demo;
    let opts = GenerateOptions { max_tokens: args.n, stop_at_eos: !args.ignore_eos, context_shift };
    let t0 = Instant::now();
    let mut first_token_at = None;
    let mut write_err = None;
    let summary = generate(&mut session, &mut sampler, &prompt, &mut window, &opts, |id| {
        first_token_at.get_or_insert_with(Instant::now);
        generated.push(id);
        let Some(tok) = tok else { return Control::Continue };
        let mut stopped = false;
        let text = tok.token_text(prev.replace(id), id).unwrap_or(&[]);
        for &b in text {
            let mut emit = |bytes: &[u8]| {
                for piece in utf8.push(bytes) {
                    if let Err(e) = out.write_all(piece.as_bytes()) {
                        write_err.get_or_insert(e);
                    }
                }
            };
            if stop.push(b, &mut emit) {
                stopped = true;
                break;
            }
        }
        let _ = out.flush();
        if stopped || write_err.is_some() {
            Control::Stop
        } else {
            Control::Continue
        }
    })?;
    let t_end = Instant::now();
    if stream_text {
        if !matches!(summary.reason, StopReason::Stopped) {
            stop.flush(|bytes| {
                for piece in utf8.push(bytes) {
                    let _ = out.write_all(piece.as_bytes());
                }
            });
        }
        write!(out, "{}", utf8.finish())?;
        writeln!(out)?;
    }
    if let Some(e) = write_err {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    if args.print_ids || !stream_text {
        writeln!(out, "{}", join_ids(&args.source.shown(&model, &generated)))?;
    }
    out.flush()?;

    let prefill_s = first_token_at.map_or(0.0, |t| (t - t0).as_secs_f64());
    let decode_s = first_token_at.map_or(0.0, |t| (t_end - t).as_secs_f64());
    let decoded = generated.len().saturating_sub(1);
    let reason = match summary.reason {
        StopReason::Eos => "end-of-text token".to_string(),
        StopReason::MaxTokens => format!("{} tokens generated", summary.generated),
        StopReason::Stopped => "stop string".to_string(),
        StopReason::ContextFull { capacity } => {
            format!("context full ({capacity} tokens; use --context-shift to keep going)")
        }
        StopReason::Error(e) => format!("error: {e}"),
    };
    eprintln!("---");
    eprintln!("stopped: {reason}");
    eprintln!("prompt tokens: {}   generated: {}   context shifts: {}", prompt.len(), summary.generated, summary.shifts);
    eprintln!(
        "prefill: {:.1} tok/s   decode: {:.1} tok/s",
        prompt.len() as f64 / prefill_s.max(1e-9),
        if decoded > 0 { decoded as f64 / decode_s.max(1e-9) } else { 0.0 }
    );
    eprintln!("memory: arena {arena_bytes} B + KV cache {kv_bytes} B ({})", kv_formula(&cfg, capacity, kv));
    if let StopReason::Error(e) = summary.reason {
        bail!("generation stopped after {} tokens: {e}", summary.generated);
    }
    Ok(())
}

/// How the KV cache's bytes come about: `int8: 2 · 4 layers · 128 ctx · 112 embd · 1 B + …`,
/// with the local layers' rings (`min(ctx, W)` positions) counted apart, and a row of
/// `H_kv · D` values where grouped-query attention makes it narrower than `n_embd`.
fn kv_formula(cfg: &runtime::Config, capacity: usize, kv: KvDType) -> String {
    let layout = KvLayout::new(cfg, capacity);
    let bytes = match kv {
        KvDType::F32 => 4,
        KvDType::F16 => 2,
        KvDType::I8 => 1,
    };
    let locals = cfg.local_layers.count();
    let globals = cfg.n_layer() - locals;
    let mut terms = Vec::new();
    if globals > 0 {
        terms.push(format!("2 · {globals} {}layers · {capacity} ctx", if locals > 0 { "global " } else { "" }));
    }
    if locals > 0 {
        terms.push(format!("2 · {locals} local layers · {} (window {})", layout.local_capacity, cfg.attn_window));
    }
    let scale = if kv == KvDType::I8 { " + a 4-byte scale per head per position" } else { "" };
    let positions = if terms.len() == 1 { terms.join("") } else { format!("({})", terms.join(" + ")) };
    let row = if cfg.kv_dim() == cfg.n_embd() {
        format!("{} embd", cfg.n_embd)
    } else {
        format!("{} ({} key/value heads · {})", cfg.kv_dim(), cfg.n_kv_head, cfg.head_dim)
    };
    format!("{}: {positions} · {row} · {bytes} B{scale}", kv.name())
}

fn cmd_tokenize(model_path: &Path, text: Option<&str>, file: Option<&Path>, source: &SourceIdsArg, bos: bool) -> Result<()> {
    let blob = load(model_path)?;
    let model = blob.model()?;
    let tok = tokenizer(&model)?;
    let owned;
    let text = match (text, file) {
        (Some(t), _) => t,
        (None, Some(f)) => {
            owned = std::fs::read_to_string(f).with_context(|| format!("cannot read {} as UTF-8 text", f.display()))?;
            &owned
        }
        (None, None) => bail!("give --text or --file"),
    };
    let mut ids = encode(tok, text)?;
    if bos {
        ids.insert(0, tok.bos_id().unwrap_or(model.config().bos_token_id));
    }
    eprintln!("{} tokens", ids.len());
    println!("{}", join_ids(&source.shown(&model, &ids)));
    Ok(())
}

fn cmd_detokenize(model_path: &Path, ids: &[u32], source: &SourceIdsArg) -> Result<()> {
    let blob = load(model_path)?;
    let model = blob.model()?;
    let tok = tokenizer(&model)?;
    let ids = &source.given(&model, ids)?;
    let mut bytes = Vec::new();
    let mut prev = None;
    for &id in ids {
        let b = tok.token_text(prev.replace(id), id).with_context(|| {
            format!("token id {id} is out of range (vocab_size {})", tok.vocab_size())
        })?;
        bytes.extend_from_slice(b);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)?;
    writeln!(out)?;
    Ok(())
}

fn cmd_perplexity(m: &ModelArg, file: &Path, ctx: Option<usize>) -> Result<()> {
    let blob = load(&m.model)?;
    let model = blob.model()?;
    let tok = tokenizer(&model)?;
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {} as UTF-8 text", file.display()))?;
    // after BOS where the tokenizer says (the first token is then predicted from BOS)
    let ids = encode_prompt(tok, &text)?;
    if ids.len() < 2 {
        bail!("{} has {} tokens; perplexity needs at least 2", file.display(), ids.len());
    }
    let window = capacity_for(&model, ctx)?;
    let t0 = Instant::now();
    let p = host_tools::eval::perplexity(&model, &ids, window, m.kv())?;
    eprintln!("{} tokens, window {window}, stride {}, {:.1} s", ids.len(), window / 2, t0.elapsed().as_secs_f64());
    println!("tokens scored: {}", p.tokens);
    println!("mean cross-entropy: {:.6} nats/token", p.mean());
    println!("perplexity: {:.4}", p.perplexity());
    let chars = text.chars().count();
    println!("nats per character: {:.6} ({chars} characters)", p.nats_per_char(chars));
    Ok(())
}

fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}


fn cmd_bench(m: &ModelArg, prompt_len: usize, n: usize, runs: usize, batch: usize, threads: &ThreadsArg) -> Result<()> {
    let pool = threads.pool()?;
    let file = load(&m.model)?;
    let model = file.model()?;
    let cfg = *model.config();
    let capacity = prompt_len + n;
    if prompt_len == 0 || n == 0 || runs == 0 || capacity > cfg.n_ctx() {
        bail!("need prompt_len ≥ 1, n ≥ 1, runs ≥ 1 and prompt_len + n ≤ n_ctx ({})", cfg.n_ctx());
    }
    let prompt: Vec<u32> = (0..prompt_len).map(|i| (i as u32 * 7919 + 13) % cfg.vocab_size).collect();
    let batch = batch.clamp(1, capacity);
    let kv = m.kv();
    let mut buf = Buffers::new(&model, capacity, batch, kv);
    let (mut pre, mut dec) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let mut s = buf.session(&model, capacity, kv)?;
        if let Some(p) = &pool {
            s.set_parallel(p);
        }
        let t0 = Instant::now();
        let mut next = argmax(s.prefill(&prompt)?);
        let t1 = Instant::now();
        for _ in 0..n {
            next = argmax(s.decode(next)?);
        }
        let t2 = Instant::now();
        pre.push(prompt_len as f64 / (t1 - t0).as_secs_f64());
        dec.push(n as f64 / (t2 - t1).as_secs_f64());
    }
    let bytes = model.weight_bytes_per_token() as f64;
    let (p, d) = (median(pre), median(dec));
    // the pool's workers spin a while after the last call: stop them first, so the probe's
    // readers have the cores to themselves
    drop(pool);
    let (bandwidth, by_streams) = host_tools::bandwidth::read_bandwidth(file.bytes(), runs.max(3), usize::from(threads.threads));
    println!(
        "model: {} layers, n_embd {}, vocab {}, {} weights, {} KV cache",
        cfg.n_layer,
        cfg.n_embd,
        cfg.vocab_size,
        model.weight_dtype().name(),
        kv.name()
    );
    // which build of the kernels ran (on x86-64 the CPU table's row: kernels/x86/cpu.rs;
    // GPT2_MCU_KERNELS=avx2|avx512|portable overrides it to measure one against the other)
    println!("kernels: {}", runtime::kernels::KernelReport);
    println!("threads: {}   runs: {runs} (median)   prompt: {prompt_len} tokens (batch {batch})   decode: {n} tokens", threads.threads);
    println!("prefill: {p:.1} tok/s");
    println!("decode:  {d:.1} tok/s");
    println!("weight bytes per decoded token: {:.1} MB  -> {:.2} GB/s streamed", bytes / 1e6, bytes * d / 1e9);
    println!(
        "memory read bandwidth (this blob, {} thread{}): {:.2} GB/s  -> decode bound {:.1} tok/s, decode reaches {:.0}% of it (best of 1-4 streams{}: {})",
        threads.threads,
        if threads.threads == 1 { "" } else { "s" },
        bandwidth / 1e9,
        bandwidth / bytes,
        100.0 * bytes * d / bandwidth,
        if threads.threads == 1 { "" } else { " a thread" },
        by_streams.map(|b| format!("{:.2}", b / 1e9)).join(" / ")
    );
    // Attention reads the keys and values each layer holds: at decode step i (from 0), layer l
    // attends to min(prompt_len + i + 1, cap_l) positions (a local layer's ring holds W); the
    // mean over the n steps is this.
    let layout = KvLayout::new(&cfg, capacity);
    let kv_bytes = (0..n)
        .map(|i| {
            (0..cfg.n_layer())
                .map(|l| (layout.layer_bytes(kv, l) / (2 * layout.layer_capacity(l))) as f64 * 2.0 * (prompt_len + i + 1).min(layout.layer_capacity(l)) as f64)
                .sum::<f64>()
        })
        .sum::<f64>()
        / n as f64;
    println!(
        "KV cache bytes read per decoded token: {:.1} MB (mean over {n} steps)  -> with the weights, decode bound {:.1} tok/s, decode reaches {:.0}% of it",
        kv_bytes / 1e6,
        bandwidth / (bytes + kv_bytes),
        100.0 * (bytes + kv_bytes) * d / bandwidth
    );
    // Decode streams these two; on 4 KiB pages it runs slower (see host_tools' HugeMem).
    let mb = |b: u64| b as f64 / 1e6;
    match (file.huge_page_bytes(), buf.kv.huge_page_bytes()) {
        (Some(w), Some(c)) => println!(
            "on 2 MiB pages (transparent huge pages): blob {:.1} of {:.1} MB, KV cache {:.1} of {:.1} MB",
            mb(w),
            mb(file.bytes().len() as u64),
            mb(c),
            mb(buf.kv.bytes().len() as u64)
        ),
        _ => println!("on 2 MiB pages: unknown (no /proc/self/smaps)"),
    }
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    match &cli.cmd {
        Some(Cmd::Logits { model, ids, out, source, board }) => cmd_logits(model, ids, out, source, board),
        Some(Cmd::Tokenize { model, text, file, source, bos }) => cmd_tokenize(&model.model, text.as_deref(), file.as_deref(), source, *bos),
        Some(Cmd::Detokenize { model, ids, source }) => cmd_detokenize(&model.model, ids, source),
        Some(Cmd::Perplexity { model, file, ctx }) => cmd_perplexity(model, file, *ctx),
        Some(Cmd::Bench { model, prompt_len, n, runs, batch, threads }) => cmd_bench(model, *prompt_len, *n, *runs, *batch, threads),
        Some(Cmd::Trace(args)) => trace::cmd_trace(args),
        Some(Cmd::Console(args)) => console::cmd_console(args),
        None => cmd_generate(&cli.gen),
    }
}

fn main() -> ExitCode {
    // a closed stdout (`host bench | head`) ends the process quietly, as for other Unix tools,
    // instead of a panic in println! (Rust starts programs with SIGPIPE ignored)
    #[cfg(unix)]
    // SAFETY: before any other thread exists; SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let about = format!(
        "GPT-2 on the desktop, with the same no_std runtime the microcontroller runs.\n\nWith no arguments: the demo. The shipped model streams 256 tokens after the boards' prompt, with context shift, at temperature 0.8, top-k 40, top-p 0.95, seed 42: the same as\n  host --prompt '{DEMO_PROMPT}' --context-shift"
    );
    let parsed = Cli::command().long_about(about).try_get_matches().and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind::*;
            if matches!(e.kind(), DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // One line: clap's first line, without the usage block.
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ");
            eprintln!("error: {first} (see --help)");
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
