//! llama2.c's files (`host-tools convert model.bin --tokenizer tokenizer.bin`): the three
//! `export.py` layouts of the same weights as the `llama_gqa` fixture, written by
//! `tests/make_llama2c_fixtures.py` into `tests/fixtures/llama2c/`.
//!
//! - versions 0 and 1 (fp32) give the Hugging Face folder's logits bit for bit, and so match
//!   transformers (≤ 1e-4): the q/k rows are permuted from adjacent pairs to rotate-half, k with
//!   its own number of heads (grouped-query attention);
//! - version 2 (Q8_0) dequantizes exactly: its logits match transformers run on the dequantized
//!   weights (≤ 1e-4); with `--dtype q8` the int8 values and scales are kept where the groups lie
//!   within rows (the blob holds the file's numbers), requantized where they cross rows (w2, 112
//!   wide, groups of 64), and the blob's provenance says which;
//! - `tokenizer.bin` packs to the same tokenizer as the `tokenizer.model` it was exported from,
//!   so its ids are sentencepiece's on every test string; decoding drops the space after BOS;
//! - damaged files: one-line errors with the numbers, never a panic.

use std::path::PathBuf;

use host_tools::blob_file::BlobFile;
use host_tools::convert::{convert_path, ConvertOptions, WeightDType};
use reference_tests::*;
use runtime::model::MatrixData;
use runtime::tokenizer::Tokenizer;
use serde_json::Value;

fn dir() -> PathBuf {
    let d = workspace_root().join("tests/fixtures/llama2c");
    assert!(d.join("model_v2.bin").exists(), "tests/fixtures/llama2c is missing; regenerate with: .venv/bin/python tests/make_llama2c_fixtures.py");
    d
}

fn convert_file(model: &str, tokenizer: Option<&str>, dtype: WeightDType) -> (BlobFile, host_tools::convert::Converted) {
    let opts = ConvertOptions { dtype, ..ConvertOptions::default() };
    let tok = tokenizer.map(|t| dir().join(t));
    let conv = convert_path(&dir().join(model), tok.as_deref(), &opts).unwrap_or_else(|e| panic!("converting {model}: {e:#}"));
    (BlobFile::from_bytes(&conv.blob), conv)
}

fn input_ids() -> Vec<u32> {
    ids(&reference(&fixture_dir("llama_gqa"))["input_ids"])
}

#[test]
fn versions_0_and_1_equal_the_hugging_face_folder() {
    let hf = convert_dir(&fixture_dir("llama_gqa"), WeightDType::F32);
    let hf_model = hf.model().unwrap();
    let ids = input_ids();
    let want = logits_after_each(&hf_model, &ids, 8);
    let (rows, cols, reference) = reference_logits(&fixture_dir("llama_gqa"));
    assert_eq!((rows, cols), (ids.len(), 512));
    for v in ["model_v0.bin", "model_v1.bin"] {
        let (blob, conv) = convert_file(v, Some("tokenizer.bin"), WeightDType::F32);
        let model = blob.model().unwrap();
        assert_eq!(*model.config(), *hf_model.config(), "{v}: config");
        assert!(conv.notes.iter().any(|n| n.contains("permuted")), "{v}: notes {:?}", conv.notes);
        let got = logits_after_each(&model, &ids, 8);
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{v}: logits differ from the Hugging Face folder's");
        assert_close(&format!("{v} vs transformers"), &got, &reference, cols, tolerance::F32);
    }
}

#[test]
fn version_2_dequantizes_exactly_and_q8_keeps_the_int8_values() {
    let ids = input_ids();
    let (f32_blob, _) = convert_file("model_v2.bin", Some("tokenizer.bin"), WeightDType::F32);
    let f32_model = f32_blob.model().unwrap();
    let (shape, want) = host_tools::npy::read_f32(&dir().join("logits_v2.npy")).unwrap();
    assert_eq!(shape, [ids.len() as u64, 512]);
    assert_close("model_v2.bin (dequantized) vs transformers", &logits_after_each(&f32_model, &ids, 8), &want, 512, tolerance::F32);

    let (q8_blob, conv) = convert_file("model_v2.bin", Some("tokenizer.bin"), WeightDType::Q8);
    let q8 = q8_blob.model().unwrap();
    let source = q8.provenance().source_dtype;
    assert!(source.contains("version 2, Q8_0 in groups of 64") && source.contains("kept in 11 of 14 matrices"), "{source}");
    assert!(source.contains("requantized in 3 (h.0.mlp.c_proj.weight"), "{source}");
    // kept: every value of wte, lm_head and each layer's c_attn, c_proj, c_fc is q · s of the
    // file's groups of 64, which is exactly the dequantized f32 blob's value
    let same = |what: &str, q: runtime::model::Matrix<'_>, f: runtime::model::Matrix<'_>, kept: bool| {
        let (MatrixData::Q8 { values, scales, group }, MatrixData::F32(f)) = (q.data, f.data) else { panic!("{what}: dtypes") };
        assert_eq!(group == 64, kept, "{what}: group {group}");
        let exact = values.iter().enumerate().all(|(i, &v)| (f32::from(v) * scales[i / group]).to_bits() == f[i].to_bits());
        assert_eq!(exact, kept, "{what}: values equal the file's dequantized ones");
    };
    same("wte", q8.wte(), f32_model.wte(), true);
    same("lm_head", q8.lm_head(), f32_model.lm_head(), true);
    for l in 0..3 {
        let (a, b) = (q8.layer(l).unwrap(), f32_model.layer(l).unwrap());
        same("c_attn", a.attn_c_attn, b.attn_c_attn, true);
        same("attn.c_proj", a.attn_c_proj, b.attn_c_proj, true);
        same("c_fc", a.mlp_c_fc, b.mlp_c_fc, true);
        same("mlp.c_proj", a.mlp_c_proj, b.mlp_c_proj, false);
    }
    assert!(conv.notes.iter().any(|n| n.contains("groups that cross rows")), "{:?}", conv.notes);
}

