//! Blob format v3: the one definition shared by the writer (`host-tools convert`) and the reader
//! ([`crate::Model::from_blob`]). See `docs/blob-format.md` for the diagram. Older blobs still
//! load: a version 1 header (GPT-2 only, no source vocabulary, [`v1`]) and a version 2 header
//! (GPT-2 and GPT-Neo, [`v2`]) are decoded with their own frozen layouts and turned into the v3
//! one. v3 added the Llama family's config fields (RMSNorm, RoPE, gated MLP, grouped-query
//! heads, an explicit head width, optional biases); which tensors a blob holds, and their
//! shapes, follow from its config ([`Role::shape`]).
//!
//! ```text
//! offset  size  field (all integers little-endian)
//! 0       8     magic  b"GPT2MCU\0"
//! 8       4     version (= 3; 1 and 2 are read too)
//! 12      4     crc32: CRC-32/ISO-HDLC (zlib's crc32) of bytes 16..file_len
//! 16      4     header_len: bytes of the postcard header that follows the preamble
//! 20      4     reserved (0)
//! 24      8     file_len: total blob length in bytes
//! 32      ..    header: postcard(Header) then Header::n_tensors × postcard(TensorEntry)
//! ..      ..    zero padding to a multiple of DATA_ALIGN
//! data    ..    tensor data, the tokenizer section and the source-vocabulary section, each
//!               starting at a multiple of DATA_ALIGN (offsets are from the start of the blob)
//! ```
//!
//! Matrices are stored row-major as `[out, in]` (the transpose of Hugging Face's Conv1D
//! `[in, out]`), so each output is one contiguous dot product; vectors as `[n, 1]`.

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::Error;

/// First eight bytes of every blob.
pub const MAGIC: [u8; 8] = *b"GPT2MCU\0";
/// Format version written by this crate (the newest it reads).
pub const VERSION: u32 = 3;
/// Oldest format version this crate reads.
pub const MIN_VERSION: u32 = 1;
/// Size of the fixed preamble before the postcard header.
pub const PREAMBLE_LEN: usize = 32;
/// Every tensor and section starts at a multiple of this many bytes from the blob start.
pub const DATA_ALIGN: usize = 64;
/// The blob itself must start at an address that is a multiple of this (so f32/f16 data and
/// SIMD loads are aligned in place).
pub const BLOB_ALIGN: usize = 16;

/// What a tensor is, in Hugging Face's words (`transformer.h.{layer}.attn.c_attn.weight`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum Role {
    // global tensors (layer 0)
    Wte,
    Wpe,
    LnFWeight,
    LnFBias,
    /// Untied output head (only when the checkpoint has a `lm_head.weight` different from wte).
    LmHead,
    // per-layer tensors
    Ln1Weight,
    Ln1Bias,
    AttnCAttnWeight,
    AttnCAttnBias,
    AttnCProjWeight,
    AttnCProjBias,
    Ln2Weight,
    Ln2Bias,
    MlpCFcWeight,
    MlpCFcBias,
    MlpCProjWeight,
    MlpCProjBias,
}

/// The global roles, in the order the converter writes them (those the config has:
/// [`Role::shape`]; `LmHead` only for an untied head).
pub const GLOBAL_ROLES: [Role; 5] = [Role::Wte, Role::Wpe, Role::LnFWeight, Role::LnFBias, Role::LmHead];

/// The per-layer roles, in the order the converter writes them (those the config has:
/// [`Role::shape`]).
pub const LAYER_ROLES: [Role; 12] = [
    Role::Ln1Weight,
    Role::Ln1Bias,
    Role::AttnCAttnWeight,
    Role::AttnCAttnBias,
    Role::AttnCProjWeight,
    Role::AttnCProjBias,
    Role::Ln2Weight,
    Role::Ln2Bias,
    Role::MlpCFcWeight,
    Role::MlpCFcBias,
    Role::MlpCProjWeight,
    Role::MlpCProjBias,
];

impl Role {
    /// True for tensors that exist once per block.
    pub const fn is_layer(self) -> bool {
        self.layer_index().is_some()
    }

