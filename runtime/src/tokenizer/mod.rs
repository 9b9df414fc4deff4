//! Tokenizers: encode text to token ids and decode ids to text, with no allocation and no panics,
//! reading their tables straight from the blob (flash).
//!
//! Two kinds, one type ([`Tokenizer`]), chosen by the section's magic:
//! - [`byte_level`]: GPT-2's byte-level BPE (`GBPE`): GPT-2, GPT-Neo, TinyStories, and SmolLM
//!   (a Llama with GPT-2's tokenizer and digits cut one by one). Exactly tiktoken's and Hugging
//!   Face's ids.
//! - [`sentencepiece`]: SentencePiece BPE with byte fallback (`SPBP`): Llama 2, TinyLlama,
//!   llama2.c's models. Exactly the `sentencepiece` package's ids (from a `tokenizer.model`) or
//!   Hugging Face's (from a Llama-2-style `tokenizer.json`).
//!
//! Both merge with the same table and loop (`merges`); both decode a token to bytes that may end
//! inside a UTF-8 character, which [`Utf8Stream`] completes. SentencePiece adds two things a
//! caller must do for Llama: start a prompt with [`Tokenizer::prompt_prefix`] (BOS), and print a
//! token with [`Tokenizer::token_text`], which drops the dummy-prefix space of the first word.
//! GPT-2's tokens need neither (`prompt_prefix` is `None`, `token_text` is `token_bytes`).
//!
//! ```
//! # fn run(tok: &runtime::tokenizer::Tokenizer<'_>) -> Result<(), runtime::Error> {
//! use runtime::tokenizer::Utf8Stream;
//! // Encode a prompt: BOS (if the tokenizer wants one), then the text.
//! let mut ids = [0u32; 64];
//! let mut n = 0;
//! if let Some(bos) = tok.prompt_prefix() {
//!     ids[0] = bos;
//!     n = 1;
//! }
//! n += tok.encode("Once upon a time", &mut ids[n..])?;
//! // Print ids as text, one at a time.
//! let (mut prev, mut stream, mut text) = (None, Utf8Stream::new(), String::new());
//! for &id in &ids[..n] {
//!     for piece in stream.push(tok.token_text(prev, id).unwrap_or(&[])) {
//!         text.push_str(piece);
//!     }
//!     prev = Some(id);
//! }
//! text.push_str(stream.finish());
//! assert_eq!(text, "Once upon a time");
//! # Ok(()) }
//! ```

pub mod byte_level;
mod merges;
pub mod pretokenize;
pub mod sentencepiece;
mod utf8_stream;

pub use byte_level::{format, ByteLevelBpe};
pub use sentencepiece::{PieceType, SentencePieceBpe};
pub use utf8_stream::{Utf8Pieces, Utf8Stream};

use crate::error::Error;

