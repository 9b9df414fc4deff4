//! The observer of the forward pass and the sampler (`runtime::observe`): the observed pass
//! gives the unobserved pass's bits, and every value it reports is exactly the arithmetic its
//! name says (the residual sums, the norms, the attention), checked bit for bit.

use std::collections::BTreeMap;

use host_tools::convert::WeightDType;
use reference_tests::*;
use runtime::generate::{generate, generate_observed, Control, GenerateOptions};
use runtime::kernels;
use runtime::observe::{AttnRow, Draw, Observer, Stage};
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::{KvDType, Model, Session, SessionSizes};

/// Everything reported, keyed by (stage, layer, pos) and (stage, layer, pos, head).
#[derive(Default)]
struct All {
    rows: BTreeMap<(Stage, usize, usize), Vec<f32>>,
    attn: BTreeMap<(Stage, usize, usize, usize), Vec<(usize, f32)>>,
    draws: Vec<(u32, Option<f32>, f32, Vec<(u32, f32)>)>,
    order: Vec<Stage>,
}

impl Observer for All {
    fn row(&mut self, stage: Stage, layer: usize, pos: usize, values: &[f32]) {
        let old = self.rows.insert((stage, layer, pos), values.to_vec());
        assert!(old.is_none(), "{stage:?} layer {layer} pos {pos} reported twice");
        self.order.push(stage);
    }
    fn attention(&mut self, row: &AttnRow<'_>) {
        self.attn.insert((row.stage, row.layer, row.pos, row.head), row.by_position().collect());
    }
    fn draw(&mut self, d: &Draw<'_>) {
        self.draws.push((d.token(), d.u(), d.total(), d.kept().collect()));
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn session<'a>(model: &'a Model<'a>, arena: &'a mut Vec<f32>, kv: &'a mut Vec<f32>, batch: usize, dtype: KvDType) -> Session<'a> {
    let cfg = model.config();
    let sizes = SessionSizes::with_kv(cfg, cfg.n_ctx(), batch, dtype);
    *arena = vec![0.0; sizes.arena_len];
    *kv = vec![0.0; sizes.kv_len];
    Session::with_kv_dtype(model, arena, kv, cfg.n_ctx(), dtype).unwrap()
}

#[test]
fn the_observed_pass_gives_the_unobserved_bits() {
    for case in CASES {
        let dir = fixture_dir(case);
        let input = ids(&reference(&dir)["input_ids"]);
        let blob = convert_dir(&dir, WeightDType::F32);
        let model = blob.model().unwrap();
        let v = model.config().vocab_size();
        let half = input.len() / 2;
        for dtype in [KvDType::F32, KvDType::F16, KvDType::I8] {
            for batch in [1, 5, 64] {
                let (mut a1, mut k1, mut a2, mut k2) = Default::default();
                let mut plain = session(&model, &mut a1, &mut k1, batch, dtype);
                let mut want = vec![0.0; input.len() * v];
                plain.prefill_each(&input[..half], |i, l| want[i * v..(i + 1) * v].copy_from_slice(l)).unwrap();
                for (i, &t) in input.iter().enumerate().skip(half) {
                    want[i * v..(i + 1) * v].copy_from_slice(plain.decode(t).unwrap());
                }
                let mut obs = All::default();
                let mut watched = session(&model, &mut a2, &mut k2, batch, dtype);
                let last = watched.prefill_observed(&input[..half], &mut obs).unwrap().to_vec();
                assert_eq!(bits(&last), bits(&want[(half - 1) * v..half * v]), "{case} {dtype:?} batch {batch}: prefill");
                for &t in &input[half..] {
                    watched.decode_observed(t, &mut obs).unwrap();
                }
                for (i, want) in want.chunks(v).enumerate() {
                    let got = &obs.rows[&(Stage::Logits, 0, i)];
                    assert_eq!(bits(got), bits(want), "{case} {dtype:?} batch {batch}: logits at {i}");
                }
            }
        }
    }
}

#[test]
fn every_stage_is_the_arithmetic_it_names() {
    for case in ["odd", "untied", "tiny", "llama_gqa", "llama_bf16_untied"] {
        let dir = fixture_dir(case);
        let input = ids(&reference(&dir)["input_ids"]);
        let input = &input[..13];
        let blob = convert_dir(&dir, WeightDType::F32);
        let model = blob.model().unwrap();
        let cfg = *model.config();
        let (c, h, d, n_layer, t) = (cfg.n_embd(), cfg.n_head(), cfg.head_dim(), cfg.n_layer(), input.len());
        let (eps, group, rope) = (cfg.layer_norm_epsilon, cfg.kv_group(), !cfg.learned_positions());
        let (mut a, mut k) = Default::default();
        let mut s = session(&model, &mut a, &mut k, 4, KvDType::F32);
        let mut obs = All::default();
        s.prefill_observed(&input[..6], &mut obs).unwrap();
        for &tok in &input[6..] {
            s.decode_observed(tok, &mut obs).unwrap();
        }
        let row = |stage, l, p| -> &Vec<f32> { obs.rows.get(&(stage, l, p)).unwrap_or_else(|| panic!("{case}: no {stage:?} layer {l} pos {p}")) };
        let add = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x + y).collect::<Vec<f32>>();
        // every row stage the model has, of every layer and position, exactly once
        let has = |s: &&Stage| s.applies(&cfg) && !matches!(s, Stage::AttnScores | Stage::AttnPattern);
        let (per_layer_rows, other_rows) = (Stage::ALL.iter().filter(has).filter(|s| s.per_layer()).count(), Stage::ALL.iter().filter(has).filter(|s| !s.per_layer()).count());
        assert_eq!(obs.rows.len(), t * (other_rows + n_layer * per_layer_rows), "{case}: rows reported");
        assert!(obs.rows.keys().all(|(s, _, _)| s.applies(&cfg)), "{case}: a stage the model does not have was reported");
        assert_eq!(obs.attn.len(), 2 * t * n_layer * h, "{case}: attention rows reported");
        let norm = |x: &[f32], w: &runtime::model::NormWeights<'_>| {
            let mut n = vec![0.0; c];
            kernels::norm(cfg.norm, &mut n, x, w, eps);
            (n, vec![kernels::norm_scale(cfg.norm, x, eps)])
        };
        for p in 0..t {
            let mut e = vec![0.0; c];
            kernels::embedding_row(&mut e, &model.wte(), input[p] as usize, false);
            assert_eq!(bits(row(Stage::Embed, 0, p)), bits(&e));
            match model.wpe() {
                Some(wpe) => {
                    let mut pe = vec![0.0; c];
                    kernels::embedding_row(&mut pe, &wpe, p, false);
                    assert_eq!(bits(row(Stage::PosEmbed, 0, p)), bits(&pe));
                    assert_eq!(bits(row(Stage::ResidPre, 0, p)), bits(&add(&e, &pe)), "{case}: resid_pre 0 = embed + pos_embed");
                }
                None => assert_eq!(bits(row(Stage::ResidPre, 0, p)), bits(&e), "{case}: resid_pre 0 = embed (RoPE)"),
            }
            for l in 0..n_layer {
                let w = model.layer(l).unwrap();
                let (n, scale) = norm(row(Stage::ResidPre, l, p), &w.ln_1);
                assert_eq!(bits(row(Stage::Ln1, l, p)), bits(&n), "{case}: ln1");
                assert_eq!(bits(row(Stage::Ln1Scale, l, p)), bits(&scale), "{case}: ln1_scale");
                // RoPE: rot_q / rot_k are q / k rotated by the position's angles
                let (q_stage, k_stage) = if rope { (Stage::RotQ, Stage::RotK) } else { (Stage::Q, Stage::K) };
                if let runtime::config::Positions::Rope { theta } = cfg.positions {
                    let mut angles = vec![0.0; d];
                    kernels::rope_angles(p, theta, d, &mut angles);
                    let (cos, sin) = angles.split_at(d / 2);
                    for (stage, rot) in [(Stage::Q, Stage::RotQ), (Stage::K, Stage::RotK)] {
                        let mut r = row(stage, l, p).clone();
                        r.chunks_exact_mut(d).for_each(|head| kernels::rope(head, cos, sin));
                        assert_eq!(bits(row(rot, l, p)), bits(&r), "{case}: {rot:?} l {l} p {p}");
                    }
                }
                // attention: scores = q·k · scale, pattern = softmax(scores), z = Σ pattern · v,
                // query head hd reading key/value head hd / group
                let mut scale = if cfg.scale_attn_weights { 1.0 / (d as f32).sqrt() } else { 1.0 };
                if cfg.scale_attn_by_inverse_layer_idx {
                    scale /= (l + 1) as f32;
                }
                let (q, z) = (row(q_stage, l, p), row(Stage::Z, l, p));
                for hd in 0..h {
                    let (sl, kv) = (hd * d..(hd + 1) * d, (hd / group) * d..(hd / group + 1) * d);
                    let scores = &obs.attn[&(Stage::AttnScores, l, p, hd)];
                    let pattern = &obs.attn[&(Stage::AttnPattern, l, p, hd)];
                    assert_eq!(scores.len(), p + 1, "{case}: causal: query {p} sees {} keys", scores.len());
                    let mut want: Vec<f32> = (0..=p).map(|j| kernels::dot_f32(&q[sl.clone()], &row(k_stage, l, j)[kv.clone()]) * scale).collect();
                    assert_eq!(bits(&scores.iter().map(|x| x.1).collect::<Vec<_>>()), bits(&want), "{case}: attn_scores l {l} p {p} h {hd}");
                    assert!(scores.iter().enumerate().all(|(j, x)| x.0 == j), "{case}: key positions");
                    kernels::softmax(&mut want);
                    assert_eq!(bits(&pattern.iter().map(|x| x.1).collect::<Vec<_>>()), bits(&want), "{case}: attn_pattern");
                    let mut mix = vec![0.0f32; d];
                    for (j, &(_, pw)) in pattern.iter().enumerate() {
                        for (o, &vv) in mix.iter_mut().zip(&row(Stage::V, l, j)[kv.clone()]) {
                            *o += pw * vv;
                        }
                    }
                    assert_eq!(bits(&z[sl.clone()]), bits(&mix), "{case}: z = pattern · v, l {l} p {p} h {hd}");
                }
                assert_eq!(bits(row(Stage::ResidMid, l, p)), bits(&add(row(Stage::ResidPre, l, p), row(Stage::AttnOut, l, p))), "{case}: resid_mid");
                let (n, scale) = norm(row(Stage::ResidMid, l, p), &w.ln_2);
                assert_eq!(bits(row(Stage::Ln2, l, p)), bits(&n), "{case}: ln2");
                assert_eq!(bits(row(Stage::Ln2Scale, l, p)), bits(&scale), "{case}: ln2_scale");
                let mut post = row(Stage::MlpPre, l, p).clone();
                kernels::activate(&mut post, cfg.activation);
                if cfg.gated_mlp {
                    post.iter_mut().zip(row(Stage::MlpPreLinear, l, p)).for_each(|(g, u)| *g *= u);
                }
                assert_eq!(bits(row(Stage::MlpPost, l, p)), bits(&post), "{case}: mlp_post");
                let mut out = vec![0.0; c];
                kernels::linear(&mut out, &post, &w.mlp_c_proj, w.mlp_c_proj_bias.unwrap_or_default(), false, &mut []);
                assert_eq!(bits(row(Stage::MlpOut, l, p)), bits(&out), "{case}: mlp_out = c_proj(mlp_post)");
                assert_eq!(bits(row(Stage::ResidPost, l, p)), bits(&add(row(Stage::ResidMid, l, p), &out)), "{case}: resid_post");
                if l + 1 < n_layer {
                    assert_eq!(row(Stage::ResidPre, l + 1, p), row(Stage::ResidPost, l, p));
                }
            }
            let (n, scale) = norm(row(Stage::ResidPost, n_layer - 1, p), &model.ln_f());
            assert_eq!(bits(row(Stage::LnFinal, 0, p)), bits(&n), "{case}: ln_final");
            assert_eq!(bits(row(Stage::LnFinalScale, 0, p)), bits(&scale), "{case}: ln_final_scale");
        }
        // the order of the pass: embeddings first, logits last
        assert_eq!(obs.order.first(), Some(&Stage::Embed));
        assert_eq!(obs.order.last(), Some(&Stage::Logits));
    }
}

