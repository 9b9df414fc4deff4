//! Bad input of every kind gives one specific `runtime::Error` (variant and numbers), and never a
//! panic: headers whose shapes, dtypes, counts or byte ranges disagree with the config,
//! truncation at every section boundary, bad tokenizer sections, token ids outside the
//! vocabulary, prompts longer than the context, buffers one element too small for each KV dtype,
//! empty prompts, zero tokens to generate, and out-of-range sampling parameters.
//! (`blob_malformed.rs` covers the preamble, the checksum and random header corruption.)
//!
//! Blobs are written by the real writer (`host_tools::blob_writer::write_blob`) where it can
//! express the fault (a wrong shape, dtype or config); faults it refuses to write (offsets,
//! lengths, dtype/length mismatches) go through [`Raw`], a small independent encoder of the same
//! format that is checked byte for byte against `write_blob` first.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use host_tools::blob_file::BlobFile;
use host_tools::blob_writer::{f16_bytes, f32_bytes, write_blob, BlobContents, TensorData};
use host_tools::convert::quantize_matrix;
use host_tools::tokenizer_pack::{bytes_to_unicode, pack};
use runtime::blob::{self, DType, Header, Preamble, Provenance, Role, Section, SourceVocab, TensorEntry, TensorTable, LAYER_ROLES};
use runtime::error::{ConfigField, SamplerParam};
use runtime::generate::{generate, Control, GenerateOptions, StopReason, Summary};
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::tokenizer::Tokenizer;
use runtime::config::{Arch, LayerMask, Norm, Positions};
use runtime::kv_cache::KvLayout;
use runtime::{Activation, Config, Error, KvDType, Model, Session, SessionSizes};

// ---- a small model, written by the real writer -------------------------------------------------

const PROVENANCE: Provenance<'static> = Provenance { source: "malformed-inputs", source_dtype: "F32", converter: "test" };

/// V = 260 (the 256 byte tokens and 4 merges), C = 8, H = 2, I = 16, 2 layers, n_ctx = 8.
fn config() -> Config {
    Config {
        vocab_size: 260,
        n_ctx: 8,
        n_embd: 8,
        n_layer: 2,
        n_head: 2,
        n_inner: 16,
        layer_norm_epsilon: 1e-5,
        activation: Activation::GeluTanh,
        scale_attn_weights: true,
        scale_attn_by_inverse_layer_idx: false,
        bos_token_id: 259,
        eos_token_id: 259,
        arch: Arch::Gpt2,
        qkv_bias: true,
        attn_window: 0,
        local_layers: LayerMask::NONE,
        ..Config::gpt2(260, 8, 8, 2, 2)
    }
}

/// A byte-level BPE section with 260 tokens: the 256 bytes, then " t", "he", "in", " the".
fn tokenizer_section() -> Vec<u8> {
    let b2u = bytes_to_unicode();
    let mut vocab: HashMap<String, u32> = (0u32..256).map(|b| (b2u[b as usize].to_string(), b)).collect();
    let merges = [("Ġ", "t"), ("h", "e"), ("i", "n"), ("Ġt", "he")];
    for (i, (l, r)) in merges.iter().enumerate() {
        vocab.insert(format!("{l}{r}"), 256 + i as u32);
    }
    let merges: Vec<(String, String)> = merges.iter().map(|(l, r)| (l.to_string(), r.to_string())).collect();
    pack(&vocab, &merges).expect("pack the test tokenizer")
}

/// Deterministic small values for a tensor (finite, varied, no two tensors alike).
fn values(n: usize, salt: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 7919 + salt * 104_729) % 1000) as f32 / 1000.0 - 0.5) * 0.4).collect()
}

/// A tensor of the shape `cfg` gives it (GPT-2's, when the config has no such tensor), in
/// `dtype` (vectors always f32).
fn tensor(cfg: &Config, role: Role, layer: u32, dtype: DType) -> TensorData {
    let gpt2 = Config::gpt2(cfg.vocab_size, cfg.n_ctx, cfg.n_embd, cfg.n_layer, cfg.n_head);
    let [rows, cols] = role.shape(cfg).or(role.shape(&Config { n_inner: cfg.n_inner, ..gpt2 })).expect("every role has a GPT-2 shape");
    let dtype = if role.is_matrix() { dtype } else { DType::F32 };
    with_shape(role, layer, [rows as u32, cols as u32], dtype, 1 + layer as usize * 31 + role as usize)
}

/// A tensor of any shape and dtype, with data of the matching length.
fn with_shape(role: Role, layer: u32, shape: [u32; 2], dtype: DType, salt: usize) -> TensorData {
    let (rows, cols) = (shape[0] as usize, shape[1] as usize);
    let mut data = values(rows * cols, salt);
    if matches!(role, Role::LnFWeight | Role::Ln1Weight | Role::Ln2Weight) {
        data.iter_mut().for_each(|w| *w += 1.0);
    }
    let bytes = match dtype {
        DType::F32 => f32_bytes(&data),
        DType::F16 => f16_bytes(&data),
        DType::Q8 { group_len } => quantize_matrix(&data, rows, cols, group_len as usize, false),
        DType::Q4 { group_len } => quantize_matrix(&data, rows, cols, group_len as usize, true),
    };
    TensorData { role, layer, dtype, shape, bytes }
}

/// Every tensor of `cfg` in the canonical order (those [`Role::shape`] says it has; a tied
/// head), matrices in `dtype`.
fn tensors(cfg: &Config, dtype: DType) -> Vec<TensorData> {
    let globals = [Role::Wte, Role::Wpe, Role::LnFWeight, Role::LnFBias].into_iter().filter(|r| r.shape(cfg).is_some()).map(|r| tensor(cfg, r, 0, dtype));
    let roles = LAYER_ROLES.into_iter().filter(|r| r.shape(cfg).is_some());
    let layers = (0..cfg.n_layer).flat_map(|l| roles.clone().map(move |r| tensor(cfg, r, l, dtype)));
    globals.chain(layers).collect()
}

/// The same size as Llama data: RMSNorm, RoPE, a gated SiLU MLP, 2 heads of 6 on one key/value
/// head (multi-query; C_q = 12 in an 8-wide model), no biases.
fn llama_config() -> Config {
    Config { head_dim: 6, ..Config::llama(260, 8, 8, 2, 2, 1, 16) }
}

/// The same model as GPT-Neo data: no q/k/v biases, unscaled scores, layer 1 local with a
/// window of 3 (shorter than n_ctx 8).
fn neo_config() -> Config {
    Config {
        arch: Arch::GptNeo,
        qkv_bias: false,
        scale_attn_weights: false,
        attn_window: 3,
        local_layers: LayerMask::NONE.with(1),
        ..config()
    }
}

fn contents(cfg: Config, tensors: Vec<TensorData>, tokenizer: Option<Vec<u8>>) -> BlobContents<'static> {
    BlobContents { config: cfg, provenance: PROVENANCE, tensors, tokenizer, source_vocab: None }
}

/// The valid model: f32, with the tokenizer.
fn valid_blob() -> Vec<u8> {
    let cfg = config();
    write_blob(&contents(cfg, tensors(&cfg, DType::F32), Some(tokenizer_section()))).expect("write the valid blob")
}

/// Writes a blob from tensors edited by `edit` (the writer accepts any shape and dtype whose
/// bytes match them).
fn written(cfg: Config, edit: impl FnOnce(&mut Vec<TensorData>)) -> Vec<u8> {
    let mut t = tensors(&config(), DType::F32);
    edit(&mut t);
    write_blob(&contents(cfg, t, None)).expect("write_blob")
}

fn find(t: &mut [TensorData], role: Role, layer: u32) -> &mut TensorData {
    t.iter_mut().find(|t| t.role == role && t.layer == layer).expect("tensor present")
}

/// Loads `bytes` (copied to aligned memory) the way a board does; a panic becomes an `Err`
/// string so one table row cannot hide the others.
fn load(bytes: &[u8]) -> Result<Result<(), Error>, String> {
    let file = BlobFile::from_bytes(bytes);
    catch_unwind(AssertUnwindSafe(|| Model::from_blob(file.bytes()).map(|_| ()))).map_err(|p| {
        p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
    })
}

