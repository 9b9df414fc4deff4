//! GPT-2's byte-level BPE tokenizer: encode text to token ids and decode ids to bytes, with no
//! allocation and no panics, reading its tables straight from the blob (flash).
//!
//! Encoding does what GPT-2's `encoder.py` and tiktoken's `encode_ordinary` do:
//! 1. cut the text into pieces with GPT-2's regex ([`pretokenize`](super::pretokenize)); with the
//!    version-2 flag [`format::FLAG_INDIVIDUAL_DIGITS`], first cut out every numeric character
//!    (`char::is_numeric`: Unicode Nd, Nl, No) as a piece of its own, as Hugging Face's
//!    `Digits(individual_digits=true)` pre-tokenizer does before `ByteLevel` (SmolLM);
//! 2. turn each piece into one token per byte (the 256 byte tokens);
//! 3. repeatedly merge the adjacent pair with the lowest merge rank (the leftmost on ties) until
//!    no adjacent pair is in the merge table.
//!
//! Special tokens are not parsed: `"<|endoftext|>"` in the text is encoded as ordinary text.
//! Decoding concatenates each token's bytes (id 50256 decodes to `<|endoftext|>`); use
//! [`Utf8Stream`](super::Utf8Stream) to print generated tokens as they come.
//!
//! # Section format (versions 1 and 2)
//!
//! `host-tools` writes this section into the model blob (see [`format`] for the constants both
//! sides share). All integers are little-endian and read from bytes, so the section needs no
//! alignment. `W` is the width of ids and ranks: 2 bytes when `vocab_size <= 65536` and
//! `n_merges <= 65536` (GPT-2: 2), else 4. `V` = `vocab_size`, `M` = `n_merges`,
//! `B` = `token_bytes_len`.
//!
//! ```text
//!  offset                 size      field
//! +----------------------+---------+----------------------------------------------------------+
//! | 0                    | 4       | magic  b"GBPE"                                           |
//! | 4                    | 2       | version = 1                                              |
//! | 6                    | 1       | W: id/rank width in bytes, 2 or 4                        |
//! | 7                    | 1       | version 1: reserved, 0; version 2: flags (bit 0:         |
//! |                      |         | FLAG_INDIVIDUAL_DIGITS), no other bit set                |
//! | 8                    | 4       | V  vocab_size (>= 256)                                   |
//! | 12                   | 4       | M  n_merges                                              |
//! | 16                   | 4       | B  token_bytes_len: total bytes of all tokens            |
//! | 20                   | 4       | section_len: total size of the section, in bytes         |
//! +----------------------+---------+----------------------------------------------------------+
//! | 24                   | 256 W   | byte_to_id[256]: the token of each single byte           |
//! +----------------------+---------+----------------------------------------------------------+
//! | 24 + 256 W           | 4 W M   | merges[M]: (left, right, rank, result), sorted by        |
//! |                      |         | (left, right), no duplicates; rank < M is the merge's    |
//! |                      |         | line in merges.txt (lower merges first)                  |
//! +----------------------+---------+----------------------------------------------------------+
//! | 24 + 256 W + 4 W M   | 4 (V+1) | token_offsets[V+1] (u32): token i is                     |
//! |                      |         | token_bytes[offsets[i]..offsets[i+1]]; offsets[0] = 0,   |
//! |                      |         | non-decreasing, offsets[V] = B                           |
//! +----------------------+---------+----------------------------------------------------------+
//! | ... + 4 (V+1)        | B       | token_bytes: every token's bytes, concatenated by id     |
//! +----------------------+---------+----------------------------------------------------------+
//!   section_len = 24 + 256 W + 4 W M + 4 (V+1) + B
//! ```
//!
//! GPT-2 (V = 50257, M = 50000, W = 2): 24 + 512 + 400 000 + 201 032 + 320 827 = 922 395 bytes.
//!
//! The writer uses version 1 when no flag is set, so GPT-2's section is the same bytes as before
//! version 2 existed, and version 2 only for a flag.
//!
//! [`ByteLevelBpe::from_bytes`] checks all of it once: the header, every length (the slice may be
//! longer than `section_len`, e.g. padding; the rest is ignored), every id `< V`, every rank
//! `< M`, the offsets, the sort order, that `byte_to_id[b]` decodes to the single byte `b`, and
//! that each merge's result decodes to its left token's bytes followed by its right token's.
//! The last check is what makes `decode(encode(text)) == text` hold for any valid section.


use super::merges::{read_id, MergeTable};
use super::pretokenize::Pieces;
use super::{bad, read_u16, read_u32};
use crate::error::Error;