fn encode(tok: &Tokenizer<'_>, text: &str) -> Vec<u32> {
    let mut out = vec![0; tok.max_encoded_len(text.len())];
    let n = tok.encode(text, &mut out).unwrap();
    out.truncate(n);
    out
}

#[test]
fn tokenizer_bin_gives_sentencepiece_ids() {
    // llama_gqa: the blob's tokenizer from tokenizer.bin is the one from tokenizer.model
    let (blob, _) = convert_file("model_v1.bin", Some("tokenizer.bin"), WeightDType::F32);
    let hf = convert_dir(&fixture_dir("llama_gqa"), WeightDType::F32);
    let (model, hf_model) = (blob.model().unwrap(), hf.model().unwrap());
    let (tok, hf_tok) = (model.tokenizer().unwrap(), hf_model.tokenizer().unwrap());
    let r = reference(&fixture_dir("llama_gqa"));
    for (text, want) in r["tokenizer"]["sp_encode"].as_object().unwrap() {
        assert_eq!(encode(tok, text), ids(want), "{text:?}");
    }
    let from_bin = host_tools::llama2c::read_tokenizer(&dir().join("tokenizer.bin"), 512).unwrap().section().unwrap();
    let from_model = host_tools::tokenizer_pack::pack_from_dir(&fixture_dir("llama_gqa")).unwrap().unwrap();
    assert!(from_bin == from_model, "tokenizer.bin and tokenizer.model pack to the same section");
    assert_eq!(encode(tok, "Hello world"), encode(hf_tok, "Hello world"));

    // the 1000-piece Llama-settings model of the SentencePiece parity tests, on its 88 strings
    let section = host_tools::llama2c::read_tokenizer(&dir().join("tok1000.bin"), 1000).unwrap().section().unwrap();
    let tok = Tokenizer::from_bytes(&section).unwrap();
    let cases: Value = serde_json::from_str(&std::fs::read_to_string(workspace_root().join("tests/fixtures/sp_tokenizer/cases.json")).unwrap()).unwrap();
    let strings = cases["strings"].as_array().unwrap();
    let expected = cases["model"]["encode"].as_array().unwrap();
    assert_eq!(strings.len(), expected.len());
    let decode = |ids: &[u32]| {
        let mut out = vec![0u8; 64 * ids.len() + 16];
        let n = tok.decode(ids, &mut out).unwrap();
        String::from_utf8_lossy(&out[..n]).into_owned()
    };
    for (s, want) in strings.iter().zip(expected) {
        let s = s.as_str().unwrap();
        let want_ids = ids(&want["ids"]);
        assert_eq!(encode(&tok, s), want_ids, "{s:?}");
        assert_eq!(decode(&want_ids), want["decoded"].as_str().unwrap(), "decoding {s:?}");
        let with_bos: Vec<u32> = std::iter::once(1).chain(want_ids.iter().copied()).collect();
        assert_eq!(decode(&with_bos), want["decoded_with_bos"].as_str().unwrap(), "decoding BOS + {s:?}");
    }
    // run.c drops the space a piece carries right after BOS
    let once = encode(&tok, "Once upon a time");
    let mut with_bos = vec![1];
    with_bos.extend(&once);
    let mut out = vec![0u8; 256];
    let n = tok.decode(&with_bos, &mut out).unwrap();
    assert_eq!(std::str::from_utf8(&out[..n]).unwrap(), "Once upon a time");
}

