//! sentencepiece's `tokenizer.model`: a `ModelProto` protocol buffer, read and written by hand
//! (the fields the packer and the trainer use; others are skipped on reading).
//!
//! ```text
//! ModelProto        1 pieces: repeated SentencePiece    2 trainer_spec: TrainerSpec
//!                   3 normalizer_spec: NormalizerSpec   5 denormalizer_spec: NormalizerSpec
//! SentencePiece     1 piece: string   2 score: float   3 type: enum (1 NORMAL, 2 UNKNOWN,
//!                   3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE; default NORMAL)
//! TrainerSpec       3 model_type (1 UNIGRAM default, 2 BPE, 3 WORD, 4 CHAR)  4 vocab_size
//!                   10 character_coverage  24 treat_whitespace_as_suffix  25 split_digits
//!                   26 allow_whitespace_only_pieces  35 byte_fallback  40 unk_id  41 bos_id
//!                   42 eos_id  43 pad_id  44 unk_surface  45-48 unk/bos/eos/pad_piece
//! NormalizerSpec    1 name  2 precompiled_charsmap: bytes  3 add_dummy_prefix (default true)
//!                   4 remove_extra_whitespaces (default true)  5 escape_whitespaces (default true)
//!                   6 normalization_rule_tsv
//! ```
//!
//! Field numbers and defaults are those of sentencepiece's `sentencepiece_model.proto` (proto2:
//! an absent field has its default). The wire format: each field is a varint key
//! `number << 3 | wire type`, then a varint (type 0), 8 bytes (1), a varint length and that many
//! bytes (2), or 4 bytes (5).

use anyhow::{bail, ensure, Context, Result};

/// Piece type codes (sentencepiece's `ModelProto.SentencePiece.Type`).
pub mod piece_type {
    /// An ordinary piece.
    pub const NORMAL: i32 = 1;
    /// The unknown piece.
    pub const UNKNOWN: i32 = 2;
    /// A control piece (`<s>`, `</s>`).
    pub const CONTROL: i32 = 3;
    /// A user-defined symbol.
    pub const USER_DEFINED: i32 = 4;
    /// An unused piece.
    pub const UNUSED: i32 = 5;
    /// A byte piece `<0xNN>`.
    pub const BYTE: i32 = 6;

    /// The type's name in the proto.
    pub fn name(code: i32) -> &'static str {
        match code {
            NORMAL => "NORMAL",
            UNKNOWN => "UNKNOWN",
            CONTROL => "CONTROL",
            USER_DEFINED => "USER_DEFINED",
            UNUSED => "UNUSED",
            BYTE => "BYTE",
            _ => "unknown type",
        }
    }
}

/// `TrainerSpec.model_type` codes.
pub mod model_type {
    /// Unigram language model (sentencepiece's default).
    pub const UNIGRAM: i32 = 1;
    /// Byte-pair encoding.
    pub const BPE: i32 = 2;
    /// Whitespace-separated words.
    pub const WORD: i32 = 3;
    /// Characters.
    pub const CHAR: i32 = 4;

    /// The type's name in the proto.
    pub fn name(code: i32) -> &'static str {
        match code {
            UNIGRAM => "UNIGRAM",
            BPE => "BPE",
            WORD => "WORD",
            CHAR => "CHAR",
            _ => "unknown",
        }
    }
}

/// One piece of the vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct SpPiece {
    /// The piece as sentencepiece writes it (`▁` for a space, `<0x41>` for a byte piece).
    pub piece: String,
    /// Its score (BPE: higher merges first).
    pub score: f32,
    /// Its type (see [`piece_type`]).
    pub kind: i32,
}

/// The `TrainerSpec` fields the packer and the trainer use.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerSpec {
    /// See [`model_type`].
    pub model_type: i32,
    /// Vocabulary size asked of the trainer.
    pub vocab_size: i32,
    /// Share of characters covered by character pieces.
    pub character_coverage: f32,
    /// Whitespace at the end of pieces instead of the start.
    pub treat_whitespace_as_suffix: bool,
    /// Training never joins two digits.
    pub split_digits: bool,
    /// Pieces of whitespace only are allowed.
    pub allow_whitespace_only_pieces: bool,
    /// Unknown characters become byte pieces.
    pub byte_fallback: bool,
    /// Id of the unknown piece.
    pub unk_id: i32,
    /// Id of BOS (-1: none).
    pub bos_id: i32,
    /// Id of EOS (-1: none).
    pub eos_id: i32,
    /// Id of the padding piece (-1: none).
    pub pad_id: i32,
    /// What `<unk>` decodes to.
    pub unk_surface: String,
    /// The unknown piece's text.
    pub unk_piece: String,
    /// BOS's text.
    pub bos_piece: String,
    /// EOS's text.
    pub eos_piece: String,
    /// The padding piece's text.
    pub pad_piece: String,
}

