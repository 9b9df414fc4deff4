//! The default model shipped in models/default: the committed blobs (f32, q8, and q4 for the
//! 1 MB-flash nRF52840-DK firmware) are exactly what the converter produces; its f32 logits, greedy continuations and validation loss match
//! transformers (reference/ made by scripts/train_default_model.py); the q8 blob meets the
//! accuracy targets.

use std::path::PathBuf;

use host_tools::blob_file::BlobFile;
use host_tools::convert::{convert, ConvertOptions, WeightDType};
use reference_tests::*;
use runtime::blob::{DType, Preamble, Role, Section, TensorTable};
use runtime::{KvDType, Session, SessionSizes};

fn dir() -> PathBuf {
    let d = workspace_root().join("models/default");
    assert!(
        d.join("reference/reference.json").exists(),
        "models/default/reference is missing; regenerate with: .venv/bin/python scripts/train_default_model.py"
    );
    d
}

fn blob(name: &str) -> BlobFile {
    BlobFile::read(&dir().join(name)).expect("committed blob readable")
}

/// What a blob holds, whatever its format version: the config (a v1 header upgraded), each
/// tensor's table row without its offset and its bytes, and the tokenizer section.
#[allow(clippy::type_complexity)]
fn payload(bytes: &[u8]) -> (u32, runtime::Config, Vec<(Role, u32, DType, [u32; 2], &[u8])>, Option<&[u8]>) {
    let pre = Preamble::parse(bytes).unwrap();
    let (header, table) = runtime::blob::parse_header(bytes, &pre).unwrap();
    let section = |s: Section| &bytes[s.offset as usize..(s.offset + s.len) as usize];
    let tensors = TensorTable::new(table, header.n_tensors).map(|e| e.unwrap()).map(|e| (e.role, e.layer, e.dtype, e.shape, section(e.data))).collect();
    (pre.version, header.config, tensors, header.tokenizer.map(section))
}

/// The committed blobs hold exactly what `host-tools convert` makes today: the same config,
/// tensors (role, layer, dtype, shape and every byte) and tokenizer, whatever the format version
/// they were written in (they are format v1, kept from before v2, so that the firmware check and
/// these tests run a v1 blob; a fresh conversion differs only in the header's layout).
#[test]
fn committed_blobs_hold_exactly_what_conversion_produces() {
    for (name, dtype) in
        [("model.blob", WeightDType::F32), ("model-q8.blob", WeightDType::Q8), ("model-q4.blob", WeightDType::Q4)]
    {
        let opts = ConvertOptions { dtype, ..ConvertOptions::default() };
        let fresh = convert(&dir(), &opts).unwrap().blob;
        let committed = std::fs::read(dir().join(name)).unwrap();
        let (fresh, committed) = (payload(&fresh), payload(&committed));
        assert_eq!(fresh.0, runtime::blob::VERSION, "{name}: a conversion writes the current format");
        assert!(
            fresh.1 == committed.1 && fresh.2 == committed.2 && fresh.3 == committed.3,
            "models/default/{name} is stale; regenerate with: cargo run -p host-tools -- convert models/default -o models/default/{name} --dtype {dtype:?}"
        );
    }
}

#[test]
fn f32_logits_match_transformers() {
    let d = dir();
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(d.join("reference/reference.json")).unwrap()).unwrap();
    let input = ids(&r["input_ids"]);
    let (_, cols, want) = reference_logits(&d.join("reference"));
    let b = blob("model.blob");
    let model = b.model().unwrap();
    let cfg = model.config();
    let sizes = SessionSizes::new(cfg, cfg.n_ctx(), 32);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, cfg.n_ctx()).unwrap();
    let v = cfg.vocab_size();
    let mut got = vec![0.0; input.len() * v];
    s.prefill_each(&input, |i, l| got[i * v..(i + 1) * v].copy_from_slice(l)).unwrap();
    assert_close("default model: logits", &got, &want, cols, tolerance::F32);
}

