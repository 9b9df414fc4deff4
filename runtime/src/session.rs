//! A session: run state for one sequence — the activation arena and the KV cache, both
//! borrowed from the caller — and the forward pass that fills them.
//!
//! ```text
//! arena (f32): x [B, C] | xn [B, max(C, C_q)] | work [B, max(C_q + 2·C_kv, I·(1|2), C)] | xq [B, Q]
//!              | rope [B, D] (RoPE only) | scores [G · capacity] | logits [V]
//! kv         : per layer (2, cap_l, C_kv) as f32, f16 or int8 (+ scales)     B = tokens per batch
//!              cap_l = capacity (global layer) or min(capacity, W) (local layer: a ring)
//! Q = f32 slots to hold one quantized activation row of max(C, C_q, I) for q8/q4 weights
//!     (`kernels::quant_scratch_len`: int8 values and group scales, or the Cortex-M DSP row
//!     kernels' int16 layout)
//! rope = each token's cos | sin of its position's angles (D/2 each), made once per batch
//! G = query heads per key/value head (H / H_kv; 1 without grouped-query attention): the heads
//!     of a group attend together ([`kernels::attention_group`]), each with its score row
//! ```
//! Sizes come from [`SessionSizes`], a `const fn` of the config, so a board can size its
//! `static` buffers at compile time.

use crate::config::{Config, Positions};
use crate::error::Error;
use crate::kernels;
use crate::kv_cache::{KvCache, KvDType, KvLayout};
use crate::model::{Model, MIN_GROUP};
use crate::observe::{self, NoObserver, Observer, Stage};

/// Buffer sizes (in f32 elements) for a session of a given context capacity and batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSizes {
    /// Tokens the KV cache holds (≤ n_ctx).
    pub capacity: usize,
    /// Tokens processed per forward batch during prefill (weights are read once per batch).
    pub batch: usize,
    /// f32 elements of the activation arena.
    pub arena_len: usize,
    /// f32 elements (4-byte slots) of the KV cache.
    pub kv_len: usize,
    /// Storage type of the KV cache.
    pub kv_dtype: KvDType,
}

/// f32 elements per token of batch of each part of the arena (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ArenaRow {
    /// `x`: the residual stream, C.
    x: usize,
    /// `xn`: a norm's output (C) or the attention output (C_q).
    xn: usize,
    /// `work`: the q|k|v product or the MLP's hidden layer (and scratch of C for observers).
    work: usize,
    /// `xq`: the quantized copy of an activation row (q8/q4 weights).
    xq: usize,
    /// `rope`: cos | sin of the token's position (D; 0 without RoPE).
    rope: usize,
}

impl ArenaRow {
    const fn new(config: &Config) -> Self {
        const fn max(a: usize, b: usize) -> usize {
            if a > b {
                a
            } else {
                b
            }
        }
        let (c, cq, i) = (config.n_embd as usize, config.q_dim(), config.n_inner as usize);
        let rope = if config.learned_positions() { 0 } else { config.head_dim as usize };
        ArenaRow {
            x: c,
            xn: max(c, cq),
            work: max(max(config.qkv_rows(), config.mlp_rows()), c),
            xq: kernels::quant_scratch_len(max(max(c, cq), i), MIN_GROUP),
            rope,
        }
    }

    const fn total(&self) -> usize {
        self.x.saturating_add(self.xn).saturating_add(self.work).saturating_add(self.xq).saturating_add(self.rope)
    }
}

impl SessionSizes {
    /// f32 elements of arena per token of batch: x, xn, the shared qkv/MLP work row, the
    /// quantized copy of an activation row for quantized weights, and RoPE's angles.
    pub const fn per_token(config: &Config) -> usize {
        ArenaRow::new(config).total()
    }

    /// Sizes for `capacity` cached positions, batches of `batch` tokens and an f32 KV cache.
    pub const fn new(config: &Config, capacity: usize, batch: usize) -> Self {
        Self::with_kv(config, capacity, batch, KvDType::F32)
    }

