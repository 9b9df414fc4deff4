//! GPT-2's byte-level BPE tokenizer: encode text to token ids and decode ids to bytes, with no
//! allocation and no panics, reading its tables straight from the blob (flash).
//!
//! Encoding does what GPT-2's `encoder.py` and tiktoken's `encode_ordinary` do:
//! 1. cut the text into pieces with GPT-2's regex ([`pretokenize`]);
//! 2. turn each piece into one token per byte (the 256 byte tokens);
//! 3. repeatedly merge the adjacent pair with the lowest merge rank (the leftmost on ties) until
//!    no adjacent pair is in the merge table.
//!
//! Special tokens are not parsed: `"<|endoftext|>"` in the text is encoded as ordinary text.
//! Decoding concatenates each token's bytes (id 50256 decodes to `<|endoftext|>`); use
//! [`Utf8Stream`] to print generated tokens as they come.
//!
//! # Section format (version 1)
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
//! | 7                    | 1       | reserved, 0                                              |
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
//! [`Tokenizer::from_bytes`] checks all of it once: the header, every length (the slice may be
//! longer than `section_len`, e.g. padding; the rest is ignored), every id `< V`, every rank
//! `< M`, the offsets, the sort order, that `byte_to_id[b]` decodes to the single byte `b`, and
//! that each merge's result decodes to its left token's bytes followed by its right token's.
//! The last check is what makes `decode(encode(text)) == text` hold for any valid section.

pub mod pretokenize;
mod utf8_stream;

pub use utf8_stream::{Utf8Pieces, Utf8Stream};

use crate::error::Error;
use pretokenize::Pieces;

/// The constants of the section format, shared by the writer (`host-tools`) and this reader.
pub mod format {
    /// First four bytes of a tokenizer section.
    pub const MAGIC: [u8; 4] = *b"GBPE";
    /// Format version this runtime reads and `host-tools` writes.
    pub const VERSION: u16 = 1;
    /// Size of the fixed header, in bytes.
    pub const HEADER_BYTES: usize = 24;
    /// Offset of `version` (u16).
    pub const OFFSET_VERSION: usize = 4;
    /// Offset of the id/rank width byte (`W`).
    pub const OFFSET_ID_BYTES: usize = 6;
    /// Offset of the reserved byte (must be 0).
    pub const OFFSET_RESERVED: usize = 7;
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

/// A validated tokenizer section: GPT-2 byte-level BPE over borrowed tables.
///
/// Build it once with [`Tokenizer::from_bytes`]; afterwards [`encode`](Self::encode) and
/// [`decode`](Self::decode) only fail for caller-side reasons (a short buffer, a bad id).
#[derive(Debug, Clone, Copy)]
pub struct Tokenizer<'a> {
    /// `V`: number of tokens.
    vocab_size: u32,
    /// `M`: number of merges.
    n_merges: u32,
    /// `W`: width of ids and ranks in the tables (2 or 4).
    id_bytes: usize,
    /// `byte_to_id`: (256,) ids of width `W`.
    byte_to_id: &'a [u8],
    /// `merges`: (M, 4) ids of width `W`, sorted by (left, right).
    merges: &'a [u8],
    /// `token_offsets`: (V + 1,) u32.
    token_offsets: &'a [u8],
    /// `token_bytes`: (B,) bytes.
    token_bytes: &'a [u8],
}

/// One entry of the merge table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Merge {
    left: u32,
    right: u32,
    rank: u32,
    result: u32,
}

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

/// [`Tokenizer::merge_piece_tagged`] stores 1 + a merge index in 16 bits, so it serves tables
/// with at most this many merges.
const MAX_TAGGED_MERGES: u32 = 0xFFFF;

/// Removes slot `i` from the live slots `tokens[..len]`, moving the later ones down by one.
fn remove_slot(tokens: &mut [u32], i: usize, len: usize) {
    if let Some(tail) = tokens.get_mut(i..len) {
        if !tail.is_empty() {
            tail.copy_within(1.., 0);
        }
    }
}

