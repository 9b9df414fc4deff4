//! SentencePiece BPE with byte fallback (Llama 2, TinyLlama, llama2.c's stories models): encode
//! text to the ids the `sentencepiece` package gives and decode ids to text, with no allocation
//! and no panics, reading its tables straight from the blob (flash).
//!
//! Encoding does what sentencepiece's `bpe_model.cc` does after its normalizer:
//! 1. normalize (the identity normalizer only): every space `' '` and every literal `▁` (U+2581)
//!    in the text becomes the piece-space `▁`; with the flag [`format::FLAG_ADD_DUMMY_PREFIX`]
//!    a `▁` goes in front of a non-empty text; with [`format::FLAG_REMOVE_EXTRA_WHITESPACES`]
//!    leading spaces, trailing spaces and `▁`s, and every space after a space are dropped first.
//!    Runs of spaces are otherwise kept, and tabs and newlines are ordinary characters;
//! 2. one symbol per character: the character's piece, or "unknown" if it has none;
//! 3. repeatedly merge the adjacent pair whose merge has the lowest rank (the leftmost on ties)
//!    until no adjacent pair is in the merge table. Ranks come from the pieces' scores
//!    (sentencepiece merges the pair whose concatenation has the best score), or from the order
//!    of a `tokenizer.json`'s merges;
//! 4. an unknown character becomes its UTF-8 bytes as the `<0xNN>` byte pieces (byte
//!    fallback), or, without byte fallback, a run of unknown characters becomes one `<unk>`
//!    (as sentencepiece does).
//!
//! sentencepiece merges over the whole text at once. This encoder cuts it into segments first,
//! where that cannot change the result: when no merge in the table joins a piece that ends in a
//! non-space to one that starts with a space (true of every model sentencepiece trains, whose
//! pieces hold spaces only at their start; [`SentencePieceBpe::from_bytes`] checks it), a cut
//! before each space that follows a non-space can never be merged across. With
//! [`format::FLAG_SPLIT_AT_SPACES`] (a Hugging Face `Metaspace` pre-tokenizer with `split:
//! true`) the text is cut before every space, as Hugging Face does.
//!
//! `split_digits` needs nothing here: it only stops training from making pieces with two digits
//! (sentencepiece merges a piece `"12"` added to such a model by hand). Special tokens are not
//! parsed: `"<s>"` in the text is encoded as the characters `<`, `s`, `>`.
//!
//! Decoding concatenates each piece's text: a piece's `▁` is a space, a byte piece its byte, a
//! control piece (`<s>`, `</s>`) nothing, `<unk>` the model's unknown surface (`" ⁇ "`). With
//! [`format::FLAG_STRIP_LEADING_SPACE`] (sentencepiece's `add_dummy_prefix` or
//! `remove_extra_whitespaces`; a `Strip` decoder in a `tokenizer.json`) an ordinary piece loses
//! its leading space when it starts the text or follows a control piece such as BOS
//! ([`SentencePieceBpe::token_text`]): `▁Hello` after `<s>` prints `Hello`. sentencepiece strips
//! only at the start of the text (after any control pieces there), llama2.c's `run.c` after
//! every BOS; the two agree on a prompt that starts with BOS. (With remove_extra_whitespaces,
//! sentencepiece goes on dropping one leading space per piece while the text is still empty, so
//! a text that starts with literal `▁`s decodes without them; here only the first piece's goes.
//! Llama does not set that flag.) Byte pieces are bytes: a sequence
//! that is not UTF-8 comes out as `from_utf8_lossy` / [`Utf8Stream`](super::Utf8Stream) make it
//! (one U+FFFD per maximal invalid sequence), where sentencepiece writes one U+FFFD per byte.
//!
//! # Section format (version 1)
//!
//! `host-tools` writes this section into the model blob (see [`format`] for the constants both
//! sides share). All integers are little-endian and read from bytes, so the section needs no
//! alignment. `W` is the width of ids and ranks: 2 bytes when `vocab_size <= 65536` and
//! `n_merges <= 65536`, else 4. `V` = `vocab_size`, `M` = `n_merges`, `C` = `n_chars`,
//! `B` = `token_bytes_len`, `F` = 256 with [`format::FLAG_BYTE_FALLBACK`], else 0.
//!
//! ```text
//!  offset             size         field
//! +------------------+------------+-------------------------------------------------------------+
//! | 0                | 4          | magic  b"SPBP"                                              |
//! | 4                | 2          | version = 1                                                 |
//! | 6                | 1          | W: id/rank width in bytes, 2 or 4                           |
//! | 7                | 1          | reserved, 0                                                 |
//! | 8                | 4          | flags (format::FLAG_*)                                      |
//! | 12               | 4          | V  vocab_size (>= 1)                                        |
//! | 16               | 4          | M  n_merges                                                 |
//! | 20               | 4          | C  n_chars: single-character pieces                         |
//! | 24               | 4          | B  token_bytes_len: total bytes of all pieces' text         |
//! | 28               | 4          | unk_id   (0xFFFFFFFF: none; only with byte fallback)        |
//! | 32               | 4          | bos_id   (0xFFFFFFFF: none)                                 |
//! | 36               | 4          | eos_id   (0xFFFFFFFF: none)                                 |
//! | 40               | 4          | section_len: total size of the section, in bytes            |
//! +------------------+------------+-------------------------------------------------------------+
//! | 44               | V          | piece_type[V] (u8): sentencepiece's codes, 1 NORMAL,        |
//! |                  |            | 2 UNKNOWN, 3 CONTROL, 6 BYTE (4 USER_DEFINED and 5 UNUSED   |
//! |                  |            | are refused)                                                |
//! +------------------+------------+-------------------------------------------------------------+
//! | 44 + V           | W F        | byte_to_id[F]: the byte piece `<0xNN>` of each byte         |
//! +------------------+------------+-------------------------------------------------------------+
//! | ... + W F        | (4 + W) C  | chars[C]: (code point u32, id), sorted by code point, no    |
//! |                  |            | duplicates: the piece of each character (`▁` U+2581 for a   |
//! |                  |            | space; it must be there)                                    |
//! +------------------+------------+-------------------------------------------------------------+
//! | ... + (4 + W) C  | 4 W M      | merges[M]: (left, right, rank, result), sorted by           |
//! |                  |            | (left, right), no duplicates; rank < M, lower merges        |
//! |                  |            | first, equal ranks allowed (the leftmost pair wins)         |
//! +------------------+------------+-------------------------------------------------------------+
//! | ... + 4 W M      | 4 (V + 1)  | token_offsets[V+1] (u32): piece i's text is                 |
//! |                  |            | token_bytes[offsets[i]..offsets[i+1]]; offsets[0] = 0,      |
//! |                  |            | non-decreasing, offsets[V] = B                              |
//! +------------------+------------+-------------------------------------------------------------+
//! | ... + 4 (V + 1)  | B          | token_bytes: every piece's decoded text, concatenated by id |
//! |                  |            | (`▁` as a space, a byte piece its byte, control pieces      |
//! |                  |            | empty, `<unk>` its surface)                                 |
//! +------------------+------------+-------------------------------------------------------------+
//!   section_len = 44 + V + W F + (4 + W) C + 4 W M + 4 (V + 1) + B
//! ```
//!
//! Pieces are stored as the text they decode to, so [`SentencePieceBpe::token_bytes`] is a slice
//! of flash, and the merge table works on ids. A model's scores become ranks in the writer:
//! sentencepiece's merges are every split of a piece into two pieces, all with that piece's
//! rank; a `tokenizer.json`'s are its own, ranked in its order. A llama2.c `tokenizer.bin`
//! (pieces and scores) packs the same way; piece types 4 and 5 are kept for user-defined
//! symbols and a pruned vocabulary's unused pieces.
//!
//! [`SentencePieceBpe::from_bytes`] checks all of it once: the header and every length (the
//! slice may be longer than `section_len`; the rest is ignored), the offsets, each piece's type
//! against its text (a NORMAL piece is not empty, a CONTROL piece is, a BYTE piece is one byte;
//! exactly the unknown piece is UNKNOWN), that BOS and EOS are control pieces, that
//! `byte_to_id[b]` is a byte piece decoding to `b` and covers every byte piece, that each
//! character entry is a NORMAL piece decoding to that character, and that every merge joins
//! NORMAL pieces, is sorted and has a result whose text is its left piece's followed by its
//! right piece's. The last two make `decode(encode(text))` the normalized text for any valid
//! section.

