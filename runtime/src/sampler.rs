//! Token sampling: greedy, temperature, top-k, top-p (nucleus) and a repetition penalty, in
//! O(K) memory and without ever sorting the vocabulary.
//!
//! GPT-2's 50257 logits take 200 KB, more than many boards have spare, so the sampler never
//! needs a second vocabulary-sized buffer: it keeps candidates in a fixed array of 2·K entries
//! inside [`Sampler`] (8 bytes each), uses a 65-bin histogram on the stack for top-p (about
//! 1 KB), and otherwise works by passes over the logits, which it overwrites with the
//! unnormalised probabilities `w_i = exp((l_i - max)/T)` (one `libm::expf` per token: the
//! dominant cost).
//!
//! | mode (see [`SamplerConfig`]) | passes over the V logits                                              |
//! |------------------------------|-----------------------------------------------------------------------|
//! | `temperature == 0`           | argmax, lowest index wins ties                                        |
//! | `top_k == 0, top_p == 1`     | max; weights and their sum; cumulative walk (stops at the token)      |
//! | `top_k > 0`                  | one: the k largest logits (a 2k buffer compacted by quickselect, then sorted); top-p and the draw happen in the array |
//! | `top_k == 0, top_p < 1`      | K largest + max; weights and their sum; if the nucleus is larger than K: 1–3 histogram passes, a collecting pass and the walk |
//!
//! The order of operations is Hugging Face's `generate`: repetition penalty, temperature, top-k,
//! top-p, then one draw from the renormalised distribution of the kept tokens.
//!
//! # Exactness
//! Token `i` is drawn with probability `w_i / Σ_kept w_j`, up to f32 rounding: the draw picks
//! the first kept token whose running f32 sum exceeds `u · total`, where `total` is accumulated
//! with the same operations in the same order as the walk, so the walk ends exactly on it. The
//! draw `u` has 24 bits, so each token's probability is resolved to about 2^-24 of the kept mass.
//! Decisions about which tokens top-p keeps add the weights as 64-bit fixed-point integers instead
//! (2^-47 resolution for GPT-2): exact and independent of summation order, where a plain f32 sum
//! of 50257 weights drifts by ~1e-4 relative, enough to move the nucleus boundary. They compare
//! these masses with one goal, `top_p` times the total, computed from a Kahan-compensated f32 sum
//! (good to ~1e-7 relative, well inside the slack below), so the steps never contradict each
//! other.
//!
//! # Top-p rule and ties
//! Sorting by logit, descending, a token is kept when the probability mass of the tokens
//! *strictly more likely* than it is below `top_p`; so the most likely token is always kept and
//! the kept set is the smallest set of most likely tokens whose mass reaches `top_p`. This is
//! Hugging Face's `TopPLogitsWarper` (which keeps a token when the cumulative mass before it, in
//! its sort order, is `< top_p`) on inputs without exact ties. Tokens tied at the threshold are
//! kept or dropped *together* (Hugging Face's answer there depends on the order its sort gives
//! them). Ties are judged on the f32 weight, so two logits whose weights round to the same f32
//! count as tied. A cumulative mass within a relative 2^-20 of `top_p` counts as reaching it, so
//! masses equal to `top_p` in exact arithmetic (0.5 + 0.3 with `top_p = 0.8`) are decided as
//! exact arithmetic would despite rounding; only a boundary closer than that to `top_p` may be
//! decided differently from a float64 reference.
//!
//! Without top-k, the nucleus is found without sorting the vocabulary:
//! 1. The first pass keeps the K largest logits. If their mass reaches `top_p` before the last
//!    group of equal weights among them (which may continue outside the K), the nucleus is read
//!    off the sorted array.
//! 2. Otherwise the threshold weight `tau` is bracketed as a range of f32 bit patterns (which
//!    order non-negative floats the same way as their values). The first bracket reaches from
//!    `(1 - top_p)/V` (the tokens lighter than that weigh less than `1 - top_p` together, and
//!    the max weighs 1, so the mass above it reaches `top_p`) up to the K largest minus their
//!    last group (whose mass does not). One pass builds a 64-bin histogram of the masses and
//!    counts in the bracket; the bin where the mass accumulated from the top reaches `top_p` is
//!    the next bracket, 64 times narrower.
//! 3. As soon as at most K tokens lie in the bracket, one pass collects them into the array,
//!    sorted, and sums the tokens above the bracket (all kept); the threshold is read off the
//!    array. (A bracket one bit pattern wide holds tokens that are all tied, and is kept whole.)
//!
//! Each unit of `K` costs 16 bytes; a larger `K` lets step 1 succeed more often. Step 1 costs
//! little beyond the passes every temperature sample needs; steps 2–3 take 3–5 cheaper passes
//! (no `expf`) more.
//!
//! # Top-k ties
//! Top-k keeps exactly `min(top_k, tokens)` tokens; among equal logits at the cut the lower token
//! ids are kept. NaN and `-inf` logits are never candidates (nor ever drawn).
//!
//! # Determinism
//! The PRNG is PCG32 ([`Pcg32`]) seeded through SplitMix64 ([`SplitMix64`]): integer arithmetic
//! only; the float math is IEEE basic operations and `libm::expf`, so the same seed, config and
//! `K` draw the same tokens on every target. (`K` matters for top-p: it changes which kept tokens
//! are walked from the candidate array, so the same draw can map to another, equally valid,
//! token.) Each non-greedy [`Sampler::sample`] call draws exactly one `u32`; greedy and failed
//! calls draw none.

use core::cmp::Ordering;

use crate::error::{Error, SamplerParam};
use crate::observe::Observer;

/// A cumulative mass `c` reaches `top_p` when `c >= top_p * TOP_P_SLACK * total` (see the
/// module docs: absorbs f32 rounding at masses equal to `top_p` in exact arithmetic).
const TOP_P_SLACK: f32 = 1.0 - 1.0 / 1_048_576.0;

/// Bins of the top-p mass histogram: each pass narrows the threshold by 6 bits.
const BINS: usize = 64;

/// Bit pattern just above 1.0, the largest weight.
const ONE_UP: u32 = 0x3f80_0001;

/// The error for logits that hold no token that could be drawn (empty, all NaN or `-inf`,
/// or more than `u32::MAX` entries).
const BAD_LOGITS: Error = Error::BadSamplerParam {
    what: SamplerParam::Logits,
};

// ---- configuration -----------------------------------------------------------------------------

/// Sampling parameters, with Hugging Face's meanings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerConfig {
    /// Softmax temperature, finite and `>= 0`. `0` is greedy decoding (argmax), which ignores
    /// `top_k`, `top_p` and `seed`.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; `0` = no limit. At most the sampler's capacity
    /// `K`.
    pub top_k: usize,
    /// Nucleus sampling: keep the smallest set of most likely tokens whose probability reaches
    /// `top_p`, in `(0, 1]`; `1` = off.
    pub top_p: f32,
    /// CTRL / Hugging Face repetition penalty, finite and `> 0`; `1` = off, `> 1` discourages
    /// repeating tokens from the history passed to [`Sampler::sample`].
    pub repetition_penalty: f32,
    /// Seed of the PRNG (see [`Pcg32::from_seed`]).
    pub seed: u64,
}

impl SamplerConfig {
    /// Greedy decoding: always the most likely token, no penalty.
    pub const fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }

    /// Checks every parameter (NaN is rejected everywhere); `max_top_k` is the capacity `K` of
    /// the [`Sampler`] it is meant for.
    pub fn validate(&self, max_top_k: usize) -> Result<(), Error> {
        let bad = |what| Err(Error::BadSamplerParam { what });
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(SamplerParam::Temperature);
        }
        if self.top_k > max_top_k {
            return bad(SamplerParam::TopK);
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(SamplerParam::TopP);
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return bad(SamplerParam::RepetitionPenalty);
        }
        Ok(())
    }

    /// True when [`Sampler::sample`] takes the argmax (`temperature == 0`).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

// ---- PRNG --------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea & Flood 2014; Vigna's `splitmix64.c`), used only to spread a `u64`
/// seed over [`Pcg32`]'s state and stream. Seed 0 yields `0xe220a8397b1dcdaf`,
/// `0x6e789e6aa1b965f4`, `0x06c45d188009454f`, ...
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// Next 64-bit output.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// PCG32, i.e. PCG-XSH-RR with 64-bit state and 32-bit output (O'Neill 2014; `pcg32_random_r`
/// and `pcg32_srandom_r` of the reference C library `pcg-c-basic`). Integer arithmetic only, so
/// every target draws the same numbers. `Pcg32::new(42, 54)` yields `0xa15c02b7`, `0x7b47f409`,
/// `0xba1d3330`, ... as in the reference `pcg32-demo`.
#[derive(Debug, Clone)]
pub struct Pcg32 {
    state: u64,
    inc: u64,
}