    /// Sizes with a KV cache stored as `kv_dtype`.
    pub const fn with_kv(config: &Config, capacity: usize, batch: usize, kv_dtype: KvDType) -> Self {
        let batch = if batch == 0 { 1 } else { batch };
        SessionSizes {
            capacity,
            batch,
            // saturating: a config that passes validation can still overflow a 32-bit usize
            // here; a saturated size then fails `Session::new` as ArenaTooSmall
            arena_len: batch.saturating_mul(Self::per_token(config)).saturating_add(Self::scores_len(config, capacity)).saturating_add(config.vocab_size as usize),
            kv_len: KvCache::required_len(kv_dtype, &KvLayout::new(config, capacity)),
            kv_dtype,
        }
    }

    /// f32 elements of the arena's attention scores: one row of `capacity` for each query head
    /// of a key/value head's group (the group's heads attend together).
    pub const fn scores_len(config: &Config, capacity: usize) -> usize {
        config.kv_group().saturating_mul(capacity)
    }

    /// Bytes of the arena.
    pub const fn arena_bytes(&self) -> usize {
        self.arena_len.saturating_mul(4)
    }

    /// Bytes of the KV cache: Σ_l 2 · cap_l · C_kv · (4 | 2 | 1) (+ int8 scales), cap_l =
    /// capacity for a global layer, min(capacity, W) for a local one.
    pub const fn kv_bytes(&self) -> usize {
        self.kv_len.saturating_mul(4)
    }
}

/// Run state of one sequence: position, KV cache and scratch, over a validated [`Model`].
pub struct Session<'a> {
    model: &'a Model<'a>,
    arena: &'a mut [f32],
    cache: KvCache<'a>,
    batch: usize,
    has_logits: bool,
    /// Threads for the matrix products (desktop `--threads`); `None` on boards.
    par: Option<&'a dyn kernels::Parallel>,
}

/// Splits `n` elements off the front of `buf` (fewer if it is shorter; never panics).
fn take(buf: &mut [f32], n: usize) -> (&mut [f32], &mut [f32]) {
    let n = n.min(buf.len());
    buf.split_at_mut(n)
}

impl<'a> Session<'a> {
    /// Starts an empty session. `arena` must hold at least
    /// `SessionSizes::new(config, capacity, 1).arena_len` f32; a larger arena allows larger
    /// prefill batches (up to `capacity`). `kv` must hold `SessionSizes::kv_len`.
    pub fn new(model: &'a Model<'a>, arena: &'a mut [f32], kv: &'a mut [f32], capacity: usize) -> Result<Self, Error> {
        Self::with_kv_dtype(model, arena, kv, capacity, KvDType::F32)
    }

    /// Like [`Session::new`] with the KV cache stored as `kv_dtype` (`kv` sized by
    /// [`SessionSizes::with_kv`]).
    pub fn with_kv_dtype(
        model: &'a Model<'a>,
        arena: &'a mut [f32],
        kv: &'a mut [f32],
        capacity: usize,
        kv_dtype: KvDType,
    ) -> Result<Self, Error> {
        let cfg = model.config();
        if capacity == 0 || capacity > cfg.n_ctx() {
            return Err(Error::BadCapacity { requested: capacity, n_ctx: cfg.n_ctx() });
        }
        let one = SessionSizes::new(cfg, capacity, 1);
        if arena.len() < one.arena_len {
            return Err(Error::ArenaTooSmall { needed: one.arena_len, available: arena.len() });
        }
        let batch = ((arena.len() - one.arena_len) / SessionSizes::per_token(cfg) + 1).min(capacity);
        let cache = KvCache::new(kv, kv_dtype, KvLayout::new(cfg, capacity))?;
        Ok(Self { model, arena, cache, batch, has_logits: false, par: None })
    }

    /// Runs the matrix products on `par`'s threads from now on (bit-identical results; see
    /// [`kernels::linear_par`]).
    pub fn set_parallel(&mut self, par: &'a dyn kernels::Parallel) {
        self.par = Some(par);
    }

    /// The model this session runs.
    pub fn model(&self) -> &'a Model<'a> {
        self.model
    }

    /// Tokens processed so far (the next token's position).
    pub fn pos(&self) -> usize {
        self.cache.len()
    }

    /// Maximum tokens this session can hold.
    pub fn capacity(&self) -> usize {
        self.cache.capacity()
    }

    /// Tokens processed per forward batch in prefill.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Bytes of the arena and of the KV cache in use.
    pub fn memory_bytes(&self) -> (usize, usize) {
        let sizes = SessionSizes::new(self.model.config(), self.capacity(), self.batch);
        (sizes.arena_bytes(), self.cache.bytes())
    }

