//! Turning generated tokens into text one token at a time.
//!
//! A byte-level BPE token is a byte string, not a string: GPT-2 often spends two or three tokens
//! on one emoji or CJK character, so a token can end in the middle of a UTF-8 sequence.
//! [`Utf8Stream`] holds back such an incomplete tail (at most 3 bytes) until the next token
//! completes it, and replaces bytes that can never be valid UTF-8 with U+FFFD. What it emits,
//! concatenated, is exactly `String::from_utf8_lossy` of all the bytes pushed.

/// U+FFFD REPLACEMENT CHARACTER, emitted for each invalid byte sequence.
const REPLACEMENT: &str = "\u{FFFD}";
/// Its UTF-8 encoding, padded to the 4 bytes of [`Utf8Stream::head`].
const REPLACEMENT_BYTES: [u8; 4] = [0xEF, 0xBF, 0xBD, 0];

/// Incremental, lossy UTF-8 decoder for token bytes. Holds at most 3 pending bytes; needs no
/// buffer from the caller.
///
/// ```
/// use runtime::tokenizer::Utf8Stream;
///
/// // "é" is 0xC3 0xA9: suppose the model emitted it as two one-byte tokens.
/// let mut stream = Utf8Stream::new();
/// let mut text = String::new();
/// for token_bytes in [&b"caf"[..], &[0xC3], &[0xA9], b"!"] {
///     for piece in stream.push(token_bytes) {
///         text.push_str(piece); // e.g. write it to the UART
///     }
/// }
/// text.push_str(stream.finish());
/// assert_eq!(text, "café!");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Utf8Stream {
    /// The incomplete character carried over from the previous push (valid prefix, 0..=3 bytes).
    pending: [u8; 4],
    /// Bytes used in `pending`.
    pending_len: usize,
    /// The character completed at the start of the latest push (or U+FFFD), 0..=4 bytes.
    head: [u8; 4],
    /// Bytes used in `head`.
    head_len: usize,
}

impl Utf8Stream {
    /// An empty stream.
    pub const fn new() -> Self {
        Self { pending: [0; 4], pending_len: 0, head: [0; 4], head_len: 0 }
    }

    /// Number of bytes held back, waiting for the rest of their character (0..=3).
    pub fn pending_len(&self) -> usize {
        self.pending_len
    }

    /// Feeds the bytes of one token and returns the text that is now complete, as an iterator of
    /// `&str` pieces (in order; usually one). An incomplete character at the end of `bytes` is
    /// kept for the next call; invalid bytes come out as U+FFFD.
    pub fn push<'s>(&'s mut self, bytes: &'s [u8]) -> Utf8Pieces<'s> {
        let mut input = bytes;
        self.head_len = 0;

        // 1. Complete the character left over from the last token, if any.
        if self.pending_len > 0 {
            let pending_len = self.pending_len;
            let need = utf8_width(self.pending[0]).saturating_sub(pending_len);
            let take = need.min(input.len());
            // joint = pending bytes + the first bytes of this token (at most 4 in all).
            let mut joint = self.pending;
            for (slot, &b) in joint.iter_mut().skip(pending_len).zip(input.iter().take(take)) {
                *slot = b;
            }
            let joint_len = (pending_len + take).min(4);
            match core::str::from_utf8(joint.get(..joint_len).unwrap_or(&[])) {
                // Complete: emit the character first.
                Ok(_) => {
                    self.head = joint;
                    self.head_len = joint_len;
                    input = input.get(take..).unwrap_or(&[]);
                    self.pending_len = 0;
                }
                // Still incomplete (this token was shorter than the missing bytes): keep it all.
                Err(e) if e.error_len().is_none() => {
                    self.pending = joint;
                    self.pending_len = joint_len;
                    return Utf8Pieces::new("", &[]);
                }
                // A byte that cannot continue the character: one U+FFFD for the broken sequence
                // (`n` bytes long), then carry on with the bytes that were not part of it.
                Err(e) => {
                    let n = e.error_len().unwrap_or(0);
                    self.head = REPLACEMENT_BYTES;
                    self.head_len = REPLACEMENT.len();
                    input = input.get(n.saturating_sub(pending_len)..).unwrap_or(&[]);
                    self.pending_len = 0;
                }
            }
        }

        // 2. Hold back an incomplete character at the end of this token.
        let complete_len = input.len() - incomplete_tail_len(input);
        let (complete, held) = input.split_at_checked(complete_len).unwrap_or((input, &[]));
        for (slot, &b) in self.pending.iter_mut().zip(held) {
            *slot = b;
        }
        self.pending_len = held.len();

        // 3. Everything before it is emitted now: valid runs as they are, invalid bytes as U+FFFD.
        let this: &'s Self = self;
        let head = this.head.get(..this.head_len).and_then(|h| core::str::from_utf8(h).ok());
        Utf8Pieces::new(head.unwrap_or(""), complete)
    }

    /// Ends the stream: returns U+FFFD if an incomplete character was still held back (as
    /// `from_utf8_lossy` would), else `""`, and resets the stream.
    pub fn finish(&mut self) -> &'static str {
        let had_pending = self.pending_len > 0;
        *self = Self::new();
        if had_pending {
            REPLACEMENT
        } else {
            ""
        }
    }
}

/// Length of a UTF-8 sequence given its first byte (1 for ASCII and for invalid lead bytes).
fn utf8_width(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 1,
    }
}

