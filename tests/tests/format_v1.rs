//! Blobs written in format v1 (before GPT-Neo: no window, layer mask, q/k/v-bias flag,
//! architecture or source vocabulary) still load, and run exactly as the same checkpoint
//! converted today. `tests/fixtures/v1/` holds blobs the v1 converter wrote from the `tiny`
//! fixture (see tests/fixtures/README.md).

use host_tools::blob_file::BlobFile;
use host_tools::convert::WeightDType;
use reference_tests::*;
use runtime::blob::{self, Preamble};
use runtime::config::{Arch, LayerMask};
use runtime::{Session, SessionSizes};

fn logits(model: &runtime::Model<'_>, tokens: &[u32]) -> Vec<f32> {
    let cfg = model.config();
    let sizes = SessionSizes::new(cfg, cfg.n_ctx(), 7);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(model, &mut arena, &mut kv, cfg.n_ctx()).unwrap();
    let v = cfg.vocab_size();
    let mut out = vec![0.0; tokens.len() * v];
    s.prefill_each(tokens, |i, l| out[i * v..(i + 1) * v].copy_from_slice(l)).unwrap();
    out
}

#[test]
fn v1_blobs_load_and_give_the_logits_of_a_fresh_conversion() {
    let dir = fixture_dir("tiny");
    let input = ids(&reference(&dir)["input_ids"]);
    let (_, cols, want) = reference_logits(&dir);
    for (name, dtype) in [("tiny.blob", WeightDType::F32), ("tiny-q8.blob", WeightDType::Q8)] {
        let path = workspace_root().join("tests/fixtures/v1").join(name);
        let old = BlobFile::read(&path).unwrap();
        assert_eq!(Preamble::parse(old.bytes()).unwrap().version, 1, "{name} is a v1 blob");
        let old_model = old.model().unwrap();
        let fresh = convert_dir(&dir, dtype);
        assert_eq!(Preamble::parse(fresh.bytes()).unwrap().version, blob::VERSION);
        let new_model = fresh.model().unwrap();
        // the v1 config upgraded is the config a conversion writes today
        let cfg = *old_model.config();
        assert_eq!(cfg, *new_model.config(), "{name}: config");
        assert_eq!((cfg.arch, cfg.qkv_bias, cfg.attn_window, cfg.local_layers), (Arch::Gpt2, true, 0, LayerMask::NONE));
        assert_eq!((old_model.source_vocab_size(), old_model.is_pruned()), (cfg.vocab_size, false));
        let got = logits(&old_model, &input);
        assert!(got == logits(&new_model, &input), "{name}: logits differ from a fresh conversion");
        if dtype == WeightDType::F32 {
            assert_close("v1 tiny.blob: logits", &got, &want, cols, tolerance::F32);
        }
    }
}
