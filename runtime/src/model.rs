//! The weights: read-only views into the blob, validated once by [`Model::from_blob`].
//!
//! After `from_blob` succeeds every accessor here is infallible: offsets, lengths, shapes,
//! dtypes and alignment were all checked, so the views below are plain slices into the blob
//! (flash on a board; no copy).

use half::f16;

use crate::blob::{self, DType, Header, Preamble, Provenance, Role, Section, SourceVocab, TensorTable, GLOBAL_ROLES, LAYER_ROLES};
use crate::config::Config;
use crate::error::Error;
use crate::tokenizer::Tokenizer;

/// Location and type of one validated tensor inside the blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TensorRef {
    role: Role,
    offset: usize,
    len: usize,
    dtype: DType,
    rows: usize,
    cols: usize,
}

/// Smallest quantization group the runtime accepts (bounds the activation scratch).
pub const MIN_GROUP: usize = 8;

/// The data of a weight matrix `[rows, cols]`, row-major, in its stored dtype.
#[derive(Debug, Clone, Copy)]
pub enum MatrixData<'a> {
    /// f32 values, `rows·cols` of them.
    F32(&'a [f32]),
    /// f16 values, widened to f32 in the kernel.
    F16(&'a [f16]),
    /// Symmetric int8 in groups of `group` along each row, one f32 scale per group.
    Q8 {
        /// `rows·cols` values.
        values: &'a [i8],
        /// `rows·cols/group` scales.
        scales: &'a [f32],
        /// Elements per scale (divides `cols`).
        group: usize,
    },
    /// Symmetric 4-bit in groups, two values per byte (low nibble first, stored + 8).
    Q4 {
        /// `rows·cols/2` bytes.
        packed: &'a [u8],
        /// `rows·cols/group` scales.
        scales: &'a [f32],
        /// Elements per scale (even, divides `cols`).
        group: usize,
    },
}

/// A weight matrix `[rows, cols]` (rows = outputs, cols = inputs).
#[derive(Debug, Clone, Copy)]
pub struct Matrix<'a> {
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Row-major data.
    pub data: MatrixData<'a>,
}

impl<'a> Matrix<'a> {
    /// Rows `r0..r1` as a matrix of their own (empty if out of range): a thread's share.
    pub fn row_range(&self, r0: usize, r1: usize) -> Matrix<'a> {
        let (r1, cols) = (r1.min(self.rows), self.cols);
        let r0 = r0.min(r1);
        let data = match self.data {
            MatrixData::F32(d) => MatrixData::F32(d.get(r0 * cols..r1 * cols).unwrap_or(&[])),
            MatrixData::F16(d) => MatrixData::F16(d.get(r0 * cols..r1 * cols).unwrap_or(&[])),
            MatrixData::Q8 { values, scales, group } => {
                let gpr = cols / group.max(1);
                MatrixData::Q8 { values: values.get(r0 * cols..r1 * cols).unwrap_or(&[]), scales: scales.get(r0 * gpr..r1 * gpr).unwrap_or(&[]), group }
            }
            MatrixData::Q4 { packed, scales, group } => {
                let gpr = cols / group.max(1);
                MatrixData::Q4 { packed: packed.get(r0 * cols / 2..r1 * cols / 2).unwrap_or(&[]), scales: scales.get(r0 * gpr..r1 * gpr).unwrap_or(&[]), group }
            }
        };
        Matrix { rows: r1 - r0, cols, data }
    }
}

/// A norm's gain and, for LayerNorm, its bias (each C): `ln_1`, `ln_2`, `ln_f`.
#[derive(Debug, Clone, Copy)]
pub struct NormWeights<'a> {
    /// The gain (C).
    pub weight: &'a [f32],
    /// The bias (C); None for RMSNorm, which has none.
    pub bias: Option<&'a [f32]>,
}