use super::merges::{read_id, MergeTable};
use super::{bad, read_u16, read_u32};
use crate::error::Error;

/// The constants of the section format, shared by the writer (`host-tools`) and this reader.
pub mod format {
    /// First four bytes of a SentencePiece section.
    pub const MAGIC: [u8; 4] = *b"SPBP";
    /// Format version this runtime reads and `host-tools` writes.
    pub const VERSION: u16 = 1;
    /// Size of the fixed header, in bytes.
    pub const HEADER_BYTES: usize = 44;
    /// Offset of `version` (u16).
    pub const OFFSET_VERSION: usize = 4;
    /// Offset of the id/rank width byte (`W`).
    pub const OFFSET_ID_BYTES: usize = 6;
    /// Offset of the reserved byte (must be 0).
    pub const OFFSET_RESERVED: usize = 7;
    /// Offset of `flags` (u32).
    pub const OFFSET_FLAGS: usize = 8;
    /// Offset of `vocab_size` (u32).
    pub const OFFSET_VOCAB_SIZE: usize = 12;
    /// Offset of `n_merges` (u32).
    pub const OFFSET_N_MERGES: usize = 16;
    /// Offset of `n_chars` (u32).
    pub const OFFSET_N_CHARS: usize = 20;
    /// Offset of `token_bytes_len` (u32).
    pub const OFFSET_TOKEN_BYTES_LEN: usize = 24;
    /// Offset of `unk_id` (u32).
    pub const OFFSET_UNK_ID: usize = 28;
    /// Offset of `bos_id` (u32).
    pub const OFFSET_BOS_ID: usize = 32;
    /// Offset of `eos_id` (u32).
    pub const OFFSET_EOS_ID: usize = 36;
    /// Offset of `section_len` (u32).
    pub const OFFSET_SECTION_LEN: usize = 40;
    /// `unk_id`, `bos_id` or `eos_id` when there is none.
    pub const NO_ID: u32 = u32::MAX;
    /// Number of byte pieces (`byte_to_id` entries) with byte fallback.
    pub const N_BYTES: usize = 256;
    /// Ids and ranks per merge entry: left, right, rank, result.
    pub const MERGE_FIELDS: usize = 4;