/// A validated tokenizer section of either kind (see the [module docs](self)).
///
/// Build it once with [`Tokenizer::from_bytes`]; afterwards [`encode`](Self::encode) and
/// [`decode`](Self::decode) only fail for caller-side reasons (a short buffer, a bad id).
#[derive(Debug, Clone, Copy)]
pub enum Tokenizer<'a> {
    /// GPT-2's byte-level BPE (magic `GBPE`).
    ByteLevel(ByteLevelBpe<'a>),
    /// SentencePiece BPE (magic `SPBP`).
    SentencePiece(SentencePieceBpe<'a>),
}

impl<'a> Tokenizer<'a> {
    /// Validates a tokenizer section: SentencePiece if it starts with `b"SPBP"`, else byte-level
    /// BPE (whose errors are unchanged: a wrong magic is `BadTokenizer { offset: 0 }`).
    pub fn from_bytes(section: &'a [u8]) -> Result<Self, Error> {
        if section.get(..4) == Some(&sentencepiece::format::MAGIC[..]) {
            SentencePieceBpe::from_bytes(section).map(Self::SentencePiece)
        } else {
            ByteLevelBpe::from_bytes(section).map(Self::ByteLevel)
        }
    }

    /// The byte-level BPE, if that is what this is (for its byte table and merges).
    pub fn as_byte_level(&self) -> Option<&ByteLevelBpe<'a>> {
        match self {
            Self::ByteLevel(t) => Some(t),
            Self::SentencePiece(_) => None,
        }
    }

    /// The SentencePiece BPE, if that is what this is.
    pub fn as_sentencepiece(&self) -> Option<&SentencePieceBpe<'a>> {
        match self {
            Self::SentencePiece(t) => Some(t),
            Self::ByteLevel(_) => None,
        }
    }

    /// Number of tokens (`V`).
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::ByteLevel(t) => t.vocab_size(),
            Self::SentencePiece(t) => t.vocab_size(),
        }
    }

    /// Number of merges (`M`).
    pub fn n_merges(&self) -> usize {
        match self {
            Self::ByteLevel(t) => t.n_merges(),
            Self::SentencePiece(t) => t.n_merges(),
        }
    }

    /// The bytes of token `id` (`None` if `id >= vocab_size`). They need not be valid UTF-8 on
    /// their own; see [`Utf8Stream`]. For printing, use [`token_text`](Self::token_text).
    pub fn token_bytes(&self, id: u32) -> Option<&'a [u8]> {
        match self {
            Self::ByteLevel(t) => t.token_bytes(id),
            Self::SentencePiece(t) => t.token_bytes(id),
        }
    }

    /// The bytes to print for token `id` after token `prev` (`None` at the start of the text):
    /// [`token_bytes`](Self::token_bytes), except that SentencePiece drops the dummy-prefix
    /// space of a piece that starts the text or follows BOS
    /// ([`SentencePieceBpe::token_text`]). `None` if `id >= vocab_size`.
    pub fn token_text(&self, prev: Option<u32>, id: u32) -> Option<&'a [u8]> {
        match self {
            Self::ByteLevel(t) => t.token_bytes(id),
            Self::SentencePiece(t) => t.token_text(prev, id),
        }
    }

    /// Encodes `text` into `out` and returns the number of ids written (no BOS; see
    /// [`prompt_prefix`](Self::prompt_prefix)). `out` is also the working memory;
    /// `out.len() >= max_encoded_len(text.len())` always suffices. See
    /// [`ByteLevelBpe::encode`] and [`SentencePieceBpe::encode`].
    pub fn encode(&self, text: &str, out: &mut [u32]) -> Result<usize, Error> {
        match self {
            Self::ByteLevel(t) => t.encode(text, out),
            Self::SentencePiece(t) => t.encode(text, out),
        }
    }

    /// Encodes `text` as a prompt: the [`prompt_prefix`](Self::prompt_prefix) (BOS, for a
    /// SentencePiece tokenizer with add_bos_token, as transformers' `tokenizer(text)` gives it),
    /// then the text's ids; returns the number of ids written. `out.len() >= 1 +
    /// max_encoded_len(text.len())` always suffices. The one place a prompt gets its BOS: `host`,
    /// the firmware and the console call it.
    pub fn encode_prompt(&self, text: &str, out: &mut [u32]) -> Result<usize, Error> {
        let head = match (self.prompt_prefix(), out.first_mut()) {
            (Some(bos), Some(slot)) => {
                *slot = bos;
                1
            }
            (Some(_), None) => return Err(Error::BufferTooSmall { needed: 1, available: 0 }),
            (None, _) => 0,
        };
        let n = self.encode(text, out.get_mut(head..).unwrap_or(&mut []))?;
        Ok(head + n)
    }

    /// An `out.len()` for [`encode`](Self::encode) that always suffices for a text of
    /// `text_bytes` bytes: `text_bytes` for byte-level BPE, `text_bytes + 1` for SentencePiece
    /// (its dummy prefix).
    pub fn max_encoded_len(&self, text_bytes: usize) -> usize {
        match self {
            Self::ByteLevel(_) => text_bytes,
            Self::SentencePiece(_) => text_bytes.saturating_add(1),
        }
    }

    /// Writes the text of `ids` into `out` ([`token_text`](Self::token_text) of each id after
    /// the one before) and returns the number of bytes written.
    ///
    /// Errors: `InvalidToken` for an id `>= vocab_size`; `BufferTooSmall { needed, available }`
    /// (in bytes, `needed` exact) when `out` is too short. Decoded bytes may not be UTF-8 (a
    /// token can hold part of a character); use `from_utf8_lossy` or [`Utf8Stream`].
    pub fn decode(&self, ids: &[u32], out: &mut [u8]) -> Result<usize, Error> {
        match self {
            Self::ByteLevel(t) => t.decode(ids, out),
            Self::SentencePiece(t) => t.decode(ids, out),
        }
    }

    /// The id a prompt starts with, if the tokenizer adds one (SentencePiece with
    /// `add_bos_token`: BOS). `None` for GPT-2's tokenizer.
    pub fn prompt_prefix(&self) -> Option<u32> {
        match self {
            Self::ByteLevel(_) => None,
            Self::SentencePiece(t) => t.prompt_prefix(),
        }
    }

    /// The tokenizer's beginning-of-sequence token, if it names one (GPT-2's section does not:
    /// the model's config has `bos_token_id`).
    pub fn bos_id(&self) -> Option<u32> {
        match self {
            Self::ByteLevel(_) => None,
            Self::SentencePiece(t) => t.bos_id(),
        }
    }

    /// The tokenizer's end-of-sequence token, if it names one (see [`bos_id`](Self::bos_id)).
    pub fn eos_id(&self) -> Option<u32> {
        match self {
            Self::ByteLevel(_) => None,
            Self::SentencePiece(t) => t.eos_id(),
        }
    }

    /// The tokenizer's unknown token, if it has one.
    pub fn unk_id(&self) -> Option<u32> {
        match self {
            Self::ByteLevel(_) => None,
            Self::SentencePiece(t) => t.unk_id(),
        }
    }
}

