//! Bytes in, lines out: a fixed buffer, no allocation.
//!
//! - A line ends at LF, at CR, or at CR LF (one end, not two), so a file with Unix or DOS line
//!   ends and a terminal's Enter key (CR) all work.
//! - Backspace (0x08) and DEL (0x7f) erase the last character of the line (a whole UTF-8
//!   character), for terminals that send what the user types as it is typed.
//! - A line longer than the buffer is not cut: every byte up to its end is discarded and
//!   counted, and the line becomes [`Line::TooLong`] with its length.
//! - UTF-8 is not checked here (the console does it on the whole line, with the position of the
//!   first bad byte).

/// What [`LineReader::push`] did with a byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The byte joined the line (or was counted, past the buffer).
    Byte,
    /// Backspace or DEL removed the last character.
    Erased,
    /// Nothing to do: the LF of a CR LF, or a backspace on an empty line.
    Nothing,
    /// The line is complete: [`LineReader::line`] returns it until the next push.
    End,
}

/// A complete line, without its line end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'b> {
    /// The line's bytes.
    Bytes(&'b [u8]),
    /// A line of `len` bytes that did not fit the buffer; all of it was discarded.
    TooLong {
        /// Bytes in the line (without its end).
        len: usize,
    },
}

/// Splits a byte stream into lines of at most `N` bytes.
#[derive(Debug, Clone)]
pub struct LineReader<const N: usize> {
    // A fixed-capacity vector written out (an array and its length) rather than
    // `heapless::Vec<u8, N>`, because that was larger on the Cortex-M4: the QEMU console firmware
    // (`cargo build --release --bin console`, llvm-size) measured .text + .rodata 297,012 B
    // hand-written and 297,260 B (+248) with `heapless::Vec` (push, pop, clear; 0.8), 297,180 B
    // (+168) with the turn buffer a `heapless::String` as well, and 300,412 B (+3,400) when
    // erasing by `truncate` (LTO then inlined the whole console into its caller); on the M55
    // (240,204 B hand-written) the same three were +96, -80 and -120 B. Instructions per token
    // are the same either way (the reader runs per input byte, outside generation). Issue 38
    // asked for heapless unless the hand-written one is smaller or faster on the M4; it is
    // smaller, if by little: differences of this size also come from unrelated edits that move
    // LTO's inlining.
    buf: [u8; N],
    /// Bytes of the line in `buf`.
    len: usize,
    /// Length of a line that no longer fits (`> N`), else 0.
    overflow: usize,
    /// The last byte was CR: a LF right after it ends nothing.
    after_cr: bool,
    /// The line in `buf` is complete; the next push starts a new one.
    ended: bool,
}

impl<const N: usize> Default for LineReader<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> LineReader<N> {
    /// Bytes a line may hold.
    pub const CAPACITY: usize = N;

    /// An empty reader.
    pub const fn new() -> Self {
        Self { buf: [0; N], len: 0, overflow: 0, after_cr: false, ended: false }
    }

    /// Feeds one byte.
    pub fn push(&mut self, byte: u8) -> Step {
        if self.ended {
            self.len = 0;
            self.overflow = 0;
            self.ended = false;
        }
        match byte {
            b'\n' if self.after_cr => {
                self.after_cr = false;
                Step::Nothing
            }
            b'\n' | b'\r' => {
                self.after_cr = byte == b'\r';
                self.ended = true;
                Step::End
            }
            0x08 | 0x7f => {
                self.after_cr = false;
                if self.overflow > 0 {
                    self.overflow += 1; // the line is discarded anyway: count it as a byte
                    return Step::Byte;
                }
                if self.len == 0 {
                    return Step::Nothing;
                }
                // drop continuation bytes (10xxxxxx), then the byte that starts the character
                while self.len > 1 && self.buf.get(self.len - 1).is_some_and(|&b| b & 0xC0 == 0x80) {
                    self.len -= 1;
                }
                self.len -= 1;
                Step::Erased
            }
            _ => {
                self.after_cr = false;
                if self.overflow > 0 {
                    self.overflow += 1;
                } else if let Some(slot) = self.buf.get_mut(self.len) {
                    *slot = byte;
                    self.len += 1;
                } else {
                    self.overflow = self.len + 1;
                }
                Step::Byte
            }
        }
    }

