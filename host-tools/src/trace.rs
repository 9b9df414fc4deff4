//! `host trace`: one run of the runtime's forward pass and sampler with an observer that keeps
//! every stage ([`Recorder`]), and what is written from it: transformers-shaped
//! `hidden_states.npy` / `attentions.npy`, one `.npy` per stage, `trace.json` (tokens, config,
//! top-k, logit lens, draws, KV cache) and the page (`crate::trace_page`).
//!
//! T, the rows of every array, is the whole sequence: the prompt's tokens (positions 0..P),
//! then the N generated tokens (P..P+N). Every one of them runs through the forward pass, the
//! last generated one too (its logits give the top-k after it, but no token is drawn from
//! them), so the arrays are what transformers gives for `input_ids` = those T tokens:
//!
//! - `hidden_states.npy` `[n_layer + 1, T, C]`: `[0]` the embeddings `wte + wpe`
//!   (`resid_pre` of block 0), `[i]` the output of block i − 1 (`resid_post`) for
//!   `1 ≤ i < n_layer`, and `[n_layer]` the last block's output after `ln_f` (`ln_final`), as
//!   transformers' `output_hidden_states` (it replaces the last block's output by
//!   `last_hidden_state`).
//! - `attentions.npy` `[n_layer, n_head, T, T]`: softmax probabilities, row = query, column =
//!   key position, zero where the mask (or a local window) hides the key, as transformers'
//!   `output_attentions` with eager attention.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use runtime::kernels::{self, quant_scratch_len};
use runtime::model::MIN_GROUP;
use runtime::observe::{AttnRow, Draw, Observer, Stage};
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::kv_cache::KvLayout;
use runtime::{Config, KvDType, Model, Session, SessionSizes};
use serde_json::{json, Value};

/// Candidates the trace's sampler can keep (as `host`'s).
pub const MAX_TOP_K: usize = 1024;

/// Kept tokens recorded per draw (the most likely first); the rest are counted.
pub const DRAW_KEEP: usize = 64;

/// Top tokens recorded per position (`top_k` in trace.json) and per layer of the logit lens.
pub const TOP_N: usize = 5;

/// Refuse a trace whose arrays would need more memory than this.
pub const MAX_TRACE_BYTES: u64 = 4 << 30;

/// The shapes a trace needs from the config.
#[derive(Debug, Clone, Copy)]
pub struct Dims {
    /// The model's config (which stages it has: [`Stage::applies`]).
    pub config: Config,
    /// Blocks.
    pub n_layer: usize,
    /// Heads (queries).
    pub n_head: usize,
    /// Key/value heads.
    pub n_kv_head: usize,
    /// C.
    pub n_embd: usize,
    /// D.
    pub head_dim: usize,
    /// I.
    pub n_inner: usize,
    /// V.
    pub vocab: usize,
    /// T: positions recorded.
    pub t: usize,
}

impl Dims {
    /// The dims of `cfg` for `t` positions.
    pub fn new(cfg: &Config, t: usize) -> Self {
        Self {
            config: *cfg,
            n_layer: cfg.n_layer(),
            n_head: cfg.n_head(),
            n_kv_head: cfg.n_kv_head(),
            n_embd: cfg.n_embd(),
            head_dim: cfg.head_dim(),
            n_inner: cfg.n_inner(),
            vocab: cfg.vocab_size(),
            t,
        }
    }

    /// The stages this model reports, in the pass's order.
    pub fn stages(&self) -> impl Iterator<Item = Stage> + '_ {
        Stage::ALL.into_iter().filter(|s| s.applies(&self.config))
    }

    /// Heads in a row of a per-head stage: H_kv for k, v and rot_k, H for the others.
    pub fn heads(&self, stage: Stage) -> usize {
        if stage.kv_heads() {
            self.n_kv_head
        } else {
            self.n_head
        }
    }

    /// Values per row of a row stage.
    pub fn width(&self, stage: Stage) -> usize {
        match stage {
            Stage::MlpPre | Stage::MlpPreLinear | Stage::MlpPost => self.n_inner,
            Stage::Logits => self.vocab,
            Stage::AttnScores | Stage::AttnPattern => self.t,
            s if s.is_scale() => 1,
            s if s.per_head() => self.heads(s) * self.head_dim,
            _ => self.n_embd,
        }
    }

    /// Shape of a stage's array: `[n_layer, T, width]` for block stages (q, rot_q and z as
    /// `[n_layer, T, H, D]`, k, v and rot_k as `[n_layer, T, H_kv, D]`), `[n_layer, H, T, T]`
    /// for the attention ones, `[T, width]` for the others.
    pub fn shape(&self, stage: Stage) -> Vec<u64> {
        let (l, t, h, d) = (self.n_layer as u64, self.t as u64, self.n_head as u64, self.head_dim as u64);
        match stage {
            Stage::AttnScores | Stage::AttnPattern => vec![l, h, t, t],
            s if s.per_head() => vec![l, t, self.heads(s) as u64, d],
            s if s.per_layer() => vec![l, t, self.width(s) as u64],
            s => vec![t, self.width(s) as u64],
        }
    }

    fn len(&self, stage: Stage) -> usize {
        self.shape(stage).iter().product::<u64>() as usize
    }

    /// Bytes of all the stage arrays.
    pub fn bytes(&self) -> u64 {
        self.stages().map(|s| self.len(s) as u64 * 4).sum()
    }
}

