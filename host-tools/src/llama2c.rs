//! Reading llama2.c's files: `model.bin` (the three layouts of its `export.py`) and
//! `tokenizer.bin`, into the converter's terms: a [`Checkpoint`] under Hugging Face Llama tensor
//! names, an [`HfConfig`], and [`SpTables`] for the tokenizer. `convert` then treats them as it
//! treats a `LlamaForCausalLM` folder.
//!
//! **`model.bin`**, the version told by content (never by file name):
//! - *version 0 (legacy)*: 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads,
//!   n_kv_heads, vocab_size, seq_len; a negative vocab_size means an unshared classifier), then
//!   fp32 tensors grouped by kind across layers: token embedding; attention norms; wq; wk; wv;
//!   wo; MLP norms; w1; w2; w3; final norm; `freqs_cos`, `freqs_sin` (seq_len × head_dim/2 each,
//!   skipped: the runtime computes RoPE's angles itself); the classifier if unshared.
//! - *version 1*: a 256-byte header (uint32 magic `0x616b3432` "ak42", int32 version 1, the
//!   7 ints, uint8 shared_classifier, zeros), then fp32: attention norms, MLP norms, final norm,
//!   token embedding, wq, wk, wv, wo, w1, w2, w3, the classifier if unshared.
//! - *version 2 (Q8_0)*: version 1's header plus an int32 group size after the flag; fp32
//!   norms (attention, MLP, final), then each matrix as int8 values followed by its fp32 scales
//!   (one per group of the flattened tensor, so a group may cross rows): token embedding, wq,
//!   wk, wv, wo (each layer in turn), w1, w2, w3, the classifier if unshared. Values are
//!   dequantized exactly (`q · s` in f32, as `runq.c` does). Where the groups lie within rows,
//!   the int8 values and scales also travel as [`Q8Rows`], for `convert --dtype q8` to keep.
//!
//! llama2.c's rules for what the header does not say: head_dim = dim / n_heads, RMSNorm eps
//! 1e-5, RoPE θ 10000, BOS 1, EOS 2. llama2.c rotates adjacent pairs of q and k (2i, 2i+1); the
//! runtime, like transformers, rotates i with i + D/2. So the rows of every q and k head are
//! permuted: row j of a head comes from row 2j, row D/2 + j from row 2j + 1. The same weights
//! from a `model.bin` and from a Hugging Face folder then give the same logits.
//!
//! **`tokenizer.bin`**: uint32 max_token_length, then per token an f32 score, an int32 length
//! and that many bytes, for the model's vocab_size tokens (the file does not store the count).
//! `export.py` writes sentencepiece's pieces with `▁` as a space, `<s>` as `"\n<s>\n"` and
//! `</s>` as `"\n</s>\n"`; byte pieces stay `<0xNN>`. Read back: id 0 is the unknown piece,
//! those two are BOS and EOS (control pieces), `<0xNN>` byte pieces, everything else an
//! ordinary piece ranked by score. The normalizer is Llama 2's (identity, a dummy prefix,
//! spaces kept), which is what `run.c` implements; a tokenizer trained with
//! `remove_extra_whitespaces` (sentencepiece's default) differs on runs of spaces, and its
//! `tokenizer.model` can be given to `--tokenizer` instead.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use safetensors::Dtype;

use crate::hf::{Checkpoint, HfConfig, Q8Rows, Tensor};
use crate::sp_model::{model_type, piece_type, NormalizerSpec, SpModel, SpPiece, TrainerSpec};
use crate::sp_pack::{byte_piece_value, SpTables, TokenizerConfig};

/// The magic of versions 1 and 2: "ak42" as a little-endian uint32.
pub const MAGIC: u32 = 0x616b_3432;
/// Bytes of the version 1 and 2 header.
const HEADER_BYTES: usize = 256;

