//! Blobs written in format v1 (before GPT-Neo: no window, layer mask, q/k/v-bias flag,
//! architecture or source vocabulary) still load, and run exactly as the same checkpoint
//! converted today. `tests/fixtures/v1/` holds blobs the v1 converter wrote from the `tiny`
//! fixture (see tests/fixtures/README.md).

use host_tools::blob_file::BlobFile;
use host_tools::convert::WeightDType;
use reference_tests::*;
use runtime::blob::{self, Preamble};
use runtime::config::{Arch, LayerMask};


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
        let got = logits_after_each(&old_model, &input, 7);
        assert!(got == logits_after_each(&new_model, &input, 7), "{name}: logits differ from a fresh conversion");
        if dtype == WeightDType::F32 {
            assert_close("v1 tiny.blob: logits", &got, &want, cols, tolerance::F32);
        }
    }
}