/// Checks every row, then fails once listing all the rows that did not give their error.
fn check_table(rows: Vec<(String, Vec<u8>, Error)>) {
    let mut failures = Vec::new();
    for (name, bytes, want) in &rows {
        match load(bytes) {
            Ok(Err(got)) if got == *want => {
                assert!(!got.to_string().is_empty());
            }
            Ok(got) => failures.push(format!("{name}: got {got:?}, want Err({want:?})")),
            Err(panic) => failures.push(format!("{name}: PANICKED: {panic}")),
        }
    }
    assert!(failures.is_empty(), "{} of {} rows failed:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

// ---- an independent encoder of the blob format, for faults the writer refuses -----------------

/// Postcard, the subset the header uses: unsigned LEB128 varints, f32 little-endian, bool as
/// one byte, strings as varint length + UTF-8, enums as a varint variant index, `Option` as
/// 0 / 1 + value, arrays without a length.
#[derive(Default)]
struct Enc(Vec<u8>);

impl Enc {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn config(&mut self, c: &Config) {
        for v in [c.vocab_size, c.n_ctx, c.n_embd, c.n_layer, c.n_head, c.n_inner] {
            self.varint(v.into());
        }
        self.0.extend_from_slice(&c.layer_norm_epsilon.to_le_bytes());
        self.varint(match c.activation {
            Activation::GeluTanh => 0,
            Activation::GeluErf => 1,
            Activation::Relu => 2,
            Activation::Silu => 3,
        });
        self.0.extend_from_slice(&[c.scale_attn_weights as u8, c.scale_attn_by_inverse_layer_idx as u8]);
        self.varint(c.bos_token_id.into());
        self.varint(c.eos_token_id.into());
        // format v2: arch, qkv_bias, attn_window, local_layers ([u64; 16], no length)
        self.varint(match c.arch {
            Arch::Gpt2 => 0,
            Arch::GptNeo => 1,
            Arch::Llama => 2,
        });
        self.0.push(c.qkv_bias as u8);
        self.varint(c.attn_window.into());
        for w in c.local_layers.0 {
            self.varint(w);
        }
        // format v3: n_kv_head, head_dim, norm, positions (enum + θ), gated_mlp, attn_out_bias, mlp_bias
        self.varint(c.n_kv_head.into());
        self.varint(c.head_dim.into());
        self.varint(match c.norm {
            Norm::LayerNorm => 0,
            Norm::RmsNorm => 1,
        });
        match c.positions {
            Positions::Learned => self.varint(0),
            Positions::Rope { theta } => {
                self.varint(1);
                self.0.extend_from_slice(&theta.to_le_bytes());
            }
        }
        self.0.extend_from_slice(&[c.gated_mlp as u8, c.attn_out_bias as u8, c.mlp_bias as u8]);
    }
    fn section(&mut self, s: &Section) {
        self.varint(s.offset);
        self.varint(s.len);
    }
    fn header(&mut self, h: &Header<'_>) {
        self.config(&h.config);
        self.str(h.provenance.source);
        self.str(h.provenance.source_dtype);
        self.str(h.provenance.converter);
        match &h.tokenizer {
            None => self.0.push(0),
            Some(s) => {
                self.0.push(1);
                self.section(s);
            }
        }
        match &h.source_vocab {
            None => self.0.push(0),
            Some(s) => {
                self.0.push(1);
                self.varint(s.vocab_size.into());
                self.section(&s.ids);
            }
        }
        self.varint(h.n_tensors.into());
    }
    fn entry(&mut self, e: &TensorEntry) {
        self.varint(e.role as u64); // declaration order: Wte = 0, ..., MlpCProjBias = 16
        self.varint(e.layer.into());
        match e.dtype {
            DType::F32 => self.varint(0),
            DType::F16 => self.varint(1),
            DType::Q8 { group_len } => {
                self.varint(2);
                self.varint(group_len.into());
            }
            DType::Q4 { group_len } => {
                self.varint(3);
                self.varint(group_len.into());
            }
        }
        self.varint(e.shape[0].into());
        self.varint(e.shape[1].into());
        self.section(&e.data);
    }
}

/// The postcard header followed by the tensor table.
fn encode_header(header: &Header<'_>, entries: &[TensorEntry]) -> Vec<u8> {
    let mut e = Enc::default();
    e.header(header);
    for entry in entries {
        e.entry(entry);
    }
    e.0
}

/// A blob taken apart: header, table and the bytes at each range, which a row edits freely
/// (any offset, length, count or dtype) before [`Raw::bytes`] puts it back together.
struct Raw {
    header: Header<'static>,
    entries: Vec<TensorEntry>,
    /// The data region (everything after the header), from `data_start` on.
    data: Vec<u8>,
    data_start: u64,
    /// Overrides the header length in the preamble (to cut the table short).
    header_len: Option<u32>,
}

impl Raw {
    /// Takes apart a blob written by `write_blob`.
    fn parse(bytes: &[u8]) -> Raw {
        let pre = Preamble::parse(bytes).expect("preamble");
        let (h, table) = blob::parse_header(bytes, &pre).expect("header");
        let entries: Vec<TensorEntry> = TensorTable::new(table, h.n_tensors).map(|e| e.expect("entry")).collect();
        let data_start = blob::align_up((blob::PREAMBLE_LEN + pre.header_len as usize) as u64);
        let header = Header { provenance: PROVENANCE, ..h };
        Raw { header, entries, data: bytes[data_start as usize..].to_vec(), data_start, header_len: None }
    }

    fn header_bytes(&self) -> Vec<u8> {
        encode_header(&self.header, &self.entries)
    }

    /// Reassembles the blob with a correct CRC. The header must still fit before `data_start`;
    /// when an edit made it longer (a varint grew) the provenance strings are emptied to make
    /// room (they are not checked).
    fn bytes(&self) -> Vec<u8> {
        let mut header = self.header_bytes();
        if blob::PREAMBLE_LEN + header.len() > self.data_start as usize {
            let provenance = Provenance { source: "", source_dtype: "", converter: "" };
            header = encode_header(&Header { provenance, ..self.header }, &self.entries);
        }
        let end = blob::PREAMBLE_LEN + header.len();
        assert!(end as u64 <= self.data_start, "the edited header no longer fits before the data");
        let mut out = vec![0u8; self.data_start as usize];
        out[blob::PREAMBLE_LEN..end].copy_from_slice(&header);
        out.extend_from_slice(&self.data);
        let header_len = self.header_len.unwrap_or(header.len() as u32);
        let mut pre = Preamble { version: blob::VERSION, crc32: 0, header_len, file_len: out.len() as u64 };
        out[..blob::PREAMBLE_LEN].copy_from_slice(&pre.to_bytes());
        pre.crc32 = blob::crc32(&out[blob::CRC_START..]);
        out[..blob::PREAMBLE_LEN].copy_from_slice(&pre.to_bytes());
        out
    }

    fn entry(&mut self, role: Role, layer: u32) -> &mut TensorEntry {
        self.entries.iter_mut().find(|e| e.role == role && e.layer == layer).expect("entry present")
    }

    fn file_len(&self) -> u64 {
        self.data_start + self.data.len() as u64
    }
}

/// Edits the valid blob through [`Raw`].
fn raw(edit: impl FnOnce(&mut Raw)) -> Vec<u8> {
    let mut r = Raw::parse(&valid_blob());
    edit(&mut r);
    r.bytes()
}

#[test]
fn the_valid_blob_loads_and_runs_and_the_raw_encoder_matches_the_writer() {
    let b = valid_blob();
    assert_eq!(load(&b), Ok(Ok(())));
    // Taking the writer's blob apart and putting it back together changes no byte: the
    // encoder used by the rows below writes the same format.
    assert_eq!(Raw::parse(&b).bytes(), b);
    let cfg = config();
    for dtype in [DType::F16, DType::Q8 { group_len: 8 }, DType::Q4 { group_len: 8 }] {
        let b = write_blob(&contents(cfg, tensors(&cfg, dtype), None)).unwrap();
        assert_eq!(Raw::parse(&b).bytes(), b, "{dtype:?}");
        assert_eq!(load(&b), Ok(Ok(())), "{dtype:?}");
    }
    let file = BlobFile::from_bytes(&b);
    let model = file.model().unwrap();
    let sizes = SessionSizes::new(model.config(), 8, 2);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, 8).unwrap();
    assert!(s.prefill(&[1, 2, 3]).unwrap().iter().all(|l| l.is_finite()));
}

// ---- header: config, shapes, dtypes, counts, order --------------------------------------------

#[test]
fn header_disagreeing_with_the_config() {
    let cfg = config();
    let with = |f: fn(&mut Config)| {
        let mut c = config();
        f(&mut c);
        c
    };
    let bad_config = |f: fn(&mut Config)| written(with(f), |_| {});
    let eps_nan = f32::NAN.to_bits() as u64;
    let rows: Vec<(&str, Vec<u8>, Error)> = vec![
        // vocab / shape mismatches: the config says one thing, the tensor another
        (
            "config vocab_size 261, wte has 260 rows",
            written(with(|c| c.vocab_size = 261), |_| {}),
            Error::BadShape { role: Role::Wte, layer: 0, expected: [261, 8], found: [260, 8] },
        ),
        (
            "config vocab_size 259, wte has 260 rows",
            written(
                with(|c| {
                    c.vocab_size = 259;
                    (c.bos_token_id, c.eos_token_id) = (0, 0);
                }),
                |_| {},
            ),
            Error::BadShape { role: Role::Wte, layer: 0, expected: [259, 8], found: [260, 8] },
        ),
        (
            "config n_ctx 9, wpe has 8 rows",
            written(with(|c| c.n_ctx = 9), |_| {}),
            Error::BadShape { role: Role::Wpe, layer: 0, expected: [9, 8], found: [8, 8] },
        ),
        (
            "config n_inner 32, mlp.c_fc has 16 rows",
            written(with(|c| c.n_inner = 32), |_| {}),
            Error::BadShape { role: Role::MlpCFcWeight, layer: 0, expected: [32, 8], found: [16, 8] },
        ),
        (
            "c_attn stored as Conv1D [in, out] (not transposed)",
            written(cfg, |t| *find(t, Role::AttnCAttnWeight, 0) = with_shape(Role::AttnCAttnWeight, 0, [8, 24], DType::F32, 5)),
            Error::BadShape { role: Role::AttnCAttnWeight, layer: 0, expected: [24, 8], found: [8, 24] },
        ),
        (
            "h.1.ln_2.bias one element too long",
            written(cfg, |t| *find(t, Role::Ln2Bias, 1) = with_shape(Role::Ln2Bias, 1, [9, 1], DType::F32, 5)),
            Error::BadShape { role: Role::Ln2Bias, layer: 1, expected: [8, 1], found: [9, 1] },
        ),
        (
            "ln_f.weight stored as a row [1, C]",
            written(cfg, |t| *find(t, Role::LnFWeight, 0) = with_shape(Role::LnFWeight, 0, [1, 8], DType::F32, 5)),
            Error::BadShape { role: Role::LnFWeight, layer: 0, expected: [8, 1], found: [1, 8] },
        ),
        // dtypes the runtime does not compute with for that role
        (
            "f16 attn.c_attn.bias",
            written(cfg, |t| *find(t, Role::AttnCAttnBias, 0) = with_shape(Role::AttnCAttnBias, 0, [24, 1], DType::F16, 5)),
            Error::UnsupportedDType { role: Role::AttnCAttnBias, dtype: 1 },
        ),
        (
            "q8 with groups of 4 (below MIN_GROUP)",
            written(cfg, |t| {
                *find(t, Role::AttnCProjWeight, 0) = with_shape(Role::AttnCProjWeight, 0, [8, 8], DType::Q8 { group_len: 4 }, 5)
            }),
            Error::UnsupportedDType { role: Role::AttnCProjWeight, dtype: 2 },
        ),
        (
            "layer 1 c_attn in f16, layer 0 in f32",
            written(cfg, |t| *find(t, Role::AttnCAttnWeight, 1) = with_shape(Role::AttnCAttnWeight, 1, [24, 8], DType::F16, 5)),
            Error::IrregularLayout { layer: 1 },
        ),
        // tensor table: order, count, layer numbers
        (
            "wpe before wte",
            written(cfg, |t| t.swap(0, 1)),
            Error::MissingTensor { role: Role::Wte, layer: 0 },
        ),
        (
            "h.1.mlp.c_proj.bias missing (27 of 28 tensors)",
            written(cfg, |t| {
                t.pop();
            }),
            Error::MissingTensor { role: Role::MlpCProjBias, layer: 1 },
        ),
        (
            "h.1.ln_1.weight labelled layer 2 of 2",
            written(cfg, |t| find(t, Role::Ln1Weight, 1).layer = 2),
            Error::UnexpectedTensor { role: Role::Ln1Weight, layer: 2 },
        ),
        (
            "one extra tensor (29 = the untied count, but no lm_head)",
            written(cfg, |t| t.push(tensor(&cfg, Role::MlpCProjBias, 1, DType::F32))),
            Error::MissingTensor { role: Role::LmHead, layer: 0 },
        ),
        (
            "two extra tensors (30)",
            written(cfg, |t| {
                t.push(tensor(&cfg, Role::MlpCProjBias, 1, DType::F32));
                t.push(tensor(&cfg, Role::MlpCProjBias, 1, DType::F32));
            }),
            Error::UnexpectedTensor { role: Role::MlpCProjBias, layer: 1 },
        ),
        // config values out of range
        ("vocab_size 0", bad_config(|c| c.vocab_size = 0), Error::BadConfig { what: ConfigField::VocabSize, value: 0 }),
        (
            "vocab_size 2^24 + 1",
            bad_config(|c| c.vocab_size = (1 << 24) + 1),
            Error::BadConfig { what: ConfigField::VocabSize, value: (1 << 24) + 1 },
        ),
        ("n_ctx 0", bad_config(|c| c.n_ctx = 0), Error::BadConfig { what: ConfigField::NCtx, value: 0 }),
        ("n_embd 0", bad_config(|c| c.n_embd = 0), Error::BadConfig { what: ConfigField::NEmbd, value: 0 }),
        ("n_layer 0", bad_config(|c| c.n_layer = 0), Error::BadConfig { what: ConfigField::NLayer, value: 0 }),
        ("n_layer 1025", bad_config(|c| c.n_layer = 1025), Error::BadConfig { what: ConfigField::NLayer, value: 1025 }),
        ("n_head 3 on 2 key/value heads", bad_config(|c| c.n_head = 3), Error::BadConfig { what: ConfigField::NKvHead, value: 2 }),
        ("n_kv_head 0", bad_config(|c| c.n_kv_head = 0), Error::BadConfig { what: ConfigField::NKvHead, value: 0 }),
        ("head_dim 0", bad_config(|c| c.head_dim = 0), Error::BadConfig { what: ConfigField::HeadDim, value: 0 }),
        ("head_dim 65537", bad_config(|c| c.head_dim = 65537), Error::BadConfig { what: ConfigField::HeadDim, value: 65537 }),
        ("n_head 0", bad_config(|c| c.n_head = 0), Error::BadConfig { what: ConfigField::NHead, value: 0 }),
        ("n_inner 0", bad_config(|c| c.n_inner = 0), Error::BadConfig { what: ConfigField::NInner, value: 0 }),
        (
            "layer_norm_epsilon NaN",
            bad_config(|c| c.layer_norm_epsilon = f32::NAN),
            Error::BadConfig { what: ConfigField::LayerNormEpsilon, value: eps_nan },
        ),
        (
            "layer_norm_epsilon -1",
            bad_config(|c| c.layer_norm_epsilon = -1.0),
            Error::BadConfig { what: ConfigField::LayerNormEpsilon, value: (-1.0f32).to_bits() as u64 },
        ),
        ("bos_token_id = vocab_size", bad_config(|c| c.bos_token_id = 260), Error::BadConfig { what: ConfigField::BosTokenId, value: 260 }),
        ("eos_token_id = vocab_size", bad_config(|c| c.eos_token_id = 260), Error::BadConfig { what: ConfigField::EosTokenId, value: 260 }),
        // the tokenizer section does not fit the model
        (
            "tokenizer of 260 tokens, model of 259",
            {
                let c = with(|c| {
                    c.vocab_size = 259;
                    (c.bos_token_id, c.eos_token_id) = (258, 258);
                });
                write_blob(&contents(c, tensors(&c, DType::F32), Some(tokenizer_section()))).unwrap()
            },
            Error::BadTokenizer { offset: 0 },
        ),
    ];
    check_table(rows.into_iter().map(|(n, b, e)| (n.to_string(), b, e)).collect());
}

// ---- header: byte ranges and dtype/length combinations the writer refuses ---------------------

#[test]
fn tensor_and_section_ranges_the_writer_cannot_produce() {
    let v = valid_blob();
    let r = Raw::parse(&v);
    let at = |role: Role, layer: u32| *r.entries.iter().find(|e| e.role == role && e.layer == layer).unwrap();
    let range = |e: TensorEntry, offset: u64, len: u64| Error::BadTensorRange { role: e.role, layer: e.layer, offset, len };
    let (wte, wpe, ln1w) = (at(Role::Wte, 0), at(Role::Wpe, 0), at(Role::Ln1Weight, 0));
    let last = *r.entries.last().unwrap();
    let file_len = r.file_len();
    let tok = r.header.tokenizer.unwrap();
    let rows: Vec<(&str, Vec<u8>, Error)> = vec![
        (
            "wpe offset not a multiple of 64",
            raw(|r| r.entry(Role::Wpe, 0).data.offset += 4),
            range(wpe, wpe.data.offset + 4, wpe.data.len),
        ),
        (
            "h.0.ln_1.bias overlaps h.0.ln_1.weight",
            raw(|r| r.entry(Role::Ln1Bias, 0).data.offset = ln1w.data.offset),
            range(at(Role::Ln1Bias, 0), ln1w.data.offset, 32),
        ),
        (
            "wte inside the header (offset 0)",
            raw(|r| r.entry(Role::Wte, 0).data.offset = 0),
            range(wte, 0, wte.data.len),
        ),
        (
            "last tensor starts at the end of the file",
            raw(|r| r.entry(last.role, last.layer).data.offset = blob::align_up(file_len)),
            range(last, blob::align_up(file_len), last.data.len),
        ),
        (
            "offset + len overflows u64",
            raw(|r| r.entry(last.role, last.layer).data.offset = u64::MAX - 63),
            range(last, u64::MAX - 63, last.data.len),
        ),
        (
            "wte length 4 bytes short of its shape",
            raw(|r| r.entry(Role::Wte, 0).data.len -= 4),
            range(wte, wte.data.offset, wte.data.len - 4),
        ),
        (
            "wte length 64 bytes more than its shape",
            raw(|r| r.entry(Role::Wte, 0).data.len += 64),
            range(wte, wte.data.offset, wte.data.len + 64),
        ),
        (
            "q8 with groups of 16 on rows of 8 (group does not divide the row)",
            raw(|r| r.entry(Role::AttnCProjWeight, 1).dtype = DType::Q8 { group_len: 16 }),
            range(at(Role::AttnCProjWeight, 1), at(Role::AttnCProjWeight, 1).data.offset, 256),
        ),
        (
            "q8 LayerNorm weight",
            raw(|r| r.entry(Role::Ln1Weight, 0).dtype = DType::Q8 { group_len: 8 }),
            Error::UnsupportedDType { role: Role::Ln1Weight, dtype: 2 },
        ),
        (
            "q4 with an odd group (9)",
            raw(|r| r.entry(Role::MlpCProjWeight, 0).dtype = DType::Q4 { group_len: 9 }),
            Error::UnsupportedDType { role: Role::MlpCProjWeight, dtype: 3 },
        ),
        (
            "q4 with groups of 0",
            raw(|r| r.entry(Role::Wte, 0).dtype = DType::Q4 { group_len: 0 }),
            Error::UnsupportedDType { role: Role::Wte, dtype: 3 },
        ),
        (
            "h.1.mlp.c_fc.weight one alignment step later than the layer stride",
            raw(|r| {
                // make room: the bias after it moves too, but the weight is judged first
                r.entry(Role::MlpCFcBias, 1).data.offset += 64;
                r.entry(Role::MlpCFcWeight, 1).data.offset += 64;
                r.entry(Role::MlpCProjWeight, 1).data.offset += 64;
            }),
            Error::IrregularLayout { layer: 1 },
        ),
        (
            "tokenizer section not aligned",
            raw(|r| r.header.tokenizer = Some(Section { offset: tok.offset + 1, len: tok.len })),
            Error::BadTokenizer { offset: 0 },
        ),
        (
            "tokenizer section one byte past the end",
            raw(|r| r.header.tokenizer = Some(Section { offset: tok.offset, len: tok.len + 1 })),
            Error::BadTokenizer { offset: 0 },
        ),
        (
            "tokenizer section inside the header",
            raw(|r| r.header.tokenizer = Some(Section { offset: 0, len: tok.len })),
            Error::BadTokenizer { offset: 0 },
        ),
        (
            "tokenizer section length overflows u64",
            raw(|r| r.header.tokenizer = Some(Section { offset: tok.offset, len: u64::MAX })),
            Error::BadTokenizer { offset: 0 },
        ),
        (
            "tokenizer section cut to its header (24 bytes)",
            raw(|r| r.header.tokenizer = Some(Section { offset: tok.offset, len: 24 })),
            Error::BadTokenizer { offset: 24 },
        ),
        (
            "tokenizer section with a wrong version",
            raw(|r| {
                let at = (tok.offset - r.data_start) as usize + 4;
                r.data[at] = 9;
            }),
            Error::BadTokenizer { offset: 4 },
        ),
        (
            "tokenizer section that is a second copy of the blob magic",
            raw(|r| {
                let at = (tok.offset - r.data_start) as usize;
                r.data[at..at + 4].copy_from_slice(b"GPT2");
            }),
            Error::BadTokenizer { offset: 0 },
        ),
        (
            "tensor table cut short by header_len (last entry missing)",
            raw(|r| {
                let mut e = Enc::default();
                e.entry(r.entries.last().unwrap());
                r.header_len = Some((r.header_bytes().len() - e.0.len()) as u32);
            }),
            Error::BadHeader,
        ),
        ("header_len 10 (the header does not decode)", raw(|r| r.header_len = Some(10)), Error::BadHeader),
        ("header_len 0", raw(|r| r.header_len = Some(0)), Error::BadHeader),
    ];
    check_table(rows.into_iter().map(|(n, b, e)| (n.to_string(), b, e)).collect());
}

// ---- truncation at every section boundary -----------------------------------------------------

#[test]
fn truncation_at_every_section_boundary() {
    let b = valid_blob();
    let r = Raw::parse(&b);
    let pre = Preamble::parse(&b).unwrap();
    let header_end = blob::PREAMBLE_LEN as u64 + pre.header_len as u64;
    let tok = r.header.tokenizer.unwrap();
    let mut cuts: Vec<(String, u64)> = vec![
        ("inside the preamble".into(), 16),
        ("preamble end".into(), blob::PREAMBLE_LEN as u64),
        ("header end".into(), header_end),
        ("data start".into(), r.data_start),
    ];
    for e in &r.entries {
        let name = e.role.hf_name(e.layer);
        cuts.push((format!("{name} start"), e.data.offset));
        cuts.push((format!("{name} start + 1"), e.data.offset + 1));
        cuts.push((format!("{name} end - 1"), e.data.offset + e.data.len - 1));
        cuts.push((format!("{name} end"), e.data.offset + e.data.len));
    }
    cuts.push(("tokenizer start".into(), tok.offset));
    cuts.push(("tokenizer end - 1".into(), tok.offset + tok.len - 1));

    let mut rows = Vec::new();
    for (name, cut) in cuts {
        // (1) the file is cut but its preamble still claims the full length
        let want = if cut < blob::PREAMBLE_LEN as u64 {
            Error::Truncated { needed: blob::PREAMBLE_LEN as u64, available: cut }
        } else {
            Error::Truncated { needed: b.len() as u64, available: cut }
        };
        rows.push((format!("cut at {name} ({cut})"), b[..cut as usize].to_vec(), want));

        // (2) the writer stopped there: file_len says `cut` and the CRC matches, so the
        // structural checks find the first part that does not fit
        let mut c = b[..cut as usize].to_vec();
        let want = if cut < blob::PREAMBLE_LEN as u64 {
            Error::Truncated { needed: blob::PREAMBLE_LEN as u64, available: cut }
        } else if cut < header_end {
            Error::Truncated { needed: header_end, available: cut }
        } else if let Some(e) = r.entries.iter().find(|e| e.data.offset + e.data.len > cut) {
            Error::BadTensorRange { role: e.role, layer: e.layer, offset: e.data.offset, len: e.data.len }
        } else {
            Error::BadTokenizer { offset: 0 }
        };
        if cut >= blob::PREAMBLE_LEN as u64 {
            let mut p = Preamble::parse(&b).unwrap();
            p.file_len = cut;
            c[..32].copy_from_slice(&p.to_bytes());
            p.crc32 = blob::crc32(&c[blob::CRC_START..]);
            c[..32].copy_from_slice(&p.to_bytes());
        }
        rows.push((format!("file_len = {cut} ({name}), CRC fixed"), c, want));
    }
    assert!(rows.len() > 200, "{} rows", rows.len());
    check_table(rows);
}

// ---- format v2: GPT-Neo's config data and the source vocabulary --------------------------------

#[test]
fn gpt_neo_config_and_tensors_disagreeing() {
    let neo = neo_config();
    let with = |f: fn(&mut Config)| {
        let mut c = neo_config();
        f(&mut c);
        c
    };
    let neo_blob = |c: Config, t: Vec<TensorData>| write_blob(&contents(c, t, None)).unwrap();
    assert_eq!(load(&neo_blob(neo, tensors(&neo, DType::F32))), Ok(Ok(())));
    let gpt2_tensors = tensors(&config(), DType::F32);
    let rows: Vec<(&str, Vec<u8>, Error)> = vec![
        (
            "a local layer 2 of 2",
            neo_blob(with(|c| c.local_layers = c.local_layers.with(2)), tensors(&neo, DType::F32)),
            Error::BadConfig { what: ConfigField::LocalLayers, value: 2 },
        ),
        (
            "local layer 1023 of 2",
            neo_blob(with(|c| c.local_layers = LayerMask::NONE.with(1023)), tensors(&neo, DType::F32)),
            Error::BadConfig { what: ConfigField::LocalLayers, value: 1023 },
        ),
        (
            "a local layer with window 0",
            neo_blob(with(|c| c.attn_window = 0), tensors(&neo, DType::F32)),
            Error::BadConfig { what: ConfigField::AttnWindow, value: 0 },
        ),
        (
            "no q/k/v biases in the config, attn.c_attn.bias in the table",
            neo_blob(neo, gpt2_tensors.iter().map(|t| TensorData { bytes: t.bytes.clone(), ..*t }).collect()),
            Error::UnexpectedTensor { role: Role::AttnCAttnBias, layer: 0 },
        ),
        (
            "q/k/v biases in the config, no attn.c_attn.bias in the table",
            neo_blob(Config { qkv_bias: true, ..neo }, tensors(&neo, DType::F32)),
            Error::MissingTensor { role: Role::AttnCAttnBias, layer: 0 },
        ),
        (
            "no q/k/v biases, but layer 1's attn.c_attn.bias in place of its c_proj bias",
            neo_blob(neo, {
                let mut t = tensors(&neo, DType::F32);
                *find(&mut t, Role::AttnCProjBias, 1) = tensor(&config(), Role::AttnCAttnBias, 1, DType::F32);
                t
            }),
            Error::UnexpectedTensor { role: Role::AttnCAttnBias, layer: 1 },
        ),
    ];
    check_table(rows.into_iter().map(|(n, b, e)| (n.to_string(), b, e)).collect());
}

/// Llama-shaped configs against their tensors: what RoPE, RMSNorm, the gated MLP and
/// grouped-query attention change in the table is checked like every other shape.
#[test]
fn llama_config_and_tensors_disagreeing() {
    let llama = llama_config();
    let with = |f: fn(&mut Config)| {
        let mut c = llama_config();
        f(&mut c);
        c
    };
    let blob = |c: Config, t: Vec<TensorData>| write_blob(&contents(c, t, None)).unwrap();
    let valid = blob(llama, tensors(&llama, DType::F32));
    assert_eq!(load(&valid), Ok(Ok(())));
    // the independent encoder writes the v3 fields as the writer does
    assert_eq!(Raw::parse(&valid).bytes(), valid);
    let file = BlobFile::from_bytes(&valid);
    let model = file.model().unwrap();
    assert_eq!((model.wpe().is_none(), model.ln_f().bias.is_none(), model.layer(1).unwrap().attn_c_attn.rows), (true, true, 24));
    assert_eq!(model.layer(2).err(), Some(Error::LayerOutOfRange { layer: 2, n_layer: 2 }));
    let sizes = SessionSizes::new(model.config(), 8, 3);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, 8).unwrap();
    assert!(s.prefill(&[1, 2, 3, 4]).unwrap().iter().all(|l| l.is_finite()));
    let gpt2 = config();
    let rows: Vec<(&str, Vec<u8>, Error)> = vec![
        (
            "RoPE in the config, wpe in the table",
            blob(llama, {
                let mut t = tensors(&llama, DType::F32);
                t.insert(1, tensor(&gpt2, Role::Wpe, 0, DType::F32));
                t
            }),
            Error::UnexpectedTensor { role: Role::Wpe, layer: 0 },
        ),
        (
            "RMSNorm in the config, LayerNorm biases in the table",
            blob(llama, {
                let mut t = tensors(&llama, DType::F32);
                t.insert(2, tensor(&gpt2, Role::LnFBias, 0, DType::F32));
                t
            }),
            Error::UnexpectedTensor { role: Role::LnFBias, layer: 0 },
        ),
        (
            "a Llama config over GPT-2's tensors",
            blob(llama, tensors(&gpt2, DType::F32)),
            Error::UnexpectedTensor { role: Role::Wpe, layer: 0 },
        ),
        (
            "one key/value head in the config, q|k|v with every head's k and v",
            blob(llama, {
                let mut t = tensors(&llama, DType::F32);
                *find(&mut t, Role::AttnCAttnWeight, 0) = with_shape(Role::AttnCAttnWeight, 0, [36, 8], DType::F32, 3);
                t
            }),
            Error::BadShape { role: Role::AttnCAttnWeight, layer: 0, expected: [24, 8], found: [36, 8] },
        ),
        (
            "a gated MLP in the config, c_fc with I rows (no up)",
            blob(llama, {
                let mut t = tensors(&llama, DType::F32);
                *find(&mut t, Role::MlpCFcWeight, 1) = with_shape(Role::MlpCFcWeight, 1, [16, 8], DType::F32, 3);
                t
            }),
            Error::BadShape { role: Role::MlpCFcWeight, layer: 1, expected: [32, 8], found: [16, 8] },
        ),
        (
            "head_dim 6 in the config, o_proj [C, C]",
            blob(llama, {
                let mut t = tensors(&llama, DType::F32);
                *find(&mut t, Role::AttnCProjWeight, 0) = with_shape(Role::AttnCProjWeight, 0, [8, 8], DType::F32, 3);
                t
            }),
            Error::BadShape { role: Role::AttnCProjWeight, layer: 0, expected: [8, 12], found: [8, 8] },
        ),
        (
            "attention biases in the config, none in the table",
            blob(with(|c| c.qkv_bias = true), tensors(&llama, DType::F32)),
            Error::MissingTensor { role: Role::AttnCAttnBias, layer: 0 },
        ),
        ("3 key/value heads for 2 heads", blob(with(|c| c.n_kv_head = 3), tensors(&llama, DType::F32)), Error::BadConfig { what: ConfigField::NKvHead, value: 3 }),
        ("odd head_dim 5 with RoPE", blob(with(|c| c.head_dim = 5), tensors(&llama, DType::F32)), Error::BadConfig { what: ConfigField::HeadDim, value: 5 }),
        (
            "RoPE θ NaN",
            blob(with(|c| c.positions = Positions::Rope { theta: f32::NAN }), tensors(&llama, DType::F32)),
            Error::BadConfig { what: ConfigField::RopeTheta, value: f32::NAN.to_bits() as u64 },
        ),
        (
            "RoPE θ 0",
            blob(with(|c| c.positions = Positions::Rope { theta: 0.0 }), tensors(&llama, DType::F32)),
            Error::BadConfig { what: ConfigField::RopeTheta, value: 0 },
        ),
    ];
    check_table(rows.into_iter().map(|(n, b, e)| (n.to_string(), b, e)).collect());
}