/// The seven header ints, as llama2.c's `Config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Model width.
    pub dim: usize,
    /// MLP hidden width.
    pub hidden_dim: usize,
    /// Layers.
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Tokens.
    pub vocab_size: usize,
    /// Context length.
    pub seq_len: usize,
    /// Whether the classifier is the token embedding.
    pub shared_classifier: bool,
}

/// A `model.bin` read into the converter's terms.
pub struct Llama2c {
    /// Which export layout: 0, 1 or 2.
    pub version: u32,
    /// The header.
    pub header: Header,
    /// Version 2's group size.
    pub group_size: Option<usize>,
    /// The runtime config (through the Hugging Face one's fields).
    pub hf: HfConfig,
    /// The tensors under Hugging Face Llama names (`model.layers.0.self_attn.q_proj.weight`, ...).
    pub checkpoint: Checkpoint,
    /// Matrices whose int8 groups cross rows (version 2), by Hugging Face name: `--dtype q8`
    /// quantizes those again.
    pub groups_cross_rows: Vec<String>,
}

impl Llama2c {
    /// One line for the blob's provenance and `inspect`: the layout and the source dtype.
    pub fn describe(&self) -> String {
        match (self.version, self.group_size) {
            (2, Some(g)) => format!("llama2.c model.bin version 2, Q8_0 in groups of {g}"),
            (v, _) => format!("llama2.c model.bin version {v}, fp32"),
        }
    }
}

/// Whether `bytes` start like a llama2.c `model.bin` of version 1 or 2 (the magic).
pub fn has_magic(bytes: &[u8]) -> bool {
    bytes.get(..4).is_some_and(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]) == MAGIC)
}

/// A little-endian reader over a byte slice whose every read is checked.
struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
    what: &'static str,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            bail!("{} ends at byte {} of {} needed ({n} more bytes at offset {})", self.what, self.bytes.len(), self.at.saturating_add(n), self.at)
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i32(&mut self) -> Result<i32> {
        Ok(self.u32()? as i32)
    }
    fn f32s(&mut self, n: usize) -> Result<Vec<f32>> {
        let bytes = self.take(n.checked_mul(4).context("tensor size overflows")?)?;
        Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }
    fn i8s(&mut self, n: usize) -> Result<Vec<i8>> {
        Ok(self.take(n)?.iter().map(|&b| b as i8).collect())
    }
}

/// Reads the seven ints and checks them against each other.
fn read_header(r: &mut Reader<'_>, legacy: bool) -> Result<(Header, i32)> {
    let mut ints = [0i32; 7];
    for v in &mut ints {
        *v = r.i32()?;
    }
    let [dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab, seq_len] = ints;
    let names = ["dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"];
    for (name, v) in names.iter().zip(ints) {
        let v = if *name == "vocab_size" && legacy { v.checked_abs().unwrap_or(-1) } else { v };
        ensure!(v > 0, "header field {name} is {v} (header: {})", header_text(&ints));
    }
    let h = Header {
        dim: dim as usize,
        hidden_dim: hidden_dim as usize,
        n_layers: n_layers as usize,
        n_heads: n_heads as usize,
        n_kv_heads: n_kv_heads as usize,
        vocab_size: vocab.unsigned_abs() as usize,
        seq_len: seq_len as usize,
        shared_classifier: vocab > 0,
    };
    ensure!(h.dim.is_multiple_of(h.n_heads), "n_heads {} does not divide dim {} (head_dim = dim / n_heads in llama2.c)", h.n_heads, h.dim);
    ensure!((h.dim / h.n_heads).is_multiple_of(2), "head_dim {} (dim {} / n_heads {}) is odd; RoPE rotates pairs", h.dim / h.n_heads, h.dim, h.n_heads);
    ensure!(
        h.n_kv_heads <= h.n_heads && h.n_heads.is_multiple_of(h.n_kv_heads),
        "n_kv_heads {} does not divide n_heads {} (grouped-query attention needs whole groups)",
        h.n_kv_heads,
        h.n_heads
    );
    Ok((h, vocab))
}