const PCG32_MULT: u64 = 6_364_136_223_846_793_005;

impl Pcg32 {
    /// `pcg32_srandom_r(initstate, initseq)`: `initseq` selects one of 2^63 streams.
    pub const fn new(initstate: u64, initseq: u64) -> Self {
        let inc = (initseq << 1) | 1;
        let state = inc; // one step from state 0: 0 * MULT + inc
        let state = state.wrapping_add(initstate);
        let state = state.wrapping_mul(PCG32_MULT).wrapping_add(inc);
        Self { state, inc }
    }

    /// The generator for a user seed: `initstate` and `initseq` are the first two outputs of
    /// [`SplitMix64`] seeded with `seed`, so nearby seeds give unrelated streams.
    pub fn from_seed(seed: u64) -> Self {
        let mut sm = SplitMix64(seed);
        let initstate = sm.next_u64();
        let initseq = sm.next_u64();
        Self::new(initstate, initseq)
    }

    /// Next 32-bit output (`pcg32_random_r`).
    pub fn next_u32(&mut self) -> u32 {
        let old = self.state;
        self.state = old.wrapping_mul(PCG32_MULT).wrapping_add(self.inc);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        let rot = (old >> 59) as u32;
        xorshifted.rotate_right(rot)
    }

    /// Uniform in `[0, 1)`: the top 24 bits of [`Pcg32::next_u32`] times 2^-24 (exact in f32).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 * (1.0 / 16_777_216.0)
    }
}

// ---- sampler -----------------------------------------------------------------------------------

/// One entry of the candidate array: a token id and its sort key (a logit or a weight).
#[derive(Debug, Clone, Copy)]
struct Candidate {
    key: f32,
    id: u32,
}

/// The tokens a draw chooses from: every token whose weight (in the overwritten logits) is
/// `>= tau` (none if `tau` is `None`), plus the first `len` entries of the candidate array (keys
/// are weights, all below `tau`). `above` and `below` are their plain f32 sums, accumulated in
/// the order the draw walks them.
#[derive(Debug, Clone, Copy)]
struct Kept {
    tau: Option<f32>,
    above: f32,
    len: usize,
    below: f32,
}

/// Draws token ids from logits according to a [`SamplerConfig`]. `K` is the largest `top_k`
/// it supports; the sampler holds 2·K candidates (16·K bytes; K = 64 is plenty).
#[derive(Debug, Clone)]
pub struct Sampler<const K: usize> {
    cfg: SamplerConfig,
    rng: Pcg32,
    /// (2, K) candidate buffer, used flat: sorted by key descending, equal keys by token id
    /// ascending, once filled. Not a `heapless::Vec`: the buffer holds 2·K (see [`TopBuf`]),
    /// and `heapless::Vec<Candidate, { 2 * K }>` is a generic const expression stable Rust does
    /// not accept; `TopBuf` is this buffer's length.
    cand: [[Candidate; K]; 2],
}