/// The constants of the section format, shared by the writer (`host-tools`) and this reader.
pub mod format {
    /// First four bytes of a tokenizer section.
    pub const MAGIC: [u8; 4] = *b"GBPE";
    /// Format version of a section without flags (GPT-2's own); this runtime reads it and
    /// `host-tools` writes it when no flag is set.
    pub const VERSION: u16 = 1;
    /// Format version of a section with flags (byte 7).
    pub const VERSION_FLAGS: u16 = 2;
    /// Size of the fixed header, in bytes.
    pub const HEADER_BYTES: usize = 24;
    /// Offset of `version` (u16).
    pub const OFFSET_VERSION: usize = 4;
    /// Offset of the id/rank width byte (`W`).
    pub const OFFSET_ID_BYTES: usize = 6;
    /// Offset of the reserved byte (version 1: must be 0) or the flags (version 2).
    pub const OFFSET_RESERVED: usize = 7;
    /// Offset of the flags byte in version 2 (the same byte as [`OFFSET_RESERVED`]).
    pub const OFFSET_FLAGS: usize = 7;
    /// Flag: every numeric character (`char::is_numeric`) is a piece of its own before GPT-2's
    /// regex runs (Hugging Face `Digits(individual_digits=true)`, as in SmolLM).
    pub const FLAG_INDIVIDUAL_DIGITS: u8 = 1;
    /// Every flag this runtime knows.
    pub const KNOWN_FLAGS: u8 = FLAG_INDIVIDUAL_DIGITS;
    /// Offset of `vocab_size` (u32).
    pub const OFFSET_VOCAB_SIZE: usize = 8;
    /// Offset of `n_merges` (u32).
    pub const OFFSET_N_MERGES: usize = 12;
    /// Offset of `token_bytes_len` (u32).
    pub const OFFSET_TOKEN_BYTES_LEN: usize = 16;
    /// Offset of `section_len` (u32).
    pub const OFFSET_SECTION_LEN: usize = 20;
    /// Number of single-byte tokens (`byte_to_id` entries).
    pub const N_BYTES: usize = 256;
    /// Ids and ranks per merge entry: left, right, rank, result.
    pub const MERGE_FIELDS: usize = 4;

    /// The id/rank width `W` the writer must use for this many tokens and merges.
    pub const fn id_bytes_for(vocab_size: usize, n_merges: usize) -> usize {
        if vocab_size <= 1 << 16 && n_merges <= 1 << 16 {
            2
        } else {
            4
        }
    }

    /// Total section size in bytes (`None` on overflow).
    pub const fn section_len(
        id_bytes: usize,
        vocab_size: usize,
        n_merges: usize,
        token_bytes_len: usize,
    ) -> Option<usize> {
        // HEADER + 256 W + 4 W M + 4 (V + 1) + B, each step checked.
        let Some(byte_table) = id_bytes.checked_mul(N_BYTES) else { return None };
        let Some(merge_entry) = id_bytes.checked_mul(MERGE_FIELDS) else { return None };
        let Some(merges) = merge_entry.checked_mul(n_merges) else { return None };
        let Some(n_offsets) = vocab_size.checked_add(1) else { return None };
        let Some(offsets) = n_offsets.checked_mul(4) else { return None };
        let Some(a) = HEADER_BYTES.checked_add(byte_table) else { return None };
        let Some(b) = a.checked_add(merges) else { return None };
        let Some(c) = b.checked_add(offsets) else { return None };
        c.checked_add(token_bytes_len)
    }
}

/// A validated byte-level BPE section (GPT-2's tokenizer) over borrowed tables.
///
/// Build it once with [`ByteLevelBpe::from_bytes`]; afterwards [`encode`](Self::encode) and
/// [`decode`](Self::decode) only fail for caller-side reasons (a short buffer, a bad id).
#[derive(Debug, Clone, Copy)]
pub struct ByteLevelBpe<'a> {
    /// `V`: number of tokens.
    vocab_size: u32,
    /// `W`: width of ids and ranks in the tables (2 or 4).
    id_bytes: usize,
    /// The version-2 flags (0 in version 1).
    flags: u8,
    /// `byte_to_id`: (256,) ids of width `W`.
    byte_to_id: &'a [u8],
    /// `merges`: (M, 4) ids of width `W`, sorted by (left, right).
    merges: MergeTable<'a>,
    /// `token_offsets`: (V + 1,) u32.
    token_offsets: &'a [u8],
    /// `token_bytes`: (B,) bytes.
    token_bytes: &'a [u8],
}

/// The pieces GPT-2's regex cuts a text into, after the numeric characters were cut out one by
/// one when `digits` is set. Cloned to walk the rest of a text again for an error's numbers.
#[derive(Debug, Clone)]
struct SplitPieces<'t> {
    /// Cut out numeric characters first.
    digits: bool,
    /// The text after the current chunk.
    rest: &'t str,
    /// The pieces of the current chunk (a run without numeric characters, or one of them).
    chunk: Pieces<'t>,
}