// ---- helpers both section readers share -----------------------------------------------------

/// Reads a little-endian `u32` at `offset` (`None` past the end).
fn read_u32(bytes: &[u8], offset: usize) -> Option<u32> {
    let b = bytes.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_le_bytes([b.first().copied()?, *b.get(1)?, *b.get(2)?, *b.get(3)?]))
}

/// Reads a little-endian `u16` at `offset` (`None` past the end).
fn read_u16(bytes: &[u8], offset: usize) -> Option<u16> {
    let b = bytes.get(offset..offset.checked_add(2)?)?;
    Some(u16::from_le_bytes([b.first().copied()?, *b.get(1)?]))
}

/// A `BadTokenizer` error at `offset` in the section.
fn bad(offset: usize) -> Error {
    Error::BadTokenizer { offset: u32::try_from(offset).unwrap_or(u32::MAX) }
}

/// Checks a `token_offsets` table of `vocab_size + 1` u32 (at byte `offsets_at` of the section):
/// it starts at 0, never decreases and ends at `token_bytes_len`.
fn check_offsets(token_offsets: &[u8], offsets_at: usize, vocab_size: u32, token_bytes_len: u32) -> Result<(), Error> {
    let v = vocab_size as usize;
    let mut prev = 0;
    for i in 0..=v {
        let o = read_u32(token_offsets, 4 * i).ok_or(bad(offsets_at + 4 * i))?;
        let ok = if i == 0 {
            o == 0
        } else if i == v {
            o == token_bytes_len && o >= prev
        } else {
            o >= prev
        };
        if !ok {
            return Err(bad(offsets_at + 4 * i));
        }
        prev = o;
    }
    Ok(())
}

/// Token `id`'s bytes from validated offsets and bytes (`None` if `id >= vocab_size`).
fn token_slice<'a>(token_offsets: &[u8], token_bytes: &'a [u8], vocab_size: u32, id: u32) -> Option<&'a [u8]> {
    if id >= vocab_size {
        return None;
    }
    let i = id as usize;
    let start = read_u32(token_offsets, 4 * i)? as usize;
    let end = read_u32(token_offsets, 4 * (i + 1))? as usize;
    token_bytes.get(start..end)
}

/// Writes `text(prev, id)` for each id (`prev` the id before, `None` for the first) into `out`
/// and returns the bytes written; on a short `out`, `BufferTooSmall` with the exact total (bad
/// ids are reported first: they are the bigger problem).
fn decode_with<'a>(
    ids: &[u32],
    out: &mut [u8],
    text: impl Fn(Option<u32>, u32) -> Result<&'a [u8], Error>,
) -> Result<usize, Error> {
    let mut n_out = 0;
    let mut prev = None;
    for (i, &id) in ids.iter().enumerate() {
        let bytes = text(prev, id)?;
        let Some(dst) = out.get_mut(n_out..n_out + bytes.len()) else {
            let mut needed = n_out;
            for &id in ids.get(i..).unwrap_or(&[]) {
                needed = needed.saturating_add(text(prev, id)?.len());
                prev = Some(id);
            }
            return Err(Error::BufferTooSmall { needed, available: out.len() });
        };
        dst.copy_from_slice(bytes);
        n_out += bytes.len();
        prev = Some(id);
    }
    Ok(n_out)
}