    /// Position of a per-layer role in [`LAYER_ROLES`].
    pub const fn layer_index(self) -> Option<usize> {
        use Role::*;
        match self {
            Ln1Weight => Some(0),
            Ln1Bias => Some(1),
            AttnCAttnWeight => Some(2),
            AttnCAttnBias => Some(3),
            AttnCProjWeight => Some(4),
            AttnCProjBias => Some(5),
            Ln2Weight => Some(6),
            Ln2Bias => Some(7),
            MlpCFcWeight => Some(8),
            MlpCFcBias => Some(9),
            MlpCProjWeight => Some(10),
            MlpCProjBias => Some(11),
            Wte | Wpe | LnFWeight | LnFBias | LmHead => None,
        }
    }

    /// The shape `[rows, cols]` of this role's tensor in a model of `config` (vectors are
    /// `[n, 1]`), or None when such a model has no such tensor: no `wpe` with RoPE, no norm
    /// biases with RMSNorm, no bias the config turns off. The one place that says which
    /// tensors a blob holds; the converter and [`crate::Model::from_blob`] both ask it.
    /// (`LmHead` is optional even where this gives a shape: without it the head is `wte`.)
    ///
    /// `attn.c_attn` stacks q | k | v: `[C_q + 2·C_kv, C]`; `attn.c_proj` is `[C, C_q]`;
    /// `mlp.c_fc` is `[I, C]`, or `[2·I, C]` stacking gate | up for a gated MLP.
    pub const fn shape(self, config: &Config) -> Option<[usize; 2]> {
        use Role::*;
        let (c, v) = (config.n_embd(), config.vocab_size());
        let (norm_bias, learned) = (config.norm_bias(), config.learned_positions());
        const fn vector(n: usize, present: bool) -> Option<[usize; 2]> {
            if present {
                Some([n, 1])
            } else {
                None
            }
        }
        match self {
            Wte | LmHead => Some([v, c]),
            Wpe => if learned { Some([config.n_ctx(), c]) } else { None },
            LnFWeight | Ln1Weight | Ln2Weight => Some([c, 1]),
            LnFBias | Ln1Bias | Ln2Bias => vector(c, norm_bias),
            AttnCAttnWeight => Some([config.qkv_rows(), c]),
            AttnCAttnBias => vector(config.qkv_rows(), config.qkv_bias),
            AttnCProjWeight => Some([c, config.q_dim()]),
            AttnCProjBias => vector(c, config.attn_out_bias),
            MlpCFcWeight => Some([config.mlp_rows(), c]),
            MlpCFcBias => vector(config.mlp_rows(), config.mlp_bias),
            MlpCProjWeight => Some([c, config.n_inner()]),
            MlpCProjBias => vector(c, config.mlp_bias),
        }
    }

    /// True for the 2-D weight matrices (the ones a quantizing converter may narrow).
    pub const fn is_matrix(self) -> bool {
        use Role::*;
        matches!(
            self,
            Wte | Wpe | LmHead | AttnCAttnWeight | AttnCProjWeight | MlpCFcWeight | MlpCProjWeight
        )
    }

