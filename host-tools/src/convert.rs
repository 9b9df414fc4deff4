//! `host-tools convert`: a Hugging Face GPT-2, GPT-Neo or Llama checkpoint -> blob.
//!
//! All layout decisions live here, not in the runtime: keys with or without `transformer.`,
//! legacy `attn.bias` / `attn.masked_bias` buffers dropped, F16/BF16 widened, GPT-2's Conv1D
//! `[in, out]` weights transposed to `[out, in]`, GPT-Neo's `nn.Linear` `[out, in]` weights
//! taken as they are, with its three bias-free `q_proj`, `k_proj`, `v_proj` stacked into the
//! rows of one `attn.c_attn` (q | k | v, as GPT-2's) and `out_proj` as `attn.c_proj`; Llama's
//! `nn.Linear` weights likewise, with `q_proj | k_proj | v_proj` stacked (k and v have
//! `num_key_value_heads` heads) and `gate_proj | up_proj` stacked into `mlp.c_fc`; an untied
//! `lm_head.weight` kept only when the config says the head is not tied, `wpe` cut to `--ctx`
//! rows, and with `--keep-vocab` only the kept tokens' rows of `wte` / `lm_head` and a pruned
//! tokenizer ([`crate::prune`]).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use runtime::blob::{DType, Provenance, Role, GLOBAL_ROLES, LAYER_ROLES};
use runtime::config::Arch;