/// 260 source ids in a source vocabulary of 50257: the 256 bytes, then four higher ids.
fn source_ids() -> Vec<u32> {
    (0..256).chain([300, 301, 5000, 50256]).collect()
}

#[test]
fn source_vocabulary_written_read_and_validated() {
    let cfg = config();
    let with_ids = |n: u32, ids: Vec<u32>| {
        let mut c = contents(cfg, tensors(&cfg, DType::F32), Some(tokenizer_section()));
        c.source_vocab = Some((n, ids));
        write_blob(&c).unwrap()
    };
    // written and read back
    let b = with_ids(50257, source_ids());
    let file = BlobFile::from_bytes(&b);
    let model = file.model().unwrap();
    assert!(model.is_pruned());
    assert_eq!(model.source_vocab_size(), 50257);
    for (id, &src) in source_ids().iter().enumerate() {
        assert_eq!(model.source_id(id as u32), Some(src));
        assert_eq!(model.id_from_source(src), Some(id as u32));
    }
    assert_eq!((model.source_id(260), model.id_from_source(299), model.id_from_source(50257)), (None, None, None));
    // without one: every id is its own source id
    let plain = BlobFile::from_bytes(&valid_blob());
    let plain = plain.model().unwrap();
    assert!(!plain.is_pruned());
    assert_eq!((plain.source_vocab_size(), plain.source_id(259), plain.id_from_source(259)), (260, Some(259), Some(259)));
    assert_eq!((plain.source_id(260), plain.id_from_source(260)), (None, None));

    let section = |bytes: &[u8]| Raw::parse(bytes).header.source_vocab.unwrap().ids;
    let mut ids = source_ids();
    ids.pop();
    let short = with_ids(50257, ids);
    let s = section(&short);
    let mut rows: Vec<(String, Vec<u8>, Error)> = vec![
        ("259 ids for 260 tokens".into(), short.clone(), Error::BadSourceVocab { offset: s.offset, len: 1036, vocab_size: 260 }),
        (
            "id 50256 in a source vocabulary of 50256".into(),
            with_ids(50256, source_ids()),
            Error::SourceIdOutOfRange { index: 259, id: 50256, source_vocab_size: 50256 },
        ),
        (
            "ids 300, 300".into(),
            with_ids(50257, (0..256).chain([300, 300, 5000, 50256]).collect()),
            Error::SourceIdOutOfOrder { index: 257, id: 300, previous: 300 },
        ),
        (
            "ids 5000, 301".into(),
            with_ids(50257, (0..256).chain([300, 5000, 301, 50256]).collect()),
            Error::SourceIdOutOfOrder { index: 258, id: 301, previous: 5000 },
        ),
        (
            "source vocabulary smaller than the model's".into(),
            with_ids(100, source_ids()),
            Error::SourceIdOutOfRange { index: 100, id: 100, source_vocab_size: 100 },
        ),
    ];
    let good = with_ids(50257, source_ids());
    let s = section(&good);
    for (name, edit) in [
        ("offset not aligned", SourceVocab { vocab_size: 50257, ids: Section { offset: s.offset + 4, len: s.len } }),
        ("offset in the header", SourceVocab { vocab_size: 50257, ids: Section { offset: 0, len: s.len } }),
        ("past the end", SourceVocab { vocab_size: 50257, ids: Section { offset: s.offset + 64, len: s.len } }),
        ("length overflows", SourceVocab { vocab_size: 50257, ids: Section { offset: s.offset, len: u64::MAX } }),
    ] {
        let mut r = Raw::parse(&good);
        r.header.source_vocab = Some(edit);
        rows.push((name.into(), r.bytes(), Error::BadSourceVocab { offset: edit.ids.offset, len: edit.ids.len, vocab_size: 260 }));
    }
    check_table(rows);
}

