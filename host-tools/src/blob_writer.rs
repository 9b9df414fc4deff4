//! Writes blob format v2 (defined in `runtime::blob`): the tensors in canonical order, each at
//! a multiple of `DATA_ALIGN`, the tokenizer section, the source-vocabulary section, then the
//! preamble with the CRC-32.

use anyhow::{ensure, Result};
use runtime::blob::{self, DType, Header, Preamble, Provenance, Role, Section, SourceVocab, TensorEntry};
use runtime::Config;

/// One tensor ready to be written: its table row (offset filled in by the writer) and bytes.
pub struct TensorData {
    /// Role in the model.
    pub role: Role,
    /// Block index (0 for globals).
    pub layer: u32,
    /// Element type of `bytes`.
    pub dtype: DType,
    /// `[rows, cols]` (`[n, 1]` for vectors).
    pub shape: [u32; 2],
    /// Encoded data.
    pub bytes: Vec<u8>,
}

/// Everything a blob holds.
pub struct BlobContents<'a> {
    /// Model config.
    pub config: Config,
    /// Provenance strings.
    pub provenance: Provenance<'a>,
    /// Tensors in the canonical order (globals, then layer 0's `LAYER_ROLES`, layer 1, …).
    pub tensors: Vec<TensorData>,
    /// Packed tokenizer section, if any.
    pub tokenizer: Option<Vec<u8>>,
    /// For a pruned vocabulary: the source vocabulary's size and the source id of each kept
    /// token (strictly increasing, `config.vocab_size` of them).
    pub source_vocab: Option<(u32, Vec<u32>)>,
}

/// The sections placed after the tensors.
struct Tail {
    tokenizer: Option<Section>,
    source_vocab: Option<SourceVocab>,
    end: u64,
}

/// Serialises header + table for the given data start (offsets depend on it).
fn encode_header(c: &BlobContents<'_>, data_start: u64) -> Result<(Vec<u8>, Vec<TensorEntry>, Tail)> {
    let mut at = data_start;
    let mut entries = Vec::with_capacity(c.tensors.len());
    for t in &c.tensors {
        at = blob::align_up(at);
        entries.push(TensorEntry {
            role: t.role,
            layer: t.layer,
            dtype: t.dtype,
            shape: t.shape,
            data: Section { offset: at, len: t.bytes.len() as u64 },
        });
        at += t.bytes.len() as u64;
    }
    let mut section = |len: usize| {
        let s = Section { offset: blob::align_up(at), len: len as u64 };
        at = s.offset + s.len;
        s
    };
    let tokenizer = c.tokenizer.as_ref().map(|tok| section(tok.len()));
    let source_vocab = c.source_vocab.as_ref().map(|(n, ids)| SourceVocab { vocab_size: *n, ids: section(4 * ids.len()) });
    let header =
        Header { config: c.config, provenance: c.provenance, tokenizer, source_vocab, n_tensors: entries.len() as u32 };
    let mut bytes = postcard::to_allocvec(&header)?;
    for e in &entries {
        bytes.extend(postcard::to_allocvec(e)?);
    }
    Ok((bytes, entries, Tail { tokenizer, source_vocab, end: at }))
}

/// Builds the complete blob in memory.
pub fn write_blob(c: &BlobContents<'_>) -> Result<Vec<u8>> {
    for t in &c.tensors {
        let want = t.dtype.data_len(t.shape[0] as u64, t.shape[1] as u64);
        ensure!(want == Some(t.bytes.len() as u64), "tensor {} has {} bytes, its shape needs {:?}", t.role.hf_name(t.layer), t.bytes.len(), want);
    }
    // Offsets are varints in the header, so the header length depends on where the data
    // starts: iterate until the data start no longer moves (two rounds in practice).
    let mut data_start = blob::align_up(blob::PREAMBLE_LEN as u64);
    let (header, entries, tail) = loop {
        let (header, entries, tail) = encode_header(c, data_start)?;
        let need = blob::align_up((blob::PREAMBLE_LEN + header.len()) as u64);
        if need <= data_start {
            break (header, entries, tail);
        }
        data_start = need;
    };
    let end = tail.end;
    let mut out = vec![0u8; end as usize];
    out[blob::PREAMBLE_LEN..blob::PREAMBLE_LEN + header.len()].copy_from_slice(&header);
    for (e, t) in entries.iter().zip(&c.tensors) {
        let at = e.data.offset as usize;
        out[at..at + t.bytes.len()].copy_from_slice(&t.bytes);
    }
    if let (Some(s), Some(tok)) = (tail.tokenizer, &c.tokenizer) {
        out[s.offset as usize..(s.offset + s.len) as usize].copy_from_slice(tok);
    }
    if let (Some(s), Some((_, ids))) = (tail.source_vocab, &c.source_vocab) {
        let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
        out[s.ids.offset as usize..(s.ids.offset + s.ids.len) as usize].copy_from_slice(&bytes);
    }
    // The CRC covers bytes 16.. (header_len and file_len included), so write those first.
    let mut pre = Preamble { version: blob::VERSION, crc32: 0, header_len: header.len() as u32, file_len: end };
    out[..blob::PREAMBLE_LEN].copy_from_slice(&pre.to_bytes());
    pre.crc32 = crc32fast::hash(&out[blob::CRC_START..]);
    out[..blob::PREAMBLE_LEN].copy_from_slice(&pre.to_bytes());
    Ok(out)
}

/// Little-endian bytes of f32 values.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

/// Little-endian bytes of f32 values narrowed to f16 (round to nearest even).
pub fn f16_bytes(v: &[f32]) -> Vec<u8> {
    let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f32(x)).collect();
    bytemuck::cast_slice(&h).to_vec()
}
