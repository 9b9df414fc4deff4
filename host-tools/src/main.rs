//! `host-tools`: convert Hugging Face GPT-2 checkpoints to blobs, inspect blobs, plan a blob's
//! memory on a board, write random checkpoints.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use host_tools::boards::{self, parse_bytes};
use host_tools::convert::{convert_path, ConvertOptions, WeightDType};
use host_tools::plan::{KvArg, Plan, Target};
use host_tools::random::{write_random, RandomShape};
use runtime::config::{Arch, LayerMask};

/// `random --arch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ArchArg {
    /// GPT2LMHeadModel.
    Gpt2,
    /// GPTNeoForCausalLM.
    GptNeo,
    /// LlamaForCausalLM.
    Llama,
}

impl ArchArg {
    fn arch(self) -> Arch {
        match self {
            ArchArg::Gpt2 => Arch::Gpt2,
            ArchArg::GptNeo => Arch::GptNeo,
            ArchArg::Llama => Arch::Llama,
        }
    }
}

#[derive(Parser)]
#[command(name = "host-tools", version, about = "Checkpoint -> blob converter and blob tools for the GPT-2 / GPT-Neo microcontroller runtime")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Convert a checkpoint into a blob: a Hugging Face GPT-2, GPT-Neo or Llama folder
    /// (config.json + model.safetensors, and its tokenizer files: vocab.json + merges.txt,
    /// tokenizer.json or tokenizer.model), or a llama2.c model.bin (export versions 0, 1 and 2,
    /// told by content) with --tokenizer tokenizer.bin.
    Convert {
        /// Checkpoint folder, or a llama2.c model.bin file.
        hf_dir: PathBuf,
        /// For a llama2.c model.bin: its tokenizer.bin (or a sentencepiece tokenizer.model).
        /// Default: a tokenizer.bin beside the model, if there is one.
        #[arg(long, value_name = "FILE")]
        tokenizer: Option<PathBuf>,
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
        /// row length that is ≤ this and ≥ 8; where none is, the smallest larger one, preferring
        /// multiples of 4).
        #[arg(long, default_value_t = 32)]
        group: usize,
        /// Matrices to keep in f32, comma-separated: wte, wpe, lm_head, attn.c_attn,
        /// attn.c_proj, mlp.c_fc, mlp.c_proj.
        #[arg(long, value_delimiter = ',')]
        keep_f32: Vec<String>,
        /// Prune the vocabulary to what this UTF-8 text needs: every token of its encoding by the
        /// full tokenizer, the 256 byte tokens, the special tokens (bos, eos, added tokens) and
        /// the tokens BPE builds them from. Other texts still encode, through shorter tokens.
        #[arg(long, value_name = "FILE")]
        keep_vocab: Option<PathBuf>,
        /// With --keep-vocab: keep only the N most frequent tokens of FILE's encoding (the byte
        /// tokens, specials and the merge closure come on top of N; the total is printed).
        #[arg(long, value_name = "N", requires = "keep_vocab")]
        vocab_size: Option<usize>,
        /// Leave the checkpoint's tokenizer out (one the runtime cannot reproduce, such as a
        /// SentencePiece model with an NFKC normaliser): the blob then takes token ids.
        #[arg(long, conflicts_with = "keep_vocab")]
        no_tokenizer: bool,
    },
    /// Print a blob's config, tensor table, bytes per section and checksum status (exits 1
    /// after the report when the checksum does not match).
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
    /// error. Prints a Markdown table; with --keep-vocab a second one, pruned vs full.
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
        /// Also convert with `convert --keep-vocab FILE` (f32, q8, q4) and compare the pruned
        /// models with the full f32 one on the text: perplexity per token and per byte, each
        /// model encoding the text with its own tokenizer.
        #[arg(long, value_name = "FILE")]
        keep_vocab: Option<PathBuf>,
        /// With --keep-vocab: as `convert --vocab-size`.
        #[arg(long, value_name = "N", requires = "keep_vocab")]
        vocab_size: Option<usize>,
    },
    /// Write a random-initialised GPT-2, GPT-Neo or Llama checkpoint in the Hugging Face layout
    /// (transformers' `from_pretrained` loads it), with a tokenizer of its vocabulary size:
    /// GPT-2's vocab.json + merges.txt at 50257 tokens (every GPT-2 and GPT-Neo preset), the
    /// default model's at 3072, GPT-2's first N otherwise; a trained SentencePiece
    /// tokenizer.model for Llama. The flags override the preset's numbers.
    Random {
        /// Output directory.
        #[arg(short, long)]
        out: PathBuf,
        /// A named shape: `gpt2` (124M), `tinystories-1m` (GPT-Neo 8 × 64, 16 heads, window
        /// 256, alternating global/local, 50257 tokens, 2048 positions), `tinystories-3m` and
        /// `tinytalk` (the same, 128 wide), `llama-tiny` (Llama 4 × 64, 8 heads on 2 key/value
        /// heads, MLP 176, 512 tokens, 256 positions, untied head), `stories260k`, `stories15m`,
        /// `stories42m` (llama2.c's shapes, tied heads).
        #[arg(long, value_parser = RandomShape::PRESETS)]
        preset: Option<String>,
        /// Checkpoint family (default: the preset's, else gpt2).
        #[arg(long, value_enum)]
        arch: Option<ArchArg>,
        #[arg(long)]
        n_layer: Option<u32>,
        #[arg(long)]
        n_embd: Option<u32>,
        #[arg(long)]
        n_head: Option<u32>,
        /// MLP width (default 4 · n_embd).
        #[arg(long)]
        n_inner: Option<u32>,
        #[arg(long)]
        vocab: Option<u32>,
        #[arg(long)]
        n_ctx: Option<u32>,
        /// GPT-Neo: window of the local layers (`window_size`).
        #[arg(long)]
        window: Option<u32>,
        /// GPT-Neo: attention type per layer, a comma-separated pattern repeated over the
        /// layers: `global,local` (alternating, the default), `local` (every layer local),
        /// `global,local,local`, …
        #[arg(long, value_delimiter = ',', value_parser = ["global", "local"])]
        attention: Vec<String>,
        /// Llama: key/value heads (grouped-query attention; must divide n_head).
        #[arg(long)]
        n_kv_head: Option<u32>,
        /// Llama: head width (default n_embd / n_head).
        #[arg(long)]
        head_dim: Option<u32>,
        /// Llama: write a separate `lm_head.weight` (`tie_word_embeddings: false`).
        #[arg(long, conflicts_with = "tied")]
        untied: bool,
        /// Llama: tie the head to the embeddings.
        #[arg(long)]
        tied: bool,
        /// RNG seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Train a SentencePiece BPE tokenizer (Llama's layout: <unk> <s> </s>, 256 byte pieces,
    /// then merged pieces and characters) on a text and write tokenizer.model and
    /// tokenizer_config.json into a directory.
    TrainTokenizer {
        /// Training text (UTF-8, one sentence per line).
        #[arg(long)]
        text: PathBuf,
        /// Number of pieces.
        #[arg(long, default_value_t = 1000)]
        vocab_size: usize,
        /// Output directory.
        #[arg(short, long)]
        out: PathBuf,
    },
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Convert { hf_dir, tokenizer, out, dtype, ctx, group, keep_f32, keep_vocab, vocab_size, no_tokenizer } => {
            const NAMES: [&str; 7] = ["wte", "wpe", "lm_head", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"];
            if let Some(bad) = keep_f32.iter().find(|k| !NAMES.contains(&k.as_str())) {
                anyhow::bail!("--keep-f32 {bad:?}: expected some of {}", NAMES.join(", "));
            }
            let keep_vocab = keep_vocab.map(|f| read_keep_vocab(&f, vocab_size)).transpose()?;
            let origin = keep_vocab.as_ref().map(|k| k.origin.clone());
            let opts = ConvertOptions { dtype, ctx, progress: true, source_name: None, group, keep_f32, keep_vocab, no_tokenizer };
            let conv = convert_path(&hf_dir, tokenizer.as_deref(), &opts)?;
            for note in &conv.notes {
                eprintln!("note: {note}");
            }
            if let (Some(p), Some(origin)) = (&conv.pruning, origin) {
                eprintln!("{}", p.summary(&origin));
            }
            std::fs::write(&out, &conv.blob).with_context(|| format!("cannot write {}", out.display()))?;
            let c = conv.config;
            let locals = match c.local_layers.count() {
                0 => String::new(),
                n => format!(" ({n} local, window {})", c.attn_window),
            };
            eprintln!(
                "wrote {} ({} bytes): {}, {} layers{locals}, n_embd {}, n_head {}, vocab {}, n_ctx {}, {:?} weights, tokenizer: {}",
                out.display(),
                conv.blob.len(),
                c.arch.name(),
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
            // the report is printed either way; a corrupt blob still fails the command
            let (stored, computed) = host_tools::blob_file::checksums(&bytes)?;
            if stored != computed {
                anyhow::bail!("{}: checksum mismatch: stored CRC-32 {stored:#010x}, computed {computed:#010x} (the file is corrupt)", blob.display());
            }
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
        Cmd::Accuracy { hf_dir, text, ctx, max_tokens, group, keep_vocab, vocab_size } => {
            let t = std::fs::read_to_string(&text).with_context(|| format!("cannot read {}", text.display()))?;
            let keep_vocab = keep_vocab.map(|f| read_keep_vocab(&f, vocab_size)).transpose()?;
            let (rows, scored, window) = host_tools::accuracy::measure(&hf_dir, &t, ctx, max_tokens, group)?;
            println!("{} tokens scored from {} (window {window}, stride {}), quantization group {group}\n", scored, text.display(), window / 2);
            print!("{}", host_tools::accuracy::table(&rows));
            if let Some(keep) = keep_vocab {
                let rows = host_tools::accuracy::measure_pruning(&hf_dir, &t, &keep, ctx, max_tokens, group)?;
                println!("\nvocabulary pruned with --keep-vocab {}{}: each model encodes the text with its own tokenizer, the first {max_tokens} tokens of the full encoding's bytes\n", keep.origin, keep.most_frequent.map_or(String::new(), |n| format!(" --vocab-size {n}")));
                print!("{}", host_tools::accuracy::pruning_table(&rows));
            }
        }
        Cmd::Random { out, preset, arch, n_layer, n_embd, n_head, n_inner, vocab, n_ctx, window, attention, n_kv_head, head_dim, untied, tied, seed } => {
            let base = match (preset.as_deref().and_then(RandomShape::preset), arch) {
                (Some(p), None) => p,
                (Some(p), Some(a)) if p.arch == a.arch() => p,
                (Some(_), Some(a)) => anyhow::bail!("--arch {} contradicts --preset {}", a.arch().name(), preset.unwrap_or_default()),
                (None, Some(ArchArg::GptNeo)) => RandomShape::gpt_neo(2, 64, 4, 256, 64, 16),
                (None, Some(ArchArg::Llama)) => RandomShape::LLAMA_TINY,
                (None, _) => RandomShape::gpt2(2, 64, 4, 256, 64),
            };
            if base.arch != Arch::GptNeo && (window.is_some() || !attention.is_empty()) {
                anyhow::bail!("--window and --attention are GPT-Neo settings (give --arch gpt-neo or a GPT-Neo preset)");
            }
            if base.arch != Arch::Llama && (n_kv_head.is_some() || head_dim.is_some() || untied || tied) {
                anyhow::bail!("--n-kv-head, --head-dim, --tied and --untied are Llama settings (give --arch llama or a Llama preset)");
            }
            let n_layer = n_layer.unwrap_or(base.n_layer);
            let local = match (base.arch, attention.is_empty()) {
                (Arch::GptNeo, true) => host_tools::random::alternating(n_layer),
                (Arch::GptNeo, false) => (0..n_layer as usize).filter(|l| attention[l % attention.len()] == "local").fold(LayerMask::NONE, |m, l| m.with(l)),
                _ => LayerMask::NONE,
            };
            let shape = RandomShape {
                n_layer,
                n_embd: n_embd.unwrap_or(base.n_embd),
                n_head: n_head.unwrap_or(base.n_head),
                n_inner: n_inner.or(base.n_inner),
                vocab_size: vocab.unwrap_or(base.vocab_size),
                n_ctx: n_ctx.unwrap_or(base.n_ctx),
                window: window.unwrap_or(base.window),
                local,
                n_kv_head: n_kv_head.unwrap_or(base.n_kv_head),
                head_dim: head_dim.unwrap_or(base.head_dim),
                tied: if untied { false } else { tied || base.tied },
                ..base
            };
            let params = write_random(&out, shape, seed)?;
            let attn = match shape.arch {
                Arch::Gpt2 => String::new(),
                Arch::GptNeo => format!(", {} of {} layers local (window {})", shape.local.count(), shape.n_layer, shape.window),
                Arch::Llama => format!(
                    ", {} key/value heads, head_dim {}, {} head",
                    if shape.n_kv_head == 0 { shape.n_head } else { shape.n_kv_head },
                    if shape.head_dim == 0 { shape.n_embd / shape.n_head } else { shape.head_dim },
                    if shape.tied { "tied" } else { "untied" }
                ),
            };
            eprintln!(
                "wrote {} ({params} parameters: {}, {} layers, n_embd {}, n_head {}, n_inner {}, vocab {}, n_ctx {}{attn}; seed {seed})",
                out.display(),
                shape.arch.name(),
                shape.n_layer,
                shape.n_embd,
                shape.n_head,
                shape.inner(),
                shape.vocab_size,
                shape.n_ctx
            );
            if shape.arch != Arch::Llama && out.join("vocab.json").is_file() {
                eprintln!("tokenizer: {}", host_tools::random::ByteLevelTokenizer::for_vocab(shape.vocab_size).describe());
            } else if out.join("tokenizer.model").is_file() {
                eprintln!("tokenizer: tokenizer.model (SentencePiece BPE, {} pieces, byte fallback) trained on the repository's text", shape.vocab_size);
            } else if let Ok(why) = std::fs::read_to_string(out.join("NO_TOKENIZER.txt")) {
                eprintln!("note: {}", why.trim_end());
            }
        }
        Cmd::TrainTokenizer { text, vocab_size, out } => {
            let body = std::fs::read_to_string(&text).with_context(|| format!("cannot read {} as UTF-8 text", text.display()))?;
            host_tools::sp_train::write_tokenizer_dir(&out, &body, vocab_size)?;
            eprintln!("wrote {} (tokenizer.model: SentencePiece BPE, {vocab_size} pieces; tokenizer_config.json)", out.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--keep-vocab FILE [--vocab-size N]`.
fn read_keep_vocab(file: &std::path::Path, most_frequent: Option<usize>) -> Result<host_tools::prune::KeepVocab> {
    let text = std::fs::read_to_string(file).with_context(|| format!("--keep-vocab: cannot read {} as UTF-8 text", file.display()))?;
    Ok(host_tools::prune::KeepVocab { text, origin: file.display().to_string(), most_frequent })
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