    /// Flag: a `▁` goes in front of a non-empty text (sentencepiece's `add_dummy_prefix`; a
    /// `Prepend("▁")` normalizer or a `Metaspace` pre-tokenizer's `prepend_scheme` in a
    /// `tokenizer.json`).
    pub const FLAG_ADD_DUMMY_PREFIX: u32 = 1 << 0;
    /// Flag, with [`FLAG_ADD_DUMMY_PREFIX`]: not when the text starts with a space or `▁`
    /// (Hugging Face's `Metaspace`, which prepends only to a text that does not start with one).
    pub const FLAG_DUMMY_PREFIX_UNLESS_SPACE: u32 = 1 << 1;
    /// Flag: drop leading spaces, trailing spaces and `▁`s, and every space that follows a space
    /// (sentencepiece's `remove_extra_whitespaces`).
    pub const FLAG_REMOVE_EXTRA_WHITESPACES: u32 = 1 << 2;
    /// Flag: a character without a piece becomes its UTF-8 bytes as byte pieces (else `<unk>`).
    pub const FLAG_BYTE_FALLBACK: u32 = 1 << 3;
    /// Flag: cut the text before every space; no piece spans two words (`Metaspace` with
    /// `split: true`).
    pub const FLAG_SPLIT_AT_SPACES: u32 = 1 << 4;
    /// Flag: decoding drops the leading space of the piece that starts the text or follows a
    /// control piece.
    pub const FLAG_STRIP_LEADING_SPACE: u32 = 1 << 5;
    /// Flag: a prompt starts with BOS (`add_bos_token`).
    pub const FLAG_ADD_BOS: u32 = 1 << 6;
    /// Flag: an encoded sequence ends with EOS (`add_eos_token`; informational: the runtime's
    /// encoder never adds it).
    pub const FLAG_ADD_EOS: u32 = 1 << 7;
    /// Every flag this runtime knows.
    pub const KNOWN_FLAGS: u32 = (1 << 8) - 1;

    /// Piece type: an ordinary piece (sentencepiece's `NORMAL`).
    pub const TYPE_NORMAL: u8 = 1;
    /// Piece type: the unknown piece `<unk>`.
    pub const TYPE_UNKNOWN: u8 = 2;
    /// Piece type: a control piece such as `<s>` and `</s>` (decodes to nothing).
    pub const TYPE_CONTROL: u8 = 3;
    /// Piece type: a user-defined symbol (reserved; not read by this runtime).
    pub const TYPE_USER_DEFINED: u8 = 4;
    /// Piece type: an unused piece (reserved; not read by this runtime).
    pub const TYPE_UNUSED: u8 = 5;
    /// Piece type: a byte piece `<0xNN>`.
    pub const TYPE_BYTE: u8 = 6;

    /// The id/rank width `W` the writer must use for this many pieces and merges.
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
        byte_fallback: bool,
        vocab_size: usize,
        n_merges: usize,
        n_chars: usize,
        token_bytes_len: usize,
    ) -> Option<usize> {
        // HEADER + V + W F + (4 + W) C + 4 W M + 4 (V + 1) + B, each step checked.
        let f = if byte_fallback { N_BYTES } else { 0 };
        let Some(byte_table) = id_bytes.checked_mul(f) else { return None };
        let Some(char_entry) = id_bytes.checked_add(4) else { return None };
        let Some(chars) = char_entry.checked_mul(n_chars) else { return None };
        let Some(merge_entry) = id_bytes.checked_mul(MERGE_FIELDS) else { return None };
        let Some(merges) = merge_entry.checked_mul(n_merges) else { return None };
        let Some(n_offsets) = vocab_size.checked_add(1) else { return None };
        let Some(offsets) = n_offsets.checked_mul(4) else { return None };
        let Some(a) = HEADER_BYTES.checked_add(vocab_size) else { return None };
        let Some(b) = a.checked_add(byte_table) else { return None };
        let Some(c) = b.checked_add(chars) else { return None };
        let Some(d) = c.checked_add(merges) else { return None };
        let Some(e) = d.checked_add(offsets) else { return None };
        e.checked_add(token_bytes_len)
    }
}

