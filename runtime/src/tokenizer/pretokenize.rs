//! GPT-2's pre-tokenizer: the regex that cuts text into pieces before BPE, as a hand-written
//! scanner (there is no regex engine in `no_std`).
//!
//! GPT-2 (`encoder.py`) and tiktoken (`r50k_base`) split text with
//!
//! ```text
//! 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//! ```
//!
//! and run BPE on each match separately, so no token ever spans two pieces. The alternatives are
//! tried in order at each position and the first that matches wins (leftmost-first, like Perl and
//! Python). Every character is matched by one of them, so the pieces tile the text.
//!
//! Character classes, as in the `regex` crate that tiktoken-rs uses:
//! - `\p{L}`: general category Letter (Lu, Ll, Lt, Lm, Lo);
//! - `\p{N}`: general category Number (Nd, Nl, No);
//! - `\s`: the Unicode `White_Space` property (25 code points, listed in [`is_white_space`]).
//!
//! Letter and Number come from `unicode-properties`. Its Unicode version can be newer than the
//! one in the reference regex tables: a code point newly assigned as a letter is then `\p{L}` here
//! and "other" there. Assigned-in-both code points classify identically (the parity tests check
//! this for every `char`).

use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

/// Which of the regex's character classes a `char` falls in. Every `char` is in exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `\p{L}`
    Letter,
    /// `\p{N}`
    Number,
    /// `\s`
    Space,
    /// `[^\s\p{L}\p{N}]`: punctuation, symbols, marks, controls, unassigned code points.
    Other,
}

/// The Unicode `White_Space` property: what `\s` means in the `regex` crate.
pub fn is_white_space(c: char) -> bool {
    matches!(
        c,
        '\u{0009}'..='\u{000D}' // tab, line feed, vertical tab, form feed, carriage return
            | '\u{0020}' // space
            | '\u{0085}' // next line
            | '\u{00A0}' // no-break space
            | '\u{1680}' // ogham space mark
            | '\u{2000}'..='\u{200A}' // en quad .. hair space
            | '\u{2028}' // line separator
            | '\u{2029}' // paragraph separator
            | '\u{202F}' // narrow no-break space
            | '\u{205F}' // medium mathematical space
            | '\u{3000}' // ideographic space
    )
}

/// The class of one `char` (ASCII is answered without a table look-up).
pub fn class_of(c: char) -> Class {
    if c.is_ascii() {
        return if c.is_ascii_alphabetic() {
            Class::Letter
        } else if c.is_ascii_digit() {
            Class::Number
        } else if is_white_space(c) {
            Class::Space
        } else {
            Class::Other
        };
    }
    if is_white_space(c) {
        return Class::Space;
    }
    match c.general_category_group() {
        GeneralCategoryGroup::Letter => Class::Letter,
        GeneralCategoryGroup::Number => Class::Number,
        _ => Class::Other,
    }
}

/// Scans the run of `class` characters at the start of `s`. Returns `(end, last)`: the byte
/// length of the run and the byte offset of its last character (both 0 for an empty run).
fn run_of(s: &str, class: Class) -> (usize, usize) {
    let mut last = 0;
    for (i, c) in s.char_indices() {
        if class_of(c) != class {
            return (i, last);
        }
        last = i;
    }
    (s.len(), last)
}

/// Byte length of the first piece of `s` (0 only when `s` is empty).
pub fn first_piece_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    let Some(first) = s.chars().next() else {
        return 0;
    };

    // 's 't 're 've 'm 'll 'd: the contractions come first in the regex, so they win. They are
    // case-sensitive: "'S" is not special-cased and becomes "'" then "S".
    if first == '\'' {
        match (bytes.get(1), bytes.get(2)) {
            (Some(b's' | b't' | b'm' | b'd'), _) => return 2,
            (Some(b'r'), Some(b'e')) | (Some(b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => return 3,
            _ => {}
        }
    }

    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: one optional ASCII space, then a run of one
    // class. A space is only taken when a non-space character follows it.
    let after_space = if first == ' ' { s.get(1..).and_then(|r| r.chars().next()) } else { None };
    let (start, class) = match after_space {
        Some(c) if class_of(c) != Class::Space => (1, class_of(c)),
        _ => (0, class_of(first)),
    };
    if class != Class::Space {
        let run = s.get(start..).map_or(0, |rest| run_of(rest, class).0);
        return start + run;
    }

    // `\s+(?!\S)`: a whitespace run that reaches the end of the text, or else the run minus its
    // last character, which is left to start the next piece (so " world" keeps its space).
    // `\s+`: a single whitespace character followed by a non-space (the lookahead failed).
    let (end, last) = run_of(s, Class::Space);
    if end == s.len() || last == 0 {
        end
    } else {
        last
    }
}

/// Iterator over the pieces of a text, in order; concatenated they give the text back.
///
/// ```
/// use runtime::tokenizer::pretokenize::Pieces;
/// let pieces: Vec<&str> = Pieces::new("Hello  world's 3.14!").collect();
/// assert_eq!(pieces, ["Hello", " ", " world", "'s", " 3", ".", "14", "!"]);
/// ```
#[derive(Debug, Clone)]
pub struct Pieces<'t> {
    rest: &'t str,
}