impl<'t> SplitPieces<'t> {
    fn new(text: &'t str, digits: bool) -> Self {
        if digits {
            Self { digits, rest: text, chunk: Pieces::new("") }
        } else {
            Self { digits, rest: "", chunk: Pieces::new(text) }
        }
    }
}

impl<'t> Iterator for SplitPieces<'t> {
    type Item = &'t str;

    fn next(&mut self) -> Option<&'t str> {
        loop {
            if let Some(piece) = self.chunk.next() {
                return Some(piece);
            }
            if !self.digits || self.rest.is_empty() {
                return None;
            }
            // The next chunk: one numeric character, or the run up to the next one.
            let mut chars = self.rest.char_indices();
            let len = match chars.next() {
                Some((_, c)) if c.is_numeric() => c.len_utf8(),
                _ => chars.find(|&(_, c)| c.is_numeric()).map_or(self.rest.len(), |(i, _)| i),
            };
            let (chunk, rest) = self.rest.split_at_checked(len)?;
            self.rest = rest;
            self.chunk = Pieces::new(chunk);
        }
    }
}

impl<'a> ByteLevelBpe<'a> {
    /// Validates a byte-level BPE section (see the [module docs](self) for the format). Every
    /// check the encoder and decoder rely on happens here; `BadTokenizer { offset }` points at
    /// the first byte found wrong.
    pub fn from_bytes(section: &'a [u8]) -> Result<Self, Error> {
        use format::*;

        // Header: magic, version, widths, counts.
        let header = section.get(..HEADER_BYTES).ok_or(bad(section.len()))?;
        if header.get(..4) != Some(&MAGIC[..]) {
            return Err(bad(0));
        }
        let version = read_u16(header, OFFSET_VERSION);
        if version != Some(VERSION) && version != Some(VERSION_FLAGS) {
            return Err(bad(OFFSET_VERSION));
        }
        let id_bytes = usize::from(header.get(OFFSET_ID_BYTES).copied().unwrap_or(0));
        if id_bytes != 2 && id_bytes != 4 {
            return Err(bad(OFFSET_ID_BYTES));
        }
        let flags = header.get(OFFSET_FLAGS).copied().unwrap_or(u8::MAX);
        let known = if version == Some(VERSION) { 0 } else { KNOWN_FLAGS };
        if flags & !known != 0 {
            return Err(bad(OFFSET_RESERVED));
        }
        let field = |offset| read_u32(header, offset).ok_or(bad(offset));
        let vocab_size = field(OFFSET_VOCAB_SIZE)?;
        let n_merges = field(OFFSET_N_MERGES)?;
        let token_bytes_len = field(OFFSET_TOKEN_BYTES_LEN)?;
        let section_len = field(OFFSET_SECTION_LEN)?;
        let (v, m, b) = (vocab_size as usize, n_merges as usize, token_bytes_len as usize);
        if v < N_BYTES || (id_bytes == 2 && v > 1 << 16) {
            return Err(bad(OFFSET_VOCAB_SIZE));
        }
        if id_bytes == 2 && m > 1 << 16 {
            return Err(bad(OFFSET_N_MERGES));
        }
        if format::section_len(id_bytes, v, m, b) != Some(section_len as usize) {
            return Err(bad(OFFSET_SECTION_LEN));
        }
        if section.len() < section_len as usize {
            return Err(bad(section.len()));
        }

        // Split the section into its four tables (lengths are known to fit now).
        let byte_to_id_at = HEADER_BYTES;
        let merges_at = byte_to_id_at + N_BYTES * id_bytes;
        let offsets_at = merges_at + MERGE_FIELDS * id_bytes * m;
        let token_bytes_at = offsets_at + 4 * (v + 1);
        let table = |start: usize, end: usize| section.get(start..end).unwrap_or(&[]);
        let byte_to_id = table(byte_to_id_at, merges_at);
        // Ids are below V <= 65536 when W = 2, so every id fits the tagged loop's 16 bits.
        let merges = MergeTable::new(table(merges_at, offsets_at), n_merges, id_bytes, vocab_size - 1);
        let token_offsets = table(offsets_at, token_bytes_at);
        let token_bytes = table(token_bytes_at, token_bytes_at + b);
        let tok = Self { vocab_size, id_bytes, flags, byte_to_id, merges, token_offsets, token_bytes };

        // Offsets: start at 0, never decrease, end at B.
        super::check_offsets(token_offsets, offsets_at, vocab_size, token_bytes_len)?;

        // Byte table: byte b's token must decode to exactly [b].
        for byte in 0..=255u8 {
            let offset = HEADER_BYTES + id_bytes * usize::from(byte);
            if tok.token_bytes(tok.byte_token(byte)) != Some(&[byte][..]) {
                return Err(bad(offset));
            }
        }

        // Merges: ids in range, strictly sorted by (left, right), and the result's bytes are the
        // left token's bytes followed by the right token's.
        merges.validate(merges_at, &|id| tok.token_bytes(id), &mut |_, _| Ok(()))?;
        Ok(tok)
    }

