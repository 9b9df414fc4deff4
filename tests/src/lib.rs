//! Helpers shared by the reference tests: fixture paths, the tolerance table, comparisons that
//! name what failed, and a converted-blob cache.
//!
//! Fixtures come from `tests/make_fixtures.py` (Hugging Face transformers, pinned versions in
//! `tests/requirements.txt`); `cargo test` never needs Python.

use std::path::{Path, PathBuf};

use host_tools::blob_file::BlobFile;
use host_tools::convert::{convert, ConvertOptions, WeightDType};
use serde_json::Value;

/// How close our numbers must be to the reference: `|ours - ref| <= abs + rel * |ref|`.
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    /// Absolute part.
    pub abs: f32,
    /// Relative part.
    pub rel: f32,
}

/// The one tolerance table. f32 weights: the core contract against PyTorch f32. f16-stored
/// checkpoints are compared with the f32 forward pass of the f16-rounded weights, so the same
/// bound applies; a blob narrowed to f16 by `--dtype f16` is compared with looser bounds.
pub mod tolerance {
    use super::Tolerance;
    /// f32 forward pass vs PyTorch f32.
    pub const F32: Tolerance = Tolerance { abs: 1e-4, rel: 1e-4 };
    /// f32 checkpoint converted to f16 weights vs PyTorch f32 (weight rounding 2^-11 relative).
    pub const F16_WEIGHTS: Tolerance = Tolerance { abs: 2e-2, rel: 2e-2 };
}

/// Root of the workspace.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// `tests/fixtures/<case>`, checked to exist with a hint on how to regenerate it.
pub fn fixture_dir(case: &str) -> PathBuf {
    let dir = workspace_root().join("tests/fixtures").join(case);
    assert!(
        dir.join("reference.json").exists(),
        "fixture {} is missing; regenerate with: python3 -m venv .venv && .venv/bin/pip install -r tests/requirements.txt && .venv/bin/python tests/make_fixtures.py",
        dir.display()
    );
    dir
}

/// The fixture cases made by `tests/make_fixtures.py`: GPT-2, then GPT-Neo (local layers with
/// windows much shorter than the sequence), then Llama (RMSNorm, RoPE, gated MLP, grouped- and
/// multi-query attention).
pub const CASES: [&str; 12] = [
    "tiny",
    "odd",
    "fp16",
    "bf16",
    "hub_layout",
    "untied",
    "neo_alternating",
    "neo_local_fp16",
    "neo_hub_layout",
    "llama_gqa",
    "llama_bf16_untied",
    "llama_mqa_bias",
];

/// The GPT-Neo cases of [`CASES`].
pub const NEO_CASES: [&str; 3] = ["neo_alternating", "neo_local_fp16", "neo_hub_layout"];

/// The Llama cases of [`CASES`].
pub const LLAMA_CASES: [&str; 3] = ["llama_gqa", "llama_bf16_untied", "llama_mqa_bias"];

/// Parsed `reference.json`.
pub fn reference(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json readable");
    serde_json::from_str(&text).expect("reference.json is JSON")
}

/// A JSON array of integers as `Vec<u32>`.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("array of ids").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

/// Converts a checkpoint directory to a blob held in aligned memory.
pub fn convert_dir(dir: &Path, dtype: WeightDType) -> BlobFile {
    let opts = ConvertOptions { dtype, ..ConvertOptions::default() };
    let conv = convert(dir, &opts).unwrap_or_else(|e| panic!("converting {}: {e:#}", dir.display()));
    BlobFile::from_bytes(&conv.blob)
}

/// Reads `logits.npy` of a fixture: (rows, cols, data).
pub fn reference_logits(dir: &Path) -> (usize, usize, Vec<f32>) {
    let (shape, data) = host_tools::npy::read_f32(&dir.join("logits.npy")).expect("logits.npy");
    assert_eq!(shape.len(), 2, "logits.npy must be 2-D");
    (shape[0] as usize, shape[1] as usize, data)
}

/// Compares `ours` with `reference` (row-major, `cols` wide). Panics naming `what`, the worst
/// element (row, col), its values and the max absolute error.
pub fn assert_close(what: &str, ours: &[f32], reference: &[f32], cols: usize, tol: Tolerance) {
    assert_eq!(ours.len(), reference.len(), "{what}: length {} vs reference {}", ours.len(), reference.len());
    let mut worst = (0usize, 0.0f32, 0.0f32); // index, excess ratio, abs err
    let mut max_abs = 0.0f32;
    for (i, (&a, &b)) in ours.iter().zip(reference).enumerate() {
        let err = (a - b).abs();
        let ratio = if err.is_nan() { f32::INFINITY } else { err / (tol.abs + tol.rel * b.abs()) };
        max_abs = max_abs.max(err);
        if ratio > worst.1 {
            worst = (i, ratio, err);
        }
    }
    if worst.1 > 1.0 {
        let (i, _, err) = worst;
        panic!(
            "{what}: max abs error {max_abs:.3e}; worst at row {} col {}: ours {} vs reference {} (error {err:.3e} > {} + {}·|ref|)",
            i / cols.max(1),
            i % cols.max(1),
            ours[i],
            reference[i],
            tol.abs,
            tol.rel
        );
    }
}

/// The logits after every token of `tokens`, through one session of the model's full context
/// with prefill batches of `batch` (`[tokens, V]`, row-major).
pub fn logits_after_each(model: &runtime::Model<'_>, tokens: &[u32], batch: usize) -> Vec<f32> {
    let cfg = model.config();
    let sizes = runtime::SessionSizes::new(cfg, cfg.n_ctx(), batch);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = runtime::Session::new(model, &mut arena, &mut kv, cfg.n_ctx()).unwrap();
    let v = cfg.vocab_size();
    let mut out = vec![0.0; tokens.len() * v];
    s.prefill_each(tokens, |i, l| out[i * v..(i + 1) * v].copy_from_slice(l)).unwrap();
    out
}

/// Top-1 agreement of `other` with `base` over `ids`, window by window of `w` tokens:
/// ((agreeing, positions), (agreeing, positions where `base` is decided, its top logit ahead of
/// the runner-up by ≥ `host_tools::accuracy::DECIDED_MARGIN`)).
pub fn top1_agreement(base: &runtime::Model<'_>, other: &runtime::Model<'_>, ids: &[u32], w: usize) -> ((usize, usize), (usize, usize)) {
    use host_tools::accuracy::{argmax, top_margin, DECIDED_MARGIN};
    let (mut all, mut decided) = ((0, 0), (0, 0));
    for chunk in ids.chunks(w) {
        let run = |m: &runtime::Model<'_>| {
            let sizes = runtime::SessionSizes::new(m.config(), w, 32);
            let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
            let mut s = runtime::Session::new(m, &mut arena, &mut kv, w).unwrap();
            let mut top = Vec::new();
            s.prefill_each(chunk, |_, l| top.push((argmax(l), top_margin(l)))).unwrap();
            top
        };
        for ((x, margin), (y, _)) in run(base).iter().zip(&run(other)) {
            all.0 += usize::from(x == y);
            all.1 += 1;
            if *margin >= DECIDED_MARGIN {
                decided.0 += usize::from(x == y);
                decided.1 += 1;
            }
        }
    }
    (all, decided)
}