impl<'t> Pieces<'t> {
    /// The pieces of `text`.
    pub fn new(text: &'t str) -> Self {
        Self { rest: text }
    }
}

impl<'t> Iterator for Pieces<'t> {
    type Item = &'t str;

    fn next(&mut self) -> Option<&'t str> {
        let len = first_piece_len(self.rest);
        if len == 0 {
            return None;
        }
        // `len` always ends on a char boundary; `split_at_checked` keeps this panic-free anyway.
        let (piece, rest) = self.rest.split_at_checked(len)?;
        self.rest = rest;
        Some(piece)
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn pieces(text: &str) -> ([&str; 16], usize) {
        let mut out = [""; 16];
        let mut n = 0;
        for p in Pieces::new(text) {
            out[n] = p;
            n += 1;
        }
        (out, n)
    }

    fn check(text: &str, expected: &[&str]) {
        let (got, n) = pieces(text);
        assert_eq!(&got[..n], expected, "pieces of {text:?}");
    }

    #[test]
    fn words_keep_their_leading_space() {
        check("Hello world", &["Hello", " world"]);
        check("cat sat", &["cat", " sat"]);
        check("", &[]);
    }

    #[test]
    fn contractions_are_case_sensitive() {
        check("don't we'll I'm", &["don", "'t", " we", "'ll", " I", "'m"]);
        check("IT'S", &["IT", "'", "S"]);
        check("''s", &["''", "s"]);
        check(" 's", &[" '", "s"]);
        check("'", &["'"]);
    }

    #[test]
    fn numbers_letters_and_punctuation_split() {
        check("abc123def", &["abc", "123", "def"]);
        check("3.14159", &["3", ".", "14159"]);
        check("1,000,000", &["1", ",", "000", ",", "000"]);
        check("fn main() {}", &["fn", " main", "()", " {}"]);
        check(" !!", &[" !!"]);
    }

    #[test]
    fn whitespace_runs_leave_one_space_for_the_next_word() {
        check("a   b", &["a", "  ", " b"]);
        check("a \n b", &["a", " \n", " b"]);
        check("a\n\nb", &["a", "\n", "\n", "b"]);
        check("a\t\tb", &["a", "\t", "\t", "b"]);
        check("a\r\nb", &["a", "\r", "\n", "b"]);
        check("a  ", &["a", "  "]);
        check("   ", &["   "]);
        check(" ", &[" "]);
        check("\u{3000}\u{3000}x", &["\u{3000}", "\u{3000}", "x"]);
    }

    #[test]
    fn unicode_classes() {
        check("나는 밥을", &["나는", " 밥을"]);
        check("Ångström précédent", &["Ångström", " précédent"]);
        // Combining marks are not letters: U+0301 is "other".
        check("e\u{301}t", &["e", "\u{301}", "t"]);
        // Superscript two is a number (No); the ideographic space is whitespace.
        check("x²", &["x", "²"]);
        assert_eq!(class_of('\u{85}'), Class::Space);
        assert_eq!(class_of('\u{1c}'), Class::Other);
        assert_eq!(class_of('٣'), Class::Number);
        assert_eq!(class_of('ⅷ'), Class::Number);
        assert_eq!(class_of('中'), Class::Letter);
        assert_eq!(class_of('😀'), Class::Other);
    }
}
