//! `host trace` against transformers, stage by stage: the hidden states and attention
//! probabilities of a greedy sequence (prompt, then generated tokens) equal transformers'
//! `output_hidden_states` / `output_attentions` (eager) within `tolerance::F32`, for every
//! fixture with a `trace` entry (`TRACES` in tests/make_fixtures.py): three GPT-2 ones and three
//! GPT-Neo ones, whose local layers' rings wrap (the trace maps ring slots back to positions, so
//! a local layer's attentions are transformers' band). A mismatch names the first stage, layer and
//! position that differ, in the order of the forward pass.

use host_tools::convert::WeightDType;
use host_tools::trace::{self, TraceOptions};
use reference_tests::*;
use runtime::sampler::SamplerConfig;
use runtime::KvDType;

/// The first element of `ours` vs `want` (in the order of the pass) out of `tol`, described.
fn first_mismatch(ours: &[f32], want: &[f32], dims: &trace::Dims, tol: Tolerance) -> Option<String> {
    let (l, h, t, c) = (dims.n_layer, dims.n_head, dims.t, dims.n_embd);
    let (hs_o, at_o) = ours.split_at((l + 1) * t * c);
    let (hs_w, at_w) = want.split_at((l + 1) * t * c);
    let bad = |a: f32, b: f32| !((a - b).abs() <= tol.abs + tol.rel * b.abs());
    let hidden_name = |i: usize| match i {
        0 => "embed + pos_embed (hidden_states[0])".to_string(),
        i if i == l => format!("ln_final (hidden_states[{l}])"),
        i => format!("resid_post of layer {} (hidden_states[{i}])", i - 1),
    };
    let hidden = |i: usize| -> Option<String> {
        for pos in 0..t {
            for e in 0..c {
                let k = (i * t + pos) * c + e;
                if bad(hs_o[k], hs_w[k]) {
                    return Some(format!("stage {}, position {pos}, element {e}: ours {} vs transformers {}", hidden_name(i), hs_o[k], hs_w[k]));
                }
            }
        }
        None
    };
    if let Some(m) = hidden(0) {
        return Some(m);
    }
    for layer in 0..l {
        for pos in 0..t {
            for head in 0..h {
                for key in 0..t {
                    let k = ((layer * h + head) * t + pos) * t + key;
                    if bad(at_o[k], at_w[k]) {
                        return Some(format!(
                            "stage attn_pattern (attentions[{layer}]), layer {layer}, head {head}, query position {pos}, key position {key}: ours {} vs transformers {}",
                            at_o[k], at_w[k]
                        ));
                    }
                }
            }
        }
        if let Some(m) = hidden(layer + 1) {
            return Some(m);
        }
    }
    None
}

fn npy(dir: &std::path::Path, name: &str) -> (Vec<u64>, Vec<f32>) {
    host_tools::npy::read_f32(&dir.join(name)).unwrap_or_else(|e| panic!("{}: {e:#}", dir.join(name).display()))
}

/// The cases with per-stage references: at least the GPT-2 ones and the GPT-Neo ones the
/// script makes today (a missing one is a stale fixture, not a case to skip).
fn trace_cases() -> Vec<&'static str> {
    let cases: Vec<&str> = CASES.into_iter().filter(|c| !reference(&fixture_dir(c))["trace"].is_null()).collect();
    for want in ["tiny", "odd", "untied", "neo_alternating", "neo_local_fp16", "neo_hub_layout"] {
        assert!(cases.contains(&want), "no trace reference in {want}: found {cases:?} (run tests/make_fixtures.py --only {want})");
    }
    cases
}