/// A `BadTokenizer` error at `offset` in the section.
fn bad(offset: usize) -> Error {
    Error::BadTokenizer { offset: u32::try_from(offset).unwrap_or(u32::MAX) }
}

impl<'a> Tokenizer<'a> {
    /// Validates a tokenizer section (see the [module docs](self) for the format). Every check
    /// the encoder and decoder rely on happens here; `BadTokenizer { offset }` points at the
    /// first byte found wrong.
    pub fn from_bytes(section: &'a [u8]) -> Result<Self, Error> {
        use format::*;

        // Header: magic, version, widths, counts.
        let header = section.get(..HEADER_BYTES).ok_or(bad(section.len()))?;
        if header.get(..4) != Some(&MAGIC[..]) {
            return Err(bad(0));
        }
        if read_u16(header, OFFSET_VERSION) != Some(VERSION) {
            return Err(bad(OFFSET_VERSION));
        }
        let id_bytes = usize::from(header.get(OFFSET_ID_BYTES).copied().unwrap_or(0));
        if id_bytes != 2 && id_bytes != 4 {
            return Err(bad(OFFSET_ID_BYTES));
        }
        if header.get(OFFSET_RESERVED) != Some(&0) {
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
        let merges = table(merges_at, offsets_at);
        let token_offsets = table(offsets_at, token_bytes_at);
        let token_bytes = table(token_bytes_at, token_bytes_at + b);
        let tok = Self { vocab_size, n_merges, id_bytes, byte_to_id, merges, token_offsets, token_bytes };

        // Offsets: start at 0, never decrease, end at B.
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

        // Byte table: byte b's token must decode to exactly [b].
        for byte in 0..=255u8 {
            let offset = HEADER_BYTES + id_bytes * usize::from(byte);
            let id = tok.read_id(byte_to_id, usize::from(byte));
            if tok.token_bytes(id) != Some(&[byte][..]) {
                return Err(bad(offset));
            }
        }

        // Merges: ids in range, strictly sorted by (left, right), and the result's bytes are the
        // left token's bytes followed by the right token's.
        let mut prev_key = None;
        for i in 0..m {
            let offset = merges_at + MERGE_FIELDS * id_bytes * i;
            let merge = tok.merge_at(i).ok_or(bad(offset))?;
            if merge.rank >= n_merges {
                return Err(bad(offset + 2 * id_bytes));
            }
            let key = (merge.left, merge.right);
            if prev_key.is_some_and(|p| p >= key) {
                return Err(bad(offset));
            }
            prev_key = Some(key);
            let (Some(l), Some(r), Some(res)) =
                (tok.token_bytes(merge.left), tok.token_bytes(merge.right), tok.token_bytes(merge.result))
            else {
                return Err(bad(offset));
            };
            if res.len() != l.len() + r.len() || !res.starts_with(l) || !res.ends_with(r) {
                return Err(bad(offset + 3 * id_bytes));
            }
        }
        Ok(tok)
    }

    /// Number of tokens (`V`).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size as usize
    }

    /// Number of merges (`M`).
    pub fn n_merges(&self) -> usize {
        self.n_merges as usize
    }