fn header_text(ints: &[i32; 7]) -> String {
    format!("dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, vocab_size {}, seq_len {}", ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], ints[6])
}

/// The kinds of tensor, in llama2.c's names, with their shape (rows, cols) for one layer (or the
/// whole model for the globals) and their Hugging Face names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Embedding,
    AttnNorm,
    Wq,
    Wk,
    Wv,
    Wo,
    FfnNorm,
    W1,
    W2,
    W3,
    FinalNorm,
    Classifier,
}

impl Kind {
    fn per_layer(self) -> bool {
        !matches!(self, Kind::Embedding | Kind::FinalNorm | Kind::Classifier)
    }
    /// (rows, cols) of one tensor of this kind; a norm is one row.
    fn shape(self, h: &Header) -> (usize, usize) {
        let kv_dim = h.dim / h.n_heads * h.n_kv_heads;
        match self {
            Kind::Embedding | Kind::Classifier => (h.vocab_size, h.dim),
            Kind::AttnNorm | Kind::FfnNorm | Kind::FinalNorm => (1, h.dim),
            Kind::Wq | Kind::Wo => (h.dim, h.dim),
            Kind::Wk | Kind::Wv => (kv_dim, h.dim),
            Kind::W1 | Kind::W3 => (h.hidden_dim, h.dim),
            Kind::W2 => (h.dim, h.hidden_dim),
        }
    }
    fn hf_name(self, layer: usize) -> String {
        let l = |s: &str| format!("model.layers.{layer}.{s}");
        match self {
            Kind::Embedding => "model.embed_tokens.weight".into(),
            Kind::FinalNorm => "model.norm.weight".into(),
            Kind::Classifier => "lm_head.weight".into(),
            Kind::AttnNorm => l("input_layernorm.weight"),
            Kind::FfnNorm => l("post_attention_layernorm.weight"),
            Kind::Wq => l("self_attn.q_proj.weight"),
            Kind::Wk => l("self_attn.k_proj.weight"),
            Kind::Wv => l("self_attn.v_proj.weight"),
            Kind::Wo => l("self_attn.o_proj.weight"),
            Kind::W1 => l("mlp.gate_proj.weight"),
            Kind::W2 => l("mlp.down_proj.weight"),
            Kind::W3 => l("mlp.up_proj.weight"),
        }
    }
    fn llama2c_name(self) -> &'static str {
        match self {
            Kind::Embedding => "token_embedding_table",
            Kind::AttnNorm => "rms_att_weight",
            Kind::Wq => "wq",
            Kind::Wk => "wk",
            Kind::Wv => "wv",
            Kind::Wo => "wo",
            Kind::FfnNorm => "rms_ffn_weight",
            Kind::W1 => "w1",
            Kind::W2 => "w2",
            Kind::W3 => "w3",
            Kind::FinalNorm => "rms_final_weight",
            Kind::Classifier => "wcls",
        }
    }
}

/// How a tensor is stored in the file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Storage {
    F32,
    /// Q8_0 with this group size.
    Q8(usize),
    /// fp32 values read and dropped (version 0's RoPE tables), this many.
    Skip(usize),
}

/// The file's sections in order: (kind, storage), each per-layer kind once for all layers.
fn layout(version: u32, h: &Header, group: usize) -> Vec<(Kind, Storage)> {
    use Kind::*;
    use Storage::*;
    let rope_table = h.seq_len * (h.dim / h.n_heads) / 2;
    let mut out = match version {
        0 => vec![
            (Embedding, F32),
            (AttnNorm, F32),
            (Wq, F32),
            (Wk, F32),
            (Wv, F32),
            (Wo, F32),
            (FfnNorm, F32),
            (W1, F32),
            (W2, F32),
            (W3, F32),
            (FinalNorm, F32),
            (FinalNorm, Skip(rope_table)),
            (FinalNorm, Skip(rope_table)),
        ],
        1 => vec![(AttnNorm, F32), (FfnNorm, F32), (FinalNorm, F32), (Embedding, F32), (Wq, F32), (Wk, F32), (Wv, F32), (Wo, F32), (W1, F32), (W2, F32), (W3, F32)],
        _ => vec![
            (AttnNorm, F32),
            (FfnNorm, F32),
            (FinalNorm, F32),
            (Embedding, Q8(group)),
            (Wq, Q8(group)),
            (Wk, Q8(group)),
            (Wv, Q8(group)),
            (Wo, Q8(group)),
            (W1, Q8(group)),
            (W2, Q8(group)),
            (W3, Q8(group)),
        ],
    };
    if !h.shared_classifier {
        out.push((Classifier, if version == 2 { Q8(group) } else { F32 }));
    }
    out
}