impl<const K: usize> Sampler<K> {
    /// A sampler for `cfg` (validated against the capacity `K`), seeded with `cfg.seed`.
    pub fn new(cfg: SamplerConfig) -> Result<Self, Error> {
        cfg.validate(K)?;
        let empty = Candidate { key: 0.0, id: 0 };
        Ok(Self {
            cfg,
            rng: Pcg32::from_seed(cfg.seed),
            cand: [[empty; K]; 2],
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Restarts the PRNG from `seed` (the same seed replays the same draws).
    pub fn reseed(&mut self, seed: u64) {
        self.cfg.seed = seed;
        self.rng = Pcg32::from_seed(seed);
    }

    /// Picks the next token id from `logits` (one per vocabulary entry).
    ///
    /// `recent` is the token history the repetition penalty applies to (ignored when the penalty
    /// is 1): each distinct id in it has its logit divided by the penalty if positive, multiplied
    /// otherwise, once however often it occurs. The duplicate check costs O(len(recent)^2)
    /// comparisons (0.5 M for a full 1024-token context), and an id outside the vocabulary is an
    /// [`Error::InvalidToken`] before any logit is touched.
    ///
    /// `logits` is scratch: on return it holds the penalised logits (greedy, top-k) or the
    /// unnormalised probabilities (otherwise). NaN logits count as `-inf` and are never drawn;
    /// if no logit is above `-inf`, or `logits` is empty, the result is
    /// `BadSamplerParam { what: Logits }`.
    pub fn sample(&mut self, logits: &mut [f32], recent: &[u32]) -> Result<u32, Error> {
        if logits.is_empty() || u32::try_from(logits.len()).is_err() {
            return Err(BAD_LOGITS);
        }
        apply_repetition_penalty(logits, recent, self.cfg.repetition_penalty)?;
        if self.cfg.is_greedy() {
            return argmax(logits).ok_or(BAD_LOGITS);
        }
        let kept = self.select(logits)?;
        let u = self.rng.next_f32();
        self.draw(logits, kept, u).ok_or(BAD_LOGITS)
    }

    /// [`Sampler::sample`], reporting the draw (the kept tokens and their weights, the random
    /// number, the token) to `obs` before returning it (nothing on error). The same steps as
    /// `sample` (which stays its own function, so that a board's code does not move); with
    /// [`NoObserver`] it is `sample`.
    pub fn sample_observed<O: Observer>(&mut self, logits: &mut [f32], recent: &[u32], obs: &mut O) -> Result<u32, Error> {
        if !O::ENABLED {
            return self.sample(logits, recent);
        }
        if logits.is_empty() || u32::try_from(logits.len()).is_err() {
            return Err(BAD_LOGITS);
        }
        apply_repetition_penalty(logits, recent, self.cfg.repetition_penalty)?;
        if self.cfg.is_greedy() {
            let token = argmax(logits).ok_or(BAD_LOGITS)?;
            obs.draw(&Draw { token, u: None, weights: &[], kept: None, cand: &[] });
            return Ok(token);
        }
        let kept = self.select(logits)?;
        let u = self.rng.next_f32();
        let token = self.draw(logits, kept, u).ok_or(BAD_LOGITS)?;
        obs.draw(&Draw { token, u: Some(u), weights: logits, kept: Some(kept), cand: self.cand.as_flattened() });
        Ok(token)
    }

    /// Applies temperature, top-k and top-p: returns the kept set (and may turn `logits` into
    /// weights).
    fn select(&mut self, logits: &mut [f32]) -> Result<Kept, Error> {
        let inv_t = 1.0 / self.cfg.temperature; // +inf for subnormal T: weights become 0 or 1
        if self.cfg.top_k > 0 {
            self.select_top_k(logits, inv_t)
        } else if self.cfg.top_p < 1.0 {
            self.select_top_p(logits, inv_t)
        } else {
            // pass 1: max; pass 2: weights and their sum (the walk in `draw` is pass 3)
            // (never NaN: a NaN logit fails `l > m`)
            let max = logits
                .iter()
                .fold(f32::NEG_INFINITY, |m, &l| if l > m { l } else { m });
            if max == f32::NEG_INFINITY {
                return Err(BAD_LOGITS);
            }
            let mut sum = 0.0f32;
            to_weights(logits, max, inv_t, |w| sum += w);
            Ok(Kept {
                tau: Some(0.0),
                above: sum,
                len: 0,
                below: 0.0,
            })
        }
    }

    /// Top-k (then top-p within the k): one pass, the rest happens in the candidate array.
    fn select_top_k(&mut self, logits: &[f32], inv_t: f32) -> Result<Kept, Error> {
        let cap = self.cfg.top_k.min(K);
        let buf = self
            .cand
            .as_flattened_mut()
            .get_mut(..2 * cap)
            .ok_or(BAD_LOGITS)?;
        let (len, max) = collect_top(buf, cap, logits);
        let top = buf.get_mut(..len).ok_or(BAD_LOGITS)?;
        if len == 0 {
            return Err(BAD_LOGITS);
        }
        for c in top.iter_mut() {
            c.key = weight(c.key, max, inv_t);
        }
        let len = if self.cfg.top_p < 1.0 {
            let fixed = Fixed::for_len(len);
            let total: u64 = top.iter().map(|c| fixed.of(c.key)).sum();
            nucleus_len(
                top,
                fixed,
                0,
                top_p_goal(total as f64, self.cfg.top_p),
                false,
            )
            .unwrap_or(len)
        } else {
            len
        };
        Ok(self.kept_in_array(len))
    }

    /// Top-p over the whole vocabulary without sorting it (see the module docs).
    fn select_top_p(&mut self, logits: &mut [f32], inv_t: f32) -> Result<Kept, Error> {
        let (p, vocab) = (self.cfg.top_p, logits.len());
        // pass 1: the K largest logits, and the max
        let (len, max) = collect_top(self.cand.as_flattened_mut(), K, logits);
        if max == f32::NEG_INFINITY {
            return Err(BAD_LOGITS);
        }
        // pass 2: logits -> weights, and their total (a Kahan sum: its latency hides behind expf)
        let mut total = Sum::ZERO;
        to_weights(logits, max, inv_t, |w| total.add(w));
        let fixed = Fixed::for_len(vocab);
        // (the goal in fixed-point units; every mass it is compared with below is exact)
        let goal = top_p_goal(f64::from(total.get()) * fixed.one(), p);

        // 1. the nucleus among the K largest, if it ends before their last group of equal
        //    weights (when all K slots are used, tokens outside may tie with that group)
        let top = self
            .cand
            .as_flattened_mut()
            .get_mut(..len)
            .ok_or(BAD_LOGITS)?;
        for c in top.iter_mut() {
            c.key = logits.get(c.id as usize).copied().unwrap_or(0.0);
        }
        if let Some(n) = nucleus_len(top, fixed, 0, goal, len == K) {
            return Ok(self.kept_in_array(n));
        }

        // 2. narrow the bracket [lo, hi) (bit patterns) that holds tau. Invariant:
        //    mass(lo) >= goal > mass(hi) = m_hi, where mass(x) is the fixed-point sum of {w >= x}.
        //    First bracket: above it, the K largest but their last group (mass < goal, or the
        //    test above would have succeeded); below it, the tokens lighter than eps = (1-p)/V,
        //    which weigh less than 1-p together, so mass(eps) >= p·total (the max weighs 1).
        let (mut hi, mut m_hi) = match top.split_last() {
            Some((last, above)) => {
                let above = above.iter().filter(|c| c.key != last.key);
                (
                    last.key.to_bits().saturating_add(1),
                    above.map(|c| fixed.of(c.key)).sum(),
                )
            }
            None => (ONE_UP, 0), // K == 0
        };
        let eps = ((1.0 - p) / vocab as f32).to_bits();
        let mut lo = if eps < hi { eps } else { 0 };
        let mut hist = Histogram::new(fixed);
        let mut wide = true; // the first bracket may hold most tokens; see `Histogram::fill`
        loop {
            hist.fill(logits, lo, hi, wide);
            match hist.narrow(m_hi, goal) {
                Some((bin_lo, bin_hi, bin_m_hi, count)) => {
                    if count <= K {
                        // 3. the bracket fits in the candidate array
                        return Ok(self.resolve_bracket(
                            logits,
                            fixed,
                            (bin_lo, bin_hi, bin_m_hi),
                            goal,
                        ));
                    }
                    if bin_hi.saturating_sub(bin_lo) <= 1 {
                        return Ok(kept_from(logits, f32::from_bits(bin_lo))); // one weight: all tied
                    }
                    (lo, hi, m_hi, wide) = (bin_lo, bin_hi, bin_m_hi, count > vocab / 4);
                }
                // mass(eps) < goal after all (eps rounded up?): the rest of the way down
                None if lo > 0 => (lo, hi, m_hi, wide) = (0, lo, m_hi + hist.mass(), true),
                None => return Ok(kept_from(logits, 0.0)), // unreachable: mass(0) is the total
            }
        }
    }

    /// Step 3 of top-p: at most K weights lie in the bracket `[lo, hi)` (bit patterns), and
    /// `m_hi` is the mass above it. One pass sums the weights `>= hi` (all kept) and gathers the
    /// bracket into the candidate array, sorted; the nucleus ends inside it.
    fn resolve_bracket(
        &mut self,
        weights: &[f32],
        fixed: Fixed,
        bracket: (u32, u32, u64),
        goal: u64,
    ) -> Kept {
        let (lo, hi, m_hi) = bracket;
        let mut buf = TopBuf::new(self.cand.as_flattened_mut(), K);
        let mut above = 0.0f32;
        let span = hi.saturating_sub(lo);
        for (i, &w) in weights.iter().enumerate() {
            let bits = w.to_bits();
            above += masked(w, bits >= hi); // branch-free: `bits >= hi` is a coin toss
            if bits.wrapping_sub(lo) < span {
                buf.push(Candidate {
                    key: w,
                    id: i as u32,
                });
            }
        }
        let len = buf.into_sorted();
        let band = self.cand.as_flattened().get(..len).unwrap_or(&[]);
        let n = nucleus_len(band, fixed, m_hi, goal, false).unwrap_or(len);
        let below = band.iter().take(n).fold(0.0f32, |s, c| s + c.key);
        Kept {
            tau: Some(f32::from_bits(hi)),
            above,
            len: n,
            below,
        }
    }

    /// The first `len` candidates, and nothing from the vocabulary.
    fn kept_in_array(&self, len: usize) -> Kept {
        let below = self
            .cand
            .as_flattened()
            .iter()
            .take(len)
            .fold(0.0f32, |s, c| s + c.key);
        Kept {
            tau: None,
            above: 0.0,
            len,
            below,
        }
    }

    /// One draw with `u` in `[0, 1)`: the first kept token whose running weight sum exceeds
    /// `u · total`, walking the vocabulary part in index order, then the array part.
    fn draw(&self, weights: &[f32], kept: Kept, u: f32) -> Option<u32> {
        let target = u * (kept.above + kept.below);
        let vocab = || walk_vocab(weights, kept.tau?, target);
        let top = self.cand.as_flattened().get(..kept.len).unwrap_or(&[]);
        if target < kept.above {
            vocab()
        } else {
            walk_array(top, target - kept.above).or_else(vocab)
        }
    }
}

// ---- what a draw saw (for observers) ------------------------------------------------------------

/// One draw as the sampler made it (see [`Sampler::sample_observed`]): the tokens it kept after
/// the repetition penalty, temperature, top-k and top-p, their weights, the random number and
/// the token it chose.
#[derive(Debug, Clone, Copy)]
pub struct Draw<'a> {
    token: u32,
    u: Option<f32>,
    /// The overwritten logits: the weights of the kept vocabulary part.
    weights: &'a [f32],
    /// None: greedy.
    kept: Option<Kept>,
    cand: &'a [Candidate],
}

impl<'a> Draw<'a> {
    /// The token drawn.
    pub fn token(&self) -> u32 {
        self.token
    }

    /// The uniform random number in `[0, 1)` (None for greedy decoding, which draws none).
    pub fn u(&self) -> Option<f32> {
        self.u
    }

    /// The sum of the kept weights (as the draw summed them); a kept token's probability is
    /// its weight divided by this. 1 for greedy decoding.
    pub fn total(&self) -> f32 {
        self.kept.map_or(1.0, |k| k.above + k.below)
    }

    /// Where the draw lands: `u · total`; the chosen token is the first kept one (in the order
    /// of [`Draw::kept`]) whose running weight sum exceeds it.
    pub fn target(&self) -> Option<f32> {
        self.u.map(|u| u * self.total())
    }

    /// `(token, weight)` of every kept token of non-zero weight, in the order the draw walks
    /// them (the vocabulary part by id, then the candidate array, most likely first), where
    /// the weight is `exp((l - max) / T)` of the penalised logit l. Greedy decoding keeps the
    /// argmax alone, with weight 1.
    pub fn kept(&self) -> impl Iterator<Item = (u32, f32)> + 'a {
        let (weights, tau, cand) = match self.kept {
            Some(k) if k.tau.is_some() => (self.weights, k.tau, self.cand.get(..k.len).unwrap_or(&[])),
            Some(k) => (&[][..], None, self.cand.get(..k.len).unwrap_or(&[])),
            None => (&[][..], None, &[][..]),
        };
        let tau = tau.unwrap_or(f32::INFINITY);
        let greedy = self.kept.is_none().then_some((self.token, 1.0));
        let vocab = weights.iter().enumerate().filter(move |&(_, &w)| w >= tau && w > 0.0).map(|(i, &w)| (i as u32, w));
        greedy.into_iter().chain(vocab).chain(cand.iter().filter(|c| c.key > 0.0).map(|c| (c.id, c.key)))
    }
}

// ---- passes ------------------------------------------------------------------------------------

/// CTRL / Hugging Face repetition penalty, once per distinct id of `recent`.
fn apply_repetition_penalty(logits: &mut [f32], recent: &[u32], penalty: f32) -> Result<(), Error> {
    if penalty == 1.0 {
        return Ok(());
    }
    let vocab = logits.len();
    if let Some(&id) = recent.iter().find(|&&id| id as usize >= vocab) {
        return Err(Error::InvalidToken {
            id,
            vocab_size: vocab as u32,
        });
    }
    for (i, &id) in recent.iter().enumerate() {
        // branch-free inner loop over chunks, so it vectorises
        let before = recent.get(..i).unwrap_or(&[]);
        if before
            .chunks(32)
            .any(|c| c.iter().fold(false, |seen, &x| seen | (x == id)))
        {
            continue;
        }
        if let Some(l) = logits.get_mut(id as usize) {
            // Hugging Face: `where(score < 0, score * penalty, score / penalty)`
            *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
        }
    }
    Ok(())
}

/// Index of the largest logit (NaN ignored, lowest index on ties); `None` if none is `> -inf`.
fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best = f32::NEG_INFINITY;
    let mut best_i = None;
    for (i, &l) in logits.iter().enumerate() {
        if l > best {
            best = l;
            best_i = Some(i as u32);
        }
    }
    best_i
}