#[test]
fn versions_are_told_by_content_not_by_name() {
    let tmp = std::env::temp_dir().join(format!("llama2c-names-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for (v, name) in [("model_v0.bin", "stories15M.bin"), ("model_v2.bin", "weights")] {
        std::fs::copy(dir().join(v), tmp.join(name)).unwrap();
        let opts = ConvertOptions::default();
        let conv = convert_path(&tmp.join(name), Some(&dir().join("tokenizer.bin")), &opts).unwrap();
        let blob = BlobFile::from_bytes(&conv.blob);
        let want = if v.contains("v0") { "version 0" } else { "version 2" };
        assert!(blob.model().unwrap().provenance().source_dtype.contains(want), "{name}");
    }
    // a tokenizer.bin beside the model is taken when --tokenizer is not given
    std::fs::copy(dir().join("tokenizer.bin"), tmp.join("tokenizer.bin")).unwrap();
    let conv = convert_path(&tmp.join("weights"), None, &ConvertOptions::default()).unwrap();
    assert!(conv.has_tokenizer && conv.notes.iter().any(|n| n.contains("found beside the model")), "{:?}", conv.notes);
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn damaged_files_are_one_line_errors_with_the_numbers() {
    let tmp = std::env::temp_dir().join(format!("llama2c-bad-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let v1 = std::fs::read(dir().join("model_v1.bin")).unwrap();
    let v0 = std::fs::read(dir().join("model_v0.bin")).unwrap();
    let err = |bytes: &[u8], tokenizer: &str| -> String {
        let path = tmp.join("m.bin");
        std::fs::write(&path, bytes).unwrap();
        let e = convert_path(&path, Some(&dir().join(tokenizer)), &ConvertOptions::default()).err().expect("must fail");
        let text = format!("{e:#}");
        assert!(!text.contains('\n') || text.contains("\\n"), "one line: {text}");
        text
    };
    // truncated: the sizes do not add up
    let e = err(&v1[..v1.len() - 4], "tokenizer.bin");
    assert!(e.contains("needs 644864 bytes after the header, the file has 644860"), "{e}");
    // a version 0 file whose vocab_size lost its sign (classifier then unaccounted for)
    let mut unsigned = v0.clone();
    unsigned[20..24].copy_from_slice(&512i32.to_le_bytes());
    let e = err(&unsigned, "tokenizer.bin");
    assert!(e.contains("is the vocab_size's sign lost?"), "{e}");
    // a damaged header field
    let mut bad = v1.clone();
    bad[12..16].copy_from_slice(&0i32.to_le_bytes()); // hidden_dim
    assert!(err(&bad, "tokenizer.bin").contains("hidden_dim is 0"));
    let mut bad = v1.clone();
    bad[36] = 7; // shared_classifier
    assert!(err(&bad, "tokenizer.bin").contains("shared_classifier byte is 7"));
    // a non-finite weight: its tensor, layer, row and column
    let mut nan = v1.clone();
    let at = 256 + 4 * (2 * 3 * 64 + 64 + 5); // token embedding, value 5
    nan[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let e = err(&nan, "tokenizer.bin");
    assert!(e.contains("token_embedding_table (layer 0): value 5 (row 0, column 5) is NaN"), "{e}");
    // the tokenizer of another vocabulary
    let e = err(&v1, "tok1000.bin");
    assert!(e.contains("holds 1000 tokens; the model's vocab_size is 512"), "{e}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 400, ..Default::default() })]

    /// Any damage to a model.bin's first bytes (header, flag, group size, first values) or its
    /// length, or to a tokenizer.bin: an error or a model, never a panic.
    #[test]
    fn damaged_files_never_panic(
        version in 0usize..3,
        edits in proptest::collection::vec((0usize..320, proptest::prelude::any::<u8>()), 1..6),
        cut in proptest::option::of(0usize..700_000),
        tok_edits in proptest::collection::vec((0usize..6305, proptest::prelude::any::<u8>()), 0..4),
    ) {
        use std::sync::OnceLock;
        static FILES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        let files = FILES.get_or_init(|| {
            ["model_v0.bin", "model_v1.bin", "model_v2.bin", "tokenizer.bin"].iter().map(|f| std::fs::read(dir().join(f)).unwrap()).collect()
        });
        let mut bytes = files[version].clone();
        for &(at, b) in &edits {
            if let Some(x) = bytes.get_mut(at) {
                *x = b;
            }
        }
        if let Some(cut) = cut {
            bytes.truncate(cut);
        }
        let _ = host_tools::llama2c::parse_model(&bytes);
        let mut tok = files[3].clone();
        for &(at, b) in &tok_edits {
            if let Some(x) = tok.get_mut(at) {
                *x = b;
            }
        }
        if let Ok(model) = host_tools::llama2c::parse_tokenizer(&tok, 512) {
            let _ = host_tools::sp_pack::SpTables::from_model(&model, &Default::default()).and_then(|t| t.section());
        }
    }
}