/// A GPT-Neo model's session: the KV cache is the per-layer sum (layer 1 a ring of 3
/// positions), one element short fails with the numbers, and exactly the size runs to a full
/// context, for every KV dtype.
#[test]
fn gpt_neo_sessions_are_sized_by_the_rings() {
    let neo = neo_config();
    let file = BlobFile::from_bytes(&write_blob(&contents(neo, tensors(&neo, DType::F32), None)).unwrap());
    let model = file.model().unwrap();
    for (kv_dtype, per_value, scales) in [(KvDType::F32, 4, 0), (KvDType::F16, 2, 0), (KvDType::I8, 1, 4 * 2)] {
        for capacity in [1, 3, 8] {
            let s = SessionSizes::with_kv(&neo, capacity, 1, kv_dtype);
            // layer 0 global: capacity positions; layer 1 local: min(capacity, 3)
            let positions = capacity + capacity.min(3);
            let want = 2 * positions * (8 * per_value + scales);
            assert_eq!(s.kv_bytes(), want.div_ceil(4) * 4, "{kv_dtype:?}, capacity {capacity}");
            let layout = KvLayout::new(&neo, capacity);
            assert_eq!((0..2).map(|l| layout.layer_bytes(kv_dtype, l)).sum::<usize>(), want);
            let (mut arena, mut kv) = (vec![0.0; s.arena_len], vec![0.0; s.kv_len - 1]);
            let err = Session::with_kv_dtype(&model, &mut arena, &mut kv, capacity, kv_dtype).err();
            assert_eq!(err, Some(Error::KvCacheTooSmall { needed: s.kv_len, available: s.kv_len - 1 }));
            let mut kv = vec![0.0; s.kv_len];
            let mut sess = Session::with_kv_dtype(&model, &mut arena, &mut kv, capacity, kv_dtype).unwrap();
            assert_eq!(sess.memory_bytes().1, s.kv_bytes());
            for t in 0..capacity as u32 {
                assert!(sess.decode(t).unwrap().iter().all(|l| l.is_finite()));
            }
            assert_eq!(sess.decode(0).err(), Some(Error::ContextFull { used: capacity, adding: 1, capacity }));
        }
    }
}