/// Unnormalised probability of a logit: `exp((l - max)/T)`, exactly 1 at the max (also when the
/// max is `+inf`), 0 for NaN.
#[inline]
fn weight(l: f32, max: f32, inv_t: f32) -> f32 {
    if l == max {
        1.0
    } else if l < max {
        libm::expf((l - max) * inv_t)
    } else {
        0.0 // NaN
    }
}

/// Overwrites each logit with its weight (see [`weight`]) and hands each weight to `f`.
#[inline]
fn to_weights(logits: &mut [f32], max: f32, inv_t: f32, mut f: impl FnMut(f32)) {
    for v in logits.iter_mut() {
        let w = weight(*v, max, inv_t);
        *v = w;
        f(w);
    }
}

/// Every token with weight `>= tau`, and their plain sum in index order (one pass).
fn kept_from(weights: &[f32], tau: f32) -> Kept {
    let above = weights.iter().fold(0.0f32, |s, &w| s + masked(w, w >= tau));
    Kept {
        tau: Some(tau),
        above,
        len: 0,
        below: 0.0,
    }
}

/// `w` if `keep`, else +0.0, without a branch (which side of a threshold a weight lies on is a
/// coin toss that a branch predictor would get wrong half the time; LLVM turns a plain `if`
/// into a branch here). Adding the +0.0 to a sum changes nothing.
#[inline]
fn masked(w: f32, keep: bool) -> f32 {
    f32::from_bits(w.to_bits() & 0u32.wrapping_sub(u32::from(keep)))
}

/// Cumulative walk over the weights `>= tau` in index order: the first whose running sum
/// exceeds `target`; if rounding leaves the sum at or below `target`, the last positive one.
fn walk_vocab(weights: &[f32], tau: f32, target: f32) -> Option<u32> {
    let mut sum = 0.0f32;
    for (i, &w) in weights.iter().enumerate() {
        sum += masked(w, w >= tau);
        if sum > target {
            return Some(i as u32);
        }
    }
    weights
        .iter()
        .rposition(|&w| w >= tau && w > 0.0)
        .map(|i| i as u32)
}

/// Cumulative walk over candidates in array order (same contract as [`walk_vocab`]).
fn walk_array(top: &[Candidate], target: f32) -> Option<u32> {
    let mut sum = 0.0f32;
    for c in top {
        sum += c.key;
        if sum > target {
            return Some(c.id);
        }
    }
    top.iter().rev().find(|c| c.key > 0.0).map(|c| c.id)
}

/// Walks `top` (weights sorted descending) one group of equal weights at a time, adding their
/// fixed-point masses to `start`; returns the length of the prefix that ends with the first group
/// where the mass reaches `goal`. If `last_open`, the last group may continue outside `top` and
/// is not judged: reaching it gives `None`; so does never reaching `goal`.
fn nucleus_len(
    top: &[Candidate],
    fixed: Fixed,
    start: u64,
    goal: u64,
    last_open: bool,
) -> Option<usize> {
    let mut mass = start;
    let mut i = 0;
    while let Some(first) = top.get(i) {
        let w = first.key;
        let mut j = i;
        while let Some(c) = top.get(j) {
            if c.key != w {
                break;
            }
            mass += fixed.of(c.key);
            j += 1;
        }
        if last_open && j == top.len() {
            return None;
        }
        i = j;
        if mass >= goal {
            return Some(i);
        }
    }
    None
}

/// Fills `buf[..cap]` with the `cap` largest logits (NaN and `-inf` skipped, ties by lower index)
/// sorted descending; returns how many it holds and the max logit (`-inf` if none). `buf` holds
/// 2·cap entries (see [`TopBuf`]).
fn collect_top(buf: &mut [Candidate], cap: usize, logits: &[f32]) -> (usize, f32) {
    let mut top = TopBuf::new(buf, cap);
    let mut max = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > max {
            max = l;
        }
        if l > top.bar {
            // + 0.0 turns -0.0 into +0.0, so that `rank`'s total order agrees with `==`
            let key = l + 0.0;
            top.push(Candidate { key, id: i as u32 });
        }
    }
    (top.into_sorted(), max)
}

// ---- helpers -----------------------------------------------------------------------------------

/// Weights in `[0, 1]` as unsigned fixed-point numbers: the top-p decisions add these, so a
/// mass is exact and the same whatever order its terms were added in (no rounding drift over
/// 50257 terms, no disagreement between a histogram's bins and a direct sum), and an add is one
/// integer instruction or two.
#[derive(Debug, Clone, Copy)]
struct Fixed {
    /// Fractional bits, chosen so that `len` weights of at most 1 sum below 2^63 (47 for GPT-2's
    /// vocabulary: each weight is exact to 7e-15).
    frac: u32,
}

impl Fixed {
    fn for_len(len: usize) -> Self {
        Self {
            frac: 63u32
                .saturating_sub(usize::BITS - len.leading_zeros())
                .min(47),
        }
    }

    /// `floor(w · 2^frac)` for `w` in `[0, 1]`, from the bits (integer operations only; the
    /// mantissa is shifted into place, subnormals and zero give 0).
    #[inline]
    fn of(self, w: f32) -> u64 {
        let bits = w.to_bits();
        let mantissa = u64::from((bits & 0x007f_ffff) | 0x0080_0000) << 24; // 1.m · 2^47
        let shift = (174 - self.frac).saturating_sub(bits >> 23).min(63); // 174 = 127 + 47
        mantissa >> shift
    }

    /// 2^frac, the fixed-point 1.
    fn one(self) -> f64 {
        (1u64 << self.frac) as f64
    }
}

/// The mass a nucleus must reach, given the total mass (in fixed-point units):
/// `total · top_p · (1 - 2^-20)` rounded down (see the module docs for the slack), at least 1.
fn top_p_goal(total: f64, top_p: f32) -> u64 {
    ((total * f64::from(top_p) * f64::from(TOP_P_SLACK)) as u64).max(1)
}

/// Kahan-compensated f32 sum: the error stays near 2 ulp of the total however many terms there
/// are (a plain f32 sum of 50257 weights drifts by ~1e-4 relative).
#[derive(Debug, Clone, Copy)]
struct Sum {
    s: f32,
    c: f32,
}

impl Sum {
    const ZERO: Self = Self { s: 0.0, c: 0.0 };

    #[inline]
    fn add(&mut self, x: f32) {
        let y = x - self.c;
        let t = self.s + y;
        self.c = (t - self.s) - y;
        self.s = t;
    }

    fn get(self) -> f32 {
        self.s
    }
}

/// Candidate order: key descending, then id ascending (a total order: keys are never NaN, and
/// never -0.0, so `total_cmp` agrees with `==`).
fn rank(a: &Candidate, b: &Candidate) -> Ordering {
    b.key.total_cmp(&a.key).then(a.id.cmp(&b.id))
}

/// Keeps the `cap` best candidates (see [`rank`]) of those pushed, in a buffer of 2·cap: when it
/// fills, a quickselect keeps the best `cap` and raises the bar, so a push costs O(1) amortised
/// even when every logit beats the bar (increasing logits). (A smaller buffer works, with more
/// compactions; `cap` is capped below its length.)
struct TopBuf<'a> {
    buf: &'a mut [Candidate],
    cap: usize,
    len: usize,
    /// A candidate pushed later (larger id) must have a key above this to be among the best.
    bar: f32,
}

impl<'a> TopBuf<'a> {
    fn new(buf: &'a mut [Candidate], cap: usize) -> Self {
        let cap = cap.min(buf.len().saturating_sub(1));
        let bar = if cap == 0 {
            f32::INFINITY
        } else {
            f32::NEG_INFINITY
        };
        Self {
            buf,
            cap,
            len: 0,
            bar,
        }
    }

    #[inline]
    fn push(&mut self, c: Candidate) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = c;
            self.len += 1;
            if self.len == self.buf.len() {
                self.compact();
            }
        }
    }

    fn compact(&mut self) {
        if self.len > self.cap && self.cap > 0 {
            if let Some(live) = self.buf.get_mut(..self.len) {
                let (_, kth, _) = live.select_nth_unstable_by(self.cap - 1, rank);
                self.bar = kth.key;
            }
            self.len = self.cap;
        }
    }

    /// Sorts the kept candidates (see [`rank`]) to the front; returns how many.
    fn into_sorted(mut self) -> usize {
        self.compact();
        if let Some(live) = self.buf.get_mut(..self.len) {
            live.sort_unstable_by(rank);
        }
        self.len
    }
}