/// One draw of the sampler, as recorded.
#[derive(Debug, Clone)]
pub struct DrawRecord {
    /// The token drawn.
    pub token: u32,
    /// The uniform number (None: greedy).
    pub u: Option<f32>,
    /// Tokens kept (non-zero weight).
    pub kept_len: usize,
    /// The most likely [`DRAW_KEEP`] kept tokens, with their probabilities among the kept,
    /// most likely first.
    pub kept: Vec<(u32, f32)>,
    /// Where the drawn token lies when the kept tokens are walked in the draw's order: the
    /// cumulative probability before it and after it (u lands in between).
    pub drawn_span: (f32, f32),
}

/// An [`Observer`] that keeps every stage of every position `0..T` (later positions are
/// dropped), every draw, and the ring length the pass reported per layer.
pub struct Recorder {
    /// Shapes.
    pub dims: Dims,
    /// Every stage's values (see [`Dims::shape`]); attention scores start at −∞ and patterns
    /// at 0, so what the mask hides stays so.
    pub stages: BTreeMap<Stage, Vec<f32>>,
    /// The draws, in order.
    pub draws: Vec<DrawRecord>,
    /// KV slots per layer, as the attention reports give them.
    pub ring: Vec<usize>,
    /// Rows reported per stage (to check coverage).
    pub reports: BTreeMap<Stage, usize>,
}

impl Recorder {
    /// Room for `dims.t` positions.
    pub fn new(dims: Dims) -> Self {
        let stages = dims.stages().map(|s| (s, vec![if s == Stage::AttnScores { f32::NEG_INFINITY } else { 0.0 }; dims.len(s)])).collect();
        Self { dims, stages, draws: Vec::new(), ring: vec![0; dims.n_layer], reports: BTreeMap::new() }
    }

    /// A stage's values (empty for a stage the model does not have).
    pub fn get(&self, stage: Stage) -> &[f32] {
        self.stages.get(&stage).map_or(&[], Vec::as_slice)
    }

    /// `[n_layer + 1, T, C]` as transformers' `output_hidden_states` (see the module docs).
    pub fn hidden_states(&self) -> Vec<f32> {
        let (l, tc) = (self.dims.n_layer, self.dims.t * self.dims.n_embd);
        let mut out = Vec::with_capacity((l + 1) * tc);
        out.extend_from_slice(&self.get(Stage::ResidPre)[..tc]);
        for i in 1..l {
            out.extend_from_slice(&self.get(Stage::ResidPost)[(i - 1) * tc..i * tc]);
        }
        out.extend_from_slice(self.get(Stage::LnFinal));
        out
    }

    /// `[n_layer, n_head, T, T]` as transformers' `output_attentions`.
    pub fn attentions(&self) -> &[f32] {
        self.get(Stage::AttnPattern)
    }

    /// The row of `stage` at (layer, pos), if recorded.
    pub fn row(&self, stage: Stage, layer: usize, pos: usize) -> &[f32] {
        let w = self.dims.width(stage);
        let at = if stage.per_layer() { (layer * self.dims.t + pos) * w } else { pos * w };
        self.get(stage).get(at..at + w).unwrap_or(&[])
    }
}