// ---- session, generation, sampler --------------------------------------------------------------

/// The valid model, loaded (the blob outlives the model).
fn with_model<R>(f: impl FnOnce(&Model<'_>) -> R) -> R {
    let file = BlobFile::from_bytes(&valid_blob());
    let model = file.model().unwrap();
    f(&model)
}

#[test]
fn token_ids_outside_the_vocabulary() {
    with_model(|model| {
        let sizes = SessionSizes::new(model.config(), 8, 1);
        let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
        let mut s = Session::new(model, &mut arena, &mut kv, 8).unwrap();
        for ids in [&[260][..], &[0, 1, 260], &[u32::MAX], &[259, 260, 261]] {
            let bad = *ids.iter().find(|&&i| i >= 260).unwrap();
            let want = Error::InvalidToken { id: bad, vocab_size: 260 };
            assert_eq!(s.prefill(ids).err(), Some(want), "{ids:?}");
            assert_eq!(s.pos(), 0, "a failed prefill changed the session");
            assert_eq!(s.prefill_each(ids, |_, _| panic!("no logits on error")), Err(want));
        }
        s.prefill(&[1, 2]).unwrap();
        assert_eq!(s.decode(260).err(), Some(Error::InvalidToken { id: 260, vocab_size: 260 }));
        assert_eq!(s.pos(), 2);
        // the tokenizer has the same rule
        let tok = model.tokenizer().unwrap();
        let mut out = [0u8; 64];
        assert_eq!(tok.decode(&[104, 260], &mut out), Err(Error::InvalidToken { id: 260, vocab_size: 260 }));
        assert_eq!(tok.token_bytes(260), None);
    });
}

#[test]
fn prompts_longer_than_the_context_and_empty_prompts() {
    with_model(|model| {
        let sizes = SessionSizes::new(model.config(), 8, 4);
        let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
        let mut s = Session::new(model, &mut arena, &mut kv, 8).unwrap();
        assert_eq!(s.prefill(&[1; 9]).err(), Some(Error::ContextFull { used: 0, adding: 9, capacity: 8 }));
        assert_eq!(s.prefill(&[]).err(), Some(Error::EmptyInput));
        assert_eq!(s.prefill_each(&[], |_, _| {}), Err(Error::EmptyInput));
        s.prefill(&[1; 5]).unwrap();
        assert_eq!(s.prefill(&[1; 4]).err(), Some(Error::ContextFull { used: 5, adding: 4, capacity: 8 }));
        assert_eq!(s.pos(), 5);
        s.prefill(&[1; 3]).unwrap();
        assert_eq!(s.decode(1).err(), Some(Error::ContextFull { used: 8, adding: 1, capacity: 8 }));
        // a smaller session than the model's n_ctx
        let sizes = SessionSizes::new(model.config(), 3, 1);
        let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
        let mut s = Session::new(model, &mut arena, &mut kv, 3).unwrap();
        assert_eq!(s.prefill(&[1; 4]).err(), Some(Error::ContextFull { used: 0, adding: 4, capacity: 3 }));
    });
}

#[test]
fn arena_and_kv_one_element_too_small_for_every_kv_dtype() {
    with_model(|model| {
        let cfg = model.config();
        for kv_dtype in [KvDType::F32, KvDType::F16, KvDType::I8] {
            for capacity in [1, 5, 8] {
                let s = SessionSizes::with_kv(cfg, capacity, 1, kv_dtype);
                let ctx = format!("{kv_dtype:?}, capacity {capacity}");
                let (mut arena, mut kv) = (vec![0.0; s.arena_len - 1], vec![0.0; s.kv_len]);
                let err = Session::with_kv_dtype(model, &mut arena, &mut kv, capacity, kv_dtype).err();
                assert_eq!(err, Some(Error::ArenaTooSmall { needed: s.arena_len, available: s.arena_len - 1 }), "{ctx}");
                let (mut arena, mut kv) = (vec![0.0; s.arena_len], vec![0.0; s.kv_len - 1]);
                let err = Session::with_kv_dtype(model, &mut arena, &mut kv, capacity, kv_dtype).err();
                assert_eq!(err, Some(Error::KvCacheTooSmall { needed: s.kv_len, available: s.kv_len - 1 }), "{ctx}");
                // exactly the sizes: runs to a full context
                let (mut arena, mut kv) = (vec![0.0; s.arena_len], vec![0.0; s.kv_len]);
                let mut sess = Session::with_kv_dtype(model, &mut arena, &mut kv, capacity, kv_dtype).unwrap();
                assert_eq!(sess.batch(), 1);
                for t in 0..capacity as u32 {
                    assert!(sess.decode(t).unwrap().iter().all(|l| l.is_finite()), "{ctx}");
                }
                // an arena one element short of a batch of 4 gives batches of 3
                let b4 = SessionSizes::with_kv(cfg, capacity, 4, kv_dtype);
                let mut arena = vec![0.0; b4.arena_len - 1];
                let sess = Session::with_kv_dtype(model, &mut arena, &mut kv, capacity, kv_dtype).unwrap();
                assert_eq!(sess.batch(), 3.min(capacity), "{ctx}");
            }
            for capacity in [0, 9, usize::MAX] {
                let mut big = vec![0.0; 1 << 16];
                let mut kv = vec![0.0; 1 << 16];
                let err = Session::with_kv_dtype(model, &mut big, &mut kv, capacity, kv_dtype).err();
                assert_eq!(err, Some(Error::BadCapacity { requested: capacity, n_ctx: 8 }));
            }
        }
    });
}

/// Runs `generate` on the valid model with capacity 8; returns the result and the tokens seen.
fn gen(prompt: &[u32], window_len: usize, max_tokens: usize, cfg: SamplerConfig) -> (Result<Summary, Error>, Vec<u32>) {
    with_model(|model| {
        let sizes = SessionSizes::new(model.config(), 8, 2);
        let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
        let mut s = Session::new(model, &mut arena, &mut kv, 8).unwrap();
        let mut sampler = Sampler::<8>::new(cfg).unwrap();
        let mut window = vec![0u32; window_len];
        let opts = GenerateOptions { max_tokens, stop_at_eos: false, context_shift: true };
        let mut seen = Vec::new();
        let r = generate(&mut s, &mut sampler, prompt, &mut window, &opts, |t| {
            seen.push(t);
            Control::Continue
        });
        (r, seen)
    })
}

#[test]
fn generate_rejects_bad_prompts_and_small_windows_before_any_token() {
    let g = SamplerConfig::greedy();
    let rows: Vec<(&str, (Result<Summary, Error>, Vec<u32>), Error)> = vec![
        ("empty prompt", gen(&[], 8, 5, g), Error::EmptyInput),
        ("prompt of 9 for a context of 8", gen(&[1; 9], 8, 5, g), Error::ContextFull { used: 0, adding: 9, capacity: 8 }),
        ("prompt with id 260 of 260", gen(&[1, 260], 8, 5, g), Error::InvalidToken { id: 260, vocab_size: 260 }),
        ("window of 7 for a context of 8", gen(&[1], 7, 5, g), Error::BufferTooSmall { needed: 8, available: 7 }),
        ("empty window", gen(&[1], 0, 5, g), Error::BufferTooSmall { needed: 8, available: 0 }),
    ];
    for (name, (result, seen), want) in rows {
        assert_eq!(result, Err(want), "{name}");
        assert!(seen.is_empty(), "{name}: tokens were emitted");
    }
    // n = 0: the prompt is processed, nothing is generated, and that is not an error
    let (result, seen) = gen(&[1, 2, 3], 8, 0, g);
    assert_eq!(result, Ok(Summary { generated: 0, reason: StopReason::MaxTokens, shifts: 0, reprefilled: 0 }));
    assert!(seen.is_empty());
    // and a normal run goes past the context with shifts
    let (result, seen) = gen(&[1, 2, 3], 8, 20, g);
    let summary = result.unwrap();
    assert_eq!((summary.generated, seen.len(), summary.reason), (20, 20, StopReason::MaxTokens));
    assert!(summary.shifts >= 3 && seen.iter().all(|&t| t < 260));
}

#[test]
fn nan_weights_end_generation_with_an_error_not_a_panic() {
    // ln_f.weight NaN: every logit is NaN, so there is no token to draw
    let cfg = config();
    let mut t = tensors(&cfg, DType::F32);
    find(&mut t, Role::LnFWeight, 0).bytes = f32_bytes(&[f32::NAN; 8]);
    let file = BlobFile::from_bytes(&write_blob(&contents(cfg, t, None)).unwrap());
    let model = file.model().unwrap();
    let sizes = SessionSizes::new(model.config(), 8, 1);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, 8).unwrap();
    assert!(s.prefill(&[1]).unwrap().iter().all(|l| l.is_nan()));
    for sampler_cfg in [SamplerConfig::greedy(), SamplerConfig { temperature: 1.0, top_k: 4, top_p: 0.9, ..SamplerConfig::greedy() }] {
        let mut sampler = Sampler::<8>::new(sampler_cfg).unwrap();
        let mut window = [0u32; 8];
        let opts = GenerateOptions { max_tokens: 5, stop_at_eos: false, context_shift: true };
        let summary = generate(&mut s, &mut sampler, &[1], &mut window, &opts, |_| Control::Continue).unwrap();
        assert_eq!(summary.generated, 0);
        assert_eq!(summary.reason, StopReason::Error(Error::BadSamplerParam { what: SamplerParam::Logits }));
    }
}