/// Fixed-point mass and count of the weights in one histogram bin.
#[derive(Debug, Clone, Copy)]
struct Bin {
    mass: u64,
    count: usize,
}

const EMPTY_BIN: Bin = Bin { mass: 0, count: 0 };

/// Masses and counts of the weights whose bit patterns (which order non-negative floats) lie in
/// the bracket `[lo, hi)`, in `BINS` bins of `2^shift` bit patterns each.
#[derive(Debug, Clone)]
struct Histogram {
    fixed: Fixed,
    lo: u32,
    hi: u32,
    shift: u32,
    /// `BINS` bins upwards from `lo` (those past `hi` stay empty), and a spare one.
    bins: [Bin; BINS + 1],
}

impl Histogram {
    fn new(fixed: Fixed) -> Self {
        Self {
            fixed,
            lo: 0,
            hi: 0,
            shift: 0,
            bins: [EMPTY_BIN; BINS + 1],
        }
    }

    /// One pass: the histogram of `weights` for the bracket `[lo, hi)`. With `wide` (when a large
    /// share of the weights may be inside, so that whether one is inside is a coin toss for the
    /// branch predictor) it is branch-free; otherwise it branches, rarely taken.
    fn fill(&mut self, weights: &[f32], lo: u32, hi: u32, wide: bool) {
        let span = hi.saturating_sub(lo);
        let shift = (u32::BITS - span.saturating_sub(1).leading_zeros())
            .saturating_sub(BINS.trailing_zeros());
        (self.lo, self.hi, self.shift) = (lo, hi, shift);
        self.bins.fill(EMPTY_BIN);
        let fixed = self.fixed;
        if wide {
            for &w in weights {
                // no branch (LLVM turns `if` and `min` into branches here): a weight outside the
                // bracket (below `lo` it wraps to a huge offset) goes to the spare bin
                let offset = w.to_bits().wrapping_sub(lo);
                let raw = (offset >> shift) as usize;
                let spare = usize::from((offset >= span) | (raw >= BINS)).wrapping_neg(); // 0 or !0
                if let Some(bin) = self.bins.get_mut((raw & !spare) | (BINS & spare)) {
                    bin.mass += fixed.of(w);
                    bin.count += 1;
                }
            }
        } else {
            for &w in weights {
                let offset = w.to_bits().wrapping_sub(lo);
                if offset < span {
                    if let Some(bin) = self.bins.get_mut((offset >> shift) as usize) {
                        bin.mass += fixed.of(w);
                        bin.count += 1;
                    }
                }
            }
        }
    }

    /// The bins of the bracket, downwards: `(lower edge, bin)`.
    fn bracket(&self) -> impl Iterator<Item = (u32, &Bin)> {
        let (lo, hi, shift) = (u64::from(self.lo), u64::from(self.hi), self.shift);
        let bins = self.bins.iter().enumerate().take(BINS).rev();
        bins.filter_map(move |(i, b)| {
            let edge = lo + ((i as u64) << shift);
            if edge < hi {
                u32::try_from(edge).ok().map(|e| (e, b))
            } else {
                None
            }
        })
    }

    /// The mass of the bracket.
    fn mass(&self) -> u64 {
        self.bracket().map(|(_, b)| b.mass).sum()
    }

    /// Walks the bins down from `hi`, adding their masses to `m_hi` (the mass above the bracket),
    /// to the bin where the mass reaches `goal`: `(lo, hi, mass above it, its count)`.
    fn narrow(&self, m_hi: u64, goal: u64) -> Option<(u32, u32, u64, usize)> {
        let mut mass = m_hi;
        let mut top = self.hi; // upper edge of the bins added so far
        for (edge, b) in self.bracket() {
            if b.count > 0 {
                if mass + b.mass >= goal {
                    return Some((edge, top, mass, b.count));
                }
                mass += b.mass;
            }
            top = edge;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::collections::BTreeSet;
    use std::vec;
    use std::vec::Vec;

    /// Upper 0.999 quantiles of the chi-square distribution, for 1..=10 degrees of freedom.
    const CHI2_999: [f64; 10] = [
        10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588,
    ];

    /// Nine tokens whose softmax at T = 0.7 has no probability below 0.5 %, so 100k draws put
    /// more than 500 expected in every cell. Sorted by probability: 2, 4, 8, 0, 7, 1, 5, 3, 6.
    const LOGITS9: [f32; 9] = [1.0, 0.5, 2.0, -0.3, 1.5, 0.0, -1.0, 0.8, 1.2];
    const DRAWS: usize = 100_000;

    fn cfg(temperature: f32, top_k: usize, top_p: f32) -> SamplerConfig {
        SamplerConfig {
            temperature,
            top_k,
            top_p,
            repetition_penalty: 1.0,
            seed: 42,
        }
    }

    /// Histogram of `draws` samples (fresh logits each time).
    fn histogram<const K: usize>(c: SamplerConfig, logits: &[f32], draws: usize) -> Vec<u64> {
        let mut s = Sampler::<K>::new(c).unwrap();
        let mut buf = logits.to_vec();
        let mut counts = vec![0u64; logits.len()];
        for _ in 0..draws {
            buf.copy_from_slice(logits);
            counts[s.sample(&mut buf, &[]).unwrap() as usize] += 1;
        }
        counts
    }

    /// softmax(logits / t) in f64, renormalised over `kept` (0 elsewhere).
    fn softmax_over(logits: &[f32], t: f64, kept: &[usize]) -> Vec<f64> {
        let max = kept
            .iter()
            .map(|&i| logits[i] as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let mut p = vec![0.0; logits.len()];
        for &i in kept {
            p[i] = ((logits[i] as f64 - max) / t).exp();
        }
        let s: f64 = p.iter().sum();
        p.iter().map(|x| x / s).collect()
    }

    /// Pearson's statistic over the cells with p > 0 (and the degrees of freedom); cells with
    /// p == 0 must be empty.
    fn chi_square(counts: &[u64], p: &[f64]) -> (f64, usize) {
        let n: u64 = counts.iter().sum();
        let mut stat = 0.0;
        let mut cells = 0;
        for (i, (&c, &pi)) in counts.iter().zip(p).enumerate() {
            if pi == 0.0 {
                assert_eq!(
                    c, 0,
                    "token {i} is outside the kept set but was drawn {c} times"
                );
            } else {
                let e = pi * n as f64;
                assert!(
                    e >= 5.0,
                    "expected count {e} too small for the chi-square test"
                );
                stat += (c as f64 - e).powi(2) / e;
                cells += 1;
            }
        }
        (stat, cells - 1)
    }

    fn assert_fits(counts: &[u64], p: &[f64], what: &str) {
        let (stat, df) = chi_square(counts, p);
        let crit = CHI2_999[df - 1];
        assert!(
            stat < crit,
            "{what}: chi-square {stat:.2} >= {crit} (df {df}); counts {counts:?}"
        );
    }

    /// The kept set as `select` leaves it, and whether the vocabulary part is used (the
    /// threshold search ran); checks that the sums it reports are bit-identical to the sums the
    /// draw walks, and that draws land in the set.
    fn kept_set<const K: usize>(c: SamplerConfig, logits: &[f32]) -> (BTreeSet<u32>, bool) {
        let mut s = Sampler::<K>::new(c).unwrap();
        let mut buf = logits.to_vec();
        let kept = s.select(&mut buf).unwrap();
        let top = &s.cand.as_flattened()[..kept.len];
        let below = top.iter().fold(0.0f32, |a, c| a + c.key);
        assert_eq!(below.to_bits(), kept.below.to_bits());
        let mut set: BTreeSet<u32> = top.iter().filter(|c| c.key > 0.0).map(|c| c.id).collect();
        if let Some(tau) = kept.tau {
            let above = buf
                .iter()
                .filter(|&&w| w >= tau)
                .fold(0.0f32, |a, &w| a + w);
            assert_eq!(above.to_bits(), kept.above.to_bits());
            for (i, &w) in buf.iter().enumerate() {
                if w >= tau && w > 0.0 {
                    assert!(top.iter().all(|c| c.id != i as u32), "token {i} kept twice");
                    set.insert(i as u32);
                }
            }
        } else {
            assert_eq!(kept.above, 0.0);
        }
        for u in [0.0, 0.25, 0.5, 0.999, U_MAX] {
            let id = s.draw(&buf, kept, u).unwrap();
            assert!(
                set.contains(&id),
                "draw at u = {u} gave {id}, outside the kept set"
            );
        }
        (set, kept.tau.is_some())
    }

    /// The largest `next_f32`: 1 - 2^-24.
    const U_MAX: f32 = (u32::MAX >> 8) as f32 / 16_777_216.0;

    fn set(ids: &[u32]) -> BTreeSet<u32> {
        ids.iter().copied().collect()
    }

    // ---- PRNG ----------------------------------------------------------------------------------

    #[test]
    fn pcg32_matches_reference_demo() {
        // pcg-c-basic's pcg32-demo: pcg32_srandom_r(&rng, 42u, 54u), first outputs.
        let mut r = Pcg32::new(42, 54);
        let got: Vec<u32> = (0..6).map(|_| r.next_u32()).collect();
        assert_eq!(
            got,
            [0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e]
        );
    }

    #[test]
    fn splitmix64_matches_reference() {
        // Vigna's splitmix64.c with x = 0.
        let mut r = SplitMix64(0);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f]
        );
    }

    #[test]
    fn seed_42_stream_is_pinned() {
        // Pinned; cross-checked once against rand_pcg 0.9's Pcg32::new fed by rand_xoshiro 0.7's
        // SplitMix64. Changing the seeding or the f32 conversion breaks every saved transcript,
        // so it must show up here.
        let mut r = Pcg32::from_seed(42);
        let got: Vec<u32> = (0..4).map(|_| r.next_u32()).collect();
        assert_eq!(got, SEED_42_U32);
        let mut r = Pcg32::from_seed(42);
        let u: Vec<f32> = (0..4).map(|_| r.next_f32()).collect();
        let want: Vec<f32> = SEED_42_U32
            .iter()
            .map(|&x| (x >> 8) as f32 / 16_777_216.0)
            .collect();
        assert_eq!(u, want);
    }
    const SEED_42_U32: [u32; 4] = [3508393247, 2846903365, 3050928809, 2850731726];

    #[test]
    fn token_streams_for_seed_42_are_pinned() {
        // The draws every target must reproduce (host == firmware), one mode per row.
        let logits = random_logits(11, 50257, 3.0);
        let stream = |c: SamplerConfig, k_small: bool| -> Vec<u32> {
            let mut buf = logits.clone();
            if k_small {
                let mut s = Sampler::<2>::new(c).unwrap();
                (0..6)
                    .map(|_| {
                        buf.copy_from_slice(&logits);
                        s.sample(&mut buf, &[]).unwrap()
                    })
                    .collect()
            } else {
                let mut s = Sampler::<64>::new(c).unwrap();
                (0..6)
                    .map(|_| {
                        buf.copy_from_slice(&logits);
                        s.sample(&mut buf, &[]).unwrap()
                    })
                    .collect()
            }
        };
        let got = [
            stream(cfg(0.8, 0, 1.0), false),
            stream(cfg(0.8, 40, 1.0), false),
            stream(cfg(0.8, 0, 0.9), false),
            stream(cfg(0.8, 0, 0.9), true),
            stream(
                SamplerConfig {
                    repetition_penalty: 1.3,
                    ..cfg(0.8, 40, 0.9)
                },
                false,
            ),
        ];
        assert_eq!(got, PINNED_STREAMS);
    }
    /// Rows 3 and 4 differ in their last token: the mapping from the uniform draw to a token
    /// depends on which kept tokens sit in the candidate array, hence on `K` (both are exact).
    const PINNED_STREAMS: [[u32; 6]; 5] = [
        [45998, 41594, 41594, 41594, 48263, 38134],
        [11038, 42061, 16604, 42061, 14269, 25812],
        [46928, 41594, 41595, 41594, 48263, 40076],
        [46928, 41594, 41595, 41594, 48263, 40050],
        [49515, 43849, 42061, 43849, 44151, 44955],
    ];

    #[test]
    fn next_f32_is_in_unit_interval() {
        let mut r = Pcg32::from_seed(7);
        for _ in 0..100_000 {
            let u = r.next_f32();
            assert!((0.0..1.0).contains(&u));
        }
        // the largest possible draw is 1 - 2^-24, still < 1
        assert!(((u32::MAX >> 8) as f32 * (1.0 / 16_777_216.0)) < 1.0);
    }

    // ---- configuration -------------------------------------------------------------------------

    #[test]
    fn validate_rejects_each_bad_parameter() {
        let ok = SamplerConfig {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.9,
            repetition_penalty: 1.3,
            seed: 1,
        };
        assert_eq!(ok.validate(64), Ok(()));
        assert_eq!(SamplerConfig::greedy().validate(0), Ok(()));
        assert!(SamplerConfig::greedy().is_greedy());
        let err = |what| Err(Error::BadSamplerParam { what });
        for t in [-0.1, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(
                SamplerConfig {
                    temperature: t,
                    ..ok
                }
                .validate(64),
                err(SamplerParam::Temperature)
            );
        }
        assert_eq!(
            SamplerConfig {
                temperature: -0.0,
                ..ok
            }
            .validate(64),
            Ok(())
        );
        assert_eq!(ok.validate(39), err(SamplerParam::TopK));
        assert_eq!(SamplerConfig { top_k: 64, ..ok }.validate(64), Ok(()));
        for p in [0.0, -0.5, 1.0001, f32::NAN, f32::INFINITY] {
            assert_eq!(
                SamplerConfig { top_p: p, ..ok }.validate(64),
                err(SamplerParam::TopP)
            );
        }
        assert_eq!(SamplerConfig { top_p: 1.0, ..ok }.validate(64), Ok(()));
        for r in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            assert_eq!(
                SamplerConfig {
                    repetition_penalty: r,
                    ..ok
                }
                .validate(64),
                err(SamplerParam::RepetitionPenalty)
            );
        }
        assert_eq!(
            Sampler::<8>::new(ok).err(),
            Some(Error::BadSamplerParam {
                what: SamplerParam::TopK
            })
        );
        assert!(Sampler::<64>::new(ok).is_ok());
    }