/// The sampler's view: the kept tokens' probabilities sum to 1, the token is the one the walk
/// lands on at u · total, and observing changes no draw.
#[test]
fn draws_report_what_the_sampler_kept_and_chose() {
    let dir = fixture_dir("odd");
    let prompt = ids(&reference(&dir)["greedy"]["prompt_ids"]);
    let blob = convert_dir(&dir, WeightDType::F32);
    let model = blob.model().unwrap();
    let configs = [
        SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.0, seed: 42 },
        SamplerConfig { temperature: 1.3, top_k: 0, top_p: 0.9, repetition_penalty: 1.2, seed: 7 },
        SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, seed: 3 },
        SamplerConfig { temperature: 0.7, top_k: 5, top_p: 1.0, repetition_penalty: 1.0, seed: 9 },
        SamplerConfig::greedy(),
    ];
    for cfg in configs {
        let opts = GenerateOptions { max_tokens: 20, stop_at_eos: false, context_shift: false };
        let (mut a, mut k) = Default::default();
        let mut s = session(&model, &mut a, &mut k, 8, KvDType::F32);
        let mut window = vec![0u32; s.capacity()];
        let mut plain = Vec::new();
        generate(&mut s, &mut Sampler::<64>::new(cfg).unwrap(), &prompt, &mut window, &opts, |t| {
            plain.push(t);
            Control::Continue
        })
        .unwrap();
        let mut obs = All::default();
        let mut seen = Vec::new();
        generate_observed(&mut s, &mut Sampler::<64>::new(cfg).unwrap(), &prompt, &mut window, &opts, &mut obs, |t| {
            seen.push(t);
            Control::Continue
        })
        .unwrap();
        assert_eq!(seen, plain, "{cfg:?}: observing changed the tokens");
        assert_eq!(obs.draws.len(), plain.len());
        for (i, (token, u, total, kept)) in obs.draws.iter().enumerate() {
            assert_eq!(*token, plain[i]);
            let sum: f32 = kept.iter().map(|k| k.1).sum();
            assert!((sum / total - 1.0).abs() < 1e-5, "{cfg:?}: kept weights sum {sum} vs total {total}");
            assert!(kept.iter().all(|k| k.1 > 0.0));
            if cfg.top_k > 0 {
                assert!(kept.len() <= cfg.top_k, "{cfg:?}: {} kept", kept.len());
            }
            match u {
                None => assert_eq!(kept, &vec![(*token, 1.0)], "greedy keeps the argmax alone"),
                Some(u) => {
                    // the walk over the kept tokens in order lands on the token
                    let target = u * total;
                    let mut acc = 0.0f32;
                    let landed = kept.iter().find(|k| {
                        acc += k.1;
                        acc > target
                    });
                    assert_eq!(landed.map(|k| k.0), Some(*token), "{cfg:?}: draw {i} (u {u})");
                }
            }
        }
    }
}