impl Observer for Recorder {
    fn row(&mut self, stage: Stage, layer: usize, pos: usize, values: &[f32]) {
        let d = self.dims;
        let w = d.width(stage);
        if pos >= d.t || layer >= d.n_layer.max(1) || values.len() != w {
            return;
        }
        let at = if stage.per_layer() { (layer * d.t + pos) * w } else { pos * w };
        if let Some(dst) = self.stages.get_mut(&stage).and_then(|v| v.get_mut(at..at + w)) {
            dst.copy_from_slice(values);
            *self.reports.entry(stage).or_default() += 1;
        }
    }

    fn attention(&mut self, row: &AttnRow<'_>) {
        let d = self.dims;
        if row.pos >= d.t || row.layer >= d.n_layer || row.head >= d.n_head {
            return;
        }
        if let Some(r) = self.ring.get_mut(row.layer) {
            *r = (*r).max(row.ring);
        }
        let base = ((row.layer * d.n_head + row.head) * d.t + row.pos) * d.t;
        let Some(dst) = self.stages.get_mut(&row.stage).and_then(|v| v.get_mut(base..base + d.t)) else { return };
        for (key, v) in row.by_position() {
            if let Some(x) = dst.get_mut(key) {
                *x = v;
            }
        }
        *self.reports.entry(row.stage).or_default() += 1;
    }

    fn draw(&mut self, draw: &Draw<'_>) {
        let total = draw.total();
        let mut kept: Vec<(u32, f32)> = draw.kept().map(|(id, w)| (id, w / total)).collect();
        let (mut before, mut after) = (0.0f32, 0.0f32);
        for &(id, p) in &kept {
            if id == draw.token() {
                after = before + p;
                break;
            }
            before += p;
        }
        let kept_len = kept.len();
        kept.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        kept.truncate(DRAW_KEEP);
        self.draws.push(DrawRecord { token: draw.token(), u: draw.u(), kept_len, kept, drawn_span: (before, after) });
    }
}

/// What to trace.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    /// Prompt ids (at least one).
    pub prompt: Vec<u32>,
    /// Tokens to generate (end-of-text does not stop a trace).
    pub n: usize,
    /// Sampling.
    pub sampler: SamplerConfig,
    /// KV-cache storage.
    pub kv: KvDType,
    /// Prefill batch (results do not depend on it).
    pub batch: usize,
}

/// The KV cache after one step of the run.
#[derive(Debug, Clone)]
pub struct KvStep {
    /// `prefill` or `decode`.
    pub kind: &'static str,
    /// Positions stored by this step: `first..end`.
    pub first: usize,
    /// One past the last position stored.
    pub end: usize,
}

/// A finished trace.
pub struct Trace {
    /// The T tokens: prompt, then generated.
    pub tokens: Vec<u32>,
    /// Prompt length P.
    pub n_prompt: usize,
    /// Everything observed.
    pub rec: Recorder,
    /// The cache's steps (prefill, then one per generated token).
    pub kv_steps: Vec<KvStep>,
    /// KV-cache capacity (positions).
    pub capacity: usize,
    /// Options used.
    pub opts: TraceOptions,
}

/// Runs the prompt and `n` generated tokens through one session with a [`Recorder`].
pub fn run(model: &Model<'_>, opts: &TraceOptions) -> Result<Trace> {
    let cfg = *model.config();
    if opts.prompt.is_empty() {
        bail!("the prompt is empty (it encodes to no tokens)");
    }
    let t = opts.prompt.len() + opts.n;
    if t > cfg.n_ctx() {
        bail!("{} prompt tokens + {} generated = {t} positions, more than the model's n_ctx ({})", opts.prompt.len(), opts.n, cfg.n_ctx());
    }
    let dims = Dims::new(&cfg, t);
    if dims.bytes() > MAX_TRACE_BYTES {
        bail!("a trace of {t} positions would hold {:.1} GB of arrays (limit {:.1} GB): use a shorter prompt or fewer tokens", dims.bytes() as f64 / 1e9, MAX_TRACE_BYTES as f64 / 1e9);
    }
    let mut sampler = Sampler::<MAX_TOP_K>::new(opts.sampler)?;
    let capacity = t;
    let sizes = SessionSizes::with_kv(&cfg, capacity, opts.batch.clamp(1, capacity), opts.kv);
    let (mut arena, mut kv) = (vec![0.0f32; sizes.arena_len], vec![0.0f32; sizes.kv_len]);
    let mut session = Session::with_kv_dtype(model, &mut arena, &mut kv, capacity, opts.kv)?;
    let mut rec = Recorder::new(dims);
    let mut tokens = opts.prompt.clone();
    let mut kv_steps = vec![KvStep { kind: "prefill", first: 0, end: tokens.len() }];
    session.prefill_observed(&opts.prompt, &mut rec)?;
    for _ in 0..opts.n {
        let logits = session.logits().context("no logits after the last token")?;
        let next = sampler.sample_observed(logits, &tokens, &mut rec)?;
        tokens.push(next);
        session.decode_observed(next, &mut rec)?;
        kv_steps.push(KvStep { kind: "decode", first: tokens.len() - 1, end: tokens.len() });
    }
    Ok(Trace { tokens, n_prompt: opts.prompt.len(), rec, kv_steps, capacity, opts: opts.clone() })
}