impl Default for TrainerSpec {
    /// The proto's defaults.
    fn default() -> Self {
        Self {
            model_type: model_type::UNIGRAM,
            vocab_size: 8000,
            character_coverage: 0.9995,
            treat_whitespace_as_suffix: false,
            split_digits: false,
            allow_whitespace_only_pieces: false,
            byte_fallback: false,
            unk_id: 0,
            bos_id: 1,
            eos_id: 2,
            pad_id: -1,
            unk_surface: " \u{2047} ".to_string(),
            unk_piece: "<unk>".to_string(),
            bos_piece: "<s>".to_string(),
            eos_piece: "</s>".to_string(),
            pad_piece: "<pad>".to_string(),
        }
    }
}

/// The `NormalizerSpec` fields.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizerSpec {
    /// Rule name (`identity`, `nmt_nfkc`, ...).
    pub name: String,
    /// The compiled normalization rules (empty for `identity`).
    pub precompiled_charsmap: Vec<u8>,
    /// A `▁` goes in front of the text.
    pub add_dummy_prefix: bool,
    /// Leading, trailing and repeated spaces are dropped.
    pub remove_extra_whitespaces: bool,
    /// Spaces become `▁`.
    pub escape_whitespaces: bool,
    /// Custom rules (a TSV), if any.
    pub normalization_rule_tsv: String,
}

impl Default for NormalizerSpec {
    /// The proto's defaults (name empty).
    fn default() -> Self {
        Self {
            name: String::new(),
            precompiled_charsmap: Vec::new(),
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            escape_whitespaces: true,
            normalization_rule_tsv: String::new(),
        }
    }
}

/// A `ModelProto`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpModel {
    /// The vocabulary, by id.
    pub pieces: Vec<SpPiece>,
    /// How it was trained.
    pub trainer: TrainerSpec,
    /// How text is normalized before encoding.
    pub normalizer: NormalizerSpec,
    /// How text is denormalized after decoding, if set.
    pub denormalizer: Option<NormalizerSpec>,
}

// ---- reading --------------------------------------------------------------------------------

/// A field's value as it is on the wire.
enum Value<'b> {
    Varint(u64),
    /// 8 bytes (no field read here uses them).
    Fixed64,
    Bytes(&'b [u8]),
    Fixed32(u32),
}

/// Reads the fields of one message.
struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn new(bytes: &'b [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.bytes.get(self.at) else { bail!("truncated varint at byte {}", self.at) };
            self.at += 1;
            value |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        bail!("varint longer than 10 bytes at byte {}", self.at)
    }

    fn take(&mut self, n: usize) -> Result<&'b [u8]> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len());
        let Some(end) = end else { bail!("field of {n} bytes at byte {} runs past the end ({} bytes)", self.at, self.bytes.len()) };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    /// The next field: (number, value), or `None` at the end.
    fn field(&mut self) -> Result<Option<(u64, Value<'b>)>> {
        if self.at >= self.bytes.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (number, wire) = (key >> 3, key & 7);
        let value = match wire {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Value::Fixed64
            }
            2 => {
                let len = usize::try_from(self.varint()?)?;
                Value::Bytes(self.take(len)?)
            }
            5 => Value::Fixed32(u32::from_le_bytes(self.take(4)?.try_into()?)),
            _ => bail!("field {number} has wire type {wire}, which protobuf 3 does not use"),
        };
        Ok(Some((number, value)))
    }
}

fn as_bytes<'b>(v: &Value<'b>, what: &str) -> Result<&'b [u8]> {
    match v {
        Value::Bytes(b) => Ok(b),
        _ => bail!("{what} is not a length-delimited field"),
    }
}

fn as_string(v: &Value<'_>, what: &str) -> Result<String> {
    String::from_utf8(as_bytes(v, what)?.to_vec()).with_context(|| format!("{what} is not UTF-8"))
}

fn as_varint(v: &Value<'_>, what: &str) -> Result<u64> {
    match v {
        Value::Varint(x) => Ok(*x),
        _ => bail!("{what} is not a varint field"),
    }
}

/// An `int32` field (negative values are 10-byte varints of their 64-bit two's complement).
fn as_i32(v: &Value<'_>, what: &str) -> Result<i32> {
    Ok(as_varint(v, what)? as i64 as i32)
}

