//! A session: run state for one sequence — the activation arena and the KV cache, both
//! borrowed from the caller — and the forward pass that fills them.
//!
//! ```text
//! arena (f32): x [B, C] | xn [B, C] | work [B, max(3C, I)] | xq [B, Q] | scores [capacity] | logits [V]
//! kv         : per layer (2, cap_l, C) as f32, f16 or int8 (+ scales)     B = tokens per batch
//!              cap_l = capacity (global layer) or min(capacity, W) (local layer: a ring)
//! Q = f32 slots to hold one quantized activation row of max(C, I) for q8/q4 weights
//!     (`kernels::quant_scratch_len`: int8 values and group scales, or the Cortex-M DSP row
//!     kernels' int16 layout)
//! ```
//! Sizes come from [`SessionSizes`], a `const fn` of the config, so a board can size its
//! `static` buffers at compile time.

use crate::config::Config;
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

impl SessionSizes {
    /// f32 elements of arena per token of batch: x, xn, the shared qkv/MLP work row, and the
    /// quantized copy of an activation row for quantized weights.
    pub const fn per_token(config: &Config) -> usize {
        let c = config.n_embd as usize;
        let i = config.n_inner as usize;
        let work = Self::work_len(config);
        let widest = if c > i { c } else { i };
        c.saturating_mul(2).saturating_add(work).saturating_add(kernels::quant_scratch_len(widest, MIN_GROUP))
    }