    // ---- greedy --------------------------------------------------------------------------------

    #[test]
    fn greedy_is_argmax_lowest_index_nan_ignored() {
        let mut s = Sampler::<4>::new(SamplerConfig::greedy()).unwrap();
        assert_eq!(
            s.sample(&mut [1.0, f32::NAN, 3.0, 3.0, f32::NEG_INFINITY], &[]),
            Ok(2)
        );
        assert_eq!(s.sample(&mut [f32::NAN, -5.0], &[]), Ok(1));
        assert_eq!(
            s.sample(&mut [0.0, f32::INFINITY, 1.0, f32::INFINITY], &[]),
            Ok(1)
        );
        assert_eq!(s.sample(&mut [-1e30, f32::NEG_INFINITY], &[]), Ok(0));
        let bad = Err(BAD_LOGITS);
        assert_eq!(s.sample(&mut [], &[]), bad);
        assert_eq!(s.sample(&mut [f32::NAN; 3], &[]), bad);
        assert_eq!(s.sample(&mut [f32::NEG_INFINITY, f32::NAN], &[]), bad);
    }

    // ---- distributions -------------------------------------------------------------------------

    #[test]
    fn temperature_matches_softmax_chi_square() {
        let counts = histogram::<64>(cfg(0.7, 0, 1.0), &LOGITS9, DRAWS);
        let all: Vec<usize> = (0..9).collect();
        assert_fits(&counts, &softmax_over(&LOGITS9, 0.7, &all), "T = 0.7");
        // the test has power: the same counts are far from softmax at T = 1
        let (stat, df) = chi_square(&counts, &softmax_over(&LOGITS9, 1.0, &all));
        assert!(
            stat > 10.0 * CHI2_999[df - 1],
            "T = 1 should be rejected, chi-square {stat}"
        );
    }

    #[test]
    fn top_k_matches_renormalised_softmax_chi_square() {
        let counts = histogram::<64>(cfg(0.7, 4, 1.0), &LOGITS9, DRAWS);
        assert_fits(
            &counts,
            &softmax_over(&LOGITS9, 0.7, &[2, 4, 8, 0]),
            "top-k 4",
        );
    }

    #[test]
    fn top_p_matches_renormalised_softmax_chi_square() {
        // cumulative mass at T = 0.7 in order 2, 4, 8, 0, 7: .407 .607 .737 .835 .908
        let kept = [2, 4, 8, 0, 7];
        let p = softmax_over(&LOGITS9, 0.7, &kept);
        // nucleus read off the K-array
        assert_fits(
            &histogram::<64>(cfg(0.7, 0, 0.85), &LOGITS9, DRAWS),
            &p,
            "top-p, K = 64",
        );
        // K-array too small: histogram passes, then the bracket sorted in the array
        assert_fits(
            &histogram::<2>(cfg(0.7, 0, 0.85), &LOGITS9, DRAWS),
            &p,
            "top-p, K = 2",
        );
        // no array at all: histogram passes down to a single bit pattern
        assert_fits(
            &histogram::<0>(cfg(0.7, 0, 0.85), &LOGITS9, DRAWS),
            &p,
            "top-p, K = 0",
        );
    }