    /// Storage type of the KV cache.
    pub fn kv_dtype(&self) -> KvDType {
        self.cache.dtype()
    }

    /// Forgets all tokens (keeps the buffers).
    pub fn reset(&mut self) {
        self.cache.clear();
        self.has_logits = false;
    }

    /// Logits (V) after the last processed token, if any.
    pub fn logits(&mut self) -> Option<&mut [f32]> {
        if !self.has_logits {
            return None;
        }
        let v = self.model.config().vocab_size();
        let start = self.logits_start();
        self.arena.get_mut(start..start + v)
    }

    fn logits_start(&self) -> usize {
        let cfg = self.model.config();
        self.batch * SessionSizes::per_token(cfg) + SessionSizes::scores_len(cfg, self.capacity())
    }

    /// Checks that `tokens` can be appended; nothing is changed when it fails.
    fn check(&self, tokens: &[u32]) -> Result<(), Error> {
        let vocab_size = self.model.config().vocab_size;
        if tokens.is_empty() {
            return Err(Error::EmptyInput);
        }
        if let Some(&id) = tokens.iter().find(|&&id| id >= vocab_size) {
            return Err(Error::InvalidToken { id, vocab_size });
        }
        let (used, adding, capacity) = (self.pos(), tokens.len(), self.capacity());
        if adding > capacity - used {
            return Err(Error::ContextFull { used, adding, capacity });
        }
        Ok(())
    }

