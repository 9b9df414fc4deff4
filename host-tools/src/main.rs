//! `host-tools`: convert Hugging Face GPT-2 checkpoints to blobs, inspect blobs, plan a blob's
//! memory on a board, write random checkpoints.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use host_tools::boards::{self, parse_bytes};
use host_tools::convert::{convert, ConvertOptions, WeightDType};
use host_tools::plan::{KvArg, Plan, Target};
use host_tools::random::{write_random, RandomShape};

#[derive(Parser)]
#[command(name = "host-tools", version, about = "Checkpoint -> blob converter and blob tools for the GPT-2 microcontroller runtime")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Convert a Hugging Face GPT-2 checkpoint directory (config.json + model.safetensors,
    /// optional vocab.json + merges.txt or tokenizer.json) into a blob.
    Convert {
        /// Checkpoint directory.
        hf_dir: PathBuf,
        /// Output blob file.
        #[arg(short, long)]
        out: PathBuf,
        /// Weight dtype of the matrices.
        #[arg(long, value_enum, default_value = "f32")]
        dtype: WeightDType,
        /// Keep only the first N positions (smaller blob; the model's context becomes N).
        #[arg(long)]
        ctx: Option<u32>,
        /// Quantization group along each row for q8/q4 (per tensor, the largest divisor of the
        /// row length that is ≤ this and ≥ 8).
        #[arg(long, default_value_t = 32)]
        group: usize,
        /// Matrices to keep in f32, comma-separated: wte, wpe, lm_head, attn.c_attn,
        /// attn.c_proj, mlp.c_fc, mlp.c_proj.
        #[arg(long, value_delimiter = ',')]
        keep_f32: Vec<String>,
    },
    /// Print a blob's config, tensor table, bytes per section and checksum status.
    Inspect {
        /// Blob file.
        blob: PathBuf,
        /// Context length for the memory estimate (default: the model's n_ctx).
        #[arg(long)]
        ctx: Option<usize>,
    },
    /// Plan a blob's memory on a board: flash (model, code) and RAM (arena, KV cache, token
    /// window, stack) per region, whether each fits, and the largest context whose RAM fits.
    /// Exits 1 when it does not fit.
    Plan {
        /// Blob file.
        #[arg(required_unless_present = "list_boards")]
        blob: Option<PathBuf>,
        /// A known board (see --list-boards).
        #[arg(long, value_name = "NAME", required_unless_present_any = ["flash", "list_boards"], conflicts_with_all = ["flash", "ram"])]
        board: Option<String>,
        /// Flash of a custom board (code and model), in bytes: 1048576, 1M, 1MiB, 512K, 0x80000.
        #[arg(long, value_name = "BYTES", requires = "ram", value_parser = parse_bytes)]
        flash: Option<u64>,
        /// RAM of a custom board (buffers, stack and statics), in bytes: 262144, 256K, 256KiB.
        #[arg(long, value_name = "BYTES", requires = "flash", value_parser = parse_bytes)]
        ram: Option<u64>,
        /// Context (KV-cache capacity) to plan for. Default: the firmware's, min(128, n_ctx).
        #[arg(long)]
        ctx: Option<usize>,
        /// KV-cache storage (as `host --kv-dtype`). Default: the firmware's, int8.
        #[arg(long, value_enum)]
        kv_dtype: Option<KvArg>,
        /// Print the known boards and their memory, then exit.
        #[arg(long, conflicts_with_all = ["board", "flash", "ram", "ctx", "kv_dtype"])]
        list_boards: bool,
    },
    /// Measure what each weight dtype (f32, f16, q8, q4) and KV-cache dtype (f32, f16, int8)
    /// costs against f32 on a text: perplexity, top-1 agreement, KL divergence, max logit
    /// error. Prints a Markdown table.
    Accuracy {
        /// Checkpoint directory (with a tokenizer).
        hf_dir: PathBuf,
        /// Held-out text file.
        #[arg(long)]
        text: PathBuf,
        /// Window in tokens (default: the model's n_ctx).
        #[arg(long)]
        ctx: Option<usize>,
        /// Use at most this many tokens of the text.
        #[arg(long, default_value_t = 4096)]
        max_tokens: usize,
        /// Quantization group.
        #[arg(long, default_value_t = 32)]
        group: usize,
    },
    /// Write a random-initialised GPT-2 checkpoint in the Hugging Face layout.
    Random {
        /// Output directory.
        #[arg(short, long)]
        out: PathBuf,
        /// A named shape (`gpt2` = 124M).
        #[arg(long, value_parser = ["gpt2"])]
        preset: Option<String>,
        #[arg(long)]
        n_layer: Option<u32>,
        #[arg(long)]
        n_embd: Option<u32>,
        #[arg(long)]
        n_head: Option<u32>,
        #[arg(long)]
        vocab: Option<u32>,
        #[arg(long)]
        n_ctx: Option<u32>,
        /// RNG seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Convert { hf_dir, out, dtype, ctx, group, keep_f32 } => {
            const NAMES: [&str; 7] = ["wte", "wpe", "lm_head", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"];
            if let Some(bad) = keep_f32.iter().find(|k| !NAMES.contains(&k.as_str())) {
                anyhow::bail!("--keep-f32 {bad:?}: expected some of {}", NAMES.join(", "));
            }
            let opts = ConvertOptions { dtype, ctx, progress: true, source_name: None, group, keep_f32 };
            let conv = convert(&hf_dir, &opts)?;
            for note in &conv.notes {
                eprintln!("note: {note}");
            }
            std::fs::write(&out, &conv.blob).with_context(|| format!("cannot write {}", out.display()))?;
            let c = conv.config;
            eprintln!(
                "wrote {} ({} bytes): {} layers, n_embd {}, n_head {}, vocab {}, n_ctx {}, {:?} weights, tokenizer: {}",
                out.display(),
                conv.blob.len(),
                c.n_layer,
                c.n_embd,
                c.n_head,
                c.vocab_size,
                c.n_ctx,
                dtype,
                if conv.has_tokenizer { "yes" } else { "no (use --ids)" }
            );
        }
        Cmd::Inspect { blob, ctx } => {
            let bytes = std::fs::read(&blob).with_context(|| format!("cannot read {}", blob.display()))?;
            print!("{}", host_tools::inspect::inspect(&bytes, ctx)?);
        }
        Cmd::Plan { list_boards: true, .. } => print!("{}", boards::list()),
        Cmd::Plan { blob, board, flash, ram, ctx, kv_dtype, list_boards: false } => {
            let target = match (board, flash, ram) {
                (Some(name), _, _) => Target::board(boards::find(&name)?),
                (None, Some(flash), Some(ram)) => Target::custom(flash, ram),
                _ => anyhow::bail!("give --board NAME or --flash BYTES --ram BYTES"),
            };
            let Some(blob) = blob else { anyhow::bail!("give the blob file") };
            let bytes = std::fs::read(&blob).with_context(|| format!("cannot read {}", blob.display()))?;
            let plan = Plan::new(&bytes, target, ctx, kv_dtype.map(KvArg::dtype))?;
            print!("{}", plan.report(&blob.display().to_string()));
            if !plan.fits() {
                return Ok(ExitCode::FAILURE);
            }
        }
        Cmd::Accuracy { hf_dir, text, ctx, max_tokens, group } => {
            let t = std::fs::read_to_string(&text).with_context(|| format!("cannot read {}", text.display()))?;
            let (rows, scored, window) = host_tools::accuracy::measure(&hf_dir, &t, ctx, max_tokens, group)?;
            println!("{} tokens scored from {} (window {window}, stride {}), quantization group {group}\n", scored, text.display(), window / 2);
            print!("{}", host_tools::accuracy::table(&rows));
        }
        Cmd::Random { out, preset, n_layer, n_embd, n_head, vocab, n_ctx, seed } => {
            let base = match preset.as_deref() {
                Some("gpt2") => RandomShape::GPT2,
                _ => RandomShape { n_layer: 2, n_embd: 64, n_head: 4, vocab_size: 256, n_ctx: 64 },
            };
            let shape = RandomShape {
                n_layer: n_layer.unwrap_or(base.n_layer),
                n_embd: n_embd.unwrap_or(base.n_embd),
                n_head: n_head.unwrap_or(base.n_head),
                vocab_size: vocab.unwrap_or(base.vocab_size),
                n_ctx: n_ctx.unwrap_or(base.n_ctx),
            };
            let params = write_random(&out, shape, seed)?;
            eprintln!("wrote {} ({params} parameters, {shape:?}, seed {seed})", out.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
