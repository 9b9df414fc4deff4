//! The generation loop: prefill the prompt, then sample → emit → decode until the end-of-text
//! token, the token limit, a stop request from the caller (e.g. a stop string, see
//! [`StopMatcher`]) or a full context. With `context_shift` a full context keeps its last half,
//! re-prefills it (learned positions and RoPE are both absolute, so cached keys and values
//! cannot be moved) and goes on, in the same fixed memory.
//!
//! [`generate`] starts a new sequence; [`generate_more`] appends to the one in the cache (a chat
//! turn: only the new text is prefilled). Both run the same loop.
//!
//! Context-shift policy, in both:
//! - **during generation**, a full cache keeps its most recent `capacity / 2` tokens, re-prefills
//!   them, then appends the new token;
//! - **when [`generate_more`]'s new tokens do not fit** beside the cached ones, the cache keeps its
//!   most recent `min(cached, capacity / 2 - new)` tokens (none if the new tokens alone fill half
//!   the context) and re-prefills them followed by the new tokens, so that the kept conversation
//!   and the new text take at most half of the context and the reply has the other half;
//! - in both, a sequence that starts with the model's beginning-of-text token keeps it in front
//!   of the kept tokens (it counts in the half, and stays even when the new tokens fill half): a
//!   Llama model's BOS, which it was trained to see first and which draws much of its attention,
//!   as llama.cpp keeps it; GPT-2's `<|endoftext|>` when a run started from it.

use crate::error::Error;
use crate::observe::{NoObserver, Observer};
use crate::sampler::Sampler;
use crate::session::Session;

/// How a generation run behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerateOptions {
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Stop when the model emits its end-of-text token (which is not passed to `on_token`).
    pub stop_at_eos: bool,
    /// When the KV cache is full, keep its last half, re-prefill, and continue.
    pub context_shift: bool,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced the end-of-text token.
    Eos,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The caller's `on_token` asked to stop (e.g. a stop string was seen).
    Stopped,
    /// The context is full and `context_shift` is off.
    ContextFull {
        /// Capacity of the KV cache in tokens.
        capacity: usize,
    },
    /// A runtime error after some tokens were already produced (they are kept).
    Error(Error),
}

/// What a generation run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Tokens passed to `on_token`.
    pub generated: usize,
    /// Why it ended.
    pub reason: StopReason,
    /// Number of context shifts.
    pub shifts: usize,
    /// Tokens re-prefilled by context shifts.
    pub reprefilled: usize,
}

/// The caller's answer to each new token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Keep going.
    Continue,
    /// End generation now (reported as [`StopReason::Stopped`]).
    Stop,
}

/// Generates from `prompt`, calling `on_token(id)` for each new token as soon as it is drawn.
///
/// `window` is caller memory of at least `session.capacity()` token ids; it holds the tokens in
/// the cache (the repetition penalty looks at them, a context shift re-prefills from them).
/// (A slice and a length, not a `heapless::Vec<u32, N>`: its capacity is the session's context,
/// which the caller chooses at run time (`host --ctx`, a board's `SessionSizes`), and a
/// `heapless::Vec` fixes it in the type.)
/// Errors are returned only when nothing has been generated yet (bad prompt, small window);
/// later failures end the run with [`StopReason::Error`] and keep what was produced.
pub fn generate<const K: usize>(
    session: &mut Session<'_>,
    sampler: &mut Sampler<K>,
    prompt: &[u32],
    window: &mut [u32],
    opts: &GenerateOptions,
    on_token: impl FnMut(u32) -> Control,
) -> Result<Summary, Error> {
    generate_observed(session, sampler, prompt, window, opts, &mut NoObserver, on_token)
}

/// [`generate`] with an observer: the same run, every forward pass and draw reported to `obs`
/// (see [`crate::observe`]; the firmware's `trace` build prints per-layer digests this way).
pub fn generate_observed<const K: usize, O: Observer>(
    session: &mut Session<'_>,
    sampler: &mut Sampler<K>,
    prompt: &[u32],
    window: &mut [u32],
    opts: &GenerateOptions,
    obs: &mut O,
    on_token: impl FnMut(u32) -> Control,
) -> Result<Summary, Error> {
    let capacity = session.capacity();
    if window.len() < capacity {
        return Err(Error::BufferTooSmall { needed: capacity, available: window.len() });
    }
    if prompt.len() > capacity {
        return Err(Error::ContextFull { used: 0, adding: prompt.len(), capacity });
    }
    session.reset();
    session.prefill_observed(prompt, obs)?;
    let len = prompt.len();
    if let Some(w) = window.get_mut(..len) {
        w.copy_from_slice(prompt);
    }
    let summary = Summary { generated: 0, reason: StopReason::MaxTokens, shifts: 0, reprefilled: 0 };
    Ok(run(session, sampler, window, len, opts, summary, obs, on_token))
}