#[test]
fn sampling_parameters_out_of_range() {
    let base = SamplerConfig { temperature: 0.8, top_k: 4, top_p: 0.9, repetition_penalty: 1.1, seed: 1 };
    let bad = |what| Err(Error::BadSamplerParam { what });
    let rows: Vec<(&str, SamplerConfig, Result<(), Error>)> = vec![
        ("temperature 0 (greedy)", SamplerConfig { temperature: 0.0, ..base }, Ok(())),
        ("temperature -0.0 (greedy)", SamplerConfig { temperature: -0.0, ..base }, Ok(())),
        ("temperature 1e-45 (subnormal)", SamplerConfig { temperature: 1e-45, ..base }, Ok(())),
        ("temperature -1", SamplerConfig { temperature: -1.0, ..base }, bad(SamplerParam::Temperature)),
        ("temperature -1e-45", SamplerConfig { temperature: -1e-45, ..base }, bad(SamplerParam::Temperature)),
        ("temperature NaN", SamplerConfig { temperature: f32::NAN, ..base }, bad(SamplerParam::Temperature)),
        ("temperature inf", SamplerConfig { temperature: f32::INFINITY, ..base }, bad(SamplerParam::Temperature)),
        ("top_p 0", SamplerConfig { top_p: 0.0, ..base }, bad(SamplerParam::TopP)),
        ("top_p -0.5", SamplerConfig { top_p: -0.5, ..base }, bad(SamplerParam::TopP)),
        ("top_p 1 (off)", SamplerConfig { top_p: 1.0, ..base }, Ok(())),
        ("top_p 1.0000001", SamplerConfig { top_p: 1.000_000_1, ..base }, bad(SamplerParam::TopP)),
        ("top_p 2", SamplerConfig { top_p: 2.0, ..base }, bad(SamplerParam::TopP)),
        ("top_p NaN", SamplerConfig { top_p: f32::NAN, ..base }, bad(SamplerParam::TopP)),
        ("top_p inf", SamplerConfig { top_p: f32::INFINITY, ..base }, bad(SamplerParam::TopP)),
        ("top_k 8 = capacity", SamplerConfig { top_k: 8, ..base }, Ok(())),
        ("top_k 9 > capacity 8", SamplerConfig { top_k: 9, ..base }, bad(SamplerParam::TopK)),
        ("top_k usize::MAX", SamplerConfig { top_k: usize::MAX, ..base }, bad(SamplerParam::TopK)),
        ("repetition_penalty 0", SamplerConfig { repetition_penalty: 0.0, ..base }, bad(SamplerParam::RepetitionPenalty)),
        ("repetition_penalty -1", SamplerConfig { repetition_penalty: -1.0, ..base }, bad(SamplerParam::RepetitionPenalty)),
        ("repetition_penalty NaN", SamplerConfig { repetition_penalty: f32::NAN, ..base }, bad(SamplerParam::RepetitionPenalty)),
        ("repetition_penalty inf", SamplerConfig { repetition_penalty: f32::INFINITY, ..base }, bad(SamplerParam::RepetitionPenalty)),
    ];
    let logits = [0.5f32, 2.0, -1.0, 1.5, f32::NAN, f32::NEG_INFINITY];
    for (name, cfg, want) in rows {
        assert_eq!(cfg.validate(8), want, "{name}: validate");
        match Sampler::<8>::new(cfg) {
            Ok(mut s) => {
                assert_eq!(want, Ok(()), "{name}: accepted");
                let id = s.sample(&mut logits.clone(), &[]).unwrap();
                assert!(logits[id as usize].is_finite(), "{name}: drew {id}");
                if cfg.is_greedy() {
                    assert_eq!(id, 1, "{name}: greedy is the argmax");
                }
            }
            Err(e) => assert_eq!(Err(e), want, "{name}"),
        }
    }
    // logits and history the sampler cannot use
    let mut s = Sampler::<8>::new(base).unwrap();
    let no_logits = Err(Error::BadSamplerParam { what: SamplerParam::Logits });
    assert_eq!(s.sample(&mut [], &[]), no_logits);
    assert_eq!(s.sample(&mut [f32::NAN; 4], &[]), no_logits);
    assert_eq!(s.sample(&mut [f32::NEG_INFINITY, f32::NAN], &[]), no_logits);
    assert_eq!(s.sample(&mut [1.0, 2.0], &[0, 2]), Err(Error::InvalidToken { id: 2, vocab_size: 2 }));
    assert_eq!(Sampler::<8>::new(SamplerConfig::greedy()).unwrap().sample(&mut [], &[]), no_logits);
}