fn as_bool(v: &Value<'_>, what: &str) -> Result<bool> {
    Ok(as_varint(v, what)? != 0)
}

fn as_f32(v: &Value<'_>, what: &str) -> Result<f32> {
    match v {
        Value::Fixed32(x) => Ok(f32::from_bits(*x)),
        _ => bail!("{what} is not a 32-bit float field"),
    }
}

impl SpModel {
    /// Parses a `tokenizer.model`.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let mut model = SpModel::default();
        let mut r = Reader::new(bytes);
        while let Some((number, value)) = r.field()? {
            match number {
                1 => {
                    let i = model.pieces.len();
                    let piece = parse_piece(as_bytes(&value, "pieces")?).with_context(|| format!("in pieces[{i}]"))?;
                    model.pieces.push(piece);
                }
                2 => model.trainer = parse_trainer(as_bytes(&value, "trainer_spec")?).context("in trainer_spec")?,
                3 => {
                    model.normalizer = parse_normalizer(as_bytes(&value, "normalizer_spec")?).context("in normalizer_spec")?
                }
                5 => {
                    let spec = parse_normalizer(as_bytes(&value, "denormalizer_spec")?).context("in denormalizer_spec")?;
                    model.denormalizer = Some(spec);
                }
                _ => {}
            }
        }
        ensure!(!model.pieces.is_empty(), "no pieces: this is not a sentencepiece model");
        Ok(model)
    }

    /// Serializes the model (fields in number order, as sentencepiece writes them; every field
    /// written, defaults included).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for p in &self.pieces {
            let mut piece = Vec::new();
            put_bytes(&mut piece, 1, p.piece.as_bytes());
            put_f32(&mut piece, 2, p.score);
            put_varint_field(&mut piece, 3, p.kind as i64 as u64);
            put_bytes(&mut out, 1, &piece);
        }
        let t = &self.trainer;
        let mut trainer = Vec::new();
        put_varint_field(&mut trainer, 3, t.model_type as i64 as u64);
        put_varint_field(&mut trainer, 4, t.vocab_size as i64 as u64);
        put_f32(&mut trainer, 10, t.character_coverage);
        put_varint_field(&mut trainer, 24, u64::from(t.treat_whitespace_as_suffix));
        put_varint_field(&mut trainer, 25, u64::from(t.split_digits));
        put_varint_field(&mut trainer, 26, u64::from(t.allow_whitespace_only_pieces));
        put_varint_field(&mut trainer, 35, u64::from(t.byte_fallback));
        for (number, id) in [(40, t.unk_id), (41, t.bos_id), (42, t.eos_id), (43, t.pad_id)] {
            put_varint_field(&mut trainer, number, id as i64 as u64);
        }
        put_bytes(&mut trainer, 44, t.unk_surface.as_bytes());
        put_bytes(&mut trainer, 45, t.unk_piece.as_bytes());
        put_bytes(&mut trainer, 46, t.bos_piece.as_bytes());
        put_bytes(&mut trainer, 47, t.eos_piece.as_bytes());
        put_bytes(&mut trainer, 48, t.pad_piece.as_bytes());
        put_bytes(&mut out, 2, &trainer);
        put_bytes(&mut out, 3, &normalizer_bytes(&self.normalizer));
        if let Some(d) = &self.denormalizer {
            put_bytes(&mut out, 5, &normalizer_bytes(d));
        }
        out
    }
}

fn parse_piece(bytes: &[u8]) -> Result<SpPiece> {
    let mut p = SpPiece { piece: String::new(), score: 0.0, kind: piece_type::NORMAL };
    let mut r = Reader::new(bytes);
    while let Some((number, v)) = r.field()? {
        match number {
            1 => p.piece = as_string(&v, "piece")?,
            2 => p.score = as_f32(&v, "score")?,
            3 => p.kind = as_i32(&v, "type")?,
            _ => {}
        }
    }
    Ok(p)
}