    const fn work_len(config: &Config) -> usize {
        let (c, i) = (config.n_embd as usize, config.n_inner as usize);
        if c.saturating_mul(3) > i {
            c.saturating_mul(3)
        } else {
            i
        }
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
            arena_len: batch.saturating_mul(Self::per_token(config)).saturating_add(capacity).saturating_add(config.vocab_size as usize),
            kv_len: KvCache::required_len(kv_dtype, &KvLayout::new(config, capacity)),
            kv_dtype,
        }
    }

    /// Bytes of the arena.
    pub const fn arena_bytes(&self) -> usize {
        self.arena_len.saturating_mul(4)
    }

    /// Bytes of the KV cache: Σ_l 2 · cap_l · n_embd · (4 | 2 | 1) (+ int8 scales), cap_l =
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
        self.batch * SessionSizes::per_token(cfg) + self.capacity()
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
        self.run(tokens, |i| i + 1 == n, |_, _| {}, &mut NoObserver);
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
        self.run(tokens, |_| true, |_, _| {}, obs);
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
        self.run(tokens, wants, |i, l| each(i, l), &mut NoObserver);
        Ok(())
    }

    /// Processes one token and returns the logits for the next.
    pub fn decode(&mut self, token: u32) -> Result<&mut [f32], Error> {
        self.prefill(&[token])
    }

    /// The forward pass over `tokens` (already checked), batch by batch.
    fn run<O: Observer>(&mut self, tokens: &[u32], wants_logits: impl Fn(usize) -> bool, mut each: impl FnMut(usize, &[f32]), obs: &mut O) {
        let mut done = 0;
        for chunk in tokens.chunks(self.batch.max(1)) {
            let first = done;
            self.forward_batch(chunk, |i| wants_logits(first + i), |i, l| each(first + i, l), obs);
            done += chunk.len();
        }
    }

    /// GPT-2 / GPT-Neo forward pass for one batch of T tokens at positions pos..pos+T. `obs`
    /// sees every stage (`observe::*` calls: nothing at all for [`NoObserver`]).
    fn forward_batch<O: Observer>(&mut self, tokens: &[u32], wants_logits: impl Fn(usize) -> bool, mut each: impl FnMut(usize, &[f32]), obs: &mut O) {
        let model = self.model;
        let cfg = model.config();
        let (c, t_len) = (cfg.n_embd(), tokens.len());
        let (n_head, d) = (cfg.n_head(), cfg.head_dim());
        let p0 = self.cache.len();
        let par = self.par;
        let per_work = SessionSizes::work_len(cfg);
        let per_q = SessionSizes::per_token(cfg) - 2 * c - per_work;

        let (x, rest) = take(self.arena, self.batch * c); //        residual stream (T, C)
        let (xn, rest) = take(rest, self.batch * c); //             normed / attention out (T, C)
        let (work, rest) = take(rest, self.batch * per_work); //    qkv (T, 3C) or MLP hidden (T, I)
        let (xq, rest) = take(rest, self.batch * per_q); //         int8 activations for q8/q4
        let (scores, rest) = take(rest, self.cache.capacity()); //  attention scores (S)
        let (logits, _) = take(rest, cfg.vocab_size()); //          (V)
        let x = x.get_mut(..t_len * c).unwrap_or(&mut []);
        let xn = xn.get_mut(..t_len * c).unwrap_or(&mut []);

        // token + position embeddings: x = wte[token] + wpe[pos]   (nn.Embedding ×2, add)
        let (wte, wpe) = (model.wte(), model.wpe());
        for (t, (&tok, xt)) in tokens.iter().zip(x.chunks_exact_mut(c)).enumerate() {
            kernels::embedding_row(xt, &wte, tok as usize, false);
            obs.row(Stage::Embed, 0, p0 + t, xt);
            kernels::embedding_row(xt, &wpe, p0 + t, true);
        }
        observe::pos_embed(obs, xn, &wpe, p0, c);

        for l in 0..cfg.n_layer() {
            let w = model.layer(l);
            observe::rows(obs, Stage::ResidPre, l, p0, x, c);
            // ln_1
            kernels::layer_norm(xn, x, w.ln_1_weight, w.ln_1_bias, cfg.layer_norm_epsilon);
            observe::rows(obs, Stage::Ln1, l, p0, xn, c);
            // attn.c_attn (GPT-Neo: q_proj | k_proj | v_proj, no bias): qkv = xn · W_attnᵀ + b   (T, 3C)
            let qkv = work.get_mut(..t_len * 3 * c).unwrap_or(&mut []);
            kernels::linear_par(par, qkv, xn, &w.attn_c_attn, w.attn_c_attn_bias, false, xq);
            observe::qkv(obs, l, p0, qkv, c);
            // causal attention softmax(q·kᵀ·scale) · v per head, heads concatenated, token by token:
            // store its k, v (a local layer's ring keeps the last W), attend to what the cache holds
            let scale = cfg.attn_scale(l);
            let ring = self.cache.layout().layer_capacity(l);
            // (threads exist on the desktop only: without `std` this is compiled out of the firmware)
            let done = cfg!(feature = "std") && !O::ENABLED && attend_par(par, &mut self.cache, (l, p0), qkv, xn, xq, (n_head, d), scale);
            for (t, (row, out)) in qkv.chunks_exact(3 * c).zip(xn.chunks_exact_mut(c)).enumerate().take(if done { 0 } else { t_len }) {
                let (k, v) = (row.get(c..2 * c).unwrap_or(&[]), row.get(2 * c..).unwrap_or(&[]));
                self.cache.store(l, p0 + t, k, v);
                for (h, (q, out_h)) in row.chunks_exact(d).zip(out.chunks_exact_mut(d)).take(n_head).enumerate() {
                    observe::attention(obs, (l, p0 + t, h), q, (&self.cache, p0 + t + 1, ring), scale, scores);
                    kernels::attention(out_h, q, &self.cache.head(l, h, p0 + t + 1), scale, scores);
                }
            }
            observe::rows(obs, Stage::Z, l, p0, xn, c);
            // attn.c_proj (GPT-Neo: out_proj), then the residual: x += attn · W_projᵀ + b
            observe::product(obs, (Stage::AttnOut, l, p0), par, work, xn, &w.attn_c_proj, w.attn_c_proj_bias, xq);
            kernels::linear_par(par, x, xn, &w.attn_c_proj, w.attn_c_proj_bias, true, xq);
            observe::rows(obs, Stage::ResidMid, l, p0, x, c);
            // ln_2
            kernels::layer_norm(xn, x, w.ln_2_weight, w.ln_2_bias, cfg.layer_norm_epsilon);
            observe::rows(obs, Stage::Ln2, l, p0, xn, c);
            // mlp.c_fc and the activation (GELU): h = act(xn · W_fcᵀ + b)   (T, I)
            let hidden = work.get_mut(..t_len * cfg.n_inner()).unwrap_or(&mut []);
            kernels::linear_par(par, hidden, xn, &w.mlp_c_fc, w.mlp_c_fc_bias, false, xq);
            observe::rows(obs, Stage::MlpPre, l, p0, hidden, cfg.n_inner());
            kernels::activate_par(par, hidden, cfg.n_inner(), cfg.activation);
            observe::rows(obs, Stage::MlpPost, l, p0, hidden, cfg.n_inner());
            // mlp.c_proj, then the residual: x += h · W_projᵀ + b
            observe::product(obs, (Stage::MlpOut, l, p0), par, xn, hidden, &w.mlp_c_proj, w.mlp_c_proj_bias, xq);
            kernels::linear_par(par, x, hidden, &w.mlp_c_proj, w.mlp_c_proj_bias, true, xq);
            observe::rows(obs, Stage::ResidPost, l, p0, x, c);
        }
        self.cache.set_len(p0 + t_len);

        // ln_f, then the (tied) head: logits = ln_f(x) · wteᵀ, only for the rows asked for
        let (ln_f_w, ln_f_b) = model.ln_f();
        let head = model.lm_head();
        for (t, (xt, xnt)) in x.chunks_exact(c).zip(xn.chunks_exact_mut(c)).enumerate() {
            if !wants_logits(t) {
                continue;
            }
            kernels::layer_norm(xnt, xt, ln_f_w, ln_f_b, cfg.layer_norm_epsilon);
            obs.row(Stage::LnFinal, 0, p0 + t, xnt);
            kernels::linear_par(par, logits, xnt, &head, &[], false, xq);
            obs.row(Stage::Logits, 0, p0 + t, logits);
            each(t, logits);
            self.has_logits = true;
        }
        if !wants_logits(t_len.saturating_sub(1)) {
            self.has_logits = false;
        }
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
    (n_head, d): (usize, usize),
    scale: f32,
) -> bool {
    let Some(par) = par else { return false };
    let c = n_head * d;
    let (threads, t_len) = (par.threads(), qkv.len() / (3 * c).max(1));
    let end = p0 + t_len;
    if threads < 2 || t_len < 2 * threads || end > cache.layout().layer_capacity(l) || out.len() < t_len * c {
        return false;
    }
    if t_len.saturating_mul(end).saturating_mul(c) < kernels::PARALLEL_MIN_MACS {
        return false;
    }
    let tasks = (spare.len() / end.max(1)).min(t_len).min(4 * threads);
    if tasks < threads {
        return false;
    }
    for (t, row) in qkv.chunks_exact(3 * c).enumerate() {
        cache.store(l, p0 + t, row.get(c..2 * c).unwrap_or(&[]), row.get(2 * c..).unwrap_or(&[]));
    }
    let cache = &*cache;
    let (outs, scores) = (kernels::Shared::new(out), kernels::Shared::new(spare));
    par.run(tasks, &|i| {
        // SAFETY: task i alone takes scores[i·end..(i+1)·end] (inside `spare`: tasks·end ≤ its
        // length) and the output rows of tokens i, i + tasks, i + 2·tasks, …
        let s = unsafe { scores.range(i * end, (i + 1) * end) };
        for t in (i..t_len).step_by(tasks) {
            let q = qkv.get(t * 3 * c..t * 3 * c + c).unwrap_or(&[]);
            // SAFETY: as above.
            let o = unsafe { outs.range(t * c, (t + 1) * c) };
            for (h, (qh, oh)) in q.chunks_exact(d).zip(o.chunks_exact_mut(d)).take(n_head).enumerate() {
                kernels::attention(oh, qh, &cache.head(l, h, p0 + t + 1), scale, s);
            }
        }
    });
    true
}