/// The kind of a piece (sentencepiece's `ModelProto.SentencePiece.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceType {
    /// An ordinary piece: text that encoding produces and merges.
    Normal,
    /// The unknown piece `<unk>`.
    Unknown,
    /// A control piece (`<s>`, `</s>`): never produced by encoding, decodes to nothing.
    Control,
    /// A byte piece `<0xNN>` (byte fallback).
    Byte,
}

impl PieceType {
    fn from_code(code: u8) -> Option<Self> {
        match code {
            format::TYPE_NORMAL => Some(Self::Normal),
            format::TYPE_UNKNOWN => Some(Self::Unknown),
            format::TYPE_CONTROL => Some(Self::Control),
            format::TYPE_BYTE => Some(Self::Byte),
            _ => None,
        }
    }
}

/// The piece-space: what a space in the text is, before merging.
const SPACE: char = '\u{2581}';

/// A validated SentencePiece BPE section over borrowed tables.
///
/// Build it once with [`SentencePieceBpe::from_bytes`]; afterwards [`encode`](Self::encode) and
/// [`decode`](Self::decode) only fail for caller-side reasons (a short buffer, a bad id).
#[derive(Debug, Clone, Copy)]
pub struct SentencePieceBpe<'a> {
    /// `V`: number of pieces.
    vocab_size: u32,
    /// `W`: width of ids and ranks in the tables (2 or 4).
    id_bytes: usize,
    /// `format::FLAG_*`.
    flags: u32,
    /// The unknown piece (`None` only with byte fallback).
    unk_id: Option<u32>,
    /// Beginning-of-sequence control piece.
    bos_id: Option<u32>,
    /// End-of-sequence control piece.
    eos_id: Option<u32>,
    /// The piece of `▁`: a space always has a piece, so it never falls back to bytes.
    space_id: u32,
    /// How the text is cut into segments before merging.
    split: Split,
    /// `piece_type`: (V,) u8.
    piece_types: &'a [u8],
    /// `byte_to_id`: (256,) ids of width `W`, or empty without byte fallback.
    byte_to_id: &'a [u8],
    /// `chars`: (C, 4 + W) code point and id.
    chars: &'a [u8],
    /// `C`.
    n_chars: u32,
    /// `merges`: (M, 4) ids of width `W`, sorted by (left, right).
    merges: MergeTable<'a>,
    /// `token_offsets`: (V + 1,) u32.
    token_offsets: &'a [u8],
    /// `token_bytes`: (B,) bytes.
    token_bytes: &'a [u8],
}

/// Where the text is cut into segments that are merged separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Split {
    /// One segment (some merge joins a word to a following space).
    None,
    /// Before each space that follows a non-space (no merge can cross it).
    AfterWord,
    /// Before every space ([`format::FLAG_SPLIT_AT_SPACES`]).
    EverySpace,
}