/// Bytes the body must hold for this layout (None on overflow).
fn body_bytes(layout: &[(Kind, Storage)], h: &Header) -> Option<u64> {
    let mut total = 0u64;
    for &(kind, storage) in layout {
        let (rows, cols) = kind.shape(h);
        let count = if kind.per_layer() { h.n_layers as u64 } else { 1 };
        let n = (rows as u64).checked_mul(cols as u64)?.checked_mul(count)?;
        let bytes = match storage {
            Storage::F32 => n.checked_mul(4)?,
            Storage::Q8(g) => n.checked_add((n / g as u64).checked_mul(4)?)?,
            Storage::Skip(values) => (values as u64).checked_mul(4)?,
        };
        total = total.checked_add(bytes)?;
    }
    Some(total)
}

/// llama2.c's adjacent-pair rows of each head (2j, 2j+1) -> the rotate-half order (j, j + D/2),
/// for `rows` rows of `row_len` values in heads of `head_dim` rows.
fn permute_heads<T: Copy>(data: &[T], rows: usize, row_len: usize, head_dim: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(data.len());
    let half = head_dim / 2;
    for head in 0..rows / head_dim {
        for new in 0..head_dim {
            let old = head * head_dim + if new < half { 2 * new } else { 2 * (new - half) + 1 };
            out.extend_from_slice(&data[old * row_len..(old + 1) * row_len]);
        }
    }
    out
}

/// Reads a llama2.c `model.bin` (see the [module docs](self)).
pub fn read_model(path: &Path) -> Result<Llama2c> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_model(&bytes).with_context(|| format!("{} (llama2.c model.bin)", path.display()))
}