/// Continues the sequence already in `session`: appends `tokens` to the KV cache (prefilling
/// only them) and generates as [`generate`] does. This is a chat turn: the conversation stays in
/// the cache and each turn costs only its new text.
///
/// `window[..session.pos()]` must hold the tokens in the cache, as [`generate`] and this
/// function leave it; on return it holds them again. A token passed to `on_token` last is not in
/// the cache (it was drawn, not yet fed back); a caller that wants it in the conversation passes
/// it at the head of the next call's `tokens`.
///
/// If `tokens` do not fit beside the cached ones: with `opts.context_shift` the cache keeps its
/// most recent `min(cached, capacity / 2 - tokens.len())` tokens (see the [module docs](self))
/// and re-prefills them before `tokens` (counted in [`Summary::shifts`] and
/// [`Summary::reprefilled`]); without it the result is [`Error::ContextFull`]. More tokens than
/// the whole context are [`Error::ContextFull`] either way, an id outside the vocabulary
/// [`Error::InvalidToken`]; on these errors the cache is unchanged.
pub fn generate_more<const K: usize>(
    session: &mut Session<'_>,
    sampler: &mut Sampler<K>,
    tokens: &[u32],
    window: &mut [u32],
    opts: &GenerateOptions,
    on_token: impl FnMut(u32) -> Control,
) -> Result<Summary, Error> {
    let capacity = session.capacity();
    let used = session.pos();
    if window.len() < capacity {
        return Err(Error::BufferTooSmall { needed: capacity, available: window.len() });
    }
    if tokens.is_empty() {
        return Err(Error::EmptyInput);
    }
    // every check before the cache changes
    let vocab_size = session.model().config().vocab_size;
    if let Some(&id) = tokens.iter().find(|&&id| id >= vocab_size) {
        return Err(Error::InvalidToken { id, vocab_size });
    }
    let fits = tokens.len() <= capacity.saturating_sub(used);
    if tokens.len() > capacity || (!fits && !opts.context_shift) {
        return Err(Error::ContextFull { used, adding: tokens.len(), capacity });
    }
    let mut summary = Summary { generated: 0, reason: StopReason::MaxTokens, shifts: 0, reprefilled: 0 };
    let mut len = used;
    if !fits {
        // keep a leading BOS, then the most recent tokens: the kept ones and the new ones fill at
        // most half
        let head = leading_bos(session, window, used).min(capacity - tokens.len());
        let recent = (capacity / 2).saturating_sub(tokens.len() + head).min(used - head);
        window.copy_within(used - recent..used, head);
        let keep = head + recent;
        session.reset();
        if keep > 0 {
            session.prefill(window.get(..keep).unwrap_or(&[]))?;
        }
        len = keep;
        summary.shifts = 1;
        summary.reprefilled = keep;
    }
    session.prefill(tokens)?;
    if let Some(w) = window.get_mut(len..len + tokens.len()) {
        w.copy_from_slice(tokens);
    }
    len += tokens.len();
    Ok(run(session, sampler, window, len, opts, summary, &mut NoObserver, on_token))
}

/// The loop both entry points share: `session` holds `window[..len]` and the logits after its
/// last token.
#[allow(clippy::too_many_arguments)]
fn run<const K: usize, O: Observer>(
    session: &mut Session<'_>,
    sampler: &mut Sampler<K>,
    window: &mut [u32],
    mut len: usize,
    opts: &GenerateOptions,
    mut summary: Summary,
    obs: &mut O,
    mut on_token: impl FnMut(u32) -> Control,
) -> Summary {
    let capacity = session.capacity();
    let eos = session.model().config().eos_token_id;
    if opts.max_tokens == 0 {
        return summary;
    }
    loop {
        // sample the next token from the logits of the last one
        let recent = window.get(..len).unwrap_or(&[]);
        let drawn = match session.logits() {
            Some(logits) => sampler.sample_observed(logits, recent, obs),
            None => Err(Error::EmptyInput),
        };
        let token = match drawn {
            Ok(t) => t,
            Err(e) => return Summary { reason: StopReason::Error(e), ..summary },
        };
        if opts.stop_at_eos && token == eos {
            return Summary { reason: StopReason::Eos, ..summary };
        }
        summary.generated += 1;
        if on_token(token) == Control::Stop {
            return Summary { reason: StopReason::Stopped, ..summary };
        }
        if summary.generated >= opts.max_tokens {
            return Summary { reason: StopReason::MaxTokens, ..summary };
        }
        // feed the token back: append it, shifting the context first if it is full
        let step = if len < capacity {
            if let Some(slot) = window.get_mut(len) {
                *slot = token;
            }
            len += 1;
            session.decode_observed(token, obs).map(|_| ())
        } else if opts.context_shift {
            // the most recent half (after a leading BOS)
            let keep = capacity / 2;
            let head = leading_bos(session, window, len).min(keep);
            window.copy_within(len - (keep - head)..len, head);
            if let Some(slot) = window.get_mut(keep) {
                *slot = token;
            }
            len = keep + 1;
            summary.shifts += 1;
            summary.reprefilled += len;
            session.reset();
            session.prefill_observed(window.get(..len).unwrap_or(&[]), obs).map(|_| ())
        } else {
            return Summary { reason: StopReason::ContextFull { capacity }, ..summary };
        };
        if let Err(e) = step {
            return Summary { reason: StopReason::Error(e), ..summary };
        }
    }
}

