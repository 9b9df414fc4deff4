//! What `host-tools inspect` and `host-tools plan` say about a GPT-Neo blob: the architecture,
//! the window and which layers are local, and a KV cache in which the local layers hold rings of
//! min(ctx, W) positions (the `neo_alternating` fixture: 4 layers, C 32, H 8, window 8, n_ctx 64).

use std::path::PathBuf;

use host_tools::convert::{convert, ConvertOptions, WeightDType};
use host_tools::inspect::inspect;
use host_tools::plan::{Plan, Target};
use runtime::KvDType;

fn blob(dtype: WeightDType) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/neo_alternating");
    convert(&dir, &ConvertOptions { dtype, ..ConvertOptions::default() }).unwrap().blob
}

#[test]
fn inspect_shows_the_local_layers_and_the_kv_bytes_per_layer() {
    let text = inspect(&blob(WeightDType::F32), None).unwrap();
    for line in [
        "blob format v3",
        "architecture gpt_neo  q/k/v bias false",
        "scale_attn_weights false",
        "attention: window 8; local layers 1, 3 (2 of 4), global layers 0, 2",
        // 2 · (2 · 64 + 2 · 8) positions · 32 · 4 B
        "KV cache (f32 )                  36864 bytes  = 2 · (2 global · ctx 64 + 2 local · 8) · C_kv 32 · 4",
        "global layers 0, 2: 64 positions, 16384 / 8192 / 8192 each",
        "local layers 1, 3: a ring of 8 positions (min(ctx, window 8)), 2048 / 1024 / 1024 each",
    ] {
        assert!(text.contains(line), "inspect does not say {line:?}:\n{text}");
    }
    assert!(!text.contains("attn.c_attn.bias"), "a GPT-Neo blob has no q/k/v bias tensors");
    // at a context below the window, the rings are the context
    let text = inspect(&blob(WeightDType::F32), Some(6)).unwrap();
    assert!(text.contains("local layers 1, 3: a ring of 6 positions"), "{text}");
}

#[test]
fn plan_counts_the_rings() {
    let p = Plan::new(&blob(WeightDType::Q8), Target::custom(1 << 20, 1 << 20), None, Some(KvDType::I8)).unwrap();
    // int8: 2 · (2 · 64 + 2 · 8) positions · (32 values + 8 scales · 4 B)
    assert_eq!(p.run.kv(), 2 * (2 * 64 + 2 * 8) * (32 + 8 * 4));
    let report = p.report("neo.blob");
    for line in ["model: gpt_neo, 4 layers (2 local, window 8)", "2 global layers (64 positions)", "2 local layers (ring of 8)"] {
        assert!(report.contains(line), "plan does not say {line:?}:\n{report}");
    }
}