#[test]
fn hidden_states_and_attentions_match_transformers() {
    for case in trace_cases() {
        let dir = fixture_dir(case);
        let r = reference(&dir);
        let want_ids = ids(&r["trace"]["ids"]);
        let prompt = ids(&r["greedy"]["prompt_ids"]);
        let n = want_ids.len() - prompt.len();
        let blob = convert_dir(&dir, WeightDType::F32);
        let model = blob.model().unwrap();
        // greedy from the prompt (token by token, or the prompt in one batch), and the whole
        // sequence as a prompt: in one batch, and in batches of 3 (a GPT-Neo ring then wraps
        // inside a prefill batch, and across batches)
        let runs = [(&prompt, n, 1), (&prompt, n, 64), (&want_ids, 0, 64), (&want_ids, 0, 3)];
        for (p, n, batch) in runs {
            let how = format!("{} prompt + {n} generated, batch {batch}", p.len());
            let opts = TraceOptions { prompt: p.clone(), n, sampler: SamplerConfig::greedy(), kv: KvDType::F32, batch };
            let t = trace::run(&model, &opts).unwrap();
            assert_eq!(t.tokens, want_ids, "{case} ({how}): the traced greedy tokens differ from transformers'");
            let d = t.rec.dims;
            let (hs_shape, hs) = npy(&dir, "trace_hidden_states.npy");
            let (at_shape, at) = npy(&dir, "trace_attentions.npy");
            assert_eq!(hs_shape, vec![d.n_layer as u64 + 1, d.t as u64, d.n_embd as u64], "{case}: hidden_states shape");
            assert_eq!(at_shape, vec![d.n_layer as u64, d.n_head as u64, d.t as u64, d.t as u64], "{case}: attentions shape");
            let ours: Vec<f32> = t.rec.hidden_states().into_iter().chain(t.rec.attentions().iter().copied()).collect();
            let want: Vec<f32> = hs.into_iter().chain(at).collect();
            let max_err = ours.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            // the largest error as a share of the tolerance abs + rel·|ref| (≤ 1 passes)
            let tol = tolerance::F32;
            let used = ours.iter().zip(&want).map(|(a, b)| (a - b).abs() / (tol.abs + tol.rel * b.abs())).fold(0.0f32, f32::max);
            eprintln!("{case} ({how}): T = {}, max |ours - transformers| = {max_err:.2e}, {:.0}% of the tolerance", d.t, used * 100.0);
            if let Some(m) = first_mismatch(&ours, &want, &d, tol) {
                panic!("{case} ({how}): first difference from transformers at {m}");
            }
            // what the mask hides is exactly zero, as transformers' (softmax of finfo.min): the
            // future, and in a local layer every key W or more positions back; the keys it shows
            // hold all the weight (a row's visible weights sum to 1)
            let cfg = model.config();
            let w = cfg.attn_window as usize;
            for (r, row) in t.rec.attentions().chunks_exact(d.t).enumerate() {
                let (layer, head, q) = (r / (d.n_head * d.t), (r / d.t) % d.n_head, r % d.t);
                let mut visible = 0.0f64;
                for (k, &p) in row.iter().enumerate() {
                    if k > q || (cfg.is_local(layer) && q - k >= w) {
                        assert_eq!(p, 0.0, "{case}: layer {layer} head {head} query {q} attends to key {k}, which its mask hides");
                    } else {
                        visible += p as f64;
                    }
                }
                assert!((visible - 1.0).abs() < 1e-5, "{case}: layer {layer} head {head} query {q}: visible weights sum to {visible}");
            }
            if !cfg.local_layers.is_empty() {
                // the trace ran past the window: the rings wrapped, and the bands are what was compared
                assert!(d.t > w + 1, "{case}: T = {} does not go past the window {w}", d.t);
                assert!(t.rec.ring.iter().enumerate().all(|(l, &r)| r == if cfg.is_local(l) { w } else { d.t }), "{case}: ring sizes {:?}", t.rec.ring);
            }
        }
    }
}

/// The mismatch report names the first stage, layer and position that differ (it cannot pass
/// a wrong trace silently).
#[test]
fn a_mismatch_names_its_stage_layer_and_position() {
    let dir = fixture_dir("tiny");
    let r = reference(&dir);
    let prompt = ids(&r["greedy"]["prompt_ids"]);
    let n = ids(&r["trace"]["ids"]).len() - prompt.len();
    let blob = convert_dir(&dir, WeightDType::F32);
    let model = blob.model().unwrap();
    let t = trace::run(&model, &TraceOptions { prompt, n, sampler: SamplerConfig::greedy(), kv: KvDType::F32, batch: 4 }).unwrap();
    let d = t.rec.dims;
    let ours: Vec<f32> = t.rec.hidden_states().into_iter().chain(t.rec.attentions().iter().copied()).collect();
    assert_eq!(first_mismatch(&ours, &ours, &d, tolerance::F32), None);
    let tc = d.t * d.n_embd;
    // resid_post of layer 0 (hidden_states[1]), position 3, element 5
    let mut bad = ours.clone();
    bad[tc + 3 * d.n_embd + 5] += 0.01;
    let m = first_mismatch(&bad, &ours, &d, tolerance::F32).unwrap();
    assert!(m.contains("resid_post of layer 0 (hidden_states[1]), position 3, element 5"), "{m}");
    // an attention weight of layer 0 comes before hidden_states[1] in the pass: it is named
    let at = (d.n_layer + 1) * tc;
    bad[at + ((2 * d.t) + 6) * d.t + 1] += 0.01; // layer 0, head 2, query 6, key 1
    let m = first_mismatch(&bad, &ours, &d, tolerance::F32).unwrap();
    assert!(m.contains("attn_pattern (attentions[0]), layer 0, head 2, query position 6, key position 1"), "{m}");
}

/// int8 and f16 KV caches trace what the pass computes with them: close to transformers, not
/// equal (keys and values are rounded), and the same greedy tokens on these fixtures.
#[test]
fn quantized_kv_traces_stay_close() {
    let dir = fixture_dir("odd");
    let r = reference(&dir);
    let prompt = ids(&r["greedy"]["prompt_ids"]);
    let want_ids = ids(&r["trace"]["ids"]);
    let blob = convert_dir(&dir, WeightDType::F32);
    let model = blob.model().unwrap();
    let (_, at) = npy(&dir, "trace_attentions.npy");
    for kv in [KvDType::F16, KvDType::I8] {
        let opts = TraceOptions { prompt: prompt.clone(), n: want_ids.len() - prompt.len(), sampler: SamplerConfig::greedy(), kv, batch: 8 };
        let t = trace::run(&model, &opts).unwrap();
        let worst = t.rec.attentions().iter().zip(&at).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst < 0.05, "{kv:?}: attention weights off by {worst}");
    }
}