    /// Processes `tokens` (appending them to the KV cache) and returns the logits of the last
    /// one. On error nothing is changed.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<&mut [f32], Error> {
        self.check(tokens)?;
        let n = tokens.len();
        self.run(tokens, |i| i + 1 == n, |_, _| {}, &mut NoObserver)?;
        self.logits().ok_or(Error::EmptyInput)
    }

    /// [`Session::prefill`] with an observer: the same pass, reporting every stage of every
    /// token to `obs` (see [`crate::observe`]), with the head (`ln_final`, `logits`) run for
    /// every token rather than the last only. With [`NoObserver`] it is `prefill` (the same
    /// function, so a board's code holds one copy of the pass). Returns the logits of the last
    /// token; on error nothing is changed or reported.
    pub fn prefill_observed<O: Observer>(&mut self, tokens: &[u32], obs: &mut O) -> Result<&mut [f32], Error> {
        if !O::ENABLED {
            return self.prefill(tokens);
        }
        self.check(tokens)?;
        self.run(tokens, |_| true, |_, _| {}, obs)?;
        self.logits().ok_or(Error::EmptyInput)
    }

    /// [`Session::decode`] with an observer (see [`Session::prefill_observed`]).
    pub fn decode_observed<O: Observer>(&mut self, token: u32, obs: &mut O) -> Result<&mut [f32], Error> {
        if !O::ENABLED {
            return self.decode(token);
        }
        self.prefill_observed(&[token], obs)
    }

    /// Processes `tokens` and calls `each(i, logits)` with the logits after every token i
    /// (in order). Same path as [`Session::prefill`]; used for `host logits`.
    pub fn prefill_each(&mut self, tokens: &[u32], each: impl FnMut(usize, &[f32])) -> Result<(), Error> {
        self.prefill_where(tokens, |_| true, each)
    }

    /// Like [`Session::prefill_each`], but computes the head (LayerNorm + `V × C` product) only
    /// for the tokens i where `wants(i)` holds: perplexity scores half of each window, and the
    /// head is the largest matrix of a small-vocabulary model's pass.
    pub fn prefill_where(&mut self, tokens: &[u32], wants: impl Fn(usize) -> bool, mut each: impl FnMut(usize, &[f32])) -> Result<(), Error> {
        self.check(tokens)?;
        self.run(tokens, wants, |i, l| each(i, l), &mut NoObserver)
    }

    /// Processes one token and returns the logits for the next.
    pub fn decode(&mut self, token: u32) -> Result<&mut [f32], Error> {
        self.prefill(&[token])
    }

    /// The forward pass over `tokens` (already checked), batch by batch. On an error (a bug:
    /// see [`Model::layer`]) the cache is rolled back to where it was and no logits are left.
    fn run<O: Observer>(&mut self, tokens: &[u32], wants_logits: impl Fn(usize) -> bool, mut each: impl FnMut(usize, &[f32]), obs: &mut O) -> Result<(), Error> {
        let start = self.cache.len();
        let mut done = 0;
        for chunk in tokens.chunks(self.batch.max(1)) {
            let first = done;
            if let Err(e) = self.forward_batch(chunk, |i| wants_logits(first + i), |i, l| each(first + i, l), obs) {
                self.cache.set_len(start);
                self.has_logits = false;
                return Err(e);
            }
            done += chunk.len();
        }
        Ok(())
    }

    /// The forward pass for one batch of T tokens at positions pos..pos+T, for every family:
    /// the config's data picks the norm, the positions (learned or RoPE), the MLP (plain or
    /// gated) and the key/value heads. `obs` sees every stage (`observe::*` calls: nothing at
    /// all for [`NoObserver`]).
    fn forward_batch<O: Observer>(&mut self, tokens: &[u32], wants_logits: impl Fn(usize) -> bool, mut each: impl FnMut(usize, &[f32]), obs: &mut O) -> Result<(), Error> {
        let model = self.model;
        let cfg = model.config();
        let (c, t_len, eps) = (cfg.n_embd(), tokens.len(), cfg.layer_norm_epsilon);
        let (d, group) = (cfg.head_dim(), cfg.kv_group());
        let (cq, ckv, qkv_w, inner) = (cfg.q_dim(), cfg.kv_dim(), cfg.qkv_rows(), cfg.n_inner());
        let p0 = self.cache.len();
        let par = self.par;
        let row = ArenaRow::new(cfg);

        let (x, rest) = take(self.arena, self.batch * row.x); //       residual stream (T, C)
        let (xn, rest) = take(rest, self.batch * row.xn); //           normed (T, C) / attention out (T, C_q)
        let (work, rest) = take(rest, self.batch * row.work); //       qkv (T, C_q + 2·C_kv) or MLP hidden (T, I or 2·I)
        let (xq, rest) = take(rest, self.batch * row.xq); //           int8 activations for q8/q4
        let (rope, rest) = take(rest, self.batch * row.rope); //       RoPE cos | sin (T, D)
        let (scores, rest) = take(rest, SessionSizes::scores_len(cfg, self.cache.capacity())); // scores (G, S)
        let (logits, _) = take(rest, cfg.vocab_size()); //             (V)
        let x = x.get_mut(..t_len * c).unwrap_or(&mut []);

        // token embeddings, plus learned position embeddings: x = wte[token] (+ wpe[pos])
        let (wte, wpe) = (model.wte(), model.wpe());
        for (t, (&tok, xt)) in tokens.iter().zip(x.chunks_exact_mut(c)).enumerate() {
            kernels::embedding_row(xt, &wte, tok as usize, false);
            obs.row(Stage::Embed, 0, p0 + t, xt);
            if let Some(wpe) = &wpe {
                kernels::embedding_row(xt, wpe, p0 + t, true);
            }
        }
        if let Some(wpe) = &wpe {
            observe::pos_embed(obs, xn.get_mut(..t_len * c).unwrap_or(&mut []), wpe, p0, c);
        }
        // RoPE: the angles of each token's position, once for all layers
        if let Positions::Rope { theta } = cfg.positions {
            kernels::rope_angles(p0, theta, d, rope.get_mut(..t_len * d).unwrap_or(&mut []));
        }
        let rope = rope.get(..t_len * row.rope).unwrap_or(&[]);

        for l in 0..cfg.n_layer() {
            let w = model.layer(l)?;
            let xn_c = xn.get_mut(..t_len * c).unwrap_or(&mut []);
            observe::rows(obs, Stage::ResidPre, l, p0, x, c);
            // ln_1 (LayerNorm; Llama: RMSNorm)
            kernels::norm(cfg.norm, xn_c, x, &w.ln_1, eps);
            observe::norm(obs, (Stage::Ln1Scale, l, p0), cfg.norm, x, xn_c, c, eps);
            // attn.c_attn (q | k | v stacked): qkv = xn · W_attnᵀ + b   (T, C_q + 2·C_kv)
            let qkv = work.get_mut(..t_len * qkv_w).unwrap_or(&mut []);
            kernels::linear_par(par, qkv, xn_c, &w.attn_c_attn, w.attn_c_attn_bias.unwrap_or_default(), false, xq);
            observe::qkv(obs, l, p0, qkv, cq, ckv);
            // RoPE: rotate every query and key head by its token's position
            if !rope.is_empty() {
                for (qk_row, r) in qkv.chunks_exact_mut(qkv_w).zip(rope.chunks_exact(d)) {
                    let (cos, sin) = r.split_at(d / 2);
                    for head in qk_row.get_mut(..cq + ckv).unwrap_or(&mut []).chunks_exact_mut(d) {
                        kernels::rope(head, cos, sin);
                    }
                }
                observe::rotated(obs, l, p0, qkv, cq, ckv);
            }
            // causal attention softmax(q·kᵀ·scale) · v per query head h, reading key/value head
            // h / (H / H_kv), heads concatenated, token by token: store its k, v (a local layer's
            // ring keeps the last W), attend to what the cache holds
            let scale = cfg.attn_scale(l);
            let ring = self.cache.layout().layer_capacity(l);
            let z = xn.get_mut(..t_len * cq).unwrap_or(&mut []);
            // (threads exist on the desktop only: without `std` this is compiled out of the firmware)
            let done = cfg!(feature = "std") && !O::ENABLED && attend_par(par, &mut self.cache, (l, p0), qkv, z, xq, (cq, ckv, d, group), scale);
            for (t, (qkv_row, out)) in qkv.chunks_exact(qkv_w).zip(z.chunks_exact_mut(cq)).enumerate().take(if done { 0 } else { t_len }) {
                let (q, kv) = qkv_row.split_at(cq);
                let (k, v) = kv.split_at(ckv);
                self.cache.store(l, p0 + t, k, v);
                if !O::ENABLED {
                    // the G query heads of each key/value head together (each key and value
                    // read once for them; the bits of one head at a time)
                    for (kvh, (q, out_g)) in q.chunks_exact(group * d).zip(out.chunks_exact_mut(group * d)).enumerate() {
                        kernels::attention_group(out_g, q, d, &self.cache.head(l, kvh, p0 + t + 1), scale, scores);
                    }
                    continue;
                }
                for (h, (q, out_h)) in q.chunks_exact(d).zip(out.chunks_exact_mut(d)).enumerate() {
                    observe::attention(obs, (l, p0 + t, h), q, (&self.cache, h / group, p0 + t + 1, ring), scale, scores);
                    kernels::attention(out_h, q, &self.cache.head(l, h / group, p0 + t + 1), scale, scores);
                }
            }
            observe::rows(obs, Stage::Z, l, p0, z, cq);
            // attn.c_proj (GPT-Neo: out_proj, Llama: o_proj), then the residual: x += z · W_projᵀ + b
            let proj_bias = w.attn_c_proj_bias.unwrap_or_default();
            observe::product(obs, (Stage::AttnOut, l, p0), par, work, z, &w.attn_c_proj, proj_bias, xq);
            kernels::linear_par(par, x, z, &w.attn_c_proj, proj_bias, true, xq);
            observe::rows(obs, Stage::ResidMid, l, p0, x, c);
            // ln_2 (Llama: post_attention_layernorm)
            let xn_c = xn.get_mut(..t_len * c).unwrap_or(&mut []);
            kernels::norm(cfg.norm, xn_c, x, &w.ln_2, eps);
            observe::norm(obs, (Stage::Ln2Scale, l, p0), cfg.norm, x, xn_c, c, eps);
            // mlp.c_fc (Llama: gate_proj | up_proj) and the activation:
            // h = act(xn · W_fcᵀ + b), or act(gate) · up   (T, I)
            let fc = work.get_mut(..t_len * cfg.mlp_rows()).unwrap_or(&mut []);
            kernels::linear_par(par, fc, xn_c, &w.mlp_c_fc, w.mlp_c_fc_bias.unwrap_or_default(), false, xq);
            if cfg.gated_mlp {
                observe::gate_up(obs, l, p0, fc, inner);
                kernels::gate_par(par, fc, inner, cfg.activation);
            } else {
                observe::rows(obs, Stage::MlpPre, l, p0, fc, inner);
                kernels::activate_par(par, fc, inner, cfg.activation);
            }
            let hidden = work.get(..t_len * inner).unwrap_or(&[]);
            observe::rows(obs, Stage::MlpPost, l, p0, hidden, inner);
            // mlp.c_proj (Llama: down_proj), then the residual: x += h · W_projᵀ + b
            let mlp_bias = w.mlp_c_proj_bias.unwrap_or_default();
            observe::product(obs, (Stage::MlpOut, l, p0), par, xn_c, hidden, &w.mlp_c_proj, mlp_bias, xq);
            kernels::linear_par(par, x, hidden, &w.mlp_c_proj, mlp_bias, true, xq);
            observe::rows(obs, Stage::ResidPost, l, p0, x, c);
        }
        self.cache.set_len(p0 + t_len);

        // ln_f (Llama: model.norm), then the head: logits = ln_f(x) · W_headᵀ (wte when tied),
        // only for the rows asked for
        let (ln_f, head) = (model.ln_f(), model.lm_head());
        let xn = xn.get_mut(..t_len * c).unwrap_or(&mut []);
        for (t, (xt, xnt)) in x.chunks_exact(c).zip(xn.chunks_exact_mut(c)).enumerate() {
            if !wants_logits(t) {
                continue;
            }
            kernels::norm(cfg.norm, xnt, xt, &ln_f, eps);
            observe::norm(obs, (Stage::LnFinalScale, 0, p0 + t), cfg.norm, xt, xnt, c, eps);
            kernels::linear_par(par, logits, xnt, &head, &[], false, xq);
            obs.row(Stage::Logits, 0, p0 + t, logits);
            each(t, logits);
            self.has_logits = true;
        }
        if !wants_logits(t_len.saturating_sub(1)) {
            self.has_logits = false;
        }
        Ok(())
    }
}