/// The weights of one transformer block, named as in Hugging Face's `GPT2Block` (the other
/// families' tensors are stacked into the same roles by the converter; see [`Role::shape`]).
/// A bias is None exactly when the config says the model has none.
#[derive(Debug, Clone, Copy)]
pub struct LayerWeights<'a> {
    /// `ln_1` (Llama: `input_layernorm`)
    pub ln_1: NormWeights<'a>,
    /// `attn.c_attn.weight` (C_q + 2·C_kv, C): rows 0..C_q give q, then C_kv rows of k, then
    /// C_kv of v (GPT-Neo and Llama: `q_proj`, `k_proj`, `v_proj` stacked).
    pub attn_c_attn: Matrix<'a>,
    /// `attn.c_attn.bias` (C_q + 2·C_kv)
    pub attn_c_attn_bias: Option<&'a [f32]>,
    /// `attn.c_proj.weight` (C, C_q) (GPT-Neo: `out_proj`, Llama: `o_proj`)
    pub attn_c_proj: Matrix<'a>,
    /// `attn.c_proj.bias` (C)
    pub attn_c_proj_bias: Option<&'a [f32]>,
    /// `ln_2` (Llama: `post_attention_layernorm`)
    pub ln_2: NormWeights<'a>,
    /// `mlp.c_fc.weight` (I, C), or (2·I, C) for a gated MLP: Llama's `gate_proj` rows, then
    /// `up_proj`'s
    pub mlp_c_fc: Matrix<'a>,
    /// `mlp.c_fc.bias` (I or 2·I)
    pub mlp_c_fc_bias: Option<&'a [f32]>,
    /// `mlp.c_proj.weight` (C, I) (Llama: `down_proj`)
    pub mlp_c_proj: Matrix<'a>,
    /// `mlp.c_proj.bias` (C)
    pub mlp_c_proj_bias: Option<&'a [f32]>,
}

/// A validated model: config plus views of its weights inside the blob.
#[derive(Debug, Clone)]
pub struct Model<'a> {
    config: Config,
    blob: &'a [u8],
    provenance: Provenance<'a>,
    wte: Matrix<'a>,                 // (V, C)
    wpe: Option<Matrix<'a>>,         // (n_ctx, C); None with RoPE
    ln_f: NormWeights<'a>,           // (C)
    lm_head: Option<Matrix<'a>>,     // (V, C); None = tied to wte
    global_bytes: usize,             // bytes of wte, lm_head and ln_f, plus one wpe row
    layer0: LayerWeights<'a>,        // layer 0's views (validated); layer l's lie l strides on
    layer_bytes: usize,              // bytes of one layer's tensors
    layer_stride: usize,             // bytes between layer l and layer l+1 tensors
    tokenizer: Option<Tokenizer<'a>>,
    source_vocab: Option<(u32, &'a [u32])>, // (source vocab_size, source id of each token (V))
    data_start: usize,
}

impl<'a> Model<'a> {
    /// Validates a blob completely (structure, shapes, ranges, alignment and CRC-32) and
    /// returns views into it. The blob must start at a 16-byte aligned address.
    pub fn from_blob(blob: &'a [u8]) -> Result<Self, Error> {
        let pre = Preamble::parse(blob)?;
        let covered = blob.get(blob::CRC_START..pre.file_len as usize).unwrap_or(&[]);
        let computed = blob::crc32(covered);
        if computed != pre.crc32 {
            return Err(Error::ChecksumMismatch { stored: pre.crc32, computed });
        }
        Self::from_blob_prechecked(blob)
    }