/// [`read_model`] on the file's bytes.
pub fn parse_model(bytes: &[u8]) -> Result<Llama2c> {
    let mut r = Reader { bytes, at: 0, what: "the file" };
    let (version, header, group_size) = if has_magic(bytes) {
        r.take(4)?;
        let version = r.i32()?;
        ensure!(version == 1 || version == 2, "magic \"ak42\" with version {version}: versions 1 and 2 are known");
        let (mut header, vocab) = read_header(&mut r, false)?;
        let shared = r.take(1)?[0];
        ensure!(shared <= 1, "shared_classifier byte is {shared}, not 0 or 1");
        ensure!(vocab > 0, "vocab_size {vocab} in a version {version} header (only version 0 signs it)");
        header.shared_classifier = shared == 1;
        let group = if version == 2 {
            let g = r.i32()?;
            ensure!(g > 0, "version 2 group size is {g}");
            Some(g as usize)
        } else {
            None
        };
        ensure!(bytes.len() >= HEADER_BYTES, "the file is {} bytes, shorter than the {HEADER_BYTES}-byte header", bytes.len());
        r.at = HEADER_BYTES;
        (version as u32, header, group)
    } else {
        let (header, _) = read_header(&mut r, true).context("no \"ak42\" magic, so read as version 0 (legacy), whose header is 7 int32")?;
        (0, header, None)
    };

    let group = group_size.unwrap_or(1);
    let sections = layout(version, &header, group);
    for &(kind, storage) in &sections {
        let (rows, cols) = kind.shape(&header);
        if let Storage::Q8(g) = storage {
            ensure!(
                (rows * cols).is_multiple_of(g),
                "{} has {rows} x {cols} = {} values, not a multiple of the group size {g}",
                kind.llama2c_name(),
                rows * cols
            );
        }
    }
    let want = body_bytes(&sections, &header).context("the header's sizes overflow")?;
    let have = (bytes.len() - r.at) as u64;
    if want != have {
        let other = if header.shared_classifier { "" } else { ", classifier unshared" };
        bail!(
            "version {version} with dim {}, hidden_dim {}, {} layers, {} heads ({} key/value), vocab {}, seq_len {}{other} needs {} bytes after the header, the file has {have}{}",
            header.dim,
            header.hidden_dim,
            header.n_layers,
            header.n_heads,
            header.n_kv_heads,
            header.vocab_size,
            header.seq_len,
            want,
            if version == 0 && have > want && have - want == (header.vocab_size * header.dim * 4) as u64 {
                " (as much more as an unshared classifier: is the vocab_size's sign lost?)"
            } else {
                ""
            }
        );
    }

    let head_dim = header.dim / header.n_heads;
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    let mut groups_cross_rows = Vec::new();
    for &(kind, storage) in &sections {
        let (rows, cols) = kind.shape(&header);
        let count = if kind.per_layer() { header.n_layers } else { 1 };
        for layer in 0..count {
            let n = rows * cols;
            let (mut data, mut q8) = match storage {
                Storage::Skip(values) => {
                    r.take(values * 4)?;
                    continue;
                }
                Storage::F32 => (r.f32s(n)?, None),
                Storage::Q8(g) => {
                    let q = r.i8s(n)?;
                    let s = r.f32s(n / g)?;
                    if let Some(i) = s.iter().position(|v| !v.is_finite()) {
                        bail!("{} (layer {layer}): scale {i} is {}", kind.llama2c_name(), s[i]);
                    }
                    let data: Vec<f32> = q.iter().enumerate().map(|(i, &v)| f32::from(v) * s[i / g]).collect();
                    // groups within rows, and values in the runtime's range: kept for --dtype q8
                    let keep = cols % g == 0 && !q.contains(&i8::MIN);
                    if !keep && rows > 1 {
                        groups_cross_rows.push(kind.hf_name(layer));
                    }
                    (data, keep.then_some(Q8Rows { group: g, q, s }))
                }
            };
            if let Some(i) = data.iter().position(|v| !v.is_finite()) {
                bail!("{} (layer {layer}): value {i} (row {}, column {}) is {}", kind.llama2c_name(), i / cols, i % cols, data[i]);
            }
            if matches!(kind, Kind::Wq | Kind::Wk) {
                data = permute_heads(&data, rows, cols, head_dim);
                if let Some(q) = &mut q8 {
                    q.q = permute_heads(&q.q, rows, cols, head_dim);
                    q.s = permute_heads(&q.s, rows, cols / q.group, head_dim);
                }
            }
            let shape = if rows == 1 { vec![cols] } else { vec![rows, cols] };
            let dtype = if q8.is_some() || matches!(storage, Storage::Q8(_)) { Dtype::I8 } else { Dtype::F32 };
            tensors.push((kind.hf_name(layer), Tensor { shape, data, dtype, q8 }));
        }
    }
    // every byte was accounted for above (want == have)

    let (h, vocab) = (&header, header.vocab_size as u32);
    let config = runtime::Config {
        head_dim: head_dim as u32,
        ..runtime::Config::llama(vocab, h.seq_len as u32, h.dim as u32, h.n_layers as u32, h.n_heads as u32, h.n_kv_heads as u32, h.hidden_dim as u32)
    };
    config.validate().map_err(|e| anyhow::anyhow!("the header gives a config the runtime refuses: {e}"))?;
    let notes = vec![format!(
        "llama2.c model.bin version {version}: head_dim {head_dim} (dim / n_heads), RMSNorm eps 1e-5, RoPE theta 10000, BOS 1, EOS 2 (llama2.c's fixed values); q and k rows permuted from adjacent pairs to rotate-half"
    )];
    Ok(Llama2c {
        version,
        header,
        group_size,
        hf: HfConfig { config, tie_word_embeddings: header.shared_classifier, notes },
        checkpoint: Checkpoint::from_tensors(tensors),
        groups_cross_rows,
    })
}