    /// The Hugging Face key suffix of this role (without `transformer.` and `h.{layer}.`).
    pub const fn hf_suffix(self) -> &'static str {
        use Role::*;
        match self {
            Wte => "wte.weight",
            Wpe => "wpe.weight",
            LnFWeight => "ln_f.weight",
            LnFBias => "ln_f.bias",
            LmHead => "lm_head.weight",
            Ln1Weight => "ln_1.weight",
            Ln1Bias => "ln_1.bias",
            AttnCAttnWeight => "attn.c_attn.weight",
            AttnCAttnBias => "attn.c_attn.bias",
            AttnCProjWeight => "attn.c_proj.weight",
            AttnCProjBias => "attn.c_proj.bias",
            Ln2Weight => "ln_2.weight",
            Ln2Bias => "ln_2.bias",
            MlpCFcWeight => "mlp.c_fc.weight",
            MlpCFcBias => "mlp.c_fc.bias",
            MlpCProjWeight => "mlp.c_proj.weight",
            MlpCProjBias => "mlp.c_proj.bias",
        }
    }

    /// The family's own name for this role's tensor, as its checkpoint spells it (without the
    /// `transformer.` / `model.` and layer prefixes): GPT-2's suffix, GPT-Neo's `attn.attention.*`
    /// projections, Llama's `self_attn.*`, `mlp.gate_proj|up_proj`, … Stacked tensors name their
    /// parts with `|`.
    pub const fn family_suffix(self, arch: crate::config::Arch) -> &'static str {
        use crate::config::Arch;
        use Role::*;
        match (arch, self) {
            (Arch::GptNeo, AttnCAttnWeight) => "attn.attention.q_proj|k_proj|v_proj.weight",
            (Arch::GptNeo, AttnCProjWeight) => "attn.attention.out_proj.weight",
            (Arch::GptNeo, AttnCProjBias) => "attn.attention.out_proj.bias",
            (Arch::Llama, Wte) => "embed_tokens.weight",
            (Arch::Llama, LnFWeight) => "norm.weight",
            (Arch::Llama, Ln1Weight) => "input_layernorm.weight",
            (Arch::Llama, Ln2Weight) => "post_attention_layernorm.weight",
            (Arch::Llama, AttnCAttnWeight) => "self_attn.q_proj|k_proj|v_proj.weight",
            (Arch::Llama, AttnCAttnBias) => "self_attn.q_proj|k_proj|v_proj.bias",
            (Arch::Llama, AttnCProjWeight) => "self_attn.o_proj.weight",
            (Arch::Llama, AttnCProjBias) => "self_attn.o_proj.bias",
            (Arch::Llama, MlpCFcWeight) => "mlp.gate_proj|up_proj.weight",
            (Arch::Llama, MlpCFcBias) => "mlp.gate_proj|up_proj.bias",
            (Arch::Llama, MlpCProjWeight) => "mlp.down_proj.weight",
            (Arch::Llama, MlpCProjBias) => "mlp.down_proj.bias",
            (_, r) => r.hf_suffix(),
        }
    }

    /// A printable name: `h.{layer}.{suffix}` for layer tensors, the suffix otherwise.
    pub fn hf_name(self, layer: u32) -> HfName {
        HfName { role: self, layer }
    }
}

/// Display helper returned by [`Role::hf_name`] (no allocation).
#[derive(Debug, Clone, Copy)]
pub struct HfName {
    role: Role,
    layer: u32,
}

impl core::fmt::Display for HfName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.role.is_layer() {
            write!(f, "h.{}.{}", self.layer, self.role.hf_suffix())
        } else {
            f.write_str(self.role.hf_suffix())
        }
    }
}

/// Element type of a tensor's data.
///
/// Appending variants keeps old blobs readable; a reader that meets a variant it does not know
/// reports [`Error::BadHeader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// Symmetric int8 in groups of `group_len` along each row, one f32 scale per group. Data:
    /// `rows·cols` i8 values, then (at the next multiple of 16 within the tensor)
    /// `rows·cols/group_len` f32 scales.
    Q8 {
        /// Elements per scale.
        group_len: u32,
    },
    /// Symmetric 4-bit in groups of `group_len`, two values per byte (low nibble first, stored
    /// as value + 8), then f32 scales as for `Q8`.
    Q4 {
        /// Elements per scale.
        group_len: u32,
    },
}

impl DType {
    /// A small numeric code for error messages.
    pub const fn code(self) -> u8 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q8 { .. } => 2,
            DType::Q4 { .. } => 3,
        }
    }

    /// Short lowercase name (`f32`, `f16`, `q8`, `q4`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Q8 { .. } => "q8",
            DType::Q4 { .. } => "q4",
        }
    }

    /// Bytes the data of a `rows × cols` tensor of this dtype occupies, or `None` if the shape
    /// does not suit the dtype (group not dividing cols) or the size overflows.
    pub fn data_len(self, rows: u64, cols: u64) -> Option<u64> {
        let n = rows.checked_mul(cols)?;
        match self {
            DType::F32 => n.checked_mul(4),
            DType::F16 => n.checked_mul(2),
            DType::Q8 { group_len } | DType::Q4 { group_len } => {
                let g = group_len as u64;
                if g == 0 || !cols.is_multiple_of(g) {
                    return None;
                }
                let values = if matches!(self, DType::Q8 { .. }) { n } else { n.div_ceil(2) };
                let scales_at = values.checked_add(15)? / 16 * 16;
                scales_at.checked_add((n / g).checked_mul(4)?)
            }
        }
    }
}