    /// Like [`Model::from_blob`] but without the CRC pass (for a host that already checked the
    /// CRC with a faster implementation, or flash that was verified when it was written). All
    /// structural checks still run, so a corrupt blob still cannot cause a panic or an
    /// out-of-bounds read; it can only produce wrong numbers.
    pub fn from_blob_prechecked(blob: &'a [u8]) -> Result<Self, Error> {
        let addr = blob.as_ptr() as usize;
        if !addr.is_multiple_of(blob::BLOB_ALIGN) {
            return Err(Error::Misaligned { addr, required: blob::BLOB_ALIGN });
        }
        if cfg!(target_endian = "big") {
            // The blob is little-endian and read in place.
            return Err(Error::BadHeader);
        }
        let pre = Preamble::parse(blob)?;
        let file_len = pre.file_len as usize;
        let blob = blob.get(..file_len).unwrap_or(&[]);
        let (header, table_bytes): (Header<'a>, &'a [u8]) = blob::parse_header(blob, &pre)?;
        let config = header.config;
        config.validate()?;
        let data_start = blob::align_up((blob::PREAMBLE_LEN + pre.header_len as usize) as u64) as usize;

        // The tensors this config has (Role::shape), in the converter's one canonical order:
        // anything else is rejected, which makes duplicates and gaps impossible by construction.
        let in_model = |r: &Role| r.shape(&config).is_some();
        let per_layer = LAYER_ROLES.iter().filter(|r| in_model(r)).count();
        let globals = GLOBAL_ROLES.iter().filter(|r| in_model(r) && **r != Role::LmHead).count();
        let tied = globals + per_layer * config.n_layer();
        // one tensor more than the tied model's: an untied head (more than one more: the walk
        // below names the first tensor too many)
        let has_lm_head = header.n_tensors as usize == tied + 1;
        if header.n_tensors as usize > tied + 1 {
            // more than any model of this config has: name a tensor the config has not (a
            // bias, wpe), else the first one past the end (found by the walk below)
            let mut table = TensorTable::new(table_bytes, header.n_tensors);
            if let Some(e) = table.find_map(|e| e.ok().filter(|e| !in_model(&e.role))) {
                return Err(Error::UnexpectedTensor { role: e.role, layer: e.layer });
            }
        }
        let expected_order = GLOBAL_ROLES
            .iter()
            .filter(|r| in_model(r) && (has_lm_head || **r != Role::LmHead))
            .map(|&r| (r, 0u32))
            .chain((0..config.n_layer).flat_map(|l| LAYER_ROLES.iter().filter(|r| in_model(r)).map(move |&r| (r, l))));

        let mut globals: [Option<TensorRef>; 5] = [None; 5];
        let mut layer0: [Option<TensorRef>; 12] = [None; 12];
        let mut layer_stride = 0;
        let mut prev_end = data_start;
        let mut table = TensorTable::new(table_bytes, header.n_tensors);
        for (want_role, want_layer) in expected_order {
            let entry = match table.next() {
                Some(e) => e?,
                None => return Err(Error::MissingTensor { role: want_role, layer: want_layer }),
            };
            if entry.role != want_role || entry.layer != want_layer {
                let foreign = !in_model(&entry.role) || (entry.role.is_layer() && entry.layer >= config.n_layer);
                return Err(if foreign {
                    Error::UnexpectedTensor { role: entry.role, layer: entry.layer }
                } else {
                    Error::MissingTensor { role: want_role, layer: want_layer }
                });
            }
            let (role, layer) = (entry.role, entry.layer);
            // in_model: the shape is there
            let shape = role.shape(&config).unwrap_or([0, 0]);
            let found = [entry.shape[0] as usize, entry.shape[1] as usize];
            if found != shape {
                return Err(Error::BadShape {
                    role,
                    layer,
                    expected: [shape[0] as u32, shape[1] as u32],
                    found: entry.shape,
                });
            }
            let dtype_ok = match entry.dtype {
                DType::F32 => true,
                DType::F16 => role.is_matrix(),
                // groups of at least MIN_GROUP keep the activation-quantization scratch bounded
                DType::Q8 { group_len } => role.is_matrix() && group_len as usize >= MIN_GROUP,
                DType::Q4 { group_len } => role.is_matrix() && group_len as usize >= MIN_GROUP && group_len % 2 == 0,
            };
            if !dtype_ok {
                return Err(Error::UnsupportedDType { role, dtype: entry.dtype.code() });
            }
            let bad_range = Error::BadTensorRange { role, layer, offset: entry.data.offset, len: entry.data.len };
            let want_len = entry.dtype.data_len(shape[0] as u64, shape[1] as u64).ok_or(bad_range)?;
            let end = entry.data.offset.checked_add(entry.data.len).ok_or(bad_range)?;
            if entry.data.len != want_len
                || entry.data.offset % blob::DATA_ALIGN as u64 != 0
                || entry.data.offset < prev_end as u64
                || end > file_len as u64
            {
                return Err(bad_range);
            }
            prev_end = end as usize;
            let tref = TensorRef {
                role,
                offset: entry.data.offset as usize,
                len: entry.data.len as usize,
                dtype: entry.dtype,
                rows: shape[0],
                cols: shape[1],
            };
            match role.layer_index() {
                Some(i) if layer == 0 => {
                    if let Some(slot) = layer0.get_mut(i) {
                        *slot = Some(tref);
                    }
                }
                Some(i) => {
                    // every layer's tensors lie at layer 0's plus l strides, with its dtypes
                    let first = layer0.get(i).copied().flatten().ok_or(Error::IrregularLayout { layer })?;
                    if layer == 1 && layer0.iter().flatten().next().map(|t| t.role) == Some(role) {
                        layer_stride = tref.offset.saturating_sub(first.offset);
                    }
                    let at = (layer as usize).checked_mul(layer_stride).and_then(|d| d.checked_add(first.offset));
                    if Some(tref.offset) != at || tref.dtype != first.dtype {
                        return Err(Error::IrregularLayout { layer });
                    }
                }
                None => {
                    if let Some(slot) = GLOBAL_ROLES.iter().position(|&r| r == role).and_then(|g| globals.get_mut(g)) {
                        *slot = Some(tref);
                    }
                }
            }
        }
        // the walk took every tensor the config has; one more is one too many
        if let Some(e) = table.next() {
            let e = e?;
            return Err(Error::UnexpectedTensor { role: e.role, layer: e.layer });
        }

        // The global views, made once (every range was checked above).
        let global = |r: Role| GLOBAL_ROLES.iter().position(|&g| g == r).and_then(|g| globals.get(g).copied().flatten());
        let wte_ref = global(Role::Wte).ok_or(Error::MissingTensor { role: Role::Wte, layer: 0 })?;
        let wpe_ref = global(Role::Wpe);
        let ln_f_ref = global(Role::LnFWeight).ok_or(Error::MissingTensor { role: Role::LnFWeight, layer: 0 })?;
        let lm_head_ref = global(Role::LmHead);
        let wpe_row = wpe_ref.map_or(0, |t| t.len / t.rows.max(1));
        let global_bytes = wte_ref.len + lm_head_ref.map_or(0, |t| t.len) + wpe_row + ln_f_ref.len + global(Role::LnFBias).map_or(0, |t| t.len);
        let role0 = |r: Role| r.layer_index().and_then(|i| layer0.get(i).copied().flatten());
        let need = |r: Role| role0(r).ok_or(Error::MissingTensor { role: r, layer: 0 });
        let opt = |r: Role| role0(r).map(|t| vector(blob, t, 0)).transpose();
        let layer0_views = LayerWeights {
            ln_1: NormWeights { weight: vector(blob, need(Role::Ln1Weight)?, 0)?, bias: opt(Role::Ln1Bias)? },
            attn_c_attn: matrix(blob, need(Role::AttnCAttnWeight)?, 0)?,
            attn_c_attn_bias: opt(Role::AttnCAttnBias)?,
            attn_c_proj: matrix(blob, need(Role::AttnCProjWeight)?, 0)?,
            attn_c_proj_bias: opt(Role::AttnCProjBias)?,
            ln_2: NormWeights { weight: vector(blob, need(Role::Ln2Weight)?, 0)?, bias: opt(Role::Ln2Bias)? },
            mlp_c_fc: matrix(blob, need(Role::MlpCFcWeight)?, 0)?,
            mlp_c_fc_bias: opt(Role::MlpCFcBias)?,
            mlp_c_proj: matrix(blob, need(Role::MlpCProjWeight)?, 0)?,
            mlp_c_proj_bias: opt(Role::MlpCProjBias)?,
        };
        let mut model = Model {
            config,
            blob,
            provenance: header.provenance,
            wte: matrix(blob, wte_ref, 0)?,
            wpe: wpe_ref.map(|t| matrix(blob, t, 0)).transpose()?,
            ln_f: NormWeights { weight: vector(blob, ln_f_ref, 0)?, bias: global(Role::LnFBias).map(|t| vector(blob, t, 0)).transpose()? },
            lm_head: lm_head_ref.map(|t| matrix(blob, t, 0)).transpose()?,
            global_bytes,
            layer0: layer0_views,
            layer_bytes: layer0.iter().flatten().map(|t| t.len).sum(),
            layer_stride,
            tokenizer: None,
            source_vocab: None,
            data_start,
        };
        if let Some(Section { offset, len }) = header.tokenizer {
            let end = offset.saturating_add(len);
            if offset % blob::DATA_ALIGN as u64 != 0 || offset < data_start as u64 || end > file_len as u64 {
                return Err(Error::BadTokenizer { offset: 0 });
            }
            let bytes = blob.get(offset as usize..end as usize).unwrap_or(&[]);
            let tok = Tokenizer::from_bytes(bytes)?;
            if tok.vocab_size() > config.vocab_size() {
                return Err(Error::BadTokenizer { offset: 0 });
            }
            model.tokenizer = Some(tok);
        }
        if let Some(src) = header.source_vocab {
            model.source_vocab = Some((src.vocab_size, source_ids(blob, data_start, &config, src)?));
        }
        Ok(model)
    }

