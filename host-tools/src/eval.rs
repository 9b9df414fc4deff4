//! Evaluation helpers shared by `host perplexity` and the tests.

use anyhow::Result;
use runtime::{KvDType, Model, Session, SessionSizes};

/// Result of a perplexity run.
#[derive(Debug, Clone, Copy)]
pub struct Perplexity {
    /// Sum of negative log-likelihoods (nats), accumulated in f64.
    pub nll_sum: f64,
    /// Tokens scored (every token but the first).
    pub tokens: usize,
}

impl Perplexity {
    /// Mean cross-entropy in nats per token.
    pub fn mean(&self) -> f64 {
        self.nll_sum / self.tokens.max(1) as f64
    }
    /// exp(mean).
    pub fn perplexity(&self) -> f64 {
        self.mean().exp()
    }
    /// Nats per character of a text of `chars` characters: the summed loss (nats/token × tokens
    /// scored) over the characters, which compares models with different tokenizers.
    pub fn nats_per_char(&self, chars: usize) -> f64 {
        self.nll_sum / chars.max(1) as f64
    }
}

/// −log softmax(logits)[target], in f64.
pub fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    max + sum.ln() - logits[target as usize] as f64
}

/// Mean cross-entropy of `ids` with a sliding window of `window` tokens and stride
/// `window / 2` (Hugging Face's recipe): the first window scores all its tokens, each later
/// window scores only its last `stride` tokens, each predicted from up to `window - 1` tokens
/// of context. Every token but the first is scored exactly once.
pub fn perplexity(model: &Model<'_>, ids: &[u32], window: usize, kv: KvDType) -> Result<Perplexity> {
    anyhow::ensure!(window >= 2, "the window must hold at least 2 tokens");
    let sizes = SessionSizes::with_kv(model.config(), window, window.min(64), kv);
    let (mut arena, mut kv_buf) = (vec![0.0f32; sizes.arena_len], vec![0.0f32; sizes.kv_len]);
    let mut s = Session::with_kv_dtype(model, &mut arena, &mut kv_buf, window, kv)?;
    let stride = window / 2;
    let (n, mut prev_end, mut out) = (ids.len(), 0usize, Perplexity { nll_sum: 0.0, tokens: 0 });
    let mut begin = 0;
    while begin < n {
        let end = (begin + window).min(n);
        let first_scored = (end - (end - prev_end)).max(1); // = max(prev_end, 1)
        s.reset();
        s.prefill_where(&ids[begin..end], |i| (first_scored..end).contains(&(begin + i + 1)), |i, logits| {
            // logits after token begin+i predict token begin+i+1
            let t = begin + i + 1;
            if t >= first_scored && t < end {
                out.nll_sum += nll(logits, ids[t]);
                out.tokens += 1;
            }
        })?;
        prev_end = end;
        if end == n {
            break;
        }
        begin += stride;
    }
    Ok(out)
}
