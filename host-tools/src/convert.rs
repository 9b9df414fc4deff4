//! `host-tools convert`: a Hugging Face GPT-2 or GPT-Neo checkpoint -> blob.
//!
//! All layout decisions live here, not in the runtime: keys with or without `transformer.`,
//! legacy `attn.bias` / `attn.masked_bias` buffers dropped, F16/BF16 widened, GPT-2's Conv1D
//! `[in, out]` weights transposed to `[out, in]`, GPT-Neo's `nn.Linear` `[out, in]` weights
//! taken as they are, with its three bias-free `q_proj`, `k_proj`, `v_proj` stacked into the
//! rows of one `attn.c_attn` (q | k | v, as GPT-2's) and `out_proj` as `attn.c_proj`, an untied
//! `lm_head.weight` kept only when the config says the head is not tied, `wpe` cut to `--ctx`
//! rows, and with `--keep-vocab` only the kept tokens' rows of `wte` / `lm_head` and a pruned
//! tokenizer ([`crate::prune`]).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use runtime::blob::{DType, Provenance, Role, LAYER_ROLES};
use runtime::config::Arch;

use crate::blob_writer::{f16_bytes, f32_bytes, write_blob, BlobContents, TensorData};
use crate::hf::{read_config, Checkpoint};
use crate::prune::{keep_rows, keep_set, prune_tables, KeepSet, KeepVocab};
use crate::tokenizer_pack::TokenizerTables;

/// Weight dtype for the blob's matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightDType {
    /// 32-bit float (exact copy of an f32 checkpoint).
    F32,
    /// 16-bit float (half the flash; computed in f32).
    F16,
    /// Symmetric int8 per group of `--group` inputs, one f32 scale per group.
    Q8,
    /// Symmetric 4-bit per group, two per byte, one f32 scale per group.
    Q4,
}

/// Options of `convert`.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// Dtype of the weight matrices.
    pub dtype: WeightDType,
    /// Keep only the first N positions (smaller wpe, smaller n_ctx).
    pub ctx: Option<u32>,
    /// Show a progress bar.
    pub progress: bool,
    /// Recorded as the blob's source (defaults to the directory name).
    pub source_name: Option<String>,
    /// Quantization group along each row (q8/q4): the largest divisor of the row length that
    /// is ≤ this and ≥ 8 is used per tensor.
    pub group: usize,
    /// Matrices kept in f32 whatever `dtype` says, by name (`wte`, `wpe`, `lm_head`,
    /// `attn.c_attn`, `attn.c_proj`, `mlp.c_fc`, `mlp.c_proj`).
    pub keep_f32: Vec<String>,
    /// `--keep-vocab FILE [--vocab-size N]`: prune the vocabulary to what FILE needs.
    pub keep_vocab: Option<KeepVocab>,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        Self { dtype: WeightDType::F32, ctx: None, progress: false, source_name: None, group: 32, keep_f32: Vec::new(), keep_vocab: None }
    }
}

/// Encodes a row-major `[rows, cols]` f32 matrix as q8 or q4 with groups of `group` (the
/// quantizers are the runtime's own, so converter and kernels agree on rounding and packing).
pub fn quantize_matrix(data: &[f32], rows: usize, cols: usize, group: usize, four_bit: bool) -> Vec<u8> {
    let n = rows * cols;
    let value_bytes = if four_bit { n / 2 } else { n };
    let scales_at = value_bytes.div_ceil(16) * 16;
    let mut out = vec![0u8; scales_at + n / group * 4];
    let mut scales = Vec::with_capacity(n / group);
    for (gi, xg) in data.chunks_exact(group).enumerate() {
        let s = if four_bit {
            runtime::kernels::quantize_group_q4(xg, &mut out[gi * group / 2..(gi + 1) * group / 2])
        } else {
            let q: &mut [i8] = bytemuck::cast_slice_mut(&mut out[gi * group..(gi + 1) * group]);
            runtime::kernels::quantize_group_q8(xg, q)
        };
        scales.push(s);
    }
    out[scales_at..].copy_from_slice(bytemuck::cast_slice(&scales));
    out
}

/// The group used for a row of `cols`: the largest divisor ≤ `want` and ≥ MIN_GROUP (even for
/// q4), or None.
pub fn pick_group(cols: usize, want: usize, four_bit: bool) -> Option<usize> {
    (runtime::model::MIN_GROUP..=want.min(cols)).rev().find(|g| cols.is_multiple_of(*g) && (!four_bit || g.is_multiple_of(2)))
}

/// The result of a conversion.
pub struct Converted {
    /// The blob bytes.
    pub blob: Vec<u8>,
    /// Things the user should know (defaults taken, tensors ignored).
    pub notes: Vec<String>,
    /// The config written.
    pub config: runtime::Config,
    /// Whether a tokenizer was packed.
    pub has_tokenizer: bool,
    /// With `--keep-vocab`: what was kept and what it saved.
    pub pruning: Option<Pruned>,
}