    /// The bytes of token `id` (`None` if `id >= vocab_size`). They need not be valid UTF-8 on
    /// their own; see [`Utf8Stream`].
    pub fn token_bytes(&self, id: u32) -> Option<&'a [u8]> {
        if id >= self.vocab_size {
            return None;
        }
        let i = id as usize;
        let start = read_u32(self.token_offsets, 4 * i)? as usize;
        let end = read_u32(self.token_offsets, 4 * (i + 1))? as usize;
        self.token_bytes.get(start..end)
    }

    /// The token of one byte.
    pub fn byte_token(&self, byte: u8) -> u32 {
        self.read_id(self.byte_to_id, usize::from(byte))
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
        let mut n_out = 0;
        let mut pieces = Pieces::new(text);
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
            n_out += self.merge_piece(scratch);
        }
        Ok(n_out)
    }

    /// `needed` for a failed [`encode`](Self::encode): every later piece adds at least one id,
    /// and each piece needs its byte count in slots while it is merged.
    fn needed_lower_bound(n_out: usize, piece_len: usize, rest: Pieces<'_>) -> usize {
        let mut needed = n_out.saturating_add(piece_len);
        for (later, piece) in rest.enumerate() {
            needed = needed.max(n_out.saturating_add(1 + later).saturating_add(piece.len()));
        }
        needed
    }

    /// Byte-pair merging of one piece, in place: `tokens` starts as the piece's byte tokens and
    /// the merged ids end up in its first `k` slots; returns `k`.
    ///
    /// Like tiktoken's `byte_pair_merge` (and GPT-2's `bpe`): find the adjacent pair with the
    /// lowest rank, the leftmost on ties; replace it by its merge result; repeat until no
    /// adjacent pair has a merge. Two implementations give the same result:
    /// [`merge_piece_ref`](Self::merge_piece_ref) is that sentence as code and serves any table;
    /// [`merge_piece_tagged`](Self::merge_piece_tagged) remembers each pair's merge so a step
    /// looks up only the two new pairs, and needs 16-bit ids.
    fn merge_piece(&self, tokens: &mut [u32]) -> usize {
        if self.id_bytes == 2 && self.n_merges <= MAX_TAGGED_MERGES {
            self.merge_piece_tagged(tokens)
        } else {
            self.merge_piece_ref(tokens)
        }
    }

    /// The naive merge loop: every step looks up every adjacent pair (O(n^2) look-ups for a
    /// piece of n bytes).
    fn merge_piece_ref(&self, tokens: &mut [u32]) -> usize {
        let mut len = tokens.len();
        loop {
            // The best merge among all adjacent pairs: (rank, position, result).
            let mut best: Option<(u32, usize, u32)> = None;
            let live = tokens.get(..len).unwrap_or(&[]);
            for (i, pair) in live.windows(2).enumerate() {
                let (Some(&left), Some(&right)) = (pair.first(), pair.get(1)) else { continue };
                if let Some(merge) = self.find_merge(left, right).and_then(|k| self.merge_at(k)) {
                    if best.is_none_or(|(rank, _, _)| merge.rank < rank) {
                        best = Some((merge.rank, i, merge.result));
                    }
                }
            }
            let Some((_, i, result)) = best else { return len };
            // Replace the pair by the merged token and close the gap.
            if let Some(slot) = tokens.get_mut(i) {
                *slot = result;
            }
            remove_slot(tokens, i + 1, len);
            len -= 1;
        }
    }

    /// The same merge loop for 16-bit tables, with each pair's merge remembered in its slot:
    /// while merging, a slot holds `token_id | tag << 16`, where `tag` is 1 + the merge-table
    /// index of the pair (this token, next token), or 0 if that pair has no merge. After a merge
    /// only the pairs on either side of the new token change, so a step costs two look-ups and
    /// a scan of the tags instead of a look-up per pair.
    fn merge_piece_tagged(&self, tokens: &mut [u32]) -> usize {
        let mut len = tokens.len();
        for i in 0..len {
            self.retag(tokens, i, len);
        }
        loop {
            // The pair with the lowest rank, the leftmost on ties: (rank, position, merge).
            let mut best: Option<(u32, usize, Merge)> = None;
            for (i, &slot) in tokens.get(..len).unwrap_or(&[]).iter().enumerate() {
                let tag = slot >> 16;
                if tag == 0 {
                    continue;
                }
                if let Some(merge) = self.merge_at(tag as usize - 1) {
                    if best.is_none_or(|(rank, _, _)| merge.rank < rank) {
                        best = Some((merge.rank, i, merge));
                    }
                }
            }
            let Some((_, i, merge)) = best else { break };
            // Replace the pair by the merged token, close the gap, and re-tag the two pairs that
            // now involve the new token.
            if let Some(slot) = tokens.get_mut(i) {
                *slot = merge.result;
            }
            remove_slot(tokens, i + 1, len);
            len -= 1;
            if i > 0 {
                self.retag(tokens, i - 1, len);
            }
            self.retag(tokens, i, len);
        }
        // Strip the tags, leaving the ids.
        for slot in tokens.iter_mut().take(len) {
            *slot &= 0xFFFF;
        }
        len
    }

    /// Sets the tag of slot `i` (see [`merge_piece_tagged`](Self::merge_piece_tagged)) from the
    /// pair (slot i, slot i + 1); the last live slot gets tag 0.
    fn retag(&self, tokens: &mut [u32], i: usize, len: usize) {
        let left = tokens.get(i).map_or(0, |&slot| slot & 0xFFFF);
        let next = if i + 1 < len { tokens.get(i + 1) } else { None };
        let tag = next.and_then(|&slot| self.find_merge(left, slot & 0xFFFF)).map_or(0, |k| k as u32 + 1);
        if let Some(slot) = tokens.get_mut(i) {
            *slot = left | tag << 16;
        }
    }

    /// Binary search for the pair `(left, right)` in the merge table; returns its index.
    fn find_merge(&self, left: u32, right: u32) -> Option<usize> {
        // Compare (left, right) as one integer: left in the high half, right in the low half.
        let w = self.id_bytes;
        let key = (u64::from(left) << (8 * w)) | u64::from(right);
        let entry_bytes = format::MERGE_FIELDS * w;
        let key_at = |i: usize| -> Option<u64> {
            let at = i * entry_bytes;
            Some(if w == 2 {
                let left_right = read_u32(self.merges, at)?;
                u64::from(left_right.rotate_left(16))
            } else {
                (u64::from(read_u32(self.merges, at)?) << 32) | u64::from(read_u32(self.merges, at + 4)?)
            })
        };
        let (mut lo, mut hi) = (0, self.n_merges as usize);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match key_at(mid)?.cmp(&key) {
                core::cmp::Ordering::Less => lo = mid + 1,
                core::cmp::Ordering::Greater => hi = mid,
                core::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// Merge table entry `i`.
    fn merge_at(&self, i: usize) -> Option<Merge> {
        let base = format::MERGE_FIELDS * i;
        let id = |field: usize| {
            let index = base + field;
            if index * self.id_bytes + self.id_bytes > self.merges.len() {
                None
            } else {
                Some(self.read_id(self.merges, index))
            }
        };
        Some(Merge { left: id(0)?, right: id(1)?, rank: id(2)?, result: id(3)? })
    }

    /// Id number `index` of a table of `W`-byte ids (`u32::MAX` past the end, which no check
    /// accepts as an id).
    fn read_id(&self, table: &[u8], index: usize) -> u32 {
        let offset = index * self.id_bytes;
        let id = if self.id_bytes == 2 { read_u16(table, offset).map(u32::from) } else { read_u32(table, offset) };
        id.unwrap_or(u32::MAX)
    }

    /// Writes the bytes of `ids` into `out` and returns the number of bytes written.
    ///
    /// Errors: `InvalidToken` for an id `>= vocab_size`; `BufferTooSmall { needed, available }`
    /// (in bytes, `needed` exact) when `out` is too short. Decoded bytes may not be UTF-8 (a
    /// token can hold part of a character); use `from_utf8_lossy` or [`Utf8Stream`].
    pub fn decode(&self, ids: &[u32], out: &mut [u8]) -> Result<usize, Error> {
        let mut n_out = 0;
        for (i, &id) in ids.iter().enumerate() {
            let bytes = self.token_bytes(id).ok_or(self.invalid(id))?;
            let Some(dst) = out.get_mut(n_out..n_out + bytes.len()) else {
                // Count the exact total (and reject bad ids first: they are the bigger problem).
                let mut needed = n_out;
                for &id in ids.get(i..).unwrap_or(&[]) {
                    needed = needed.saturating_add(self.token_bytes(id).ok_or(self.invalid(id))?.len());
                }
                return Err(Error::BufferTooSmall { needed, available: out.len() });
            };
            dst.copy_from_slice(bytes);
            n_out += bytes.len();
        }
        Ok(n_out)
    }

    fn invalid(&self, id: u32) -> Error {
        Error::InvalidToken { id, vocab_size: self.vocab_size }
    }
}