#[test]
fn tokenizer_buffers_too_small() {
    with_model(|model| {
        let tok: &Tokenizer<'_> = model.tokenizer().unwrap();
        let text = "hello the world in the thin";
        let mut ids = vec![0u32; text.len()];
        let n = tok.encode(text, &mut ids).unwrap();
        assert!(n < text.len(), "the merges apply");
        for short in 0..n {
            let mut out = vec![0u32; short];
            match tok.encode(text, &mut out) {
                Err(Error::BufferTooSmall { needed, available }) => {
                    assert_eq!(available, short);
                    assert!(needed > short && needed <= text.len(), "needed {needed} for {short}");
                }
                other => panic!("{short} slots: {other:?}"),
            }
        }
        let mut bytes = vec![0u8; text.len()];
        assert_eq!(tok.decode(&ids[..n], &mut bytes), Ok(text.len()));
        for short in 0..text.len() {
            let mut out = vec![0u8; short];
            let want = Err(Error::BufferTooSmall { needed: text.len(), available: short });
            assert_eq!(tok.decode(&ids[..n], &mut out), want, "{short} bytes");
        }
        // an invalid id is reported ahead of a short buffer, wherever it is
        assert_eq!(tok.decode(&[104, 104, 999], &mut [0u8; 1]), Err(Error::InvalidToken { id: 999, vocab_size: 260 }));
    });
    // a model without a tokenizer says so
    let cfg = config();
    let file = BlobFile::from_bytes(&write_blob(&contents(cfg, tensors(&cfg, DType::F32), None)).unwrap());
    assert!(file.model().unwrap().tokenizer().is_none());
}