/// What pruning kept and saved.
#[derive(Debug, Clone)]
pub struct Pruned {
    /// The kept tokens and how they came about.
    pub keep: KeepSet,
    /// Tokens of the source vocabulary (the model's `vocab_size` before pruning).
    pub source_vocab_size: u32,
    /// Bytes of the dropped rows of `wte` (and `lm_head`), at the blob's dtype.
    pub embedding_bytes_saved: u64,
    /// Bytes of the full and of the pruned tokenizer section.
    pub tokenizer_bytes: (u64, u64),
    /// Merges of the full and of the pruned table.
    pub merges: (usize, usize),
}

impl Pruned {
    /// Bytes the blob is smaller than without pruning: rows and tokenizer, less the source-id
    /// table (4 bytes a kept token); up to 64 bytes of alignment padding either way.
    pub fn bytes_saved(&self) -> i64 {
        let (full, pruned) = self.tokenizer_bytes;
        self.embedding_bytes_saved as i64 + full as i64 - pruned as i64 - 4 * self.keep.kept.len() as i64
    }

    /// One line for `convert`'s output.
    pub fn summary(&self, origin: &str) -> String {
        let k = &self.keep;
        let coverage = if k.selected < k.distinct {
            format!("the {} most frequent of its {} distinct tokens (covering {:.2}% of its {} tokens)", k.selected, k.distinct, 100.0 * k.covered_tokens as f64 / k.text_tokens.max(1) as f64, k.text_tokens)
        } else {
            format!("all {} distinct tokens of its {} tokens", k.distinct, k.text_tokens)
        };
        format!(
            "vocabulary pruned to {} of {} tokens: {origin}: {coverage}, the 256 byte tokens, {} special(s), {} more for the merge closure; merges {} of {}; saves about {} bytes (embedding rows {}, tokenizer {} -> {}, source-id table -{})",
            k.kept.len(),
            self.source_vocab_size,
            k.specials.len(),
            k.closure_only,
            self.merges.1,
            self.merges.0,
            self.bytes_saved(),
            self.embedding_bytes_saved,
            self.tokenizer_bytes.0,
            self.tokenizer_bytes.1,
            4 * k.kept.len()
        )
    }
}

/// Where a blob tensor comes from in the checkpoint: the key suffixes (after `transformer.` and
/// `h.{layer}.`; several are stacked along the rows), each tensor's Hugging Face shape, and
/// whether it is a Conv1D `[in, out]` to transpose. None: the family has no such tensor.
struct HfSource {
    suffixes: Vec<&'static str>,
    shape: Vec<usize>,
    conv1d: bool,
}

fn hf_source(arch: Arch, role: Role, c: usize, inner: usize, v: usize, n_pos: usize) -> Option<HfSource> {
    use Role::*;
    let one = |suffix: &'static str, shape: Vec<usize>, conv1d: bool| Some(HfSource { suffixes: vec![suffix], shape, conv1d });
    match (arch, role) {
        (_, Wte) => one("wte.weight", vec![v, c], false),
        (_, LmHead) => one("lm_head.weight", vec![v, c], false),
        (_, Wpe) => one("wpe.weight", vec![n_pos, c], false),
        (_, r @ (LnFWeight | LnFBias | Ln1Weight | Ln1Bias | Ln2Weight | Ln2Bias | MlpCProjBias)) => one(r.hf_suffix(), vec![c], false),
        (_, MlpCFcBias) => one("mlp.c_fc.bias", vec![inner], false),
        // GPT-2: Conv1D [in, out]
        (Arch::Gpt2, AttnCAttnWeight) => one("attn.c_attn.weight", vec![c, 3 * c], true),
        (Arch::Gpt2, AttnCAttnBias) => one("attn.c_attn.bias", vec![3 * c], false),
        (Arch::Gpt2, AttnCProjWeight) => one("attn.c_proj.weight", vec![c, c], true),
        (Arch::Gpt2, AttnCProjBias) => one("attn.c_proj.bias", vec![c], false),
        (Arch::Gpt2, MlpCFcWeight) => one("mlp.c_fc.weight", vec![c, inner], true),
        (Arch::Gpt2, MlpCProjWeight) => one("mlp.c_proj.weight", vec![inner, c], true),
        // GPT-Neo: nn.Linear [out, in]; q/k/v without bias
        (Arch::GptNeo, AttnCAttnWeight) => Some(HfSource {
            suffixes: vec!["attn.attention.q_proj.weight", "attn.attention.k_proj.weight", "attn.attention.v_proj.weight"],
            shape: vec![c, c],
            conv1d: false,
        }),
        (Arch::GptNeo, AttnCAttnBias) => None,
        (Arch::GptNeo, AttnCProjWeight) => one("attn.attention.out_proj.weight", vec![c, c], false),
        (Arch::GptNeo, AttnCProjBias) => one("attn.attention.out_proj.bias", vec![c], false),
        (Arch::GptNeo, MlpCFcWeight) => one("mlp.c_fc.weight", vec![inner, c], false),
        (Arch::GptNeo, MlpCProjWeight) => one("mlp.c_proj.weight", vec![c, inner], false),
    }
}