/// A byte range inside the blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// Offset from the blob start (a multiple of [`DATA_ALIGN`]).
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Where the blob came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance<'a> {
    /// The checkpoint the blob was converted from (a directory name or description).
    pub source: &'a str,
    /// Storage dtype of the source checkpoint (`F32`, `F16`, `BF16`, mixed).
    pub source_dtype: &'a str,
    /// `host-tools <version>` that wrote the blob.
    pub converter: &'a str,
}

/// A pruned vocabulary's map back to the vocabulary the model was trained with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceVocab {
    /// Tokens in the source vocabulary.
    pub vocab_size: u32,
    /// `config.vocab_size` u32 (little-endian): the source id of each kept token, strictly
    /// increasing, each below `vocab_size`.
    pub ids: Section,
}

/// The postcard header that follows the preamble.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Header<'a> {
    /// Model shapes and hyper-parameters.
    pub config: Config,
    /// Where the blob came from.
    #[serde(borrow)]
    pub provenance: Provenance<'a>,
    /// Tokenizer tables (see [`crate::tokenizer`]), if the checkpoint had them.
    pub tokenizer: Option<Section>,
    /// For a pruned vocabulary, the source id of each kept token; None when the vocabulary is
    /// the checkpoint's own.
    pub source_vocab: Option<SourceVocab>,
    /// Number of [`TensorEntry`] records that follow this header.
    pub n_tensors: u32,
}

/// Format v1 (read only): the header layout before GPT-Neo. Its config has no window, layer
/// mask, q/k/v-bias flag or architecture: every v1 blob is a GPT-2 (all layers global, q/k/v
/// biases present), and has no source vocabulary.
pub mod v1 {
    use serde::{Deserialize, Serialize};

    use super::{Provenance, Section};
    use crate::config::{Activation, Arch, LayerMask};

    /// The v1 [`crate::Config`]: the same fields in the same order, without the v2 ones.
    #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
    #[allow(missing_docs)]
    pub struct Config {
        pub vocab_size: u32,
        pub n_ctx: u32,
        pub n_embd: u32,
        pub n_layer: u32,
        pub n_head: u32,
        pub n_inner: u32,
        pub layer_norm_epsilon: f32,
        pub activation: Activation,
        pub scale_attn_weights: bool,
        pub scale_attn_by_inverse_layer_idx: bool,
        pub bos_token_id: u32,
        pub eos_token_id: u32,
    }

    /// The v1 [`super::Header`].
    #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
    #[allow(missing_docs)]
    pub struct Header<'a> {
        pub config: Config,
        #[serde(borrow)]
        pub provenance: Provenance<'a>,
        pub tokenizer: Option<Section>,
        pub n_tensors: u32,
    }

    impl Config {
        /// The config of a v1 blob: GPT-2, every layer global, q/k/v biases (through the v2
        /// layout, which is v1's plus those fields).
        pub const fn upgrade(self) -> crate::Config {
            super::v2::Config {
                vocab_size: self.vocab_size,
                n_ctx: self.n_ctx,
                n_embd: self.n_embd,
                n_layer: self.n_layer,
                n_head: self.n_head,
                n_inner: self.n_inner,
                layer_norm_epsilon: self.layer_norm_epsilon,
                activation: self.activation,
                scale_attn_weights: self.scale_attn_weights,
                scale_attn_by_inverse_layer_idx: self.scale_attn_by_inverse_layer_idx,
                bos_token_id: self.bos_token_id,
                eos_token_id: self.eos_token_id,
                arch: Arch::Gpt2,
                qkv_bias: true,
                attn_window: 0,
                local_layers: LayerMask::NONE,
            }
            .upgrade()
        }
    }

    impl<'a> Header<'a> {
        /// The v3 header of a v1 blob.
        pub const fn upgrade(self) -> super::Header<'a> {
            super::Header {
                config: self.config.upgrade(),
                provenance: self.provenance,
                tokenizer: self.tokenizer,
                source_vocab: None,
                n_tensors: self.n_tensors,
            }
        }
    }
}