    /// Number of tokens (`V`).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size as usize
    }

    /// Number of merges (`M`).
    pub fn n_merges(&self) -> usize {
        self.merges.len() as usize
    }

    /// Whether numeric characters are cut out one by one before GPT-2's regex
    /// ([`format::FLAG_INDIVIDUAL_DIGITS`]).
    pub fn individual_digits(&self) -> bool {
        self.flags & format::FLAG_INDIVIDUAL_DIGITS != 0
    }

    /// The bytes of token `id` (`None` if `id >= vocab_size`). They need not be valid UTF-8 on
    /// their own; see [`Utf8Stream`](super::Utf8Stream).
    pub fn token_bytes(&self, id: u32) -> Option<&'a [u8]> {
        super::token_slice(self.token_offsets, self.token_bytes, self.vocab_size, id)
    }

    /// The token of one byte.
    pub fn byte_token(&self, byte: u8) -> u32 {
        read_id(self.byte_to_id, self.id_bytes, usize::from(byte))
    }

    /// Encodes `text` into `out` as GPT-2 does and returns the number of ids written.
    ///
    /// `out` is also the working memory: a piece of `n` bytes is merged in place in `n` slots
    /// after the ids already written, so `out` needs room for the ids of the text so far plus
    /// the bytes of the longest piece. `out.len() >= text.len()` always suffices. When `out` is
    /// too short this returns `BufferTooSmall { needed, available }` where `needed` is a lower
    /// bound (ids written so far, one per piece still to come, and the bytes of a piece); what
    /// `out` holds after an error is unspecified, and nothing is written past its end.
    ///
    /// Time: linear in the text except within a piece, where merging is quadratic in the
    /// piece's length (as in tiktoken below 100 bytes; above that tiktoken uses a heap, which
    /// needs memory this function does not have). Ordinary text has pieces of a few bytes, but
    /// a single run of 10 000 letters takes ~0.1-0.2 s on a desktop and 100 000 takes ~10 s.
    pub fn encode(&self, text: &str, out: &mut [u32]) -> Result<usize, Error> {
        // Two copies of the loop: GPT-2's own pieces go through the regex scanner directly (a
        // wrapper that checks for the digit split costs GPT-2 about 10% of its speed).
        if self.individual_digits() {
            self.encode_pieces(SplitPieces::new(text, true), out)
        } else {
            self.encode_pieces(Pieces::new(text), out)
        }
    }

    fn encode_pieces<'t>(&self, mut pieces: impl Iterator<Item = &'t str> + Clone, out: &mut [u32]) -> Result<usize, Error> {
        let mut n_out = 0;
        while let Some(piece) = pieces.next() {
            let piece = piece.as_bytes();
            // Byte-level: the piece starts as one token per byte (GPT-2 maps bytes to unicode
            // characters first, which is the same thing).
            let Some(scratch) = out.get_mut(n_out..n_out + piece.len()) else {
                let needed = Self::needed_lower_bound(n_out, piece.len(), pieces);
                return Err(Error::BufferTooSmall { needed, available: out.len() });
            };
            for (slot, &byte) in scratch.iter_mut().zip(piece) {
                *slot = self.byte_token(byte);
            }
            // BPE: merge inside the piece, then keep what is left.
            n_out += self.merges.merge(scratch);
        }
        Ok(n_out)
    }

    /// `needed` for a failed [`encode`](Self::encode): every later piece adds at least one id,
    /// and each piece needs its byte count in slots while it is merged.
    fn needed_lower_bound<'t>(n_out: usize, piece_len: usize, rest: impl Iterator<Item = &'t str>) -> usize {
        let mut needed = n_out.saturating_add(piece_len);
        for (later, piece) in rest.enumerate() {
            needed = needed.max(n_out.saturating_add(1 + later).saturating_add(piece.len()));
        }
        needed
    }

    /// Writes the bytes of `ids` into `out` and returns the number of bytes written.
    ///
    /// Errors: `InvalidToken` for an id `>= vocab_size`; `BufferTooSmall { needed, available }`
    /// (in bytes, `needed` exact) when `out` is too short. Decoded bytes may not be UTF-8 (a
    /// token can hold part of a character); use `from_utf8_lossy` or
    /// [`Utf8Stream`](super::Utf8Stream).
    pub fn decode(&self, ids: &[u32], out: &mut [u8]) -> Result<usize, Error> {
        super::decode_with(ids, out, |_, id| self.token_bytes(id).ok_or(self.invalid(id)))
    }

    fn invalid(&self, id: u32) -> Error {
        Error::InvalidToken { id, vocab_size: self.vocab_size }
    }
}