    #[test]
    fn top_k_then_top_p_chi_square() {
        // within the top 6 (mass .956): .426 .209 .136 .102 | .077 .050 -> p = 0.8 keeps 4
        let counts = histogram::<8>(cfg(0.7, 6, 0.8), &LOGITS9, DRAWS);
        assert_fits(
            &counts,
            &softmax_over(&LOGITS9, 0.7, &[2, 4, 8, 0]),
            "top-k 6 + top-p 0.8",
        );
    }

    // ---- kept sets -----------------------------------------------------------------------------

    /// Probabilities 0.5, 0.3, 0.1, 0.06, 0.04 at T = 1, scattered over 7 ids (two -inf).
    fn crafted() -> (Vec<f32>, [u32; 5]) {
        let ids = [3, 0, 6, 1, 4]; // ids in order of probability
        let mut logits = vec![f32::NEG_INFINITY; 7];
        for (&id, p) in ids.iter().zip([0.5f32, 0.3, 0.1, 0.06, 0.04]) {
            logits[id as usize] = p.ln() + 2.5;
        }
        (logits, ids)
    }

    fn check_crafted_top_p<const K: usize>() {
        let (logits, ids) = crafted();
        for (p, n) in [
            (0.8, 2),
            (0.81, 3),
            (0.5, 1),
            (0.51, 2),
            (0.9, 3),
            (0.95, 4),
            (0.97, 5),
            (1.0, 5),
            (1e-6, 1),
        ] {
            let want = set(&ids[..n]);
            assert_eq!(
                kept_set::<K>(cfg(1.0, 0, p), &logits).0,
                want,
                "top-p {p}, K = {K}"
            );
            if K >= 5 {
                assert_eq!(
                    kept_set::<K>(cfg(1.0, 5, p), &logits).0,
                    want,
                    "top-k 5 + top-p {p}"
                );
            }
        }
    }

    #[test]
    fn top_p_keeps_exactly_the_hf_set_on_crafted_logits() {
        check_crafted_top_p::<0>();
        check_crafted_top_p::<1>();
        check_crafted_top_p::<2>();
        check_crafted_top_p::<3>();
        check_crafted_top_p::<64>();
    }

    #[test]
    fn top_k_keeps_the_k_largest() {
        let (logits, ids) = crafted();
        for k in 1..=5 {
            assert_eq!(
                kept_set::<8>(cfg(1.0, k, 1.0), &logits).0,
                set(&ids[..k]),
                "top-k {k}"
            );
        }
        // k larger than the vocabulary (and than the finite logits): all finite ones
        assert_eq!(kept_set::<8>(cfg(1.0, 8, 1.0), &logits).0, set(&ids));
        // ties at the cut: lower ids first
        assert_eq!(
            kept_set::<4>(cfg(1.0, 2, 1.0), &[1.0, 3.0, 1.0, 1.0]).0,
            set(&[1, 0])
        );
    }

    #[test]
    fn top_p_keeps_tied_tokens_together() {
        let logits = [0.0, 1.0, 1.0, 1.0, 1.0, -3.0];
        // mass strictly above each 1.0 token is 0 < p: the whole tie group stays
        let want = set(&[1, 2, 3, 4]);
        assert_eq!(kept_set::<64>(cfg(1.0, 0, 0.3), &logits).0, want);
        assert_eq!(kept_set::<2>(cfg(1.0, 0, 0.3), &logits).0, want);
        assert_eq!(kept_set::<0>(cfg(1.0, 0, 0.3), &logits).0, want);
        assert_eq!(kept_set::<8>(cfg(1.0, 6, 0.3), &logits).0, want);
    }