/// Format v2 (read only): the header layout of GPT-2 and GPT-Neo blobs before the Llama family.
/// Its config has no key/value-head count, head width, norm, position, MLP-gate or bias fields:
/// every v2 blob is multi-head with D = C / H, LayerNorm, learned positions, a plain MLP, and
/// biases on the attention output and the MLP (q/k/v biases as its `qkv_bias` says).
pub mod v2 {
    use serde::{Deserialize, Serialize};

    use super::{Provenance, Section, SourceVocab};
    use crate::config::{Activation, Arch, LayerMask, Norm, Positions};

    /// The v2 [`crate::Config`]: the same fields in the same order, without the v3 ones.
    #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
    #[allow(missing_docs)]
    pub struct Config {
        pub vocab_size: u32,
        pub n_ctx: u32,
        pub n_embd: u32,
        pub n_layer: u32,
        pub n_head: u32,
        pub n_inner: u32,
        pub layer_norm_epsilon: f32,
        pub activation: Activation,
        pub scale_attn_weights: bool,
        pub scale_attn_by_inverse_layer_idx: bool,
        pub bos_token_id: u32,
        pub eos_token_id: u32,
        pub arch: Arch,
        pub qkv_bias: bool,
        pub attn_window: u32,
        pub local_layers: LayerMask,
    }

    /// The v2 [`super::Header`] (the same as v3's but for the config).
    #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
    #[allow(missing_docs)]
    pub struct Header<'a> {
        pub config: Config,
        #[serde(borrow)]
        pub provenance: Provenance<'a>,
        pub tokenizer: Option<Section>,
        pub source_vocab: Option<SourceVocab>,
        pub n_tensors: u32,
    }

    impl Config {
        /// The v3 config of a v2 blob (D = C / H, which a v2 config required to be whole).
        pub const fn upgrade(self) -> crate::Config {
            crate::Config {
                vocab_size: self.vocab_size,
                n_ctx: self.n_ctx,
                n_embd: self.n_embd,
                n_layer: self.n_layer,
                n_head: self.n_head,
                n_inner: self.n_inner,
                layer_norm_epsilon: self.layer_norm_epsilon,
                activation: self.activation,
                scale_attn_weights: self.scale_attn_weights,
                scale_attn_by_inverse_layer_idx: self.scale_attn_by_inverse_layer_idx,
                bos_token_id: self.bos_token_id,
                eos_token_id: self.eos_token_id,
                arch: self.arch,
                qkv_bias: self.qkv_bias,
                attn_window: self.attn_window,
                local_layers: self.local_layers,
                n_kv_head: self.n_head,
                // a v2 config with n_embd not a multiple of n_head was invalid and stays so:
                // D = 0 fails validation
                head_dim: match self.n_embd.checked_div(self.n_head) {
                    Some(d) if d * self.n_head == self.n_embd => d,
                    _ => 0,
                },
                norm: Norm::LayerNorm,
                positions: Positions::Learned,
                gated_mlp: false,
                attn_out_bias: true,
                mlp_bias: true,
            }
        }
    }

    impl<'a> Header<'a> {
        /// The v3 header of a v2 blob.
        pub const fn upgrade(self) -> super::Header<'a> {
            super::Header {
                config: self.config.upgrade(),
                provenance: self.provenance,
                tokenizer: self.tokenizer,
                source_vocab: self.source_vocab,
                n_tensors: self.n_tensors,
            }
        }
    }
}