impl<'a> SentencePieceBpe<'a> {
    /// Validates a SentencePiece section (see the [module docs](self) for the format). Every
    /// check the encoder and decoder rely on happens here; `BadTokenizer { offset }` points at
    /// the first byte found wrong.
    pub fn from_bytes(section: &'a [u8]) -> Result<Self, Error> {
        use format::*;

        // Header: magic, version, widths, flags, counts.
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
        let flags = field(OFFSET_FLAGS)?;
        let unless_space_alone = flags & FLAG_DUMMY_PREFIX_UNLESS_SPACE != 0 && flags & FLAG_ADD_DUMMY_PREFIX == 0;
        if flags & !KNOWN_FLAGS != 0 || unless_space_alone {
            return Err(bad(OFFSET_FLAGS));
        }
        let byte_fallback = flags & FLAG_BYTE_FALLBACK != 0;
        let vocab_size = field(OFFSET_VOCAB_SIZE)?;
        let n_merges = field(OFFSET_N_MERGES)?;
        let n_chars = field(OFFSET_N_CHARS)?;
        let token_bytes_len = field(OFFSET_TOKEN_BYTES_LEN)?;
        let section_len = field(OFFSET_SECTION_LEN)?;
        let (v, m, c, b) = (vocab_size as usize, n_merges as usize, n_chars as usize, token_bytes_len as usize);
        // V < u32::MAX: the value V itself marks an unknown character while merging.
        if v == 0 || vocab_size == u32::MAX || (id_bytes == 2 && v > 1 << 16) {
            return Err(bad(OFFSET_VOCAB_SIZE));
        }
        if id_bytes == 2 && m > 1 << 16 {
            return Err(bad(OFFSET_N_MERGES));
        }
        if format::section_len(id_bytes, byte_fallback, v, m, c, b) != Some(section_len as usize) {
            return Err(bad(OFFSET_SECTION_LEN));
        }
        if section.len() < section_len as usize {
            return Err(bad(section.len()));
        }

        // Split the section into its tables (lengths are known to fit now).
        let types_at = HEADER_BYTES;
        let byte_to_id_at = types_at + v;
        let chars_at = byte_to_id_at + if byte_fallback { N_BYTES * id_bytes } else { 0 };
        let merges_at = chars_at + (4 + id_bytes) * c;
        let offsets_at = merges_at + MERGE_FIELDS * id_bytes * m;
        let token_bytes_at = offsets_at + 4 * (v + 1);
        let table = |start: usize, end: usize| section.get(start..end).unwrap_or(&[]);
        let mut tok = Self {
            vocab_size,
            id_bytes,
            flags,
            unk_id: None,
            bos_id: None,
            eos_id: None,
            space_id: 0,
            split: Split::None,
            piece_types: table(types_at, byte_to_id_at),
            byte_to_id: table(byte_to_id_at, chars_at),
            chars: table(chars_at, merges_at),
            n_chars,
            // The marker of an unknown character, V, must fit the tagged loop's 16 bits too.
            merges: MergeTable::new(table(merges_at, offsets_at), n_merges, id_bytes, vocab_size),
            token_offsets: table(offsets_at, token_bytes_at),
            token_bytes: table(token_bytes_at, token_bytes_at + b),
        };

        // Offsets: start at 0, never decrease, end at B.
        super::check_offsets(tok.token_offsets, offsets_at, vocab_size, token_bytes_len)?;

        // Special ids: the unknown piece (required without byte fallback), BOS and EOS.
        let id_field = |offset| -> Result<Option<u32>, Error> {
            let id = field(offset)?;
            if id == NO_ID {
                Ok(None)
            } else if id < vocab_size {
                Ok(Some(id))
            } else {
                Err(bad(offset))
            }
        };
        tok.unk_id = id_field(OFFSET_UNK_ID)?;
        tok.bos_id = id_field(OFFSET_BOS_ID)?;
        tok.eos_id = id_field(OFFSET_EOS_ID)?;
        let is = |id: Option<u32>, t: PieceType| id.is_some_and(|id| tok.piece_type(id) == Some(t));
        if tok.unk_id.is_none() && !byte_fallback || tok.unk_id.is_some() && !is(tok.unk_id, PieceType::Unknown) {
            return Err(bad(OFFSET_UNK_ID));
        }
        if tok.bos_id.is_some() && !is(tok.bos_id, PieceType::Control) || flags & FLAG_ADD_BOS != 0 && tok.bos_id.is_none() {
            return Err(bad(OFFSET_BOS_ID));
        }
        if tok.eos_id.is_some() && !is(tok.eos_id, PieceType::Control) || flags & FLAG_ADD_EOS != 0 && tok.eos_id.is_none() {
            return Err(bad(OFFSET_EOS_ID));
        }

        // Piece types against their text.
        let mut n_byte_pieces = 0;
        for id in 0..vocab_size {
            let bytes = tok.token_bytes(id).unwrap_or(&[]);
            let ok = match tok.piece_type(id) {
                Some(PieceType::Normal) => !bytes.is_empty(),
                Some(PieceType::Unknown) => tok.unk_id == Some(id),
                Some(PieceType::Control) => bytes.is_empty(),
                Some(PieceType::Byte) => {
                    n_byte_pieces += 1;
                    byte_fallback && bytes.len() == 1
                }
                None => false,
            };
            if !ok {
                return Err(bad(types_at + id as usize));
            }
        }

        // Byte table: byte b's piece is a byte piece that decodes to exactly [b]; together they
        // are all the byte pieces.
        if byte_fallback {
            for byte in 0..=255u8 {
                let id = read_id(tok.byte_to_id, id_bytes, usize::from(byte));
                if tok.piece_type(id) != Some(PieceType::Byte) || tok.token_bytes(id) != Some(&[byte][..]) {
                    return Err(bad(byte_to_id_at + id_bytes * usize::from(byte)));
                }
            }
            if n_byte_pieces != N_BYTES {
                return Err(bad(byte_to_id_at));
            }
        }

        // Characters: strictly increasing code points, each a NORMAL piece whose text is the
        // character (a space for `▁`), and `▁` among them.
        let mut prev = None;
        let mut space_id = None;
        for i in 0..c {
            let at = chars_at + (4 + id_bytes) * i;
            let (code, id) = tok.char_entry(i).ok_or(bad(at))?;
            let ch = char::from_u32(code).filter(|&ch| ch != ' ');
            let Some(ch) = ch.filter(|_| prev.is_none_or(|p| p < code)) else { return Err(bad(at)) };
            prev = Some(code);
            let mut utf8 = [0u8; 4];
            let text: &[u8] = if ch == SPACE { b" " } else { ch.encode_utf8(&mut utf8).as_bytes() };
            if tok.piece_type(id) != Some(PieceType::Normal) || tok.token_bytes(id) != Some(text) {
                return Err(bad(at + 4));
            }
            if ch == SPACE {
                space_id = Some(id);
            }
        }
        tok.space_id = space_id.ok_or(bad(OFFSET_N_CHARS))?;

        // Merges: ids in range, strictly sorted by (left, right), NORMAL pieces only, and the
        // result's text is the left piece's followed by the right piece's. Note whether any merge
        // joins a piece ending in a non-space to one starting with a space.
        let mut joins_word_to_space = false;
        let normal = |id| tok.piece_type(id) == Some(PieceType::Normal);
        tok.merges.validate(
            merges_at,
            &|id| tok.token_bytes(id),
            &mut |merge, offset| {
                if !normal(merge.left) || !normal(merge.right) || !normal(merge.result) {
                    return Err(bad(offset));
                }
                let left_end = tok.token_bytes(merge.left).and_then(|l| l.last().copied());
                let right_start = tok.token_bytes(merge.right).and_then(|r| r.first().copied());
                joins_word_to_space |= left_end != Some(b' ') && right_start == Some(b' ');
                Ok(())
            },
        )?;
        tok.split = if flags & FLAG_SPLIT_AT_SPACES != 0 {
            Split::EverySpace
        } else if joins_word_to_space {
            Split::None
        } else {
            Split::AfterWord
        };
        Ok(tok)
    }