#[test]
fn greedy_continuations_are_identical() {
    let d = dir();
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(d.join("reference/reference.json")).unwrap()).unwrap();
    let b = blob("model.blob");
    let model = b.model().unwrap();
    let tok = model.tokenizer().expect("default blob has a tokenizer");
    let cfg = model.config();
    for g in r["greedy"].as_array().unwrap() {
        let prompt_text = g["prompt"].as_str().unwrap();
        let prompt = ids(&g["prompt_ids"]);
        let mut enc = vec![0u32; prompt_text.len()];
        let n = tok.encode(prompt_text, &mut enc).unwrap();
        assert_eq!(&enc[..n], &prompt[..], "tokenizer ids for {prompt_text:?}");
        let want = ids(&g["new_ids"]);
        let sizes = SessionSizes::new(cfg, cfg.n_ctx(), 8);
        let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
        let mut s = Session::new(&model, &mut arena, &mut kv, cfg.n_ctx()).unwrap();
        let argmax = |l: &[f32]| host_tools::accuracy::argmax(l) as u32;
        let mut next = argmax(s.prefill(&prompt).unwrap());
        let mut got = vec![next];
        while got.len() < want.len() {
            next = argmax(s.decode(next).unwrap());
            got.push(next);
        }
        assert_eq!(got, want, "greedy continuation of {prompt_text:?}");
        let mut text = Vec::new();
        for &t in &got {
            text.extend_from_slice(tok.token_bytes(t).unwrap());
        }
        assert_eq!(String::from_utf8_lossy(&text), g["text"].as_str().unwrap(), "decoded text of {prompt_text:?}");
    }
}

fn val_ids(model: &runtime::Model<'_>) -> Vec<u32> {
    let text = std::fs::read_to_string(dir().join("val.txt")).unwrap();
    let tok = model.tokenizer().unwrap();
    let mut out = vec![0u32; text.len()];
    let n = tok.encode(&text, &mut out).unwrap();
    out.truncate(n);
    out
}

/// `host perplexity`'s computation on the whole validation split reproduces transformers'
/// mean loss to 1e-3 nats/token.
#[test]
fn validation_loss_matches_transformers() {
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir().join("reference/reference.json")).unwrap()).unwrap();
    let b = blob("model.blob");
    let model = b.model().unwrap();
    let ids = val_ids(&model);
    let p = host_tools::eval::perplexity(&model, &ids, model.config().n_ctx(), KvDType::F32).unwrap();
    let want = r["val_loss_nats_per_token"].as_f64().unwrap();
    assert_eq!(p.tokens as u64, r["val_tokens_scored"].as_u64().unwrap(), "tokens scored");
    assert!((p.mean() - want).abs() < 1e-3, "runtime {} vs transformers {want} nats/token", p.mean());
}

/// Targets from the quantization issue, on a slice of the validation text: q8 weights within
/// 1% of f32 perplexity; int8 KV within 0.5%; and top-1 agreement with f32, restated for the
/// trained models (issue 18): ≥ 99.5% at the positions where f32 is decided, its top logit
/// leading the runner-up by ≥ `DECIDED_MARGIN` (0.1). The quantization issue asked ≥ 98% at
/// every position; the better-trained default models are at near-ties at ~12% of positions,
/// where any rounding can flip the argmax, and miss that (e12 97.69%, e14 97.46% over the
/// validation text) while their q8 perplexity cost is +0.01%. Overall agreement is printed.
#[test]
fn q8_weights_and_int8_kv_meet_the_accuracy_targets() {
    let f32_blob = blob("model.blob");
    let q8_blob = blob("model-q8.blob");
    let (m32, m8) = (f32_blob.model().unwrap(), q8_blob.model().unwrap());
    let ids: Vec<u32> = val_ids(&m32).into_iter().take(4096).collect();
    let w = m32.config().n_ctx();
    let base = host_tools::eval::perplexity(&m32, &ids, w, KvDType::F32).unwrap().perplexity();
    let q8 = host_tools::eval::perplexity(&m8, &ids, w, KvDType::F32).unwrap().perplexity();
    let kv8 = host_tools::eval::perplexity(&m32, &ids, w, KvDType::I8).unwrap().perplexity();
    assert!(q8 / base - 1.0 < 0.01, "q8 perplexity {q8} vs f32 {base}");
    assert!((kv8 / base - 1.0).abs() < 0.005, "int8 KV perplexity {kv8} vs f32 {base}");
    // top-1 agreement over the 4096 tokens, window by window
    let (agree, decided) = top1_agreement(&m32, &m8, &ids, w);
    let (frac, frac_decided) = (agree.0 as f64 / agree.1 as f64, decided.0 as f64 / decided.1.max(1) as f64);
    println!("q8 top-1 agreement {frac:.4} over {} positions; {frac_decided:.4} over the {} where f32 is decided", agree.1, decided.1);
    assert!(decided.1 * 4 >= agree.1 * 3, "f32 decided at only {} of {} positions", decided.1, agree.1);
    assert!(frac_decided >= 0.995, "q8 top-1 agreement {frac_decided} where f32 is decided ({} positions)", decided.1);
}