/// The text of a token (lossy UTF-8: a token may hold part of a character), `<s>` / `</s>` for
/// a SentencePiece BOS / EOS (which print nothing), or `#id`.
pub fn token_text(model: &Model<'_>, id: u32) -> String {
    let tok = model.tokenizer();
    match tok.and_then(|t| t.token_bytes(id)) {
        Some(b) if !b.is_empty() => String::from_utf8_lossy(b).into_owned(),
        // a control piece prints nothing (SentencePiece's <s>, </s>): show which one it is
        Some(_) if tok.and_then(|t| t.bos_id()) == Some(id) => "<s>".into(),
        Some(_) if tok.and_then(|t| t.eos_id()) == Some(id) => "</s>".into(),
        Some(_) | None => format!("#{id}"),
    }
}

/// Softmax of `logits` in f64, and the `n` most likely `(id, logit, prob)`.
pub fn top_n(logits: &[f32], n: usize) -> Vec<(u32, f32, f32)> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let z: f64 = logits.iter().map(|&l| ((l as f64) - max).exp()).sum();
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    idx.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
    idx.truncate(n);
    idx.into_iter().map(|i| (i, logits[i as usize], (((logits[i as usize] as f64) - max).exp() / z) as f32)).collect()
}

/// The logit lens: `ln_f` + the head applied to the residual stream after the embeddings
/// (row 0) and after every block (rows 1..=n_layer; the last is the model's own output), at
/// every position: the top [`TOP_N`] `(id, prob)` of each. Runs the runtime's kernels.
pub fn logit_lens(model: &Model<'_>, rec: &Recorder) -> Vec<Vec<Vec<(u32, f32)>>> {
    let cfg = model.config();
    let d = rec.dims;
    let ln_f = model.ln_f();
    let head = model.lm_head();
    let mut normed = vec![0.0f32; d.n_embd];
    let mut logits = vec![0.0f32; d.vocab];
    let mut scratch = vec![0.0f32; quant_scratch_len(d.n_embd, MIN_GROUP)];
    (0..=d.n_layer)
        .map(|i| {
            (0..d.t)
                .map(|pos| {
                    let resid = if i == 0 { rec.row(Stage::ResidPre, 0, pos) } else { rec.row(Stage::ResidPost, i - 1, pos) };
                    kernels::norm(cfg.norm, &mut normed, resid, &ln_f, cfg.layer_norm_epsilon);
                    kernels::linear(&mut logits, &normed, &head, &[], false, &mut scratch);
                    top_n(&logits, TOP_N).into_iter().map(|(id, _, p)| (id, p)).collect()
                })
                .collect()
        })
        .collect()
}

/// L2 norm of the residual stream after the embeddings and after each block: `[n_layer + 1][T]`.
pub fn residual_norms(rec: &Recorder) -> Vec<Vec<f32>> {
    let d = rec.dims;
    (0..=d.n_layer)
        .map(|i| {
            (0..d.t)
                .map(|pos| {
                    let r = if i == 0 { rec.row(Stage::ResidPre, 0, pos) } else { rec.row(Stage::ResidPost, i - 1, pos) };
                    r.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>().sqrt() as f32
                })
                .collect()
        })
        .collect()
}

/// One layer of the KV cache after one step.
#[derive(Debug, Clone, Copy)]
pub struct KvLayer {
    /// Slots filled.
    pub filled: usize,
    /// Bytes they hold.
    pub bytes: usize,
    /// Positions the step's last token read back from the cache (a decode step: all it
    /// attends to but itself) instead of recomputing their keys and values.
    pub read: usize,
    /// Slots the step wrote over (a ring shorter than the positions).
    pub overwritten: usize,
}