/// One row of the tensor table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorEntry {
    /// What the tensor is.
    pub role: Role,
    /// Block index for per-layer roles, 0 otherwise.
    pub layer: u32,
    /// Element type.
    pub dtype: DType,
    /// `[rows, cols]`; vectors are `[n, 1]`.
    pub shape: [u32; 2],
    /// Byte range of the data (offset a multiple of [`DATA_ALIGN`]).
    pub data: Section,
}

/// The fixed-size fields at the start of a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    /// Format version.
    pub version: u32,
    /// Stored CRC-32 of bytes `16..file_len`.
    pub crc32: u32,
    /// Length of the postcard header (header plus tensor table).
    pub header_len: u32,
    /// Total blob length.
    pub file_len: u64,
}

impl Preamble {
    /// Encodes the preamble (the writer calls this once the checksum is known).
    pub fn to_bytes(&self) -> [u8; PREAMBLE_LEN] {
        let mut out = [0u8; PREAMBLE_LEN];
        let fields: [(usize, &[u8]); 5] = [
            (0, &MAGIC),
            (8, &self.version.to_le_bytes()),
            (12, &self.crc32.to_le_bytes()),
            (16, &self.header_len.to_le_bytes()),
            (24, &self.file_len.to_le_bytes()),
        ];
        for (at, bytes) in fields {
            if let Some(dst) = out.get_mut(at..at + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        }
        out
    }

    /// Decodes and checks magic, version and length against the buffer actually given.
    pub fn parse(blob: &[u8]) -> Result<Preamble, Error> {
        let avail = blob.len() as u64;
        let Some(pre) = blob.get(..PREAMBLE_LEN) else {
            if let Some(m) = blob.get(..4) {
                if m != &MAGIC[..4] {
                    return Err(Error::BadMagic { found: le_u32(m) });
                }
            }
            return Err(Error::Truncated { needed: PREAMBLE_LEN as u64, available: avail });
        };
        let (magic, rest) = pre.split_at(8);
        if magic != MAGIC {
            return Err(Error::BadMagic { found: le_u32(magic) });
        }
        let version = le_u32(rest.get(0..4).unwrap_or(&[]));
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion { found: version, supported: VERSION });
        }
        let crc32 = le_u32(rest.get(4..8).unwrap_or(&[]));
        let header_len = le_u32(rest.get(8..12).unwrap_or(&[]));
        let file_len = le_u64(rest.get(16..24).unwrap_or(&[]));
        if file_len > avail {
            return Err(Error::Truncated { needed: file_len, available: avail });
        }
        let header_end = PREAMBLE_LEN as u64 + header_len as u64;
        if header_end > file_len {
            return Err(Error::Truncated { needed: header_end, available: file_len });
        }
        Ok(Preamble { version, crc32, header_len, file_len })
    }
}

/// Rounds `n` up to the next multiple of [`DATA_ALIGN`].
pub const fn align_up(n: u64) -> u64 {
    n.div_ceil(DATA_ALIGN as u64) * DATA_ALIGN as u64
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    u64::from_le_bytes(a)
}

/// CRC-32/ISO-HDLC (the one in zlib, PNG and `crc32fast`), byte-at-a-time with a 1 KiB table.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32_update(0, bytes)
}

/// Continues a CRC-32 over more bytes (`crc32_update(crc32(a), b) == crc32(a ++ b)`).
pub fn crc32_update(crc: u32, bytes: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in bytes {
        let idx = ((c ^ b as u32) & 0xFF) as usize;
        c = CRC_TABLE.get(idx).copied().unwrap_or(0) ^ (c >> 8);
    }
    !c
}

// Evaluated at compile time: an out-of-range index here would be a build error, not a panic.
#[allow(clippy::indexing_slicing)]
static CRC_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// The range of the blob the checksum covers.
pub const CRC_START: usize = 16;

