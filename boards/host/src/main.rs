//! `host`: the desktop emulator. Runs the same no_std runtime a board runs, with std around it
//! for files and the terminal.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use host_tools::blob_file::BlobFile;
use runtime::{Model, Session, SessionSizes};

/// The default model shipped in the repository.
const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/default/model.blob");

#[derive(Parser)]
#[command(name = "host", version, about = "GPT-2 on the desktop, with the microcontroller runtime", args_conflicts_with_subcommands = true)]
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
}

#[derive(Args, Clone)]
struct GenerateArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Prompt token ids, comma-separated (instead of --prompt).
    #[arg(long, value_delimiter = ',')]
    ids: Option<Vec<u32>>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "max-tokens", default_value_t = 200)]
    n: usize,
    /// Always take the most likely token.
    #[arg(long)]
    greedy: bool,
    /// Print the generated ids, comma-separated, as the last line of stdout.
    #[arg(long)]
    print_ids: bool,
    /// KV-cache capacity in tokens (default: the model's n_ctx).
    #[arg(long)]
    ctx: Option<usize>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write float32 logits [n_ids, vocab_size] for a sequence of ids to a .npy file.
    Logits {
        #[command(flatten)]
        model: ModelArg,
        /// Token ids, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        ids: Vec<u32>,
        /// Output .npy file.
        #[arg(long)]
        out: PathBuf,
    },
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
    },
}

/// Owns the buffers a session borrows (a board would use `static` arrays instead).
struct Buffers {
    arena: Vec<f32>,
    kv: Vec<f32>,
}

impl Buffers {
    fn new(model: &Model<'_>, capacity: usize, batch: usize) -> Self {
        let s = SessionSizes::new(model.config(), capacity, batch);
        Self { arena: vec![0.0; s.arena_len], kv: vec![0.0; s.kv_len] }
    }
}

fn load(path: &PathBuf) -> Result<BlobFile> {
    if !path.exists() {
        if path.as_os_str() == DEFAULT_MODEL {
            bail!("the default model is missing at {} (pass --model BLOB)", path.display());
        }
        bail!("model file {} not found", path.display());
    }
    BlobFile::read(path)
}

fn capacity_for(model: &Model<'_>, ctx: Option<usize>) -> Result<usize> {
    let n_ctx = model.config().n_ctx();
    match ctx {
        Some(c) if c == 0 || c > n_ctx => bail!("--ctx {c} must be between 1 and the model's n_ctx ({n_ctx})"),
        Some(c) => Ok(c),
        None => Ok(n_ctx),
    }
}

fn cmd_logits(model_path: &PathBuf, ids: &[u32], out: &PathBuf) -> Result<()> {
    let file = load(model_path)?;
    let model = file.model()?;
    let v = model.config().vocab_size();
    if ids.len() > model.config().n_ctx() {
        bail!("{} ids do not fit the model's context of {} tokens", ids.len(), model.config().n_ctx());
    }
    let capacity = ids.len().max(1);
    let mut buf = Buffers::new(&model, capacity, capacity.min(64));
    let mut session = Session::new(&model, &mut buf.arena, &mut buf.kv, capacity)?;
    let mut all = vec![0.0f32; ids.len() * v];
    session.prefill_each(ids, |i, logits| all[i * v..(i + 1) * v].copy_from_slice(logits))?;
    host_tools::npy::write_f32(out, &[ids.len() as u64, v as u64], &all)?;
    eprintln!("wrote {} ({} x {} float32)", out.display(), ids.len(), v);
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

fn cmd_generate(args: &GenerateArgs) -> Result<()> {
    let file = load(&args.model.model)?;
    let model = file.model()?;
    let capacity = capacity_for(&model, args.ctx)?;
    let prompt = args.ids.clone().context("give the prompt as --ids (text prompts need a tokenizer)")?;
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    let mut buf = Buffers::new(&model, capacity, capacity.min(64));
    let mut session = Session::new(&model, &mut buf.arena, &mut buf.kv, capacity)?;
    let mut generated = Vec::with_capacity(args.n);
    if args.n > 0 {
        let mut next = argmax(session.prefill(&prompt)?);
        loop {
            generated.push(next);
            if generated.len() == args.n {
                break;
            }
            match session.decode(next) {
                Ok(logits) => next = argmax(logits),
                Err(e) => {
                    eprintln!("stopped after {} tokens: {e}", generated.len());
                    break;
                }
            }
        }
    }
    if args.print_ids {
        println!("{}", generated.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn cmd_bench(model_path: &PathBuf, prompt_len: usize, n: usize, runs: usize, batch: usize) -> Result<()> {
    use std::time::Instant;
    let file = load(model_path)?;
    let model = file.model()?;
    let cfg = *model.config();
    let capacity = prompt_len + n;
    if prompt_len == 0 || n == 0 || runs == 0 || capacity > cfg.n_ctx() {
        bail!("need prompt_len ≥ 1, n ≥ 1, runs ≥ 1 and prompt_len + n ≤ n_ctx ({})", cfg.n_ctx());
    }
    let prompt: Vec<u32> = (0..prompt_len).map(|i| (i as u32 * 7919 + 13) % cfg.vocab_size).collect();
    let mut buf = Buffers::new(&model, capacity, batch.clamp(1, capacity));
    let (mut pre, mut dec) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let mut s = Session::new(&model, &mut buf.arena, &mut buf.kv, capacity)?;
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
    println!("model: {} layers, n_embd {}, vocab {}, {} weights", cfg.n_layer, cfg.n_embd, cfg.vocab_size, model.weight_dtype().name());
    println!("threads: 1   runs: {runs}   prompt: {prompt_len} tokens (batch {})   decode: {n} tokens", batch.clamp(1, capacity));
    println!("prefill: {p:.1} tok/s");
    println!("decode:  {d:.1} tok/s");
    println!("weight bytes per decoded token: {:.1} MB  -> {:.2} GB/s streamed", bytes / 1e6, bytes * d / 1e9);
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    match &cli.cmd {
        Some(Cmd::Logits { model, ids, out }) => cmd_logits(&model.model, ids, out),
        Some(Cmd::Bench { model, prompt_len, n, runs, batch }) => cmd_bench(&model.model, *prompt_len, *n, *runs, *batch),
        None => cmd_generate(&cli.gen),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
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