    /// The model's shapes and hyper-parameters.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where the blob came from.
    pub fn provenance(&self) -> &Provenance<'a> {
        &self.provenance
    }

    /// The tokenizer packed in the blob, if any.
    pub fn tokenizer(&self) -> Option<&Tokenizer<'a>> {
        self.tokenizer.as_ref()
    }

    /// Tokens of the vocabulary the model was trained with (`vocab_size` unless the blob's
    /// vocabulary was pruned).
    pub fn source_vocab_size(&self) -> u32 {
        self.source_vocab.map_or(self.config.vocab_size, |(n, _)| n)
    }

    /// Whether the blob's vocabulary is a pruned subset of the source one.
    pub fn is_pruned(&self) -> bool {
        self.source_vocab.is_some()
    }

    /// The source-vocabulary id of token `id` (itself without pruning); None when `id` is not
    /// a token of this model.
    pub fn source_id(&self, id: u32) -> Option<u32> {
        match self.source_vocab {
            Some((_, ids)) => ids.get(id as usize).copied(),
            None => (id < self.config.vocab_size).then_some(id),
        }
    }

    /// This model's id of source-vocabulary token `src` (binary search); None when pruning
    /// dropped it or it is outside the source vocabulary.
    pub fn id_from_source(&self, src: u32) -> Option<u32> {
        match self.source_vocab {
            Some((_, ids)) => ids.binary_search(&src).ok().map(|i| i as u32),
            None => (src < self.config.vocab_size).then_some(src),
        }
    }

    /// Bytes of tensor data (everything after the header), a proxy for flash use.
    pub fn data_bytes(&self) -> usize {
        self.blob.len().saturating_sub(self.data_start)
    }

    /// Total bytes of weights read to produce one token (all matrices except wpe, plus one wpe
    /// row, plus vectors): what decode has to stream from memory.
    pub fn weight_bytes_per_token(&self) -> usize {
        self.layer_bytes * self.config.n_layer() + self.global_bytes
    }

    /// Token embedding table `wte` (V, C).
    pub fn wte(&self) -> Matrix<'a> {
        self.wte
    }

    /// Position embedding table `wpe` (n_ctx, C); None when the model uses RoPE.
    pub fn wpe(&self) -> Option<Matrix<'a>> {
        self.wpe
    }

    /// Output head (V, C): `lm_head.weight` if the checkpoint had a separate one, else `wte`.
    pub fn lm_head(&self) -> Matrix<'a> {
        self.lm_head.unwrap_or(self.wte)
    }

    /// Final norm `ln_f` (Llama: `model.norm`), each (C).
    pub fn ln_f(&self) -> NormWeights<'a> {
        self.ln_f
    }

    /// The weights of block `l` (`LayerOutOfRange` for `l ≥ n_layer`): layer 0's views moved
    /// `l` strides on, where `from_blob` found layer l's tensors with the same shapes and dtypes.
    pub fn layer(&self, l: usize) -> Result<LayerWeights<'a>, Error> {
        if l >= self.config.n_layer() {
            return Err(Error::LayerOutOfRange { layer: l, n_layer: self.config.n_layer() });
        }
        // SAFETY: `from_blob` checked that every tensor of every layer l < n_layer lies at layer
        // 0's offset plus l · layer_stride, with layer 0's length, inside the blob (which `blob`
        // spans, for 'a); the stride is a multiple of DATA_ALIGN, so alignment is kept.
        Ok(unsafe { self.layer0.moved(l * self.layer_stride) })
    }

    /// Dtype of the block matrices (as stored).
    pub fn weight_dtype(&self) -> DType {
        match self.layer0.attn_c_attn.data {
            MatrixData::F32(_) => DType::F32,
            MatrixData::F16(_) => DType::F16,
            MatrixData::Q8 { group, .. } => DType::Q8 { group_len: group as u32 },
            MatrixData::Q4 { group, .. } => DType::Q4 { group_len: group as u32 },
        }
    }
}