/// Prefill's causal attention on `par`'s threads: every key and value of the batch is stored
/// first, then the queries are shared out (token t to task t mod tasks, which evens out the
/// causal rows' growing lengths), each task with its own score row in `spare` (the int8
/// activations' scratch, unused between the products). Each (token, head) output is
/// [`kernels::attention`] on exactly what the one-thread loop gives it, so the bits are the
/// same. Returns false, having done nothing, where it does not apply: one thread, a short or
/// small batch, a local layer's ring shorter than the batch's end (storing the whole batch
/// first would overwrite keys earlier queries read), or too little scratch.
#[allow(clippy::too_many_arguments)]
fn attend_par(
    par: Option<&dyn kernels::Parallel>,
    cache: &mut KvCache<'_>,
    (l, p0): (usize, usize),
    qkv: &[f32],
    out: &mut [f32],
    spare: &mut [f32],
    (cq, ckv, d, group): (usize, usize, usize, usize),
    scale: f32,
) -> bool {
    let Some(par) = par else { return false };
    let row = cq + 2 * ckv;
    let (threads, t_len) = (par.threads(), qkv.len() / row.max(1));
    let end = p0 + t_len;
    if threads < 2 || t_len < 2 * threads || end > cache.layout().layer_capacity(l) || out.len() < t_len * cq || d == 0 {
        return false;
    }
    if t_len.saturating_mul(end).saturating_mul(cq) < kernels::PARALLEL_MIN_MACS {
        return false;
    }
    let tasks = (spare.len() / end.max(1)).min(t_len).min(4 * threads);
    if tasks < threads {
        return false;
    }
    for (t, r) in qkv.chunks_exact(row).enumerate() {
        cache.store(l, p0 + t, r.get(cq..cq + ckv).unwrap_or(&[]), r.get(cq + ckv..).unwrap_or(&[]));
    }
    let cache = &*cache;
    let (outs, scores) = (kernels::Shared::new(out), kernels::Shared::new(spare));
    par.run(tasks, &|i| {
        // SAFETY: task i alone takes scores[i·end..(i+1)·end] (inside `spare`: tasks·end ≤ its
        // length) and the output rows of tokens i, i + tasks, i + 2·tasks, …
        let s = unsafe { scores.range(i * end, (i + 1) * end) };
        for t in (i..t_len).step_by(tasks) {
            let q = qkv.get(t * row..t * row + cq).unwrap_or(&[]);
            // SAFETY: as above.
            let o = unsafe { outs.range(t * cq, (t + 1) * cq) };
            for (h, (qh, oh)) in q.chunks_exact(d).zip(o.chunks_exact_mut(d)).enumerate() {
                kernels::attention(oh, qh, &cache.head(l, h / group, p0 + t + 1), scale, s);
            }
        }
    });
    true
}