/// 1 when the `len` tokens of `window` start with the model's beginning-of-text token (kept in
/// front by a context shift), else 0.
fn leading_bos(session: &Session<'_>, window: &[u32], len: usize) -> usize {
    let bos = session.model().config().bos_token_id;
    usize::from(len > 0 && window.first() == Some(&bos))
}

/// Streaming stop-string detector for generated bytes. It holds back bytes that could be the
/// start of the stop string (at most its length) and releases the rest, so the stop string is
/// never printed, in memory bounded by the stop string itself.
///
/// It needs no buffer (so no `heapless` container): the bytes it holds back are always
/// `stop[..matched]`, a prefix of the stop string, so a count says what they are.
#[derive(Debug, Clone)]
pub struct StopMatcher<'s> {
    stop: &'s [u8],
    matched: usize, // bytes held: the stream ends with stop[..matched]
}

impl<'s> StopMatcher<'s> {
    /// Watches for `stop` (an empty stop string never matches).
    pub fn new(stop: &'s [u8]) -> Self {
        Self { stop, matched: 0 }
    }

    /// Feeds one byte. Bytes that can no longer be part of a match are passed to `emit`
    /// (in order). Returns true when the stop string is complete (its bytes are dropped).
    pub fn push(&mut self, byte: u8, mut emit: impl FnMut(&[u8])) -> bool {
        if self.stop.is_empty() {
            emit(&[byte]);
            return false;
        }
        // The held bytes plus `byte` are stop[..matched] ++ [byte]; find the longest suffix of
        // that which is a prefix of stop (naive, O(len²) per byte; stop strings are short).
        let m = self.matched;
        let extends = self.stop.get(m) == Some(&byte);
        let mut k = if extends { m + 1 } else { 0 };
        if !extends {
            for cand in (1..=m).rev() {
                // suffix of length cand of stop[..m] ++ [byte]
                let head = self.stop.get(m + 1 - cand..m).unwrap_or(&[]);
                if self.stop.get(..cand - 1) == Some(head) && self.stop.get(cand - 1) == Some(&byte) {
                    k = cand;
                    break;
                }
            }
        }
        // release the first (m + 1 - k) bytes of stop[..m] ++ [byte]
        let release = m + 1 - k;
        if release > 0 {
            emit(self.stop.get(..release.min(m)).unwrap_or(&[]));
            if release > m {
                emit(&[byte]);
            }
        }
        self.matched = k;
        if k == self.stop.len() {
            self.matched = 0;
            return true;
        }
        false
    }

    /// Releases the held bytes (at the end of generation when no stop string completed).
    pub fn flush(&mut self, mut emit: impl FnMut(&[u8])) {
        emit(self.stop.get(..self.matched).unwrap_or(&[]));
        self.matched = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    fn run(stop: &str, text: &str) -> (Vec<u8>, bool) {
        let mut m = StopMatcher::new(stop.as_bytes());
        let mut out = Vec::new();
        for &b in text.as_bytes() {
            if m.push(b, |s| out.extend_from_slice(s)) {
                return (out, true);
            }
        }
        m.flush(|s| out.extend_from_slice(s));
        (out, false)
    }

    #[test]
    fn stop_matcher_finds_and_hides_the_stop_string() {
        assert_eq!(run("\n\n", "Hello\nworld\n\nmore"), (b"Hello\nworld".to_vec(), true));
        assert_eq!(run("END", "no stop here"), (b"no stop here".to_vec(), false));
        assert_eq!(run("END", "almost EN"), (b"almost EN".to_vec(), false));
        // overlapping prefixes: "aab" inside "aaab"
        assert_eq!(run("aab", "xaaab"), (b"xa".to_vec(), true));
        assert_eq!(run("abab", "ababab"), (b"".to_vec(), true));
        assert_eq!(run("abac", "ababac"), (b"ab".to_vec(), true));
        assert_eq!(run("", "abc"), (b"abc".to_vec(), false));
    }

    #[test]
    fn stop_matcher_agrees_with_naive_search() {
        // exhaustive over short strings on a 2-letter alphabet
        for stop_len in 1..4 {
            for s in 0..(1 << stop_len) {
                let stop: std::string::String = (0..stop_len).map(|i| if s >> i & 1 == 1 { 'a' } else { 'b' }).collect();
                for t_len in 0..8 {
                    for t in 0..(1 << t_len) {
                        let text: std::string::String = (0..t_len).map(|i| if t >> i & 1 == 1 { 'a' } else { 'b' }).collect();
                        let want = match text.find(&stop) {
                            Some(i) => (text.as_bytes()[..i].to_vec(), true),
                            None => (text.as_bytes().to_vec(), false),
                        };
                        assert_eq!(run(&stop, &text), want, "stop {stop:?} text {text:?}");
                    }
                }
            }
        }
    }
}