/// `s` moved `bytes` on in memory (the same length).
///
/// # Safety
/// The moved range must lie inside the allocation `s` is in, and keep `T`'s alignment.
#[inline(always)]
unsafe fn moved<T>(s: &[T], bytes: usize) -> &[T] {
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts(s.as_ptr().byte_add(bytes), s.len()) }
}

impl<'a> Matrix<'a> {
    /// The same matrix `bytes` on in memory (see [`moved`]).
    ///
    /// # Safety
    /// As [`moved`], for every slice of the matrix.
    #[inline(always)]
    unsafe fn moved(&self, bytes: usize) -> Matrix<'a> {
        // SAFETY: the caller's contract, slice by slice.
        let data = unsafe {
            match self.data {
                MatrixData::F32(d) => MatrixData::F32(moved(d, bytes)),
                MatrixData::F16(d) => MatrixData::F16(moved(d, bytes)),
                MatrixData::Q8 { values, scales, group } => MatrixData::Q8 { values: moved(values, bytes), scales: moved(scales, bytes), group },
                MatrixData::Q4 { packed, scales, group } => MatrixData::Q4 { packed: moved(packed, bytes), scales: moved(scales, bytes), group },
            }
        };
        Matrix { data, ..*self }
    }
}

impl<'a> LayerWeights<'a> {
    /// Every view `bytes` on in memory (see [`moved`]).
    ///
    /// # Safety
    /// As [`moved`], for every slice of every tensor.
    #[inline(always)]
    unsafe fn moved(&self, bytes: usize) -> LayerWeights<'a> {
        // SAFETY: the caller's contract, view by view.
        unsafe {
            let v = |s: &'a [f32]| moved(s, bytes);
            LayerWeights {
                ln_1: NormWeights { weight: v(self.ln_1.weight), bias: self.ln_1.bias.map(v) },
                attn_c_attn: self.attn_c_attn.moved(bytes),
                attn_c_attn_bias: self.attn_c_attn_bias.map(v),
                attn_c_proj: self.attn_c_proj.moved(bytes),
                attn_c_proj_bias: self.attn_c_proj_bias.map(v),
                ln_2: NormWeights { weight: v(self.ln_2.weight), bias: self.ln_2.bias.map(v) },
                mlp_c_fc: self.mlp_c_fc.moved(bytes),
                mlp_c_fc_bias: self.mlp_c_fc_bias.map(v),
                mlp_c_proj: self.mlp_c_proj.moved(bytes),
                mlp_c_proj_bias: self.mlp_c_proj_bias.map(v),
            }
        }
    }
}