/// Reads a `tokenizer.bin` of `vocab_size` tokens into the SentencePiece tables the runtime
/// packs (see the [module docs](self)).
pub fn read_tokenizer(path: &Path, vocab_size: usize) -> Result<SpTables> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let model = parse_tokenizer(&bytes, vocab_size).with_context(|| format!("{} (llama2.c tokenizer.bin)", path.display()))?;
    SpTables::from_model(&model, &TokenizerConfig::default()).with_context(|| format!("{} (llama2.c tokenizer.bin)", path.display()))
}

/// The `(score, bytes)` entries of a `tokenizer.bin`, as many as the file holds (an error at
/// the first one that does not parse, naming its index).
fn tokenizer_entries(bytes: &[u8]) -> Result<Vec<(f32, &[u8])>> {
    let mut r = Reader { bytes, at: 0, what: "the file" };
    let max_len = r.u32()?;
    let mut out = Vec::new();
    while r.at < bytes.len() {
        let i = out.len();
        let score = f32::from_bits(r.u32().with_context(|| format!("token {i}'s score"))?);
        let len = r.i32().with_context(|| format!("token {i}'s length"))?;
        ensure!(len >= 0 && len as u32 <= max_len, "token {i} has length {len}; max_token_length is {max_len}");
        let text = r.take(len as usize).with_context(|| format!("token {i}'s {len} bytes"))?;
        out.push((score, text));
    }
    Ok(out)
}

/// [`read_tokenizer`]'s parse: a sentencepiece BPE model rebuilt from the file's pieces.
pub fn parse_tokenizer(bytes: &[u8], vocab_size: usize) -> Result<SpModel> {
    let entries = tokenizer_entries(bytes)?;
    ensure!(entries.len() == vocab_size, "the file holds {} tokens; the model's vocab_size is {vocab_size}", entries.len());
    let mut pieces = Vec::with_capacity(vocab_size);
    let mut byte_pieces = 0;
    for (id, &(score, raw)) in entries.iter().enumerate() {
        let text = std::str::from_utf8(raw).with_context(|| format!("token {id} is not UTF-8: {raw:?}"))?;
        ensure!(score.is_finite() || !is_normal_text(id, text), "token {id} {text:?} has score {score}");
        let (piece, kind) = match (id, text) {
            (0, _) => (text.to_string(), piece_type::UNKNOWN),
            (_, "\n<s>\n") => ("<s>".to_string(), piece_type::CONTROL),
            (_, "\n</s>\n") => ("</s>".to_string(), piece_type::CONTROL),
            (_, t) if byte_piece_value(t).is_some() => {
                byte_pieces += 1;
                (t.to_string(), piece_type::BYTE)
            }
            (_, t) => (t.replace(' ', "\u{2581}"), piece_type::NORMAL),
        };
        pieces.push(SpPiece { piece, score, kind });
    }
    let trainer = TrainerSpec {
        model_type: model_type::BPE,
        vocab_size: vocab_size as i32,
        byte_fallback: byte_pieces > 0,
        unk_piece: pieces.first().map_or_else(|| "<unk>".into(), |p| p.piece.clone()),
        ..TrainerSpec::default()
    };
    let normalizer = NormalizerSpec { name: "identity".into(), remove_extra_whitespaces: false, ..NormalizerSpec::default() };
    Ok(SpModel { pieces, trainer, normalizer, denormalizer: None })
}

fn is_normal_text(id: usize, text: &str) -> bool {
    id != 0 && text != "\n<s>\n" && text != "\n</s>\n" && byte_piece_value(text).is_none()
}

