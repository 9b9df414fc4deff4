//! The one error type of the runtime: small, `Copy`, and carrying the numbers that explain it.

use core::fmt;

/// Everything that can go wrong in the runtime. Each variant carries the numbers a user needs to
/// fix the problem (what was needed, what was there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    // ---- blob format -------------------------------------------------------------------------
    /// The blob is shorter than a part of it claims (`needed` bytes, `available` present).
    Truncated {
        /// Bytes the blob would need to hold.
        needed: u64,
        /// Bytes actually present.
        available: u64,
    },
    /// The first bytes are not the blob magic.
    BadMagic {
        /// The first four bytes found, little-endian.
        found: u32,
    },
    /// The blob was written by a format version this runtime does not read.
    UnsupportedVersion {
        /// Version in the blob.
        found: u32,
        /// Newest version this runtime reads (it reads 1 up to this).
        supported: u32,
    },
    /// The CRC-32 stored in the blob does not match its contents.
    ChecksumMismatch {
        /// Checksum stored in the blob.
        stored: u32,
        /// Checksum computed over the blob.
        computed: u32,
    },
    /// The postcard header could not be decoded.
    BadHeader,
    /// The blob's base address is not aligned as the tensor data requires.
    Misaligned {
        /// Address (or offset) that is misaligned.
        addr: usize,
        /// Alignment required, in bytes.
        required: usize,
    },
    /// The model configuration is inconsistent (field index given by `what`, see [`ConfigField`]).
    BadConfig {
        /// Which field is wrong.
        what: ConfigField,
        /// The offending value.
        value: u64,
    },
    /// A tensor the model needs is absent from the tensor table.
    MissingTensor {
        /// Role of the missing tensor.
        role: crate::blob::Role,
        /// Layer index (0 for global tensors).
        layer: u32,
    },
    /// A tensor appears twice, or belongs to a layer that does not exist.
    UnexpectedTensor {
        /// Role of the tensor.
        role: crate::blob::Role,
        /// Layer index in the table.
        layer: u32,
    },
    /// A tensor has the wrong shape.
    BadShape {
        /// Role of the tensor.
        role: crate::blob::Role,
        /// Layer index.
        layer: u32,
        /// Expected shape (rows, cols); cols is 1 for vectors.
        expected: [u32; 2],
        /// Shape found in the blob.
        found: [u32; 2],
    },
    /// A tensor's byte range is outside the data section, overlaps the header, or has the wrong
    /// length for its shape and dtype.
    BadTensorRange {
        /// Role of the tensor.
        role: crate::blob::Role,
        /// Layer index.
        layer: u32,
        /// Byte offset claimed.
        offset: u64,
        /// Byte length claimed.
        len: u64,
    },
    /// A tensor uses a dtype this build cannot compute with (or not allowed for this role).
    UnsupportedDType {
        /// Role of the tensor.
        role: crate::blob::Role,
        /// Dtype code (see [`crate::blob::DType::code`]).
        dtype: u8,
    },
    /// The blob's layer tensors are not laid out with a uniform stride (the converter always
    /// writes them so).
    IrregularLayout {
        /// Layer where the layout differs from layer 0.
        layer: u32,
    },
    /// The source-vocabulary section (the source id of each kept token of a pruned
    /// vocabulary) lies outside the data or does not hold one u32 per token.
    BadSourceVocab {
        /// Byte offset claimed.
        offset: u64,
        /// Byte length claimed (4 · vocab_size expected).
        len: u64,
        /// The model's vocab_size.
        vocab_size: u32,
    },
    /// A source id is not above the one before it (they must be strictly increasing).
    SourceIdOutOfOrder {
        /// Index of the kept token.
        index: u32,
        /// Its source id.
        id: u32,
        /// The source id of the token before it.
        previous: u32,
    },
    /// A source id is outside the source vocabulary.
    SourceIdOutOfRange {
        /// Index of the kept token.
        index: u32,
        /// Its source id.
        id: u32,
        /// Size of the source vocabulary.
        source_vocab_size: u32,
    },

    /// A layer index past the model's last block ([`crate::Model::layer`]).
    LayerOutOfRange {
        /// The layer asked for.
        layer: usize,
        /// The model's layers.
        n_layer: usize,
    },

    // ---- session memory and context ----------------------------------------------------------
    /// A caller-provided buffer is too small.
    ArenaTooSmall {
        /// Elements (f32) needed.
        needed: usize,
        /// Elements provided.
        available: usize,
    },
    /// The KV-cache buffer is too small for the requested capacity.
    KvCacheTooSmall {
        /// Elements (f32) needed.
        needed: usize,
        /// Elements provided.
        available: usize,
    },
    /// The requested context capacity is zero or larger than the model's `n_ctx`.
    BadCapacity {
        /// Capacity asked for.
        requested: usize,
        /// The model's n_ctx.
        n_ctx: usize,
    },
    /// The KV cache is full: no token was processed.
    ContextFull {
        /// Tokens already in the cache.
        used: usize,
        /// Tokens that were to be added.
        adding: usize,
        /// Cache capacity in tokens.
        capacity: usize,
    },
    /// A token id is not in the vocabulary.
    InvalidToken {
        /// The id.
        id: u32,
        /// The model's vocabulary size.
        vocab_size: u32,
    },
    /// An empty token list was given where at least one token is needed.
    EmptyInput,

    // ---- tokenizer ---------------------------------------------------------------------------
    /// The blob has no tokenizer section.
    NoTokenizer,
    /// The tokenizer section is malformed (byte offset within the section where it failed).
    BadTokenizer {
        /// Offset in the tokenizer section.
        offset: u32,
    },
    /// An output buffer given to the tokenizer or decoder is too small.
    BufferTooSmall {
        /// Elements needed (at least).
        needed: usize,
        /// Elements available.
        available: usize,
    },
    /// The text contains a byte sequence that no token covers (cannot happen with byte-level
    /// BPE vocabularies that contain all 256 bytes).
    UnencodableByte {
        /// The byte.
        byte: u8,
    },

    // ---- sampler -----------------------------------------------------------------------------
    /// A sampling parameter is out of range (`what` names it).
    BadSamplerParam {
        /// Which parameter.
        what: SamplerParam,
    },
}