    /// The line just completed (after [`Step::End`] or [`LineReader::finish`]), or the partial
    /// line so far.
    pub fn line(&self) -> Line<'_> {
        if self.overflow > 0 {
            Line::TooLong { len: self.overflow }
        } else {
            Line::Bytes(self.buf.get(..self.len).unwrap_or(&[]))
        }
    }

    /// At the end of the input: completes a last line that has no line end. Returns false when
    /// there is none (the input ended with a line end, or was empty).
    pub fn finish(&mut self) -> bool {
        if self.ended || (self.len == 0 && self.overflow == 0) {
            return false;
        }
        self.ended = true;
        true
    }

    /// Bytes of the partial line so far (0 right after a line end).
    pub fn pending(&self) -> usize {
        if self.ended {
            0
        } else {
            self.len.max(self.overflow)
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    #[derive(Debug, PartialEq)]
    enum L {
        B(Vec<u8>),
        Long(usize),
    }

    fn lines<const N: usize>(input: &[u8]) -> Vec<L> {
        let mut r = LineReader::<N>::new();
        let mut out = Vec::new();
        let take = |r: &LineReader<N>| match r.line() {
            Line::Bytes(b) => L::B(b.to_vec()),
            Line::TooLong { len } => L::Long(len),
        };
        for &b in input {
            if r.push(b) == Step::End {
                out.push(take(&r));
            }
        }
        if r.finish() {
            out.push(take(&r));
        }
        out
    }

    fn b(s: &str) -> L {
        L::B(s.as_bytes().to_vec())
    }

    #[test]
    fn lf_cr_and_crlf_each_end_one_line() {
        assert_eq!(lines::<16>(b"a\nb\r\nc\rd"), [b("a"), b("b"), b("c"), b("d")]);
        assert_eq!(lines::<16>(b"\n\r\n\r\r"), [b(""), b(""), b(""), b("")]);
        assert_eq!(lines::<16>(b"x\r\n"), [b("x")]);
        assert_eq!(lines::<16>(b""), []);
        // a LF only merges with the CR right before it
        assert_eq!(lines::<16>(b"a\r\rb\n\n"), [b("a"), b(""), b("b"), b("")]);
    }

    #[test]
    fn long_lines_are_measured_and_discarded_up_to_their_end() {
        assert_eq!(lines::<4>(b"abcd\nabcde\nxy\n"), [b("abcd"), L::Long(5), b("xy")]);
        assert_eq!(lines::<4>(b"0123456789"), [L::Long(10)]);
        assert_eq!(lines::<4>(b"0123456789\r\nok"), [L::Long(10), b("ok")]);
    }

    #[test]
    fn backspace_erases_whole_characters() {
        assert_eq!(lines::<16>(b"abc\x08\x08d\n"), [b("ad")]);
        assert_eq!(lines::<16>("naïve\x7f\x7f\x7fx\n".as_bytes()), [b("nax")]);
        assert_eq!(lines::<16>("🙂\x7f!\n".as_bytes()), [b("!")]);
        assert_eq!(lines::<16>(b"\x08\x08a\n"), [b("a")]);
        let mut r = LineReader::<4>::new();
        assert_eq!(r.push(b'a'), Step::Byte);
        assert_eq!(r.push(0x7f), Step::Erased);
        assert_eq!(r.push(0x7f), Step::Nothing);
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn every_byte_is_accounted_for() {
        // deterministic pseudo-random bytes biased towards line ends and backspaces
        let mut x = 1u32;
        let input: Vec<u8> = (0..5000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                [b'\n', b'\r', b'a', b'b', 0xC3, 0xA9, 0x7f, b' '][(x % 8) as usize]
            })
            .collect();
        let got = lines::<8>(&input);
        // the line ends the reader saw, counted independently
        let mut ends = 0;
        let mut prev_cr = false;
        for &b in &input {
            if b == b'\n' && prev_cr {
                prev_cr = false;
                continue;
            }
            if b == b'\n' || b == b'\r' {
                ends += 1;
            }
            prev_cr = b == b'\r';
        }
        // a last line without a line end counts unless backspaces emptied it
        let ended = matches!(input.last(), Some(b'\n' | b'\r'));
        assert!(got.len() == ends || (!ended && got.len() == ends + 1), "{} lines, {ends} ends", got.len());
        for l in &got {
            match l {
                L::B(v) => assert!(v.len() <= 8),
                L::Long(n) => assert!(*n > 8),
            }
        }
    }
}