#[test]
fn every_error_displays_its_numbers() {
    let errors = [
        Error::Truncated { needed: 100, available: 32 },
        Error::BadShape { role: Role::MlpCFcWeight, layer: 1, expected: [32, 8], found: [16, 8] },
        Error::BadTensorRange { role: Role::Ln1Bias, layer: 1, offset: 4160, len: 32 },
        Error::ArenaTooSmall { needed: 1000, available: 999 },
        Error::KvCacheTooSmall { needed: 512, available: 511 },
        Error::ContextFull { used: 5, adding: 4, capacity: 8 },
        Error::InvalidToken { id: 260, vocab_size: 260 },
        Error::BufferTooSmall { needed: 27, available: 3 },
        Error::UnsupportedVersion { found: 3, supported: 2 },
        Error::BadSourceVocab { offset: 8128, len: 1036, vocab_size: 260 },
        Error::SourceIdOutOfOrder { index: 258, id: 301, previous: 5000 },
        Error::SourceIdOutOfRange { index: 259, id: 50256, source_vocab_size: 50256 },
    ];
    for e in errors {
        let text = e.to_string();
        let numbers: Vec<String> = format!("{e:?}").split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(String::from).collect();
        for n in numbers {
            assert!(text.contains(&n), "{e:?} displays as {text:?}, without {n}");
        }
    }
    assert!(Error::BadShape { role: Role::MlpCFcWeight, layer: 1, expected: [32, 8], found: [16, 8] }.to_string().contains("h.1.mlp.c_fc.weight"));
}

// ---- regression: KV-cache size arithmetic ------------------------------------------------------

/// `KvCache::required_len` (and so `SessionSizes` and `Session::new`) multiplied
/// 2 · n_layer · capacity · n_embd unchecked. On a 32-bit target a config that validates
/// (n_layer ≤ 1024, n_ctx and n_embd ≤ 65536) can make that exceed `usize::MAX`, e.g. 1024
/// layers × n_ctx 65536 × n_embd 64 = 2^33 values: a debug build panicked, a release build
/// wrapped to a small size and accepted a KV buffer far too short. On this 64-bit host the same
/// overflow is reached with a capacity beyond any model's. Sizes now saturate, and a buffer can
/// never hold `usize::MAX` elements, so the result is `KvCacheTooSmall`.
#[test]
fn kv_cache_size_saturates_instead_of_overflowing() {
    use runtime::KvCache;
    let cfg = Config { n_layer: 1024, n_embd: 65536, n_head: 1, n_kv_head: 1, head_dim: 65536, n_ctx: 65536, ..config() };
    // representable sizes are exact
    assert_eq!(KvCache::required_len(KvDType::F32, &KvLayout::uniform(1024, 65536, 65536, 1)), 1 << 43);
    assert_eq!(SessionSizes::with_kv(&cfg, 65536, 1, KvDType::I8).kv_len, (1 << 41) + (1 << 27));
    let huge = usize::MAX / 1024;
    for (kv_dtype, want) in [(KvDType::F32, usize::MAX), (KvDType::F16, usize::MAX.div_ceil(2)), (KvDType::I8, usize::MAX)] {
        let result = catch_unwind(|| SessionSizes::with_kv(&cfg, huge, 1, kv_dtype).kv_len);
        assert_eq!(result.ok(), Some(want), "{kv_dtype:?}: SessionSizes::with_kv overflowed");
        let mut buf = [0.0f32; 64];
        let result = catch_unwind(AssertUnwindSafe(|| KvCache::new(&mut buf, kv_dtype, KvLayout::uniform(1024, huge, 65536, 1)).err()));
        assert_eq!(result.ok(), Some(Some(Error::KvCacheTooSmall { needed: want, available: 64 })), "{kv_dtype:?}");
    }
}