    /// Number of pieces (`V`).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size as usize
    }

    /// Number of merges (`M`).
    pub fn n_merges(&self) -> usize {
        self.merges.len() as usize
    }

    /// Number of single-character pieces (`C`).
    pub fn n_chars(&self) -> usize {
        self.n_chars as usize
    }

    /// The section's `format::FLAG_*` bits.
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// The unknown piece (`None` for a byte-fallback vocabulary without one).
    pub fn unk_id(&self) -> Option<u32> {
        self.unk_id
    }

    /// The beginning-of-sequence piece, if the vocabulary has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    /// The end-of-sequence piece, if the vocabulary has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }

    /// The id a prompt starts with: BOS when the tokenizer adds it (`add_bos_token`).
    pub fn prompt_prefix(&self) -> Option<u32> {
        self.bos_id.filter(|_| self.flags & format::FLAG_ADD_BOS != 0)
    }

    /// The type of piece `id` (`None` if `id >= vocab_size`).
    pub fn piece_type(&self, id: u32) -> Option<PieceType> {
        self.piece_types.get(id as usize).and_then(|&code| PieceType::from_code(code))
    }

    /// The piece of one byte (`None` without byte fallback).
    pub fn byte_token(&self, byte: u8) -> Option<u32> {
        if self.byte_to_id.is_empty() {
            None
        } else {
            Some(read_id(self.byte_to_id, self.id_bytes, usize::from(byte)))
        }
    }

    /// The text of piece `id` (`None` if `id >= vocab_size`): `▁` as a space, a byte piece's
    /// byte, nothing for a control piece. See [`token_text`](Self::token_text) for printing.
    pub fn token_bytes(&self, id: u32) -> Option<&'a [u8]> {
        super::token_slice(self.token_offsets, self.token_bytes, self.vocab_size, id)
    }

    /// The text to print for piece `id` after piece `prev` (`None` at the start of the text):
    /// its [`token_bytes`](Self::token_bytes), less the leading space of an ordinary piece that
    /// starts the text or follows a control piece (BOS) when the tokenizer adds a dummy prefix
    /// ([`format::FLAG_STRIP_LEADING_SPACE`]). `None` if `id >= vocab_size`.
    pub fn token_text(&self, prev: Option<u32>, id: u32) -> Option<&'a [u8]> {
        let bytes = self.token_bytes(id)?;
        let at_start = prev.is_none_or(|p| self.piece_type(p) == Some(PieceType::Control));
        if at_start && self.flags & format::FLAG_STRIP_LEADING_SPACE != 0 && self.piece_type(id) == Some(PieceType::Normal) {
            return Some(bytes.strip_prefix(b" ").unwrap_or(bytes));
        }
        Some(bytes)
    }

    /// Code point and id of character entry `i`.
    fn char_entry(&self, i: usize) -> Option<(u32, u32)> {
        let entry = 4 + self.id_bytes;
        let at = i.checked_mul(entry)?;
        let code = read_u32(self.chars, at)?;
        let id = if self.id_bytes == 2 { u32::from(read_u16(self.chars, at + 4)?) } else { read_u32(self.chars, at + 4)? };
        Some((code, id))
    }

    /// The piece of one normalized character (binary search in `chars`).
    fn char_id(&self, ch: char) -> Option<u32> {
        let key = u32::from(ch);
        let (mut lo, mut hi) = (0, self.n_chars as usize);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (code, id) = self.char_entry(mid)?;
            match code.cmp(&key) {
                core::cmp::Ordering::Less => lo = mid + 1,
                core::cmp::Ordering::Greater => hi = mid,
                core::cmp::Ordering::Equal => return Some(id),
            }
        }
        None
    }

    /// Encodes `text` into `out` as sentencepiece's `encode` does (no BOS: see
    /// [`prompt_prefix`](Self::prompt_prefix)) and returns the number of ids written.
    ///
    /// `out` is also the working memory: a segment (a run of spaces and the word after it; the
    /// whole text if the table has a merge across a word's end) of `n` bytes is merged in place
    /// in `n` slots after the ids already written, plus one slot for the dummy prefix. So
    /// `out.len() >= text.len() + 1` always suffices. When `out` is too short this returns
    /// `BufferTooSmall { needed, available }` where `needed` is a lower bound (ids written so
    /// far, one per segment still to come, and the slots of a segment); what `out` holds after
    /// an error is unspecified, and nothing is written past its end.
    ///
    /// Time: linear in the text except within a segment, where merging is quadratic in its
    /// length, as in the byte-level encoder (a long run of text without spaces, e.g. Chinese, is
    /// one segment).
    pub fn encode(&self, text: &str, out: &mut [u32]) -> Result<usize, Error> {
        let norm = Normalized::new(text, self.flags, self.split);
        let mut n_out: usize = 0;
        let mut prev_unknown = false;
        let mut segments = norm.segments();
        while let Some(segment) = segments.next() {
            let area = segment.area();
            let Some(scratch) = out.get_mut(n_out..n_out.saturating_add(area)) else {
                let needed = Self::needed_lower_bound(n_out, area, segments);
                return Err(Error::BufferTooSmall { needed, available: out.len() });
            };
            // One symbol per character: its piece, or V for "unknown".
            let mut k = 0;
            for (slot, ch) in scratch.iter_mut().zip(segment.chars(&norm)) {
                *slot = self.char_id(ch).unwrap_or(self.vocab_size);
                k += 1;
            }
            // BPE: merge inside the segment, then write its ids.
            let k = self.merges.merge(scratch.get_mut(..k).unwrap_or(&mut []));
            n_out += self.emit(scratch, k, segment.chars(&norm), &mut prev_unknown);
        }
        Ok(n_out)
    }

    /// `needed` for a failed [`encode`](Self::encode): every later segment adds at least one id,
    /// and each segment needs its slots while it is merged.
    fn needed_lower_bound(n_out: usize, area: usize, rest: Segments<'_>) -> usize {
        let mut needed = n_out.saturating_add(area);
        for (later, segment) in rest.enumerate() {
            needed = needed.max(n_out.saturating_add(1 + later).saturating_add(segment.area()));
        }
        needed
    }

    /// Turns the `k` merged symbols at the start of `scratch` into ids, written from the start
    /// of `scratch`; returns how many. `chars` are the segment's characters, walked alongside to
    /// know which character an unknown symbol is.
    ///
    /// A piece becomes one id, an unknown character its byte pieces (as many as its UTF-8 bytes)
    /// or one `<unk>` for a run of them. Each symbol's ids are at most its bytes in the text (a
    /// space always has a piece; the dummy prefix has its own slot), so after the symbols are
    /// moved to the end of `scratch` the ids written from the start never overtake the symbols
    /// still to be read.
    fn emit(&self, scratch: &mut [u32], k: usize, mut chars: SegmentChars<'_>, prev_unknown: &mut bool) -> usize {
        let area = scratch.len();
        let Some(first) = area.checked_sub(k) else { return 0 };
        scratch.copy_within(..k, first);
        let mut written = 0;
        let mut put = |scratch: &mut [u32], id: u32| {
            if let Some(slot) = scratch.get_mut(written) {
                *slot = id;
                written += 1;
            }
        };
        for j in first..area {
            let Some(&symbol) = scratch.get(j) else { break };
            if symbol < self.vocab_size {
                // A piece: skip the characters it covers (its text is theirs, one for one).
                let n_chars = self.token_bytes(symbol).map_or(0, |t| t.iter().filter(|&&b| b & 0xC0 != 0x80).count());
                if n_chars > 0 {
                    chars.nth(n_chars - 1);
                }
                put(scratch, symbol);
                *prev_unknown = false;
                continue;
            }
            let Some(ch) = chars.next() else { break };
            let mut utf8 = [0u8; 4];
            match self.unk_id {
                _ if !self.byte_to_id.is_empty() => {
                    for &byte in ch.encode_utf8(&mut utf8).as_bytes() {
                        put(scratch, read_id(self.byte_to_id, self.id_bytes, usize::from(byte)));
                    }
                }
                Some(unk) if !*prev_unknown => put(scratch, unk),
                _ => {}
            }
            *prev_unknown = true;
        }
        written
    }

    /// Writes the text of `ids` into `out`, as [`token_text`](Self::token_text) gives it for
    /// each id after the one before, and returns the number of bytes written.
    ///
    /// Errors: `InvalidToken` for an id `>= vocab_size`; `BufferTooSmall { needed, available }`
    /// (in bytes, `needed` exact) when `out` is too short. Byte pieces can make the text invalid
    /// UTF-8; use `from_utf8_lossy` or [`Utf8Stream`](super::Utf8Stream).
    pub fn decode(&self, ids: &[u32], out: &mut [u8]) -> Result<usize, Error> {
        super::decode_with(ids, out, |prev, id| {
            self.token_text(prev, id).ok_or(Error::InvalidToken { id, vocab_size: self.vocab_size })
        })
    }
}