/// One step of the run: what it stored, and every layer after it.
#[derive(Debug, Clone)]
pub struct KvStepReport {
    /// `prefill` or `decode`.
    pub kind: &'static str,
    /// Positions stored: `first..end`.
    pub first: usize,
    /// One past the last.
    pub end: usize,
    /// Per layer.
    pub layers: Vec<KvLayer>,
}

/// The KV cache's numbers per layer and per step.
#[derive(Debug, Clone)]
pub struct KvReport {
    /// Storage.
    pub dtype: KvDType,
    /// Slots per layer (positions it can hold at once).
    pub slots: Vec<usize>,
    /// Bytes one slot takes in one layer (keys + values, + int8 scales).
    pub slot_bytes: usize,
    /// Per step.
    pub steps: Vec<KvStepReport>,
}

/// The KV cache as it fills, from the trace's steps and the slots per layer the pass reported.
pub fn kv_report(trace: &Trace) -> KvReport {
    let d = trace.rec.dims;
    let dtype = trace.opts.kv;
    let slot_bytes = KvLayout::uniform(1, 1, d.n_embd, d.n_head).layer_bytes(dtype, 0);
    let slots: Vec<usize> = trace.rec.ring.iter().map(|&r| if r == 0 { trace.capacity } else { r }).collect();
    let steps = trace
        .kv_steps
        .iter()
        .map(|s| {
            let layers = slots
                .iter()
                .map(|&r| {
                    let filled = s.end.min(r);
                    // positions p ≥ r are written over the slot that held p − r
                    let overwritten = (s.first..s.end).filter(|&p| p >= r).count();
                    // a decode step's token attends to the filled slots: all but its own hold
                    // keys and values of earlier steps, read back instead of recomputed
                    let read = if s.kind == "decode" { filled.saturating_sub(1) } else { 0 };
                    KvLayer { filled, bytes: filled * slot_bytes, read, overwritten }
                })
                .collect();
            KvStepReport { kind: s.kind, first: s.first, end: s.end, layers }
        })
        .collect();
    KvReport { dtype, slots, slot_bytes, steps }
}

/// The layers that attend only to the last [`Config::attn_window`] positions (GPT-Neo's local ones).
pub fn local_layers(cfg: &Config) -> Vec<usize> {
    (0..cfg.n_layer()).filter(|&l| cfg.is_local(l)).collect()
}

fn config_json(cfg: &Config) -> Value {
    json!({
        "arch": cfg.arch.name(),
        "vocab_size": cfg.vocab_size, "n_ctx": cfg.n_ctx, "n_embd": cfg.n_embd, "n_layer": cfg.n_layer,
        "n_head": cfg.n_head, "head_dim": cfg.head_dim(), "n_inner": cfg.n_inner,
        "layer_norm_epsilon": cfg.layer_norm_epsilon, "activation": format!("{:?}", cfg.activation),
        "scale_attn_weights": cfg.scale_attn_weights, "scale_attn_by_inverse_layer_idx": cfg.scale_attn_by_inverse_layer_idx,
        "qkv_bias": cfg.qkv_bias, "local_layers": local_layers(cfg), "attn_window": cfg.attn_window,
        "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
    })
}