/// Parses the header (a v1 or v2 header is upgraded to v3, see [`v1`], [`v2`]) and returns it with the bytes
/// of the tensor table that follow it.
pub fn parse_header<'a>(blob: &'a [u8], pre: &Preamble) -> Result<(Header<'a>, &'a [u8]), Error> {
    let end = PREAMBLE_LEN + pre.header_len as usize;
    let bytes = blob.get(PREAMBLE_LEN..end).ok_or(Error::Truncated {
        needed: end as u64,
        available: blob.len() as u64,
    })?;
    let parsed = match pre.version {
        1 => postcard::take_from_bytes::<v1::Header<'_>>(bytes).map(|(h, rest)| (h.upgrade(), rest)),
        2 => postcard::take_from_bytes::<v2::Header<'_>>(bytes).map(|(h, rest)| (h.upgrade(), rest)),
        _ => postcard::take_from_bytes::<Header<'_>>(bytes),
    };
    parsed.map_err(|_| Error::BadHeader)
}

/// Iterates over the tensor table (stops at the first record that does not decode, yielding
/// the error).
pub struct TensorTable<'a> {
    rest: &'a [u8],
    left: u32,
}

impl<'a> TensorTable<'a> {
    /// Table of `n` records encoded in `bytes`.
    pub fn new(bytes: &'a [u8], n: u32) -> Self {
        Self { rest: bytes, left: n }
    }
}

impl Iterator for TensorTable<'_> {
    type Item = Result<TensorEntry, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        match postcard::take_from_bytes::<TensorEntry>(self.rest) {
            Ok((e, rest)) => {
                self.rest = rest;
                Some(Ok(e))
            }
            Err(_) => {
                self.left = 0;
                Some(Err(Error::BadHeader))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_zlib() {
        // zlib.crc32(b"123456789") == 0xCBF43926 (the CRC catalogue check value).
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_update(crc32(b"1234"), b"56789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn preamble_round_trip() {
        let p = Preamble { version: VERSION, crc32: 0xDEAD_BEEF, header_len: 77, file_len: 4096 };
        let mut buf = [0u8; 4096];
        buf[..PREAMBLE_LEN].copy_from_slice(&p.to_bytes());
        assert_eq!(Preamble::parse(&buf), Ok(p));
    }

    #[test]
    fn preamble_rejects_bad_input() {
        assert_eq!(Preamble::parse(&[]), Err(Error::Truncated { needed: 32, available: 0 }));
        assert_eq!(
            Preamble::parse(b"PK\x03\x04 zip file, not a blob at all......"),
            Err(Error::BadMagic { found: u32::from_le_bytes(*b"PK\x03\x04") })
        );
        for version in [0, 4, u32::MAX] {
            let p = Preamble { version, crc32: 0, header_len: 0, file_len: 32 };
            assert_eq!(
                Preamble::parse(&p.to_bytes()),
                Err(Error::UnsupportedVersion { found: version, supported: 3 })
            );
        }
        for version in [1, 2, 3] {
            let p = Preamble { version, crc32: 0, header_len: 0, file_len: 32 };
            assert_eq!(Preamble::parse(&p.to_bytes()).map(|p| p.version), Ok(version));
        }
        let p = Preamble { version: 1, crc32: 0, header_len: 0, file_len: 100 };
        assert_eq!(
            Preamble::parse(&p.to_bytes()),
            Err(Error::Truncated { needed: 100, available: 32 })
        );
        let p = Preamble { version: 1, crc32: 0, header_len: 10, file_len: 32 };
        assert_eq!(
            Preamble::parse(&p.to_bytes()),
            Err(Error::Truncated { needed: 42, available: 32 })
        );
    }

    #[test]
    fn quantized_sizes() {
        assert_eq!(DType::F32.data_len(3, 4), Some(48));
        assert_eq!(DType::F16.data_len(3, 4), Some(24));
        // 2x64 int8 = 128 bytes, then 4 scales of 4 bytes
        assert_eq!(DType::Q8 { group_len: 32 }.data_len(2, 64), Some(128 + 16));
        assert_eq!(DType::Q4 { group_len: 32 }.data_len(2, 64), Some(64 + 16));
        assert_eq!(DType::Q8 { group_len: 32 }.data_len(2, 48), None);
        assert_eq!(DType::F32.data_len(u64::MAX, 2), None);
    }
}