/// The text as sentencepiece's identity normalizer leaves it, read in place: the characters of
/// `text[start..end]`, a space or `▁` read as `▁`, dropped spaces skipped, and a dummy `▁` in
/// front.
#[derive(Debug, Clone, Copy)]
struct Normalized<'t> {
    text: &'t str,
    /// Start of the kept text (after leading spaces, with remove_extra_whitespaces).
    start: usize,
    /// End of the kept text (before trailing spaces and `▁`s, with remove_extra_whitespaces).
    end: usize,
    /// Whether the normalized text starts with a dummy `▁`.
    dummy: bool,
    /// remove_extra_whitespaces: a space after a space is dropped.
    collapse: bool,
    split: Split,
}

impl<'t> Normalized<'t> {
    fn new(text: &'t str, flags: u32, split: Split) -> Self {
        use format::*;
        let collapse = flags & FLAG_REMOVE_EXTRA_WHITESPACES != 0;
        let (mut start, mut end) = (0, text.len());
        if collapse {
            start = text.len() - text.trim_start_matches(' ').len();
            end = text.trim_end_matches([' ', SPACE]).len().max(start);
        }
        let first = text.get(start..end).and_then(|kept| kept.chars().next());
        let unless_space = flags & FLAG_DUMMY_PREFIX_UNLESS_SPACE != 0 && first.is_some_and(|c| c == ' ' || c == SPACE);
        let dummy = first.is_some() && flags & FLAG_ADD_DUMMY_PREFIX != 0 && !unless_space;
        Self { text, start, end, dummy, collapse, split }
    }