/// The tokenizer given to `convert … --tokenizer FILE` for a `model.bin`: a llama2.c
/// `tokenizer.bin`, or a sentencepiece `tokenizer.model` (told by content).
pub fn read_any_tokenizer(path: &Path, vocab_size: usize) -> Result<SpTables> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    match parse_tokenizer(&bytes, vocab_size) {
        Ok(model) => SpTables::from_model(&model, &TokenizerConfig::default()).with_context(|| format!("{} (llama2.c tokenizer.bin)", path.display())),
        Err(bin_err) => match SpModel::parse(&bytes) {
            Ok(model) if !model.pieces.is_empty() => {
                ensure!(
                    model.pieces.len() == vocab_size,
                    "{} (sentencepiece model): {} pieces; the model's vocab_size is {vocab_size}",
                    path.display(),
                    model.pieces.len()
                );
                let config = path.parent().map(TokenizerConfig::from_dir).transpose()?.unwrap_or_default();
                SpTables::from_model(&model, &config).with_context(|| format!("{} (sentencepiece model)", path.display()))
            }
            _ => Err(bin_err.context(format!("{} (llama2.c tokenizer.bin)", path.display()))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_takes_pairs_to_halves() {
        // one head of 4 rows of 1 value: rows 0 1 2 3 (pairs (0,1), (2,3)) -> 0 2 1 3
        assert_eq!(permute_heads(&[0, 1, 2, 3], 4, 1, 4), [0, 2, 1, 3]);
        // two heads of 4, rows of 2
        let data: Vec<u32> = (0..16).collect();
        assert_eq!(permute_heads(&data, 8, 2, 4), [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15]);
    }

    fn header(ints: [i32; 7]) -> Vec<u8> {
        ints.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn bad_headers_are_one_line_errors_with_the_numbers() {
        let e = |b: &[u8]| format!("{:#}", parse_model(b).err().expect("must fail"));
        assert!(e(&header([64, 172, 5, 8, 4, 512, 512])).contains("needs "), "{}", e(&header([64, 172, 5, 8, 4, 512, 512])));
        assert!(e(&header([64, 172, 5, 6, 3, 512, 512])).contains("n_heads 6 does not divide dim 64"));
        assert!(e(&header([64, 172, 5, 8, 3, 512, 512])).contains("n_kv_heads 3 does not divide n_heads 8"));
        assert!(e(&header([64, 0, 5, 8, 4, 512, 512])).contains("hidden_dim is 0"));
        let huge = e(&header([1 << 30, i32::MAX, i32::MAX, 2, 2, i32::MAX, 2]));
        assert!(huge.contains("the header's sizes overflow"), "{huge}");
        assert!(e(&[1, 2, 3]).contains("ends at byte 3"), "{}", e(&[1, 2, 3]));
        let mut v3 = MAGIC.to_le_bytes().to_vec();
        v3.extend(3i32.to_le_bytes());
        assert!(e(&v3).contains("version 3"), "{}", e(&v3));
    }

    #[test]
    fn tokenizer_count_must_match() {
        let mut bin = 6u32.to_le_bytes().to_vec();
        for (s, t) in [(0.0f32, "<unk>"), (0.0, "\n<s>\n"), (0.0, "\n</s>\n"), (-1.0, " a")] {
            bin.extend(s.to_le_bytes());
            bin.extend((t.len() as i32).to_le_bytes());
            bin.extend(t.as_bytes());
        }
        let e = format!("{:#}", parse_tokenizer(&bin, 5).unwrap_err());
        assert!(e.contains("holds 4 tokens; the model's vocab_size is 5"), "{e}");
        let m = parse_tokenizer(&bin, 4).unwrap();
        assert_eq!(m.pieces[3].piece, "\u{2581}a");
        assert_eq!(m.pieces[1].kind, piece_type::CONTROL);
        bin.truncate(bin.len() - 1);
        let e = format!("{:#}", parse_tokenizer(&bin, 4).unwrap_err());
        assert!(e.contains("token 3's 2 bytes"), "{e}");
    }
}