/// Which configuration field was rejected by [`Error::BadConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ConfigField {
    VocabSize,
    NCtx,
    NEmbd,
    NLayer,
    NHead,
    NInner,
    LayerNormEpsilon,
    BosTokenId,
    EosTokenId,
    /// `attn_window` (0 while some layer is local).
    AttnWindow,
    /// `local_layers` (the value is a layer ≥ n_layer in the set).
    LocalLayers,
    /// `n_kv_head` (0, or not a divisor of n_head).
    NKvHead,
    /// `head_dim` (0, too large, or odd with RoPE).
    HeadDim,
    /// RoPE's θ (the value is its f32 bit pattern): not finite and positive.
    RopeTheta,
}

/// Which sampling parameter was rejected by [`Error::BadSamplerParam`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum SamplerParam {
    Temperature,
    TopK,
    TopP,
    RepetitionPenalty,
    Logits,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Error::*;
        match *self {
            Truncated { needed, available } => {
                write!(f, "blob truncated: needs {needed} bytes, has {available}")
            }
            BadMagic { found } => write!(f, "not a model blob (magic {found:#010x})"),
            UnsupportedVersion { found, supported } => {
                write!(f, "blob format version {found} is not supported (this runtime reads versions 1 to {supported})")
            }
            ChecksumMismatch { stored, computed } => write!(
                f,
                "blob checksum mismatch: stored {stored:#010x}, computed {computed:#010x} (file corrupt)"
            ),
            BadHeader => write!(f, "blob header could not be decoded"),
            Misaligned { addr, required } => {
                write!(f, "blob data at {addr:#x} is not aligned to {required} bytes")
            }
            BadConfig { what, value } => write!(f, "invalid model config: {what:?} = {value}"),
            MissingTensor { role, layer } => write!(f, "tensor {} missing", role.hf_name(layer)),
            UnexpectedTensor { role, layer } => {
                write!(f, "unexpected or duplicate tensor {}", role.hf_name(layer))
            }
            BadShape { role, layer, expected, found } => write!(
                f,
                "tensor {} has shape {:?}, expected {:?}",
                role.hf_name(layer),
                found,
                expected
            ),
            BadTensorRange { role, layer, offset, len } => write!(
                f,
                "tensor {} has an invalid byte range (offset {offset}, length {len})",
                role.hf_name(layer)
            ),
            UnsupportedDType { role, dtype } => {
                write!(f, "tensor {} uses unsupported dtype code {dtype}", role.hf_name(0))
            }
            IrregularLayout { layer } => {
                write!(f, "layer {layer} tensors are not laid out like layer 0")
            }
            BadSourceVocab { offset, len, vocab_size } => write!(
                f,
                "source-vocabulary section (offset {offset}, length {len}) must lie in the data and hold {vocab_size} u32 ids ({} bytes)",
                vocab_size as u64 * 4
            ),
            SourceIdOutOfOrder { index, id, previous } => write!(
                f,
                "source id {id} of token {index} is not above {previous}, the one before it (source ids must increase)"
            ),
            SourceIdOutOfRange { index, id, source_vocab_size } => write!(
                f,
                "source id {id} of token {index} is outside the source vocabulary ({source_vocab_size} tokens)"
            ),
            LayerOutOfRange { layer, n_layer } => write!(f, "layer {layer} does not exist (the model has {n_layer})"),
            ArenaTooSmall { needed, available } => write!(
                f,
                "activation arena too small: needs {needed} f32 ({} bytes), has {available} ({} bytes)",
                needed * 4,
                available * 4
            ),
            KvCacheTooSmall { needed, available } => write!(
                f,
                "KV cache buffer too small: needs {needed} f32 ({} bytes), has {available} ({} bytes)",
                needed * 4,
                available * 4
            ),
            BadCapacity { requested, n_ctx } => write!(
                f,
                "context capacity {requested} is invalid (must be 1..={n_ctx}, the model's n_ctx)"
            ),
            ContextFull { used, adding, capacity } => write!(
                f,
                "context full: {used} tokens cached + {adding} new > capacity {capacity}"
            ),
            InvalidToken { id, vocab_size } => {
                write!(f, "token id {id} is out of range (vocab_size {vocab_size})")
            }
            EmptyInput => write!(f, "no input tokens"),
            NoTokenizer => write!(f, "this blob has no tokenizer; pass token ids instead"),
            BadTokenizer { offset } => write!(f, "tokenizer section malformed at byte {offset}"),
            BufferTooSmall { needed, available } => {
                write!(f, "output buffer too small: needs at least {needed}, has {available}")
            }
            UnencodableByte { byte } => write!(f, "byte {byte:#04x} has no token in the vocabulary"),
            BadSamplerParam { what } => write!(f, "invalid sampling parameter: {what:?}"),
        }
    }
}

#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "std")]
impl std::error::Error for Error {}