use crate::blob_writer::{f16_bytes, f32_bytes, write_blob, BlobContents, TensorData};
use crate::hf::{read_config, Checkpoint, HfConfig, Q8Rows};
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
    /// `--no-tokenizer`: leave the checkpoint's tokenizer out (the blob then takes token ids).
    pub no_tokenizer: bool,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        Self { dtype: WeightDType::F32, ctx: None, progress: false, source_name: None, group: 32, keep_f32: Vec::new(), keep_vocab: None, no_tokenizer: false }
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
/// q4); where there is none, the smallest larger divisor that is a multiple of 4 (the Cortex-M
/// kernels read whole words; e.g. 172, the whole row, for llama2.c stories260K's hidden size
/// 172 = 4·43, where groups of 43 or 86 would not be), else any larger even (q4) divisor; None
/// only for rows shorter than MIN_GROUP (then the tensor stays f16).
pub fn pick_group(cols: usize, want: usize, four_bit: bool) -> Option<usize> {
    let min = runtime::model::MIN_GROUP;
    let fits = |g: &usize| cols.is_multiple_of(*g) && (!four_bit || g.is_multiple_of(2));
    (min..=want.min(cols)).rev().find(fits).or_else(|| {
        let above = want.max(min - 1) + 1..=cols;
        above.clone().find(|g| fits(g) && g.is_multiple_of(4)).or_else(|| above.clone().find(fits))
    })
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

/// Where a blob tensor comes from in the checkpoint: the key suffixes (after the family's key
/// prefix and, for a layer tensor, its layer prefix) with each part's Hugging Face shape
/// (several parts are stacked along the rows), and whether they are Conv1D `[in, out]` weights
/// to transpose. None: the family has no such tensor. The blob's shape of every role is
/// [`Role::shape`]; these are the checkpoint's.
struct HfSource {
    parts: Vec<(&'static str, Vec<usize>)>,
    conv1d: bool,
}

fn hf_source(config: &runtime::Config, role: Role) -> Option<HfSource> {
    use Role::*;
    let shape = role.shape(config)?;
    let (c, inner, cq, ckv) = (config.n_embd(), config.n_inner(), config.q_dim(), config.kv_dim());
    let linear = |parts: Vec<(&'static str, Vec<usize>)>| Some(HfSource { parts, conv1d: false });
    let one = |suffix: &'static str| linear(vec![(suffix, if shape[1] == 1 { vec![shape[0]] } else { shape.to_vec() })]);
    let conv1d = |suffix: &'static str, i: usize, o: usize| Some(HfSource { parts: vec![(suffix, vec![i, o])], conv1d: true });
    match config.arch {
        Arch::Gpt2 => match role {
            // GPT-2: Conv1D [in, out]
            AttnCAttnWeight => conv1d("attn.c_attn.weight", c, 3 * c),
            AttnCProjWeight => conv1d("attn.c_proj.weight", c, c),
            MlpCFcWeight => conv1d("mlp.c_fc.weight", c, inner),
            MlpCProjWeight => conv1d("mlp.c_proj.weight", inner, c),
            r => one(r.hf_suffix()),
        },
        // GPT-Neo: nn.Linear [out, in]; q/k/v without bias
        Arch::GptNeo => match role {
            AttnCAttnWeight => linear(vec![
                ("attn.attention.q_proj.weight", vec![c, c]),
                ("attn.attention.k_proj.weight", vec![c, c]),
                ("attn.attention.v_proj.weight", vec![c, c]),
            ]),
            AttnCProjWeight => one("attn.attention.out_proj.weight"),
            AttnCProjBias => one("attn.attention.out_proj.bias"),
            r => one(r.hf_suffix()),
        },
        // Llama: nn.Linear [out, in] under `model.`, q/k/v and gate/up stacked
        Arch::Llama => match role {
            Wte => one("embed_tokens.weight"),
            LmHead => one("lm_head.weight"),
            LnFWeight => one("norm.weight"),
            Ln1Weight => one("input_layernorm.weight"),
            Ln2Weight => one("post_attention_layernorm.weight"),
            AttnCAttnWeight => linear(vec![
                ("self_attn.q_proj.weight", vec![cq, c]),
                ("self_attn.k_proj.weight", vec![ckv, c]),
                ("self_attn.v_proj.weight", vec![ckv, c]),
            ]),
            AttnCAttnBias => linear(vec![
                ("self_attn.q_proj.bias", vec![cq]),
                ("self_attn.k_proj.bias", vec![ckv]),
                ("self_attn.v_proj.bias", vec![ckv]),
            ]),
            AttnCProjWeight => one("self_attn.o_proj.weight"),
            AttnCProjBias => one("self_attn.o_proj.bias"),
            MlpCFcWeight => linear(vec![("mlp.gate_proj.weight", vec![inner, c]), ("mlp.up_proj.weight", vec![inner, c])]),
            MlpCFcBias => linear(vec![("mlp.gate_proj.bias", vec![inner]), ("mlp.up_proj.bias", vec![inner])]),
            MlpCProjWeight => one("mlp.down_proj.weight"),
            MlpCProjBias => one("mlp.down_proj.bias"),
            // RMSNorm has no bias, RoPE no wpe: Role::shape said None above
            Wpe | LnFBias | Ln1Bias | Ln2Bias => None,
        },
    }
}

/// The checkpoint's key prefix (`transformer.` / `model.` or none, as saved) and the prefix of a
/// layer's keys (`h.` / `layers.`), found from where the token embedding is.
fn key_prefixes(arch: Arch, ckpt: &Checkpoint) -> Result<(&'static str, &'static str)> {
    let (with, bare, layers) = match arch {
        Arch::Gpt2 | Arch::GptNeo => ("transformer.", "wte.weight", "h."),
        Arch::Llama => ("model.", "embed_tokens.weight", "layers."),
    };
    if ckpt.contains(&format!("{with}{bare}")) {
        Ok((with, layers))
    } else if ckpt.contains(bare) {
        Ok(("", layers))
    } else {
        bail!("tensor {bare} missing (looked for `{with}{bare}` and `{bare}`)")
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

/// A checkpoint in the converter's terms, whatever file it came from: the config, the tensors
/// under Hugging Face names, the tokenizer, and how to name the source in the blob.
pub struct Source {
    /// The config and the head's tying.
    pub hf: HfConfig,
    /// The tensors.
    pub checkpoint: Checkpoint,
    /// The tokenizer, if any (and not left out by `--no-tokenizer`).
    pub tokenizer: Option<TokenizerTables>,
    /// Recorded as the blob's source unless [`ConvertOptions::source_name`] says otherwise.
    pub name: String,
    /// Recorded as the source's dtype (default: the tensors' storage dtypes).
    pub description: Option<String>,
}

impl Source {
    /// A Hugging Face folder: `config.json`, the safetensors, and the tokenizer files beside.
    pub fn hf_dir(dir: &Path, no_tokenizer: bool) -> Result<Self> {
        let hf = read_config(dir)?;
        let checkpoint = Checkpoint::open(dir)?;
        let hint = |e: anyhow::Error| anyhow::anyhow!("{e:#} (pass --no-tokenizer to convert the weights without it)");
        let tokenizer = if no_tokenizer { None } else { crate::tokenizer_pack::tokenizer_from_dir(dir).map_err(hint)? };
        let name = dir
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| dir.display().to_string());
        Ok(Self { hf, checkpoint, tokenizer, name, description: None })
    }

    /// A llama2.c `model.bin` ([`crate::llama2c`]) and its tokenizer: `tokenizer` if given
    /// (a `tokenizer.bin` or a sentencepiece `tokenizer.model`), else a `tokenizer.bin` beside
    /// the model, else none.
    pub fn llama2c(model: &Path, tokenizer: Option<&Path>, no_tokenizer: bool) -> Result<Self> {
        let m = crate::llama2c::read_model(model)?;
        let description = Some(m.describe());
        let mut hf = m.hf;
        let beside = model.parent().map(|d| d.join("tokenizer.bin")).filter(|p| p.is_file() && p != model);
        let tok_path = if no_tokenizer { None } else { tokenizer.map(Path::to_path_buf).or(beside) };
        let tables = match &tok_path {
            Some(p) => {
                if tokenizer.is_none() {
                    hf.notes.push(format!("tokenizer: {} (found beside the model; --tokenizer FILE to choose another)", p.display()));
                }
                Some(crate::llama2c::read_any_tokenizer(p, m.header.vocab_size)?)
            }
            None if no_tokenizer => None,
            None => {
                hf.notes.push("no tokenizer: pass --tokenizer tokenizer.bin (the blob then encodes text); without it the blob takes token ids".into());
                None
            }
        };
        if !m.groups_cross_rows.is_empty() {
            hf.notes.push(format!(
                "{} of the version 2 matrices have Q8_0 groups that cross rows ({}{}): dequantized exactly, and requantized if --dtype q8",
                m.groups_cross_rows.len(),
                m.groups_cross_rows.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
                if m.groups_cross_rows.len() > 3 { ", …" } else { "" }
            ));
        }
        let name = model.file_name().map_or_else(|| model.display().to_string(), |n| n.to_string_lossy().into_owned());
        Ok(Self { hf, checkpoint: m.checkpoint, tokenizer: tables.map(TokenizerTables::SentencePiece), name, description })
    }
}

/// Converts the checkpoint at `path`: a Hugging Face folder, or a llama2.c `model.bin` (a file)
/// with `tokenizer` (only for a `model.bin`).
pub fn convert_path(path: &Path, tokenizer: Option<&Path>, opts: &ConvertOptions) -> Result<Converted> {
    if path.is_dir() {
        if let Some(t) = tokenizer {
            bail!("--tokenizer {}: only for a llama2.c model.bin; a Hugging Face folder's tokenizer is read from its own files", t.display());
        }
        convert(path, opts)
    } else if path.is_file() {
        convert_source(Source::llama2c(path, tokenizer, opts.no_tokenizer)?, opts)
    } else {
        bail!("{}: no such file or directory (expected a Hugging Face checkpoint folder or a llama2.c model.bin)", path.display())
    }
}

/// Converts the Hugging Face checkpoint in `dir`.
pub fn convert(dir: &Path, opts: &ConvertOptions) -> Result<Converted> {
    convert_source(Source::hf_dir(dir, opts.no_tokenizer)?, opts)
}

/// The matrix's int8 values and scales as the blob stores them, when every stacked part carries
/// [`Q8Rows`] with one group the runtime takes (≥ `MIN_GROUP`, dividing the row), after
/// `--keep-vocab`'s row selection.
fn kept_q8(parts: &[Option<Q8Rows>], cols: usize, rows_kept: Option<&KeepSet>) -> Option<(usize, Vec<u8>)> {
    let g = parts.first()?.as_ref()?.group;
    if g < runtime::model::MIN_GROUP || !cols.is_multiple_of(g) || parts.iter().any(|p| p.as_ref().is_none_or(|p| p.group != g)) {
        return None;
    }
    let mut q: Vec<i8> = parts.iter().flatten().flat_map(|p| p.q.iter().copied()).collect();
    let mut s: Vec<f32> = parts.iter().flatten().flat_map(|p| p.s.iter().copied()).collect();
    if let Some(keep) = rows_kept {
        let pick = |cols: usize| move |&src: &u32| src as usize * cols..(src as usize + 1) * cols;
        q = keep.kept.iter().map(pick(cols)).flat_map(|r| q[r].to_vec()).collect();
        s = keep.kept.iter().map(pick(cols / g)).flat_map(|r| s[r].to_vec()).collect();
    }
    let scales_at = q.len().div_ceil(16) * 16;
    let mut out = vec![0u8; scales_at + s.len() * 4];
    out[..q.len()].copy_from_slice(bytemuck::cast_slice(&q));
    out[scales_at..].copy_from_slice(bytemuck::cast_slice(&s));
    Some((g, out))
}

/// Converts a [`Source`].
pub fn convert_source(source: Source, opts: &ConvertOptions) -> Result<Converted> {
    let Source { hf, checkpoint: ckpt, tokenizer: found, name: source_name, description } = source;
    let mut config = hf.config;
    let mut notes = hf.notes.clone();

    let (prefix, layer_prefix) = key_prefixes(config.arch, &ckpt)?;
    if let Some(ctx) = opts.ctx {
        if ctx == 0 || ctx > config.n_ctx {
            bail!("--ctx {ctx} must be between 1 and the model's n_positions ({})", config.n_ctx);
        }
        config.n_ctx = ctx;
    }
    let (c, v) = (config.n_embd(), config.vocab_size());

    // The tokenizer, and with --keep-vocab the kept tokens (which decide wte's rows).
    if let Some(t) = &found {
        // fewer is fine (an embedding padded past the tokenizer); more would give ids the model has no row for
        if t.vocab_size() > v {
            bail!("the tokenizer has {} tokens, more than the model's vocab_size {v}", t.vocab_size());
        }
    }
    let full_section = found.as_ref().map(|t| t.section()).transpose().map_err(|e| anyhow::anyhow!("{e:#} (pass --no-tokenizer to convert the weights without it)"))?;
    let mut pruning = None;
    let tokenizer = match (&opts.keep_vocab, &found, &full_section) {
        (None, _, section) => section.clone(),
        (Some(keep), Some(tables), Some(section)) => {
            let full = runtime::tokenizer::Tokenizer::from_bytes(section).map_err(|e| anyhow::anyhow!("internal error: the packed tokenizer does not load: {e}"))?;
            let specials = [config.bos_token_id, config.eos_token_id];
            // the kept set and the pruned section, by tokenizer kind; merges before and after
            let (ks, section_out, merges) = match tables {
                TokenizerTables::ByteLevel(t) => {
                    let ks = keep_set(t, &full, keep, &specials, config.vocab_size)?;
                    let pruned = prune_tables(t, &ks)?;
                    (ks, pruned.section()?, (t.merges.len(), pruned.merges.len()))
                }
                TokenizerTables::SentencePiece(t) => {
                    let ks = crate::sp_prune::keep_set(t, &full, keep, &specials, config.vocab_size)?;
                    let pruned = crate::sp_prune::prune_tables(t, &ks)?;
                    (ks, pruned.section()?, (t.merges.len(), pruned.merges.len()))
                }
            };
            let new = |id: u32, what: &str| ks.new_id(id).with_context(|| format!("internal error: {what} {id} was not kept"));
            config.bos_token_id = new(config.bos_token_id, "bos_token_id")?;
            config.eos_token_id = new(config.eos_token_id, "eos_token_id")?;
            config.vocab_size = ks.kept.len() as u32;
            pruning = Some(Pruned {
                source_vocab_size: v as u32,
                embedding_bytes_saved: 0,
                tokenizer_bytes: (section.len() as u64, section_out.len() as u64),
                merges,
                keep: ks,
            });
            Some(section_out)
        }
        (Some(keep), _, _) => bail!("--keep-vocab {}: the checkpoint has no tokenizer (vocab.json + merges.txt, tokenizer.json or tokenizer.model) to encode it with", keep.origin),
    };

    let untied = !hf.tie_word_embeddings;
    if untied && !ckpt.contains("lm_head.weight") {
        bail!("config.json says tie_word_embeddings = false but tensor lm_head.weight is missing");
    }
    let arch = config.arch;
    // the tensors the config has (Role::shape), in the blob's order; shapes as in the checkpoint
    // (its full context and vocabulary: wpe is cut and wte pruned below)
    let source_config = runtime::Config { n_ctx: hf.config.n_ctx, vocab_size: v as u32, ..config };
    let has = |r: &&Role| hf_source(&source_config, **r).is_some();
    let mut plan: Vec<(Role, u32)> = GLOBAL_ROLES.iter().filter(has).filter(|&&r| r != Role::LmHead || untied).map(|&r| (r, 0)).collect();
    for l in 0..config.n_layer {
        plan.extend(LAYER_ROLES.iter().filter(has).map(|&r| (r, l)));
    }

    let bar = if opts.progress { ProgressBar::new(plan.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template("{msg:>24} [{bar:40}] {pos}/{len} tensors ({elapsed})")?.progress_chars("=> "));
    bar.set_message("converting");

    let mut used = BTreeSet::new();
    let mut source_dtypes = BTreeSet::new();
    // (matrix, whether its int8 values were kept) for a quantized source and --dtype q8
    let mut int8_kept: Vec<(String, bool)> = Vec::new();
    let mut tensors = Vec::with_capacity(plan.len());
    for (role, layer) in plan {
        let Some(src) = hf_source(&source_config, role) else { continue };
        // the parts, stacked along the rows (GPT-Neo's and Llama's q | k | v, Llama's gate | up)
        let mut data = Vec::new();
        let mut q8_parts = Vec::new();
        let mut int8_source = false;
        let mut name = String::new();
        for (suffix, expected) in &src.parts {
            name = match role {
                Role::LmHead => suffix.to_string(),
                r if r.is_layer() => format!("{prefix}{layer_prefix}{layer}.{suffix}"),
                _ => format!("{prefix}{suffix}"),
            };
            let t = ckpt.read(&name).with_context(|| format!("tensor {name} missing (expected shape {expected:?})"))?;
            if &t.shape != expected {
                bail!("tensor {name} has shape {:?}, expected {expected:?}", t.shape);
            }
            used.insert(name.clone());
            source_dtypes.insert(format!("{:?}", t.dtype));
            int8_source |= t.dtype == safetensors::Dtype::I8;
            data.extend(t.data);
            q8_parts.push(t.q8);
        }
        let pruned_rows = matches!(role, Role::Wte | Role::LmHead) && pruning.is_some();
        if let (Some(p), true) = (&pruning, pruned_rows) {
            data = keep_rows(&data, c, &p.keep);
        }
        if role == Role::Wpe {
            data.truncate(config.n_ctx() * c);
        }
        if src.conv1d {
            let (i, o) = (src.parts[0].1[0], src.parts[0].1[1]);
            data = transpose(&data, i, o);
        }
        // the blob's shape (after --ctx and pruning)
        let [rows, cols] = role.shape(&config).context("internal error: a planned tensor has no shape")?;
        if data.len() != rows * cols {
            bail!("internal error: {name}: {} values for shape [{rows}, {cols}]", data.len());
        }
        let keep_f32 = opts.keep_f32.iter().any(|k| role.hf_suffix().starts_with(k.as_str()));
        let kept = if role.is_matrix() && !keep_f32 && opts.dtype == WeightDType::Q8 {
            kept_q8(&q8_parts, cols, pruning.as_ref().filter(|_| pruned_rows).map(|p| &p.keep))
        } else {
            None
        };
        if int8_source && role.is_matrix() && opts.dtype == WeightDType::Q8 && !keep_f32 {
            int8_kept.push((if role.is_layer() { format!("h.{layer}.{}", role.hf_suffix()) } else { role.hf_suffix().to_string() }, kept.is_some()));
        }
        let (dtype, bytes) = match (role.is_matrix() && !keep_f32, opts.dtype) {
            (true, WeightDType::Q8) if kept.is_some() => {
                let (g, bytes) = kept.context("internal error")?;
                (DType::Q8 { group_len: g as u32 }, bytes)
            }
            (true, WeightDType::F16) => (DType::F16, f16_bytes(&data)),
            (true, q @ (WeightDType::Q8 | WeightDType::Q4)) => {
                let four = q == WeightDType::Q4;
                match pick_group(cols, opts.group, four) {
                    Some(g) => {
                        let dtype = if four { DType::Q4 { group_len: g as u32 } } else { DType::Q8 { group_len: g as u32 } };
                        (dtype, quantize_matrix(&data, rows, cols, g, four))
                    }
                    None => {
                        notes.push(format!("{name}: rows of {cols} are shorter than a quantization group (8); kept as f16"));
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
            Arch::Llama => "Llama",
        };
        notes.push(format!("ignored {} tensor(s) not part of {family}: {}", ignored.len(), ignored.join(", ")));
    }

    let source = opts.source_name.clone().unwrap_or(source_name);
    let mut source_dtype = description.unwrap_or_else(|| source_dtypes.into_iter().collect::<Vec<_>>().join("+"));
    if !int8_kept.is_empty() {
        let requantized: Vec<&str> = int8_kept.iter().filter(|(_, k)| !k).map(|(n, _)| n.as_str()).collect();
        let kept = int8_kept.len() - requantized.len();
        source_dtype += &format!("; --dtype q8: int8 values kept in {kept} of {} matrices", int8_kept.len());
        if !requantized.is_empty() {
            let list = requantized.iter().take(4).copied().collect::<Vec<_>>().join(", ");
            source_dtype += &format!(", requantized in {} ({list}{}: groups cross rows)", requantized.len(), if requantized.len() > 4 { ", …" } else { "" });
        }
        notes.push(format!("int8 values kept in {kept} of {} matrices, {} requantized", int8_kept.len(), requantized.len()));
    }
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

#[cfg(test)]
mod tests {
    use super::pick_group;

    #[test]
    fn pick_group_prefers_the_largest_divisor_up_to_the_wish_then_whole_words() {
        assert_eq!(pick_group(64, 32, false), Some(32));
        assert_eq!(pick_group(112, 32, false), Some(28));
        assert_eq!(pick_group(448, 32, true), Some(32));
        // stories260K's hidden size: 172 = 4·43 has no divisor in 8..=32; 43 and 86 are not
        // multiples of 4, the row is
        assert_eq!(pick_group(172, 32, false), Some(172));
        assert_eq!(pick_group(172, 32, true), Some(172));
        // no multiple of 4 above the wish: the smallest divisor (even for q4)
        assert_eq!(pick_group(2 * 37, 32, false), Some(37));
        assert_eq!(pick_group(2 * 37, 32, true), Some(74));
        assert_eq!(pick_group(37, 32, true), None);
        assert_eq!(pick_group(6, 32, false), None);
    }
}
