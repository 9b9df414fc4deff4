//! Blobs written in format v2 (GPT-2 and GPT-Neo, before the Llama family: no key/value-head
//! count, head width, norm, positions, MLP gate or bias flags in the config) still load, and run
//! exactly as the same checkpoint converted today. `tests/fixtures/v2/` holds blobs the v2
//! converter (`host-tools` at commit 8a692a3) wrote from the `neo_alternating` fixture, f32 and
//! q8; the default model's committed blobs (`models/default/*.blob`) are v2 as well.

use host_tools::blob_file::BlobFile;
use host_tools::convert::WeightDType;
use reference_tests::*;
use runtime::blob::{self, Preamble};
use runtime::config::{Arch, Norm, Positions};


#[test]
fn v2_blobs_load_and_give_the_logits_of_a_fresh_conversion() {
    let dir = fixture_dir("neo_alternating");
    let input = ids(&reference(&dir)["input_ids"]);
    let (_, cols, want) = reference_logits(&dir);
    for (name, dtype) in [("neo_alternating.blob", WeightDType::F32), ("neo_alternating-q8.blob", WeightDType::Q8)] {
        let path = workspace_root().join("tests/fixtures/v2").join(name);
        let old = BlobFile::read(&path).unwrap();
        assert_eq!(Preamble::parse(old.bytes()).unwrap().version, 2, "{name} is a v2 blob");
        let old_model = old.model().unwrap();
        let fresh = convert_dir(&dir, dtype);
        assert_eq!(Preamble::parse(fresh.bytes()).unwrap().version, blob::VERSION);
        let new_model = fresh.model().unwrap();
        // the v2 config upgraded is the config a conversion writes today
        let cfg = *old_model.config();
        assert_eq!(cfg, *new_model.config(), "{name}: config");
        assert_eq!((cfg.arch, cfg.n_kv_head, cfg.head_dim, cfg.norm, cfg.positions), (Arch::GptNeo, cfg.n_head, cfg.n_embd / cfg.n_head, Norm::LayerNorm, Positions::Learned));
        assert!(!cfg.gated_mlp && cfg.attn_out_bias && cfg.mlp_bias && !cfg.qkv_bias);
        let got = logits_after_each(&old_model, &input, 5);
        assert!(got == logits_after_each(&new_model, &input, 5), "{name}: logits differ from a fresh conversion");
        if dtype == WeightDType::F32 {
            assert_close("v2 neo_alternating.blob: logits", &got, &want, cols, tolerance::F32);
        }
    }
    // the shipped model's blobs are v2 and load
    for name in ["model.blob", "model-q8.blob", "model-q4.blob"] {
        let file = BlobFile::read(&workspace_root().join("models/default").join(name)).unwrap();
        assert_eq!(Preamble::parse(file.bytes()).unwrap().version, 2, "{name}");
        assert_eq!(file.model().unwrap().config().arch, Arch::Gpt2);
    }
}