/// Buffers of older checkpoints that are not weights (causal masks): skipped without a note.
fn is_legacy_buffer(name: &str) -> bool {
    [".attn.bias", ".attn.masked_bias", ".attn.attention.bias", ".attn.attention.masked_bias"].iter().any(|s| name.ends_with(s))
}

/// `[rows, cols]` -> `[cols, rows]`.
fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = data[r * cols + c];
        }
    }
    out
}

/// Converts the checkpoint in `dir`.
pub fn convert(dir: &Path, opts: &ConvertOptions) -> Result<Converted> {
    let hf = read_config(dir)?;
    let mut config = hf.config;
    let mut notes = hf.notes.clone();
    let ckpt = Checkpoint::open(dir)?;

    let prefix = if ckpt.contains("transformer.wte.weight") {
        "transformer."
    } else if ckpt.contains("wte.weight") {
        ""
    } else {
        bail!("tensor wte.weight missing (looked for `transformer.wte.weight` and `wte.weight`)");
    };
    let n_pos = config.n_ctx as usize;
    if let Some(ctx) = opts.ctx {
        if ctx == 0 || ctx > config.n_ctx {
            bail!("--ctx {ctx} must be between 1 and the model's n_positions ({})", config.n_ctx);
        }
        config.n_ctx = ctx;
    }
    let (c, inner, v) = (config.n_embd(), config.n_inner(), config.vocab_size());

    // The tokenizer, and with --keep-vocab the kept tokens (which decide wte's rows).
    let found = crate::tokenizer_pack::tokenizer_from_dir(dir)?;
    let full_section = found.as_ref().map(|t| t.section()).transpose()?;
    let mut pruning = None;
    let tokenizer = match (&opts.keep_vocab, &found, &full_section) {
        (None, _, section) => section.clone(),
        (Some(keep), Some(TokenizerTables::ByteLevel(tables)), Some(section)) => {
            let full = runtime::tokenizer::Tokenizer::from_bytes(section).map_err(|e| anyhow::anyhow!("internal error: the packed tokenizer does not load: {e}"))?;
            let ks = keep_set(tables, &full, keep, &[config.bos_token_id, config.eos_token_id], config.vocab_size)?;
            let pruned = prune_tables(tables, &ks)?;
            let section_out = pruned.section()?;
            let new = |id: u32, what: &str| ks.new_id(id).with_context(|| format!("internal error: {what} {id} was not kept"));
            config.bos_token_id = new(config.bos_token_id, "bos_token_id")?;
            config.eos_token_id = new(config.eos_token_id, "eos_token_id")?;
            config.vocab_size = ks.kept.len() as u32;
            pruning = Some(Pruned {
                source_vocab_size: v as u32,
                embedding_bytes_saved: 0,
                tokenizer_bytes: (section.len() as u64, section_out.len() as u64),
                merges: (tables.merges.len(), pruned.merges.len()),
                keep: ks,
            });
            Some(section_out)
        }
        (Some(keep), Some(TokenizerTables::SentencePiece(_)), _) => bail!("--keep-vocab {}: vocabulary pruning is not supported for SentencePiece tokenizers (tokenizer.model, or a tokenizer.json with byte_fallback) yet", keep.origin),
        (Some(keep), _, _) => bail!("--keep-vocab {}: the checkpoint has no tokenizer (vocab.json + merges.txt, tokenizer.json or tokenizer.model) to encode it with", keep.origin),
    };

    let untied = !hf.tie_word_embeddings;
    if untied && !ckpt.contains("lm_head.weight") {
        bail!("config.json says tie_word_embeddings = false but tensor lm_head.weight is missing");
    }
    let arch = config.arch;
    let mut plan: Vec<(Role, u32)> = vec![(Role::Wte, 0), (Role::Wpe, 0), (Role::LnFWeight, 0), (Role::LnFBias, 0)];
    if untied {
        plan.push((Role::LmHead, 0));
    }
    for l in 0..config.n_layer {
        let has = |r: &&Role| hf_source(arch, **r, c, inner, v, n_pos).is_some();
        plan.extend(LAYER_ROLES.iter().filter(has).map(|&r| (r, l)));
    }

    let bar = if opts.progress { ProgressBar::new(plan.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template("{msg:>24} [{bar:40}] {pos}/{len} tensors ({elapsed})")?.progress_chars("=> "));
    bar.set_message("converting");

    let mut used = BTreeSet::new();
    let mut source_dtypes = BTreeSet::new();
    let mut tensors = Vec::with_capacity(plan.len());
    for (role, layer) in plan {
        let Some(src) = hf_source(arch, role, c, inner, v, n_pos) else { continue };
        let expected = src.shape.clone();
        // the parts, stacked along the rows (GPT-Neo's q | k | v)
        let mut data = Vec::new();
        let mut name = String::new();
        for suffix in &src.suffixes {
            name = match role {
                Role::LmHead => suffix.to_string(),
                r if r.is_layer() => format!("{prefix}h.{layer}.{suffix}"),
                _ => format!("{prefix}{suffix}"),
            };
            let t = ckpt.read(&name).with_context(|| format!("tensor {name} missing (expected shape {expected:?})"))?;
            if t.shape != expected {
                bail!("tensor {name} has shape {:?}, expected {expected:?}", t.shape);
            }
            used.insert(name.clone());
            source_dtypes.insert(format!("{:?}", t.dtype));
            data.extend(t.data);
        }
        let parts = src.suffixes.len();
        let pruned_rows = matches!(role, Role::Wte | Role::LmHead) && pruning.is_some();
        if let (Some(p), true) = (&pruning, pruned_rows) {
            data = keep_rows(&data, c, &p.keep);
        }
        let (rows, cols) = match role {
            Role::Wpe => {
                data.truncate(config.n_ctx() * c);
                (config.n_ctx(), c)
            }
            _ if src.conv1d => {
                let (i, o) = (expected[0], expected[1]);
                data = transpose(&data, i, o);
                (o, i)
            }
            Role::Wte | Role::LmHead => (data.len() / c, c),
            _ if expected.len() == 2 => (parts * expected[0], expected[1]),
            _ => (parts * expected[0], 1),
        };
        let keep_f32 = opts.keep_f32.iter().any(|k| role.hf_suffix().starts_with(k.as_str()));
        let (dtype, bytes) = match (role.is_matrix() && !keep_f32, opts.dtype) {
            (true, WeightDType::F16) => (DType::F16, f16_bytes(&data)),
            (true, q @ (WeightDType::Q8 | WeightDType::Q4)) => {
                let four = q == WeightDType::Q4;
                match pick_group(cols, opts.group, four) {
                    Some(g) => {
                        let dtype = if four { DType::Q4 { group_len: g as u32 } } else { DType::Q8 { group_len: g as u32 } };
                        (dtype, quantize_matrix(&data, rows, cols, g, four))
                    }
                    None => {
                        notes.push(format!("{name}: no quantization group ≥ 8 divides {cols}; kept as f16"));
                        (DType::F16, f16_bytes(&data))
                    }
                }
            }
            _ => (DType::F32, f32_bytes(&data)),
        };
        if let (Some(p), true) = (pruning.as_mut(), pruned_rows) {
            let full = dtype.data_len(v as u64, cols as u64).unwrap_or(0);
            p.embedding_bytes_saved += full.saturating_sub(bytes.len() as u64);
        }
        tensors.push(TensorData { role, layer, dtype, shape: [rows as u32, cols as u32], bytes });
        bar.inc(1);
    }
    bar.finish_and_clear();

    if !untied && ckpt.contains("lm_head.weight") {
        used.insert("lm_head.weight".into());
        notes.push("lm_head.weight ignored: tie_word_embeddings is true, so the head is wte (as in transformers)".into());
    }
    let ignored: Vec<&str> = ckpt.names().filter(|n| !used.contains(*n) && !is_legacy_buffer(n)).collect();
    if !ignored.is_empty() {
        let family = match arch {
            Arch::Gpt2 => "GPT-2",
            Arch::GptNeo => "GPT-Neo",
        };
        notes.push(format!("ignored {} tensor(s) not part of {family}: {}", ignored.len(), ignored.join(", ")));
    }

    let source = opts.source_name.clone().unwrap_or_else(|| {
        dir.canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| dir.display().to_string())
    });
    let source_dtype = source_dtypes.into_iter().collect::<Vec<_>>().join("+");
    let converter = concat!("host-tools ", env!("CARGO_PKG_VERSION"));
    let has_tokenizer = tokenizer.is_some();
    let contents = BlobContents {
        config,
        provenance: Provenance { source: &source, source_dtype: &source_dtype, converter },
        tensors,
        tokenizer,
        source_vocab: pruning.as_ref().map(|p| (p.source_vocab_size, p.keep.kept.clone())),
    };
    let blob = write_blob(&contents)?;
    Ok(Converted { blob, notes, config, has_tokenizer, pruning })
}