/// Everything but the arrays, as `trace.json` holds it.
pub fn trace_json(model: &Model<'_>, trace: &Trace, model_path: &str) -> Value {
    let d = trace.rec.dims;
    let text = |id: u32| token_text(model, id);
    let tokens: Vec<Value> = trace
        .tokens
        .iter()
        .enumerate()
        .map(|(pos, &id)| json!({"pos": pos, "id": id, "text": text(id), "source": if pos < trace.n_prompt { "prompt" } else { "generated" }}))
        .collect();
    let top_k: Vec<Value> = (0..d.t)
        .map(|pos| {
            let next: Vec<Value> = top_n(trace.rec.row(Stage::Logits, 0, pos), TOP_N)
                .into_iter()
                .map(|(id, logit, p)| json!({"id": id, "text": text(id), "logit": logit, "prob": p}))
                .collect();
            json!({"pos": pos, "next": next})
        })
        .collect();
    let lens = logit_lens(model, &trace.rec);
    let lens_rows: Vec<Value> = lens
        .iter()
        .enumerate()
        .map(|(i, per_pos)| {
            let at: Vec<Value> = per_pos
                .iter()
                .map(|top| Value::Array(top.iter().map(|&(id, p)| json!({"id": id, "text": text(id), "prob": p})).collect()))
                .collect();
            json!({"residual": if i == 0 { "embeddings".to_string() } else { format!("after block {}", i - 1) }, "top": at})
        })
        .collect();
    let draws: Vec<Value> = trace
        .rec
        .draws
        .iter()
        .enumerate()
        .map(|(k, dr)| {
            let kept: Vec<Value> = dr.kept.iter().map(|&(id, p)| json!({"id": id, "text": text(id), "prob": p})).collect();
            json!({"from_pos": trace.n_prompt + k - 1, "pos": trace.n_prompt + k, "token": dr.token, "text": text(dr.token),
                   "u": dr.u, "kept_len": dr.kept_len, "kept": kept, "drawn_cumulative": [dr.drawn_span.0, dr.drawn_span.1]})
        })
        .collect();
    let kv = kv_report(trace);
    let steps: Vec<Value> = kv
        .steps
        .iter()
        .map(|s| {
            let each = |f: fn(&KvLayer) -> usize| s.layers.iter().map(f).collect::<Vec<_>>();
            json!({"kind": s.kind, "positions": [s.first, s.end],
                   "filled_slots": each(|l| l.filled), "bytes_used": each(|l| l.bytes),
                   "positions_read_from_cache": each(|l| l.read), "slots_overwritten": each(|l| l.overwritten)})
        })
        .collect();
    let s = &trace.opts.sampler;
    let files: serde_json::Map<String, Value> = array_files(&d).into_iter().map(|(name, shape)| (name, json!(shape))).collect();
    json!({
        "made_by": "host trace",
        "model": model_path,
        "weights": model.weight_dtype().name(),
        "config": config_json(model.config()),
        "T": d.t,
        "covers": format!("positions 0..{}: the {} prompt tokens, then positions {}..{}: the {} generated tokens; every one ran through the forward pass (the last generated one too), so row t of every array is token t", trace.n_prompt, trace.n_prompt, trace.n_prompt, d.t, d.t - trace.n_prompt),
        "settings": {"n_prompt": trace.n_prompt, "n_generated": d.t - trace.n_prompt, "kv_dtype": trace.opts.kv.name(), "capacity": trace.capacity,
                     "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p, "repetition_penalty": s.repetition_penalty, "seed": s.seed},
        "tokens": tokens,
        "top_k": top_k,
        "logit_lens": lens_rows,
        "draws": draws,
        "kv_cache": {"dtype": kv.dtype.name(), "slots_per_layer": kv.slots, "bytes_per_slot_per_layer": kv.slot_bytes,
                     "bytes_per_layer": kv.slots.iter().map(|&r| r * kv.slot_bytes).collect::<Vec<_>>(), "steps": steps},
        "files": files,
    })
}

/// The array files and their shapes: the two transformers-shaped ones, then one per stage.
pub fn array_files(d: &Dims) -> Vec<(String, Vec<u64>)> {
    let (l, t, c, h) = (d.n_layer as u64, d.t as u64, d.n_embd as u64, d.n_head as u64);
    let mut v = vec![("hidden_states.npy".to_string(), vec![l + 1, t, c]), ("attentions.npy".to_string(), vec![l, h, t, t])];
    v.extend(d.stages().map(|s| (format!("{}.npy", s.name()), d.shape(s))));
    v
}

/// Writes the arrays (see [`array_files`]) into `dir`.
pub fn write_arrays(dir: &Path, rec: &Recorder) -> Result<()> {
    let d = rec.dims;
    let files = array_files(&d);
    crate::npy::write_f32(&dir.join(&files[0].0), &files[0].1, &rec.hidden_states())?;
    crate::npy::write_f32(&dir.join(&files[1].0), &files[1].1, rec.attentions())?;
    for (stage, (name, shape)) in d.stages().zip(&files[2..]) {
        crate::npy::write_f32(&dir.join(name), shape, rec.get(stage))?;
    }
    Ok(())
}

/// Runs the trace and writes `dir`: the arrays, `trace.json` and `index.html`.
pub fn write_dir(model: &Model<'_>, trace: &Trace, dir: &Path, model_path: &str) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_arrays(dir, &trace.rec)?;
    let json = trace_json(model, trace, model_path);
    let text = serde_json::to_string_pretty(&json)?;
    std::fs::write(dir.join("trace.json"), text + "\n").with_context(|| format!("cannot write {}", dir.join("trace.json").display()))?;
    let page = crate::trace_page::render(model, trace, &json);
    std::fs::write(dir.join("index.html"), page).with_context(|| format!("cannot write {}", dir.join("index.html").display()))?;
    Ok(())
}