/// Length of the incomplete-but-so-far-valid character at the end of `bytes` (0..=3).
fn incomplete_tail_len(bytes: &[u8]) -> usize {
    // Walk back over at most three bytes to the last byte that is not a continuation byte
    // (0b10xx_xxxx); decoding always restarts there.
    for k in 1..=bytes.len().min(3) {
        let start = bytes.len() - k;
        let Some(&b) = bytes.get(start) else { return 0 };
        if b & 0xC0 == 0x80 {
            continue;
        }
        // `error_len() == None` is the standard library telling us "valid so far, just cut off".
        let tail = bytes.get(start..).unwrap_or(&[]);
        return match core::str::from_utf8(tail) {
            Err(e) if e.valid_up_to() == 0 && e.error_len().is_none() => k,
            _ => 0,
        };
    }
    0
}

/// The text pieces produced by one [`Utf8Stream::push`], in order.
#[derive(Debug, Clone)]
pub struct Utf8Pieces<'s> {
    /// The completed carried-over character (or U+FFFD); empty once yielded.
    head: &'s str,
    /// The rest of the complete bytes, split into valid runs and invalid sequences.
    chunks: core::str::Utf8Chunks<'s>,
    /// A U+FFFD is due before the next chunk.
    replacement_due: bool,
}

impl<'s> Utf8Pieces<'s> {
    fn new(head: &'s str, complete: &'s [u8]) -> Self {
        Self { head, chunks: complete.utf8_chunks(), replacement_due: false }
    }
}

impl<'s> Iterator for Utf8Pieces<'s> {
    type Item = &'s str;

    fn next(&mut self) -> Option<&'s str> {
        if !self.head.is_empty() {
            return Some(core::mem::take(&mut self.head));
        }
        loop {
            if self.replacement_due {
                self.replacement_due = false;
                return Some(REPLACEMENT);
            }
            let chunk = self.chunks.next()?;
            self.replacement_due = !chunk.invalid().is_empty();
            if !chunk.valid().is_empty() {
                return Some(chunk.valid());
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::String;
    use std::vec::Vec;

    /// Pushes `tokens` one by one; checks after each push that what was emitted so far is exactly
    /// the lossy decoding of the bytes pushed so far minus the held-back tail.
    fn stream_text(tokens: &[&[u8]]) -> String {
        let mut stream = Utf8Stream::new();
        let mut text = String::new();
        let mut pushed = Vec::new();
        for token in tokens {
            pushed.extend_from_slice(token);
            for piece in stream.push(token) {
                assert!(!piece.is_empty());
                text.push_str(piece);
            }
            assert!(stream.pending_len() <= 3);
            let settled = &pushed[..pushed.len() - stream.pending_len()];
            assert_eq!(text, String::from_utf8_lossy(settled), "after pushing {pushed:x?}");
        }
        text.push_str(stream.finish());
        assert_eq!(stream.pending_len(), 0);
        text
    }

    #[test]
    fn characters_split_across_tokens_are_never_emitted_half() {
        let text = "a é 中 😀 👩‍👩‍👧‍👦 z";
        let bytes = text.as_bytes();
        // Every way of cutting the text into two or three tokens.
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let tokens = [&bytes[..i], &bytes[i..j], &bytes[j..]];
                assert_eq!(stream_text(&tokens), text);
            }
        }
        // One byte per token: each character appears only once its last byte arrives.
        let mut stream = Utf8Stream::new();
        let mut emitted = String::new();
        for (i, b) in bytes.iter().enumerate() {
            for piece in stream.push(core::slice::from_ref(b)) {
                emitted.push_str(piece);
            }
            assert!(text.is_char_boundary(emitted.len()));
            assert_eq!(emitted.len() + stream.pending_len(), i + 1);
        }
        assert_eq!(emitted, text);
    }

    #[test]
    fn invalid_bytes_become_replacement_characters_like_from_utf8_lossy() {
        let cases: &[&[&[u8]]] = &[
            &[&[0xFF], b"a"],
            &[&[0xE2, 0x82], b"a"],                       // cut-off character, then ASCII
            &[&[0xE2], &[0x82], &[0x41]],                 // ... split over three tokens
            &[&[0xF0, 0x9F], &[0x98]],                    // unfinished at the end: finish() flushes U+FFFD
            &[&[0xC3], &[0xC3, 0xA9]],                    // lead byte after a lead byte
            &[&[0x80, 0x80], b"ok", &[0xED, 0xA0, 0x80]], // stray continuations, surrogate
            &[&[0xE0], &[0x80]],                          // overlong prefix
            &[b"x", &[], &[0xF4, 0x8F], &[], &[0xBF, 0xBF]],
        ];
        for tokens in cases {
            let all: Vec<u8> = tokens.concat();
            assert_eq!(stream_text(tokens), String::from_utf8_lossy(&all), "{tokens:x?}");
        }
    }

    #[test]
    fn all_byte_pairs_split_anywhere_match_from_utf8_lossy() {
        // Exhaustive over a 3-byte window of interesting bytes, split into single-byte tokens.
        let interesting = [0x41, 0x80, 0x9F, 0xA0, 0xBF, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF];
        for &a in &interesting {
            for &b in &interesting {
                for &c in &interesting {
                    for &d in &interesting {
                        let all = [a, b, c, d];
                        let tokens: [&[u8]; 3] = [&all[..1], &all[1..3], &all[3..]];
                        assert_eq!(stream_text(&tokens), String::from_utf8_lossy(&all));
                    }
                }
            }
        }
    }
}