fn parse_trainer(bytes: &[u8]) -> Result<TrainerSpec> {
    let mut t = TrainerSpec::default();
    let mut r = Reader::new(bytes);
    while let Some((number, v)) = r.field()? {
        match number {
            3 => t.model_type = as_i32(&v, "model_type")?,
            4 => t.vocab_size = as_i32(&v, "vocab_size")?,
            10 => t.character_coverage = as_f32(&v, "character_coverage")?,
            24 => t.treat_whitespace_as_suffix = as_bool(&v, "treat_whitespace_as_suffix")?,
            25 => t.split_digits = as_bool(&v, "split_digits")?,
            26 => t.allow_whitespace_only_pieces = as_bool(&v, "allow_whitespace_only_pieces")?,
            35 => t.byte_fallback = as_bool(&v, "byte_fallback")?,
            40 => t.unk_id = as_i32(&v, "unk_id")?,
            41 => t.bos_id = as_i32(&v, "bos_id")?,
            42 => t.eos_id = as_i32(&v, "eos_id")?,
            43 => t.pad_id = as_i32(&v, "pad_id")?,
            44 => t.unk_surface = as_string(&v, "unk_surface")?,
            45 => t.unk_piece = as_string(&v, "unk_piece")?,
            46 => t.bos_piece = as_string(&v, "bos_piece")?,
            47 => t.eos_piece = as_string(&v, "eos_piece")?,
            48 => t.pad_piece = as_string(&v, "pad_piece")?,
            _ => {}
        }
    }
    Ok(t)
}

fn parse_normalizer(bytes: &[u8]) -> Result<NormalizerSpec> {
    let mut n = NormalizerSpec::default();
    let mut r = Reader::new(bytes);
    while let Some((number, v)) = r.field()? {
        match number {
            1 => n.name = as_string(&v, "name")?,
            2 => n.precompiled_charsmap = as_bytes(&v, "precompiled_charsmap")?.to_vec(),
            3 => n.add_dummy_prefix = as_bool(&v, "add_dummy_prefix")?,
            4 => n.remove_extra_whitespaces = as_bool(&v, "remove_extra_whitespaces")?,
            5 => n.escape_whitespaces = as_bool(&v, "escape_whitespaces")?,
            6 => n.normalization_rule_tsv = as_string(&v, "normalization_rule_tsv")?,
            _ => {}
        }
    }
    Ok(n)
}

// ---- writing --------------------------------------------------------------------------------

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7F) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_varint_field(out: &mut Vec<u8>, number: u64, value: u64) {
    put_varint(out, number << 3);
    put_varint(out, value);
}

fn put_bytes(out: &mut Vec<u8>, number: u64, bytes: &[u8]) {
    put_varint(out, number << 3 | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn put_f32(out: &mut Vec<u8>, number: u64, value: f32) {
    put_varint(out, number << 3 | 5);
    out.extend_from_slice(&value.to_le_bytes());
}

fn normalizer_bytes(n: &NormalizerSpec) -> Vec<u8> {
    let mut out = Vec::new();
    put_bytes(&mut out, 1, n.name.as_bytes());
    put_bytes(&mut out, 2, &n.precompiled_charsmap);
    put_varint_field(&mut out, 3, u64::from(n.add_dummy_prefix));
    put_varint_field(&mut out, 4, u64::from(n.remove_extra_whitespaces));
    put_varint_field(&mut out, 5, u64::from(n.escape_whitespaces));
    if !n.normalization_rule_tsv.is_empty() {
        put_bytes(&mut out, 6, n.normalization_rule_tsv.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_defaults() {
        let mut m = SpModel::default();
        m.pieces.push(SpPiece { piece: "<unk>".into(), score: 0.0, kind: piece_type::UNKNOWN });
        m.pieces.push(SpPiece { piece: "▁a".into(), score: -1.5, kind: piece_type::NORMAL });
        m.trainer.model_type = model_type::BPE;
        m.trainer.pad_id = -1;
        m.normalizer.name = "identity".into();
        m.normalizer.remove_extra_whitespaces = false;
        let bytes = m.to_bytes();
        assert_eq!(SpModel::parse(&bytes).unwrap(), m);

        // An empty trainer/normalizer spec reads as the proto's defaults.
        let mut minimal = Vec::new();
        let mut piece = Vec::new();
        put_bytes(&mut piece, 1, b"x");
        put_bytes(&mut minimal, 1, &piece);
        put_bytes(&mut minimal, 2, &[]);
        put_bytes(&mut minimal, 3, &[]);
        let parsed = SpModel::parse(&minimal).unwrap();
        assert_eq!(parsed.pieces[0].kind, piece_type::NORMAL);
        assert_eq!(parsed.trainer, TrainerSpec::default());
        assert!(parsed.normalizer.add_dummy_prefix && parsed.normalizer.remove_extra_whitespaces);
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert!(SpModel::parse(&[]).is_err());
        assert!(SpModel::parse(&[0x0A, 0x05, 1, 2]).is_err()); // length past the end
        assert!(SpModel::parse(&[0x0B]).is_err()); // wire type 3
        assert!(SpModel::parse(&[0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]).is_err()); // varint of 11 bytes
    }
}