/// The error for a tensor of `layer` whose range or length is wrong (after validation: a bug,
/// reported rather than turned into empty weights).
#[cold]
fn bad_range(t: TensorRef, layer: usize) -> Error {
    Error::BadTensorRange { role: t.role, layer: layer as u32, offset: t.offset as u64, len: t.len as u64 }
}

/// The bytes of a tensor of `layer` (its range checked here once more).
#[inline(always)]
fn bytes(blob: &[u8], t: TensorRef, layer: usize) -> Result<&[u8], Error> {
    blob.get(t.offset..t.offset.wrapping_add(t.len)).ok_or_else(|| bad_range(t, layer))
}

/// An f32 vector tensor (`[n, 1]`).
#[inline(always)]
fn vector(blob: &[u8], t: TensorRef, layer: usize) -> Result<&[f32], Error> {
    match bytemuck::try_cast_slice::<u8, f32>(bytes(blob, t, layer)?) {
        Ok(v) if v.len() == t.rows && t.dtype == DType::F32 => Ok(v),
        _ => Err(bad_range(t, layer)),
    }
}

/// A matrix tensor, its data split as its dtype says: every slice exactly as long as the shape
/// needs.
fn matrix<'a>(blob: &'a [u8], t: TensorRef, layer: usize) -> Result<Matrix<'a>, Error> {
    let bytes = bytes(blob, t, layer)?;
    let n = t.rows.checked_mul(t.cols).ok_or_else(|| bad_range(t, layer))?;
    // quantized data: values, then f32 scales at the next multiple of 16 bytes
    let split = |value_bytes: usize, group: usize| -> Option<(&'a [u8], &'a [f32])> {
        if group == 0 || n % group != 0 {
            return None;
        }
        let at = value_bytes.div_ceil(16) * 16;
        let values = bytes.get(..value_bytes)?;
        let scales = bytes.get(at..at + n / group * 4)?;
        Some((values, bytemuck::try_cast_slice::<u8, f32>(scales).ok()?))
    };
    let data = match t.dtype {
        DType::F32 => bytemuck::try_cast_slice(bytes).ok().filter(|d: &&[f32]| d.len() == n).map(MatrixData::F32),
        DType::F16 => bytemuck::try_cast_slice(bytes).ok().filter(|d: &&[f16]| d.len() == n).map(MatrixData::F16),
        DType::Q8 { group_len } => split(n, group_len as usize).map(|(values, scales)| MatrixData::Q8 { values: bytemuck::cast_slice(values), scales, group: group_len as usize }),
        DType::Q4 { group_len } => split(n / 2, group_len as usize).map(|(packed, scales)| MatrixData::Q4 { packed, scales, group: group_len as usize }),
    };
    Ok(Matrix { rows: t.rows, cols: t.cols, data: data.ok_or_else(|| bad_range(t, layer))? })
}