    /// Normal(0, sigma) logits from our own PRNG (Box-Muller).
    fn random_logits(seed: u64, n: usize, sigma: f64) -> Vec<f32> {
        let mut r = Pcg32::from_seed(seed);
        (0..n)
            .map(|_| {
                let u1 = (r.next_u32() as f64 + 1.0) / 4_294_967_296.0;
                let u2 = r.next_u32() as f64 / 4_294_967_296.0;
                (sigma * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
            })
            .collect()
    }

    /// Hugging Face's rule by brute force: sort descending, keep while the mass before < p.
    /// Returns the set and how far the boundary masses are from p (to skip ill-conditioned cases).
    fn brute_force_top_p(logits: &[f32], t: f64, top_k: usize, p: f64) -> (BTreeSet<u32>, f64) {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].partial_cmp(&logits[a]).unwrap().then(a.cmp(&b)));
        if top_k > 0 {
            order.truncate(top_k);
        }
        let max = logits[order[0]] as f64;
        let w: Vec<f64> = order
            .iter()
            .map(|&i| ((logits[i] as f64 - max) / t).exp())
            .collect();
        let total: f64 = w.iter().sum();
        let mut before = 0.0;
        let mut kept = BTreeSet::new();
        let mut margin = f64::INFINITY;
        for (&i, &wi) in order.iter().zip(&w) {
            margin = margin.min((before / total - p).abs());
            if before / total >= p {
                break;
            }
            kept.insert(i as u32);
            before += wi;
        }
        (kept, margin)
    }

    #[test]
    fn top_p_matches_brute_force_sort_on_gpt2_sized_logits() {
        let (mut compared, mut searched, mut in_array) = (0, 0, 0);
        for seed in 0..6u64 {
            for sigma in [1.5, 3.0, 6.0] {
                let logits = random_logits(seed, 50257, sigma);
                for t in [1.0f32, 0.7] {
                    for p in [0.3f32, 0.9, 0.95] {
                        let what = std::format!("seed {seed} sigma {sigma} T {t} p {p}");
                        let (want, margin) = brute_force_top_p(&logits, t as f64, 0, p as f64);
                        // a boundary within f32 rounding of p: either answer is right
                        if margin >= 2e-6 {
                            let (got, vocab_part) = kept_set::<64>(cfg(t, 0, p), &logits);
                            assert_eq!(got, want, "{what} (K = 64)");
                            (searched, in_array) = (
                                searched + vocab_part as usize,
                                in_array + !vocab_part as usize,
                            );
                            assert_eq!(
                                kept_set::<8>(cfg(t, 0, p), &logits).0,
                                want,
                                "{what} (K = 8)"
                            );
                            if seed == 0 {
                                // no candidate array: histogram passes down to single bit patterns
                                assert_eq!(
                                    kept_set::<0>(cfg(t, 0, p), &logits).0,
                                    want,
                                    "{what} (K = 0)"
                                );
                                assert_eq!(
                                    kept_set::<1>(cfg(t, 0, p), &logits).0,
                                    want,
                                    "{what} (K = 1)"
                                );
                            }
                            compared += 1;
                        }
                        // top-k 50 then top-p inside
                        let (want, margin) = brute_force_top_p(&logits, t as f64, 50, p as f64);
                        if margin >= 2e-6 {
                            assert_eq!(
                                kept_set::<64>(cfg(t, 50, p), &logits).0,
                                want,
                                "{what}, top-k 50"
                            );
                        }
                    }
                }
            }
        }
        assert!(compared >= 80, "only {compared} cases compared");
        assert!(
            searched >= 10 && in_array >= 10,
            "threshold search {searched}, K-array {in_array}"
        );
    }

    #[test]
    fn top_k_matches_brute_force_sort_on_gpt2_sized_logits() {
        let logits = random_logits(9, 50257, 3.0);
        // increasing logits: every one beats the bar, the buffer compacts every k pushes
        let increasing: Vec<f32> = (0..50257).map(|i| i as f32 * 1e-3).collect();
        // few distinct values: ties at the cut go to the lower ids
        let ties: Vec<f32> = (0..50257u32).map(|i| ((i * 7919) % 13) as f32).collect();
        for l in [&logits, &increasing, &ties] {
            for k in [1, 7, 50, 64] {
                let (want, _) = brute_force_top_p(l, 1.0, k, 1.0);
                assert_eq!(kept_set::<64>(cfg(1.0, k, 1.0), l).0, want, "top-k {k}");
            }
        }
    }

    #[test]
    fn fixed_point_weights_are_floor_of_w_times_2_pow_frac() {
        let fixed = Fixed::for_len(50257);
        assert_eq!(fixed.frac, 47);
        assert_eq!(Fixed::for_len(u32::MAX as usize).frac, 31);
        let exact = |w: f32| (w as f64 * fixed.one()).floor() as u64;
        for w in [
            0.0,
            1.0,
            0.5,
            2f32.powi(-47),
            2f32.powi(-48),
            1e-30,
            f32::from_bits(1),
            0.999_999_94,
        ] {
            assert_eq!(fixed.of(w), exact(w), "{w:e}");
        }
        let mut r = Pcg32::from_seed(5);
        for _ in 0..100_000 {
            let w = f32::from_bits(r.next_u32() % 0x3f80_0001); // any weight in [0, 1]
            assert_eq!(fixed.of(w), exact(w), "{w:e}");
        }
    }

    // ---- streams -------------------------------------------------------------------------------

    fn stream(c: SamplerConfig, n: usize) -> Vec<u32> {
        let logits = random_logits(3, 1000, 2.0);
        let mut s = Sampler::<64>::new(c).unwrap();
        let mut buf = logits.clone();
        (0..n)
            .map(|_| {
                buf.copy_from_slice(&logits);
                s.sample(&mut buf, &[]).unwrap()
            })
            .collect()
    }

    #[test]
    fn same_seed_same_stream_different_seed_different_stream() {
        for c in [
            cfg(1.0, 0, 1.0),
            cfg(0.8, 40, 1.0),
            cfg(1.0, 0, 0.9),
            cfg(0.9, 64, 0.95),
        ] {
            let a = stream(c, 500);
            assert_eq!(a, stream(c, 500));
            let b = stream(SamplerConfig { seed: 43, ..c }, 500);
            assert_ne!(a, b);
            assert!(a.iter().zip(&b).filter(|(x, y)| x != y).count() > 100);
        }
        // reseed replays
        let logits = random_logits(3, 1000, 2.0);
        let mut s = Sampler::<64>::new(cfg(1.0, 0, 1.0)).unwrap();
        let first: Vec<u32> = (0..50)
            .map(|_| s.sample(&mut logits.clone(), &[]).unwrap())
            .collect();
        s.reseed(42);
        let again: Vec<u32> = (0..50)
            .map(|_| s.sample(&mut logits.clone(), &[]).unwrap())
            .collect();
        assert_eq!(first, again);
    }

    #[test]
    fn draw_at_the_ends_of_the_unit_interval() {
        let u_max = U_MAX;
        for top_k in [0, 3] {
            let mut s = Sampler::<4>::new(cfg(1.0, top_k, 1.0)).unwrap();
            let mut w = [
                f32::NEG_INFINITY,
                0.0,
                1.0,
                f32::NAN,
                0.5,
                f32::NEG_INFINITY,
            ];
            let kept = s.select(&mut w).unwrap();
            // index order for the vocabulary walk, descending weight inside the top-k array
            let (first, last) = if top_k == 0 { (1, 4) } else { (2, 1) };
            assert_eq!(s.draw(&w, kept, 0.0), Some(first));
            assert_eq!(s.draw(&w, kept, u_max), Some(last));
        }
    }

    // ---- repetition penalty --------------------------------------------------------------------

    #[test]
    fn repetition_penalty_changes_greedy_choice() {
        let greedy = |penalty: f32| {
            Sampler::<1>::new(SamplerConfig {
                repetition_penalty: penalty,
                ..SamplerConfig::greedy()
            })
            .unwrap()
        };
        // positive logit divided: 2.0 / 1.2 = 1.67 < 1.9
        assert_eq!(greedy(1.0).sample(&mut [2.0, 1.9, -1.0], &[0]), Ok(0));
        assert_eq!(greedy(1.2).sample(&mut [2.0, 1.9, -1.0], &[0]), Ok(1));
        // negative logit multiplied: -0.9 * 1.2 = -1.08 < -1.0
        assert_eq!(greedy(1.2).sample(&mut [-1.0, -0.9], &[1]), Ok(0));
        // penalty < 1 encourages: 1.5 / 0.7 = 2.14 > 2.0
        assert_eq!(greedy(0.7).sample(&mut [2.0, 1.5], &[1]), Ok(1));
        // each distinct token once: 2.0 / 1.2 = 1.67 > 1.5 (thrice would be 1.16)
        let mut l = [2.0, 1.5];
        assert_eq!(greedy(1.2).sample(&mut l, &[0, 0, 0]), Ok(0));
        assert_eq!(l, [2.0 / 1.2, 1.5]);
        // ids outside the vocabulary: error, logits untouched; ignored when the penalty is off
        let mut l = [2.0, 1.5];
        assert_eq!(
            greedy(1.2).sample(&mut l, &[0, 2]),
            Err(Error::InvalidToken {
                id: 2,
                vocab_size: 2
            })
        );
        assert_eq!(l, [2.0, 1.5]);
        assert_eq!(greedy(1.0).sample(&mut l, &[7]), Ok(0));
        // it also applies before sampling: token 0 loses almost all its mass
        let c = SamplerConfig {
            repetition_penalty: 100.0,
            ..cfg(1.0, 0, 1.0)
        };
        let mut s = Sampler::<4>::new(c).unwrap();
        for _ in 0..200 {
            assert_eq!(s.sample(&mut [10.0, 9.0, -20.0], &[0, 2]), Ok(1));
        }
    }

    // ---- edge cases ----------------------------------------------------------------------------

    fn every_mode() -> [SamplerConfig; 5] {
        [
            SamplerConfig::greedy(),
            cfg(1.0, 0, 1.0),
            cfg(1.0, 3, 1.0),
            cfg(1.0, 0, 0.9),
            cfg(1.0, 3, 0.9),
        ]
    }

    #[test]
    fn empty_and_all_nan_logits_are_errors_in_every_mode() {
        for c in every_mode() {
            let mut s = Sampler::<4>::new(c).unwrap();
            assert_eq!(s.sample(&mut [], &[]), Err(BAD_LOGITS), "{c:?}");
            assert_eq!(s.sample(&mut [f32::NAN; 5], &[]), Err(BAD_LOGITS), "{c:?}");
            assert_eq!(
                s.sample(&mut [f32::NEG_INFINITY, f32::NAN], &[]),
                Err(BAD_LOGITS),
                "{c:?}"
            );
            // a failed call draws nothing: the next draw is the seed's first
            let mut fresh = Sampler::<4>::new(c).unwrap();
            let l = random_logits(1, 20, 1.0);
            assert_eq!(
                s.sample(&mut l.clone(), &[]),
                fresh.sample(&mut l.clone(), &[])
            );
        }
    }

    #[test]
    fn infinite_logits_share_all_the_mass() {
        let logits = [
            0.0,
            f32::INFINITY,
            1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        for c in every_mode() {
            let counts = histogram::<4>(c, &logits, 2000);
            if c.is_greedy() {
                assert_eq!(counts[1], 2000);
            } else {
                assert_eq!(counts[1] + counts[3], 2000, "{c:?}: {counts:?}");
                assert!(counts[1] > 800 && counts[3] > 800, "{c:?}: {counts:?}");
            }
        }
        // more +inf tokens than the K-array holds
        let mut many = [f32::INFINITY; 10];
        many[0] = 0.0;
        let counts = histogram::<4>(cfg(1.0, 0, 0.5), &many, 9000);
        assert_eq!(counts[0], 0);
        assert!(counts[1..].iter().all(|&c| c > 700), "{counts:?}");
    }

    #[test]
    fn tiny_temperature_is_greedy_without_nan() {
        let logits = [
            1e30,
            -1e30,
            3.0e30,
            2.9999e30,
            f32::NEG_INFINITY,
            0.0,
            2.99e30,
        ];
        for t in [1e-6, 1e-30, 1e-45] {
            for mut c in every_mode() {
                if c.is_greedy() {
                    continue;
                }
                c.temperature = t;
                let mut s = Sampler::<4>::new(c).unwrap();
                for _ in 0..100 {
                    assert_eq!(s.sample(&mut logits.clone(), &[]), Ok(2), "{c:?}");
                }
            }
        }
        // ordinary logits, T = 1e-6
        for mut c in every_mode() {
            c.temperature = 1e-6;
            let mut s = Sampler::<4>::new(c).unwrap();
            for _ in 0..100 {
                assert_eq!(s.sample(&mut LOGITS9.clone(), &[]), Ok(2), "{c:?}");
            }
        }
    }

    #[test]
    fn huge_temperature_is_uniform() {
        let counts = histogram::<16>(cfg(1e30, 0, 1.0), &LOGITS9, 9000);
        assert_fits(&counts, &[1.0 / 9.0; 9], "T = 1e30");
    }

    #[test]
    fn k_one_is_argmax_and_single_token_vocab_works() {
        let mut s = Sampler::<1>::new(cfg(1.0, 1, 1.0)).unwrap();
        for _ in 0..100 {
            assert_eq!(s.sample(&mut LOGITS9.clone(), &[]), Ok(2));
        }
        for c in every_mode() {
            let mut s = Sampler::<4>::new(c).unwrap();
            assert_eq!(s.sample(&mut [-3.0], &[]), Ok(0));
        }
    }

    #[test]
    fn top_p_one_and_k_beyond_vocab_keep_everything() {
        let all: Vec<usize> = (0..9).collect();
        let p = softmax_over(&LOGITS9, 0.7, &all);
        assert_fits(
            &histogram::<16>(cfg(0.7, 16, 1.0), &LOGITS9, DRAWS),
            &p,
            "top-k 16 > vocab 9",
        );
        assert_fits(
            &histogram::<16>(cfg(0.7, 16, 1.0 - 1e-7), &LOGITS9, DRAWS),
            &p,
            "top-p 1 - 1e-7",
        );
    }
}
