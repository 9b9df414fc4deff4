//! The weights: read-only views into the blob, validated once by [`Model::from_blob`].
//!
//! After `from_blob` succeeds every accessor here is infallible: offsets, lengths, shapes,
//! dtypes and alignment were all checked, so the views below are plain slices into the blob
//! (flash on a board; no copy).

use half::f16;

use crate::blob::{self, DType, Header, Preamble, Provenance, Role, Section, SourceVocab, TensorTable, LAYER_ROLES};
use crate::config::Config;
use crate::error::Error;
use crate::tokenizer::Tokenizer;

/// Location and type of one validated tensor inside the blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TensorRef {
    offset: usize,
    len: usize,
    dtype: DType,
    rows: usize,
    cols: usize,
}

/// Smallest quantization group the runtime accepts (bounds the activation scratch).
pub const MIN_GROUP: usize = 8;

const NO_TENSOR: TensorRef = TensorRef { offset: 0, len: 0, dtype: DType::F32, rows: 0, cols: 0 };

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

/// The weights of one transformer block, named as in Hugging Face's `GPT2Block`.
#[derive(Debug, Clone, Copy)]
pub struct LayerWeights<'a> {
    /// `ln_1.weight` (C)
    pub ln_1_weight: &'a [f32],
    /// `ln_1.bias` (C)
    pub ln_1_bias: &'a [f32],
    /// `attn.c_attn.weight` (3C, C): rows 0..C give q, C..2C k, 2C..3C v.
    pub attn_c_attn: Matrix<'a>,
    /// `attn.c_attn.bias` (3C); empty when the config has no q/k/v biases (GPT-Neo)
    pub attn_c_attn_bias: &'a [f32],
    /// `attn.c_proj.weight` (C, C)
    pub attn_c_proj: Matrix<'a>,
    /// `attn.c_proj.bias` (C)
    pub attn_c_proj_bias: &'a [f32],
    /// `ln_2.weight` (C)
    pub ln_2_weight: &'a [f32],
    /// `ln_2.bias` (C)
    pub ln_2_bias: &'a [f32],
    /// `mlp.c_fc.weight` (I, C)
    pub mlp_c_fc: Matrix<'a>,
    /// `mlp.c_fc.bias` (I)
    pub mlp_c_fc_bias: &'a [f32],
    /// `mlp.c_proj.weight` (C, I)
    pub mlp_c_proj: Matrix<'a>,
    /// `mlp.c_proj.bias` (C)
    pub mlp_c_proj_bias: &'a [f32],
}