    /// The kept character at or after byte `p`: (normalized character, its byte offset, the
    /// offset after it), or `None` at the end.
    fn next_char(&self, mut p: usize) -> Option<(char, usize, usize)> {
        loop {
            if p >= self.end {
                return None;
            }
            let c = self.text.get(p..)?.chars().next()?;
            let next = p + c.len_utf8();
            let after_space = p > self.start && self.text.as_bytes().get(p - 1) == Some(&b' ');
            if self.collapse && c == ' ' && after_space {
                p = next;
                continue;
            }
            return Some((if c == ' ' { SPACE } else { c }, p, next));
        }
    }

    fn segments(self) -> Segments<'t> {
        Segments { norm: self, p: self.start, dummy: self.dummy }
    }
}

/// A run of the normalized text that is merged on its own: `text[start..end]`, after the dummy
/// `▁` for the first one.
#[derive(Debug, Clone, Copy)]
struct Segment {
    start: usize,
    end: usize,
    dummy: bool,
}

impl Segment {
    /// Slots the segment needs while it is merged: one per byte, one for the dummy prefix.
    fn area(&self) -> usize {
        self.end - self.start + usize::from(self.dummy)
    }

    fn chars<'t>(&self, norm: &Normalized<'t>) -> SegmentChars<'t> {
        SegmentChars { norm: *norm, p: self.start, end: self.end, dummy: self.dummy }
    }
}

/// The segments of a normalized text, in order.
#[derive(Debug, Clone)]
struct Segments<'t> {
    norm: Normalized<'t>,
    /// Where the next segment starts.
    p: usize,
    /// Whether it starts with the dummy `▁`.
    dummy: bool,
}

impl Iterator for Segments<'_> {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        if self.p >= self.norm.end && !self.dummy {
            return None;
        }
        let start = self.p;
        // Whether the segment's last character so far is a space (None: no character yet).
        let mut prev_space = self.dummy.then_some(true);
        let mut end = self.norm.end;
        let mut q = start;
        while let Some((c, at, next)) = self.norm.next_char(q) {
            let space = c == SPACE;
            let cut = match (prev_space, self.norm.split) {
                (None, _) | (_, Split::None) => false,
                (Some(prev), Split::AfterWord) => space && !prev,
                (Some(_), Split::EverySpace) => space,
            };
            if cut {
                end = at;
                break;
            }
            prev_space = Some(space);
            q = next;
        }
        let segment = Segment { start, end, dummy: self.dummy };
        self.p = end;
        self.dummy = false;
        Some(segment)
    }
}

/// The normalized characters of one segment.
#[derive(Debug, Clone)]
struct SegmentChars<'t> {
    norm: Normalized<'t>,
    p: usize,
    end: usize,
    dummy: bool,
}

impl Iterator for SegmentChars<'_> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        if self.dummy {
            self.dummy = false;
            return Some(SPACE);
        }
        let (c, at, next) = self.norm.next_char(self.p)?;
        if at >= self.end {
            return None;
        }
        self.p = next;
        Some(c)
    }
}