/// Validates a source-vocabulary section: inside the data, one u32 per token, strictly
/// increasing, each below the source vocabulary's size.
fn source_ids<'a>(blob: &'a [u8], data_start: usize, config: &Config, src: SourceVocab) -> Result<&'a [u32], Error> {
    let Section { offset, len } = src.ids;
    let vocab_size = config.vocab_size;
    let bad = Error::BadSourceVocab { offset, len, vocab_size };
    let end = offset.checked_add(len).ok_or(bad)?;
    if offset % blob::DATA_ALIGN as u64 != 0 || offset < data_start as u64 || end > blob.len() as u64 || len != 4 * vocab_size as u64 {
        return Err(bad);
    }
    let bytes = blob.get(offset as usize..end as usize).ok_or(bad)?;
    // 64-byte aligned offset in a 16-byte aligned blob: the cast cannot fail
    let ids: &[u32] = bytemuck::try_cast_slice(bytes).map_err(|_| bad)?;
    let mut previous: Option<u32> = None;
    for (index, &id) in ids.iter().enumerate() {
        let index = index as u32;
        if id >= src.vocab_size {
            return Err(Error::SourceIdOutOfRange { index, id, source_vocab_size: src.vocab_size });
        }
        if let Some(previous) = previous.filter(|&p| id <= p) {
            return Err(Error::SourceIdOutOfOrder { index, id, previous });
        }
        previous = Some(id);
    }
    Ok(ids)
}