/// A validated model: config plus views of its weights inside the blob.
#[derive(Debug, Clone)]
pub struct Model<'a> {
    config: Config,
    blob: &'a [u8],
    provenance: Provenance<'a>,
    wte: TensorRef,            // (V, C)
    wpe: TensorRef,            // (n_ctx, C)
    ln_f_weight: TensorRef,    // (C)
    ln_f_bias: TensorRef,      // (C)
    lm_head: Option<TensorRef>, // (V, C), None = tied to wte
    layer0: [TensorRef; 12],   // layer 0's tensors in LAYER_ROLES order
    layer_stride: usize,       // bytes between layer l and layer l+1 tensors
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

        let (c, v, n_ctx, inner) = (config.n_embd(), config.vocab_size(), config.n_ctx(), config.n_inner());
        // the per-layer tensors this config has (no attn.c_attn.bias without q/k/v biases)
        let in_layer = |r: &Role| config.qkv_bias || *r != Role::AttnCAttnBias;
        let per_layer = LAYER_ROLES.iter().filter(|r| in_layer(r)).count();
        let has_lm_head = header.n_tensors as usize == 5 + per_layer * config.n_layer();
        let expected_tensors = 4 + usize::from(has_lm_head) + per_layer * config.n_layer();
        if header.n_tensors as usize != expected_tensors {
            // The config and the table disagree about q/k/v biases: name that tensor.
            let mut table = TensorTable::new(table_bytes, header.n_tensors);
            let bias = table.find_map(|e| e.ok().filter(|e| e.role == Role::AttnCAttnBias));
            match (config.qkv_bias, bias) {
                (false, Some(e)) => return Err(Error::UnexpectedTensor { role: e.role, layer: e.layer }),
                (true, None) => return Err(Error::MissingTensor { role: Role::AttnCAttnBias, layer: 0 }),
                _ => {}
            }
            // Report the first tensor the count says is missing (or extra).
            return Err(if (header.n_tensors as usize) < expected_tensors {
                Error::MissingTensor { role: Role::Ln1Weight, layer: config.n_layer - 1 }
            } else {
                Error::UnexpectedTensor { role: Role::LmHead, layer: 0 }
            });
        }

        let mut model = Model {
            config,
            blob,
            provenance: header.provenance,
            wte: NO_TENSOR,
            wpe: NO_TENSOR,
            ln_f_weight: NO_TENSOR,
            ln_f_bias: NO_TENSOR,
            lm_head: None,
            layer0: [NO_TENSOR; 12],
            layer_stride: 0,
            tokenizer: None,
            source_vocab: None,
            data_start,
        };

        // The converter writes tensors in one canonical order; anything else is rejected, which
        // makes duplicates and gaps impossible by construction.
        let globals: &[Role] = if has_lm_head {
            &[Role::Wte, Role::Wpe, Role::LnFWeight, Role::LnFBias, Role::LmHead]
        } else {
            &[Role::Wte, Role::Wpe, Role::LnFWeight, Role::LnFBias]
        };
        let expected_order = globals
            .iter()
            .map(|&r| (r, 0u32))
            .chain((0..config.n_layer).flat_map(|l| LAYER_ROLES.iter().filter(|r| in_layer(r)).map(move |&r| (r, l))));

        let mut prev_end = data_start;
        let mut table = TensorTable::new(table_bytes, header.n_tensors);
        for (want_role, want_layer) in expected_order {
            let entry = match table.next() {
                Some(e) => e?,
                None => return Err(Error::MissingTensor { role: want_role, layer: want_layer }),
            };
            if entry.role != want_role || entry.layer != want_layer {
                let foreign = entry.role.is_layer() && (entry.layer >= config.n_layer || !in_layer(&entry.role));
                return Err(if foreign {
                    Error::UnexpectedTensor { role: entry.role, layer: entry.layer }
                } else {
                    Error::MissingTensor { role: want_role, layer: want_layer }
                });
            }
            let (role, layer) = (entry.role, entry.layer);
            // Expected shape [rows, cols].
            let shape: [usize; 2] = match role {
                Role::Wte | Role::LmHead => [v, c],
                Role::Wpe => [n_ctx, c],
                Role::AttnCAttnWeight => [3 * c, c],
                Role::AttnCAttnBias => [3 * c, 1],
                Role::AttnCProjWeight => [c, c],
                Role::MlpCFcWeight => [inner, c],
                Role::MlpCFcBias => [inner, 1],
                Role::MlpCProjWeight => [c, inner],
                Role::LnFWeight
                | Role::LnFBias
                | Role::Ln1Weight
                | Role::Ln1Bias
                | Role::AttnCProjBias
                | Role::Ln2Weight
                | Role::Ln2Bias
                | Role::MlpCProjBias => [c, 1],
            };
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
                offset: entry.data.offset as usize,
                len: entry.data.len as usize,
                dtype: entry.dtype,
                rows: shape[0],
                cols: shape[1],
            };
            match (role, role.layer_index()) {
                (_, Some(i)) if layer == 0 => {
                    if let Some(slot) = model.layer0.get_mut(i) {
                        *slot = tref;
                    }
                }
                (_, Some(i)) => {
                    let first = model.layer0.get(i).copied().unwrap_or(NO_TENSOR);
                    if layer == 1 && i == 0 {
                        model.layer_stride = tref.offset.saturating_sub(first.offset);
                    }
                    let at = (layer as usize)
                        .checked_mul(model.layer_stride)
                        .and_then(|d| d.checked_add(first.offset));
                    if Some(tref.offset) != at || tref.dtype != first.dtype {
                        return Err(Error::IrregularLayout { layer });
                    }
                }
                (Role::Wte, None) => model.wte = tref,
                (Role::Wpe, None) => model.wpe = tref,
                (Role::LnFWeight, None) => model.ln_f_weight = tref,
                (Role::LnFBias, None) => model.ln_f_bias = tref,
                (_, None) => model.lm_head = Some(tref),
            }
        }

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
        let l = self.layer0.iter().map(|t| t.len).sum::<usize>() * self.config.n_layer();
        let head = self.lm_head.map_or(0, |t| t.len);
        let wpe_row = self.wpe.len / self.wpe.rows.max(1);
        l + self.wte.len + head + wpe_row + self.ln_f_weight.len + self.ln_f_bias.len
    }

    fn bytes(&self, t: TensorRef) -> &'a [u8] {
        self.blob.get(t.offset..t.offset + t.len).unwrap_or(&[])
    }

    fn vector(&self, t: TensorRef) -> &'a [f32] {
        bytemuck::try_cast_slice(self.bytes(t)).unwrap_or(&[])
    }

    fn matrix(&self, t: TensorRef) -> Matrix<'a> {
        let bytes = self.bytes(t);
        let n = t.rows * t.cols;
        // quantized data: values, then f32 scales at the next multiple of 16 bytes
        let split = |value_bytes: usize, group: usize| {
            let at = value_bytes.div_ceil(16) * 16;
            let values = bytes.get(..value_bytes).unwrap_or(&[]);
            let scales = bytes.get(at..at + n / group.max(1) * 4).unwrap_or(&[]);
            (values, bytemuck::try_cast_slice::<u8, f32>(scales).unwrap_or(&[]))
        };
        let data = match t.dtype {
            DType::F32 => MatrixData::F32(bytemuck::try_cast_slice(bytes).unwrap_or(&[])),
            DType::F16 => MatrixData::F16(bytemuck::try_cast_slice(bytes).unwrap_or(&[])),
            DType::Q8 { group_len } => {
                let (values, scales) = split(n, group_len as usize);
                MatrixData::Q8 { values: bytemuck::cast_slice(values), scales, group: group_len as usize }
            }
            DType::Q4 { group_len } => {
                let (packed, scales) = split(n / 2, group_len as usize);
                MatrixData::Q4 { packed, scales, group: group_len as usize }
            }
        };
        Matrix { rows: t.rows, cols: t.cols, data }
    }

    /// Token embedding table `wte` (V, C).
    pub fn wte(&self) -> Matrix<'a> {
        self.matrix(self.wte)
    }

    /// Position embedding table `wpe` (n_ctx, C).
    pub fn wpe(&self) -> Matrix<'a> {
        self.matrix(self.wpe)
    }

    /// Output head (V, C): `lm_head.weight` if the checkpoint had a separate one, else `wte`.
    pub fn lm_head(&self) -> Matrix<'a> {
        self.matrix(self.lm_head.unwrap_or(self.wte))
    }

    /// Final LayerNorm `ln_f` (weight, bias), each (C).
    pub fn ln_f(&self) -> (&'a [f32], &'a [f32]) {
        (self.vector(self.ln_f_weight), self.vector(self.ln_f_bias))
    }

    /// The weights of block `l` (empty views if `l >= n_layer`).
    pub fn layer(&self, l: usize) -> LayerWeights<'a> {
        let at = |i: usize| {
            let mut t = self.layer0.get(i).copied().unwrap_or(NO_TENSOR);
            if l >= self.config.n_layer() {
                return NO_TENSOR;
            }
            t.offset += l * self.layer_stride;
            t
        };
        LayerWeights {
            ln_1_weight: self.vector(at(0)),
            ln_1_bias: self.vector(at(1)),
            attn_c_attn: self.matrix(at(2)),
            attn_c_attn_bias: self.vector(at(3)),
            attn_c_proj: self.matrix(at(4)),
            attn_c_proj_bias: self.vector(at(5)),
            ln_2_weight: self.vector(at(6)),
            ln_2_bias: self.vector(at(7)),
            mlp_c_fc: self.matrix(at(8)),
            mlp_c_fc_bias: self.vector(at(9)),
            mlp_c_proj: self.matrix(at(10)),
            mlp_c_proj_bias: self.vector(at(11)),
        }
    }

    /// Dtype of the block matrices (as stored).
    pub fn weight_dtype(&self) -> DType {
        self.layer0.get(2).map_or(DType::F32, |t| t.dtype)
    }
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
