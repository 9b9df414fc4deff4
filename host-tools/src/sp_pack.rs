//! Packs a SentencePiece BPE tokenizer into the runtime's SentencePiece section
//! (`runtime::tokenizer::sentencepiece`, magic `SPBP`), from either file a Llama checkpoint
//! ships:
//! - `tokenizer.model`, sentencepiece's own `ModelProto` ([`crate::sp_model`]): model_type BPE,
//!   the identity normalizer. sentencepiece merges the adjacent pair whose concatenation is the
//!   piece with the best score; here every split of a piece into two pieces becomes a merge with
//!   that piece's rank (its score's place among all scores, best first; equal scores share a
//!   rank and the leftmost pair wins, as in sentencepiece).
//! - `tokenizer.json`, a Hugging Face tokenizer whose model is BPE with `byte_fallback`
//!   (Llama 2 / TinyLlama: a `Prepend("▁")` + `Replace(" ", "▁")` normalizer; or a `Metaspace`
//!   pre-tokenizer, as transformers 5 converts a `tokenizer.model`). Its merges are taken as
//!   they are, ranked in their order, so the runtime gives Hugging Face's ids.
//!
//! `tokenizer_config.json` beside either, if present, says whether a prompt starts with BOS
//! (`add_bos_token`; default: yes for `tokenizer.model`, else what the `tokenizer.json`'s
//! post-processor adds) and which pieces BOS and EOS are.
//!
//! Everything the runtime would not reproduce is refused with the reason: another model type or
//! normalizer, user-defined or unused pieces, a merge of byte or control pieces, and so on.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use anyhow::{anyhow, bail, ensure, Context, Result};
use runtime::tokenizer::sentencepiece::format;
use runtime::tokenizer::Tokenizer;
use serde_json::Value;

use crate::sp_model::{model_type, piece_type, SpModel};

/// The piece-space.
const SPACE: char = '\u{2581}';

/// A SentencePiece BPE by ids: exactly what a SentencePiece section holds, before it is packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpTables {
    /// `names[id]`: each piece as the file writes it (`▁the`, `<0x0A>`, `<s>`). (V,)
    pub names: Vec<String>,
    /// `text[id]`: what each piece decodes to (`▁` as a space, a byte piece's byte, nothing
    /// for a control piece, the unknown surface for `<unk>`). (V,)
    pub text: Vec<Vec<u8>>,
    /// `types[id]`: `format::TYPE_*`. (V,)
    pub types: Vec<u8>,
    /// `byte_to_id[b]`: the byte piece of byte `b`, with byte fallback. (256,)
    pub byte_to_id: Option<Vec<u32>>,
    /// `(code point, id)` of every single-character piece (`▁` U+2581 for a space), sorted.
    pub chars: Vec<(u32, u32)>,
    /// `[left, right, rank, result]`, sorted by rank (then by left, right). (M, 4)
    pub merges: Vec<[u32; 4]>,
    /// `format::FLAG_*`.
    pub flags: u32,
    /// The unknown piece.
    pub unk_id: Option<u32>,
    /// Beginning of sequence.
    pub bos_id: Option<u32>,
    /// End of sequence.
    pub eos_id: Option<u32>,
}

/// What `tokenizer_config.json` says about special tokens (every field optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenizerConfig {
    /// `add_bos_token`.
    pub add_bos_token: Option<bool>,
    /// `add_eos_token`.
    pub add_eos_token: Option<bool>,
    /// `bos_token` (a string or `{"content": ...}`).
    pub bos_token: Option<String>,
    /// `eos_token`.
    pub eos_token: Option<String>,
    /// `unk_token`.
    pub unk_token: Option<String>,
}

impl TokenizerConfig {
    /// Reads `tokenizer_config.json` in `dir` (all fields `None` if there is none).
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer_config.json");
        if !path.is_file() {
            return Ok(Self::default());
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses the text of a `tokenizer_config.json`.
    pub fn parse(text: &str) -> Result<Self> {
        let root: Value = serde_json::from_str(text).context("not valid JSON")?;
        let flag = |key: &str| -> Result<Option<bool>> {
            match root.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(v) => bail!("{key} is {v}, not true or false"),
            }
        };
        let token = |key: &str| -> Result<Option<String>> {
            match root.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(v) => match v.get("content").and_then(Value::as_str) {
                    Some(s) => Ok(Some(s.to_string())),
                    None => bail!("{key} is {v}, neither a string nor an object with \"content\""),
                },
            }
        };
        Ok(Self {
            add_bos_token: flag("add_bos_token")?,
            add_eos_token: flag("add_eos_token")?,
            bos_token: token("bos_token")?,
            eos_token: token("eos_token")?,
            unk_token: token("unk_token")?,
        })
    }
}

/// The byte of a byte piece's name `<0xNN>` (upper-case hex, as sentencepiece writes it).
pub fn byte_piece_value(name: &str) -> Option<u8> {
    let hex = name.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b)) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// The text an ordinary piece decodes to: its `▁`s as spaces.
fn normal_text(name: &str) -> Vec<u8> {
    name.replace(SPACE, " ").into_bytes()
}

impl SpTables {
    /// The tables of a sentencepiece `tokenizer.model` (see the [module docs](self)).
    pub fn from_model(model: &SpModel, config: &TokenizerConfig) -> Result<Self> {
        let t = &model.trainer;
        let n = &model.normalizer;
        ensure!(
            t.model_type == model_type::BPE,
            "trainer_spec.model_type is {} ({}); the runtime implements only BPE (2)",
            model_type::name(t.model_type),
            t.model_type
        );
        ensure!(
            n.precompiled_charsmap.is_empty() && n.normalization_rule_tsv.is_empty(),
            "normalizer_spec.name is {:?} (a precompiled character map of {} bytes); only the identity normalizer is supported",
            n.name,
            n.precompiled_charsmap.len()
        );
        ensure!(n.escape_whitespaces, "normalizer_spec.escape_whitespaces is false; only models that turn spaces into ▁ are supported");
        ensure!(!t.treat_whitespace_as_suffix, "trainer_spec.treat_whitespace_as_suffix is true; only ▁ at the start of pieces is supported");
        if let Some(d) = &model.denormalizer {
            ensure!(
                d.precompiled_charsmap.is_empty() && d.normalization_rule_tsv.is_empty(),
                "denormalizer_spec {:?} is set; decoding with a denormalizer is not supported",
                d.name
            );
        }

        // Pieces: names, types, text.
        let v = model.pieces.len();
        ensure!(u32::try_from(v).is_ok_and(|v| v < u32::MAX), "{v} pieces are too many");
        let mut tables = Self::empty(v);
        let mut ids: HashMap<&str, u32> = HashMap::with_capacity(v);
        let mut byte_to_id = [None; 256];
        for (id, p) in (0u32..).zip(&model.pieces) {
            let name = p.piece.as_str();
            ensure!(!name.is_empty(), "piece {id} is empty");
            if let Some(first) = ids.insert(name, id) {
                bail!("piece {name:?} appears twice (ids {first} and {id})");
            }
            let (kind, text) = match p.kind {
                piece_type::NORMAL => {
                    ensure!(!name.contains(' '), "piece {id} {name:?} holds a space (text never does: spaces are ▁)");
                    (format::TYPE_NORMAL, normal_text(name))
                }
                piece_type::UNKNOWN => {
                    ensure!(tables.unk_id.is_none(), "pieces {} and {id} are both UNKNOWN", tables.unk_id.unwrap_or(0));
                    tables.unk_id = Some(id);
                    (format::TYPE_UNKNOWN, t.unk_surface.as_bytes().to_vec())
                }
                piece_type::CONTROL => (format::TYPE_CONTROL, Vec::new()),
                piece_type::BYTE => {
                    ensure!(t.byte_fallback, "piece {id} {name:?} is a BYTE piece but trainer_spec.byte_fallback is false");
                    let byte = byte_piece_value(name).ok_or_else(|| anyhow!("BYTE piece {id} {name:?} is not <0xNN>"))?;
                    byte_to_id[usize::from(byte)] = Some(id);
                    (format::TYPE_BYTE, vec![byte])
                }
                other => bail!(
                    "piece {id} {name:?} is {} ({other}); the runtime supports NORMAL, UNKNOWN, CONTROL and BYTE pieces",
                    piece_type::name(other)
                ),
            };
            // sentencepiece looks a one-character symbol up among control pieces first.
            if kind != format::TYPE_NORMAL && kind != format::TYPE_BYTE {
                ensure!(name.chars().count() > 1, "{} piece {id} {name:?} is a single character", piece_type::name(p.kind));
            }
            tables.names[id as usize] = name.to_string();
            tables.types[id as usize] = kind;
            tables.text[id as usize] = text;
        }
        ensure!(tables.unk_id.is_some(), "no UNKNOWN piece (sentencepiece requires one)");
        if t.byte_fallback {
            let missing = byte_to_id.iter().position(Option::is_none);
            if let Some(b) = missing {
                bail!("trainer_spec.byte_fallback is true but there is no byte piece <0x{b:02X}>");
            }
            tables.byte_to_id = Some(byte_to_id.iter().map(|id| id.unwrap_or(0)).collect());
        }

        // Ranks: the place of each NORMAL piece's score among all their scores, best first.
        let normal: Vec<(u32, &str, f32)> = (0u32..)
            .zip(&model.pieces)
            .filter(|(_, p)| p.kind == piece_type::NORMAL)
            .map(|(id, p)| (id, p.piece.as_str(), p.score))
            .collect();
        if let Some((id, name, _)) = normal.iter().find(|(_, _, s)| !s.is_finite()) {
            bail!("piece {id} {name:?} has score {}", model.pieces[*id as usize].score);
        }
        let mut scores: Vec<f32> = normal.iter().map(|&(_, _, s)| s).collect();
        scores.sort_by(|a, b| b.total_cmp(a));
        scores.dedup_by(|a, b| a == b);
        let rank_of = |score: f32| scores.partition_point(|&s| s > score) as u32;

        // Characters, then merges: every split of a piece into two pieces.
        let normal_ids: HashMap<&str, u32> = normal.iter().map(|&(id, name, _)| (name, id)).collect();
        for &(id, name, _) in &normal {
            let mut chars = name.chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                tables.chars.push((u32::from(c), id));
            }
        }
        for &(id, name, score) in &normal {
            if name.chars().nth(1).is_none() {
                continue;
            }
            // sentencepiece starts from characters, so it can reach a piece through a character
            // that has no piece; the runtime cannot.
            if let Some(c) = name.chars().find(|c| !normal_ids.contains_key(c.to_string().as_str())) {
                bail!("piece {id} {name:?} holds {c:?}, which is not a piece itself; the runtime cannot merge it");
            }
            for (i, _) in name.char_indices().skip(1) {
                let (l, r) = name.split_at(i);
                if let (Some(&left), Some(&right)) = (normal_ids.get(l), normal_ids.get(r)) {
                    tables.merges.push([left, right, rank_of(score), id]);
                }
            }
        }

        // Normalizer and decoder flags, special pieces.
        tables.flags |= if n.add_dummy_prefix { format::FLAG_ADD_DUMMY_PREFIX } else { 0 };
        tables.flags |= if n.remove_extra_whitespaces { format::FLAG_REMOVE_EXTRA_WHITESPACES } else { 0 };
        tables.flags |= if t.byte_fallback { format::FLAG_BYTE_FALLBACK } else { 0 };
        if n.add_dummy_prefix || n.remove_extra_whitespaces {
            tables.flags |= format::FLAG_STRIP_LEADING_SPACE;
        }
        tables.bos_id = tables.control(config.bos_token.as_deref(), &t.bos_piece, "bos_token")?;
        tables.eos_id = tables.control(config.eos_token.as_deref(), &t.eos_piece, "eos_token")?;
        let add_bos = config.add_bos_token.unwrap_or(tables.bos_id.is_some());
        tables.set_add_flags(add_bos, config.add_eos_token.unwrap_or(false))?;
        tables.finish()
    }

    /// The tables of a Hugging Face `tokenizer.json` (already parsed) whose model is BPE with
    /// byte fallback (see the [module docs](self)).
    pub fn from_tokenizer_json(root: &Value, config: &TokenizerConfig) -> Result<Self> {
        let model = root.get("model").ok_or_else(|| anyhow!("no \"model\" object"))?;
        let kind = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
        ensure!(kind == "BPE", "model type is {kind:?}; only \"BPE\" is supported");
        let is_set =
            |v: Option<&Value>| v.is_some_and(|v| !(v.is_null() || v == &Value::Bool(false) || v.as_str() == Some("")));
        ensure!(is_set(model.get("byte_fallback")), "model.byte_fallback is not true; a SentencePiece-style BPE needs byte fallback");
        for key in ["dropout", "continuing_subword_prefix", "end_of_word_suffix", "ignore_merges"] {
            ensure!(
                !is_set(model.get(key)),
                "model.{key} = {} is not supported",
                model.get(key).map(Value::to_string).unwrap_or_default()
            );
        }

        // Normalizer + pre-tokenizer: how spaces become ▁ and whether a ▁ goes in front.
        let mut flags = format::FLAG_BYTE_FALLBACK;
        let normalizer = root.get("normalizer").unwrap_or(&Value::Null);
        let pre = root.get("pre_tokenizer").unwrap_or(&Value::Null);
        match (normalizer.is_null(), pre.is_null()) {
            (false, true) => flags |= legacy_normalizer(normalizer)?,
            (true, false) => flags |= metaspace(pre)?,
            (true, true) => bail!("neither a normalizer nor a pre_tokenizer turns spaces into ▁"),
            (false, false) => bail!("normalizer {normalizer} and pre_tokenizer {pre} are both set; the runtime implements one of Llama 2's Prepend + Replace normalizer or a Metaspace pre-tokenizer"),
        }
        if decoder_strips_leading_space(root.get("decoder").unwrap_or(&Value::Null)) {
            flags |= format::FLAG_STRIP_LEADING_SPACE;
        }

        // Vocabulary: model.vocab plus the added tokens.
        let vocab = model.get("vocab").and_then(Value::as_object).ok_or_else(|| anyhow!("no model.vocab object"))?;
        let mut by_id: HashMap<u32, String> = HashMap::with_capacity(vocab.len());
        let mut ids: HashMap<String, u32> = HashMap::with_capacity(vocab.len());
        for (key, id) in vocab {
            let id = id
                .as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| anyhow!("model.vocab token {key:?} has id {id}, not a u32"))?;
            if let Some(other) = by_id.insert(id, key.clone()) {
                bail!("model.vocab tokens {other:?} and {key:?} both have id {id}");
            }
            ids.insert(key.clone(), id);
        }
        let mut special = BTreeSet::new();
        for token in root.get("added_tokens").and_then(Value::as_array).into_iter().flatten() {
            let content = token.get("content").and_then(Value::as_str);
            let id = token.get("id").and_then(Value::as_u64).and_then(|id| u32::try_from(id).ok());
            let (Some(content), Some(id)) = (content, id) else {
                bail!("added_tokens entry {token} needs a string \"content\" and a u32 \"id\"");
            };
            ensure!(
                token.get("special") == Some(&Value::Bool(true)),
                "added token {content:?} (id {id}) is not special; the runtime does not match added tokens in text"
            );
            match by_id.insert(id, content.to_string()) {
                Some(other) if other != content => bail!("added token {content:?} has id {id}, which model.vocab gives to {other:?}"),
                _ => {}
            }
            ids.insert(content.to_string(), id);
            special.insert(id);
        }
        let v = by_id.keys().max().map_or(0, |&max| max as usize + 1);
        ensure!(v > 0 && v < u32::MAX as usize, "the vocabulary is empty or too large");
        ensure!(v <= 2 * by_id.len() + 1024, "the largest token id is {} but there are only {} tokens", v - 1, by_id.len());

        // The unknown piece: model.unk_token, else tokenizer_config's, else "<unk>" if special.
        let unk_name = model.get("unk_token").and_then(Value::as_str).map(str::to_string).or(config.unk_token.clone());
        let unk_id = match unk_name {
            Some(name) => Some(*ids.get(&name).ok_or_else(|| anyhow!("unk_token {name:?} is not in the vocabulary"))?),
            None => ids.get("<unk>").copied().filter(|id| special.contains(id)),
        };

        let mut tables = Self::empty(v);
        tables.unk_id = unk_id;
        let mut byte_to_id = [None; 256];
        for id in 0..v as u32 {
            // An id no token uses is a control piece: never produced, decodes to nothing.
            let Some(name) = by_id.get(&id) else {
                tables.types[id as usize] = format::TYPE_CONTROL;
                continue;
            };
            let (kind, text) = if Some(id) == unk_id {
                (format::TYPE_UNKNOWN, " \u{2047} ".as_bytes().to_vec())
            } else if special.contains(&id) {
                (format::TYPE_CONTROL, Vec::new())
            } else if let Some(byte) = byte_piece_value(name) {
                byte_to_id[usize::from(byte)] = Some(id);
                (format::TYPE_BYTE, vec![byte])
            } else {
                ensure!(!name.is_empty(), "token {id} is empty");
                ensure!(!name.contains(' '), "token {id} {name:?} holds a space (text never does: spaces are ▁)");
                (format::TYPE_NORMAL, normal_text(name))
            };
            tables.names[id as usize] = name.clone();
            tables.types[id as usize] = kind;
            tables.text[id as usize] = text;
        }
        if let Some(b) = byte_to_id.iter().position(Option::is_none) {
            bail!("model.byte_fallback is true but the vocabulary has no byte token <0x{b:02X}>");
        }
        tables.byte_to_id = Some(byte_to_id.iter().map(|id| id.unwrap_or(0)).collect());
        for id in 0..v as u32 {
            if tables.types[id as usize] != format::TYPE_NORMAL {
                continue;
            }
            let mut chars = tables.names[id as usize].chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                tables.chars.push((u32::from(c), id));
            }
        }

        // Merges, ranked in their order; parts and result must be ordinary pieces.
        let raw = model.get("merges").and_then(Value::as_array).ok_or_else(|| anyhow!("no model.merges array"))?;
        let mut seen: HashMap<(u32, u32), usize> = HashMap::with_capacity(raw.len());
        for (rank, merge) in raw.iter().enumerate() {
            let (left, right) = match merge {
                Value::String(line) => match line.split(' ').collect::<Vec<_>>().as_slice() {
                    [l, r] if !l.is_empty() && !r.is_empty() => (l.to_string(), r.to_string()),
                    _ => bail!("model.merges[{rank}] {merge}: a merge must be two tokens separated by one space"),
                },
                Value::Array(parts) => match parts.as_slice() {
                    [Value::String(l), Value::String(r)] => (l.clone(), r.clone()),
                    _ => bail!("model.merges[{rank}] {merge}: a merge array must hold two strings"),
                },
                _ => bail!("model.merges[{rank}] {merge}: a merge must be a string or a pair of strings"),
            };
            let id_of = |key: &str, what: &str| -> Result<u32> {
                let id = *ids.get(key).ok_or_else(|| anyhow!("model.merges[{rank}] ({left:?} + {right:?}): {what} {key:?} is not in the vocabulary"))?;
                ensure!(
                    tables.types[id as usize] == format::TYPE_NORMAL,
                    "model.merges[{rank}] ({left:?} + {right:?}): {what} {key:?} is a byte or special token; the runtime merges ordinary pieces only"
                );
                Ok(id)
            };
            let (l, r) = (id_of(&left, "left part")?, id_of(&right, "right part")?);
            let result = id_of(&format!("{left}{right}"), "result")?;
            if let Some(first) = seen.insert((l, r), rank) {
                bail!("model.merges[{rank}] ({left:?} + {right:?}) repeats model.merges[{first}]");
            }
            tables.merges.push([l, r, u32::try_from(rank)?, result]);
        }

        // Special pieces and whether a prompt starts with BOS.
        let template = PostProcessor::read(root.get("post_processor").unwrap_or(&Value::Null));
        let bos = config.bos_token.clone().or(template.first.clone()).unwrap_or_else(|| "<s>".to_string());
        let eos = config.eos_token.clone().or(template.last.clone()).unwrap_or_else(|| "</s>".to_string());
        tables.flags = flags;
        tables.bos_id = tables.control(config.bos_token.as_deref(), &bos, "bos_token")?;
        tables.eos_id = tables.control(config.eos_token.as_deref(), &eos, "eos_token")?;
        let add_bos = config.add_bos_token.unwrap_or(template.first.is_some() && template.first == Some(bos));
        let add_eos = config.add_eos_token.unwrap_or(template.last.is_some() && template.last == Some(eos));
        tables.set_add_flags(add_bos, add_eos)?;
        tables.finish()
    }

    fn empty(v: usize) -> Self {
        Self {
            names: vec![String::new(); v],
            text: vec![Vec::new(); v],
            types: vec![format::TYPE_CONTROL; v],
            byte_to_id: None,
            chars: Vec::new(),
            merges: Vec::new(),
            flags: 0,
            unk_id: None,
            bos_id: None,
            eos_id: None,
        }
    }

    /// The control piece named `configured` (an error if it is not one) or else `default` (None
    /// if there is no such control piece).
    fn control(&self, configured: Option<&str>, default: &str, what: &str) -> Result<Option<u32>> {
        let find = |name: &str| {
            self.names.iter().position(|n| n == name).filter(|&id| self.types[id] == format::TYPE_CONTROL).map(|id| id as u32)
        };
        match configured {
            Some(name) => find(name)
                .map(Some)
                .ok_or_else(|| anyhow!("tokenizer_config.json: {what} {name:?} is not a control piece of the vocabulary")),
            None => Ok(find(default)),
        }
    }

    fn set_add_flags(&mut self, add_bos: bool, add_eos: bool) -> Result<()> {
        if add_bos {
            ensure!(self.bos_id.is_some(), "add_bos_token is true but the vocabulary has no BOS control piece");
            self.flags |= format::FLAG_ADD_BOS;
        }
        if add_eos {
            ensure!(self.eos_id.is_some(), "add_eos_token is true but the vocabulary has no EOS control piece");
            self.flags |= format::FLAG_ADD_EOS;
        }
        Ok(())
    }

    /// Final checks and ordering shared by both readers.
    fn finish(mut self) -> Result<Self> {
        self.chars.sort_unstable();
        ensure!(
            self.chars.iter().any(|&(c, _)| c == u32::from(SPACE)),
            "the vocabulary has no piece \"▁\" (a space); the runtime needs one"
        );
        self.merges.sort_by_key(|&[l, r, rank, _]| (rank, l, r));
        Ok(self)
    }

    /// Number of pieces.
    pub fn vocab_size(&self) -> usize {
        self.types.len()
    }

    /// Packs the tables into a SentencePiece section (loaded back by the runtime before it is
    /// returned).
    pub fn section(&self) -> Result<Vec<u8>> {
        let v = self.types.len();
        let m = self.merges.len();
        let c = self.chars.len();
        let token_bytes_len: usize = self.text.iter().map(Vec::len).sum();
        let id_bytes = format::id_bytes_for(v, m);
        let byte_fallback = self.flags & format::FLAG_BYTE_FALLBACK != 0;
        ensure!(byte_fallback == self.byte_to_id.is_some(), "internal error: byte fallback without a byte table");
        let section_len = format::section_len(id_bytes, byte_fallback, v, m, c, token_bytes_len)
            .filter(|&len| u32::try_from(len).is_ok())
            .ok_or_else(|| anyhow!("the tokenizer is too large for the section format (> 4 GiB)"))?;

        let mut out = Vec::with_capacity(section_len);
        let u32_field = |n: usize| u32::try_from(n).map(u32::to_le_bytes);
        let id_field = |id: Option<u32>| id.unwrap_or(format::NO_ID).to_le_bytes();
        out.extend_from_slice(&format::MAGIC);
        out.extend_from_slice(&format::VERSION.to_le_bytes());
        out.push(id_bytes as u8);
        out.push(0);
        out.extend_from_slice(&self.flags.to_le_bytes());
        for n in [v, m, c, token_bytes_len] {
            out.extend_from_slice(&u32_field(n)?);
        }
        for id in [self.unk_id, self.bos_id, self.eos_id] {
            out.extend_from_slice(&id_field(id));
        }
        out.extend_from_slice(&u32_field(section_len)?);
        let push_id = |out: &mut Vec<u8>, id: u32| {
            if id_bytes == 2 {
                out.extend_from_slice(&(id as u16).to_le_bytes());
            } else {
                out.extend_from_slice(&id.to_le_bytes());
            }
        };
        out.extend_from_slice(&self.types);
        for &id in self.byte_to_id.iter().flatten() {
            push_id(&mut out, id);
        }
        for &(code, id) in &self.chars {
            out.extend_from_slice(&code.to_le_bytes());
            push_id(&mut out, id);
        }
        let mut merges = self.merges.clone();
        merges.sort_unstable_by_key(|&[left, right, _, _]| (left, right));
        for merge in &merges {
            for &field in merge {
                push_id(&mut out, field);
            }
        }
        let mut offset = 0;
        out.extend_from_slice(&u32_field(0)?);
        for text in &self.text {
            offset += text.len();
            out.extend_from_slice(&u32_field(offset)?);
        }
        for text in &self.text {
            out.extend_from_slice(text);
        }
        ensure!(out.len() == section_len, "internal error: wrote {} bytes, expected {section_len}", out.len());

        // The reader is the judge of the format.
        Tokenizer::from_bytes(&out).map_err(|e| anyhow!("internal error: the packed section does not load: {e}"))?;
        Ok(out)
    }
}

/// Flags of Llama 2's normalizer, `Sequence[Prepend("▁"), Replace(" ", "▁")]` (either order);
/// anything else is refused.
fn legacy_normalizer(normalizer: &Value) -> Result<u32> {
    let refuse = || anyhow!("normalizer {normalizer} is not supported (only Llama 2's Sequence of Prepend(\"▁\") and Replace(\" \", \"▁\"))");
    let steps = match normalizer.get("type").and_then(Value::as_str) {
        Some("Sequence") => normalizer.get("normalizers").and_then(Value::as_array).ok_or_else(refuse)?.clone(),
        _ => vec![normalizer.clone()],
    };
    let (mut prepend, mut replace) = (false, false);
    for step in &steps {
        match step.get("type").and_then(Value::as_str) {
            Some("Prepend") if step.get("prepend").and_then(Value::as_str) == Some("▁") && !prepend => prepend = true,
            Some("Replace")
                if step.get("pattern").and_then(|p| p.get("String")).and_then(Value::as_str) == Some(" ")
                    && step.get("content").and_then(Value::as_str) == Some("▁")
                    && !replace =>
            {
                replace = true
            }
            _ => return Err(refuse()),
        }
    }
    ensure!(replace, "normalizer {normalizer} does not replace spaces with ▁");
    Ok(if prepend { format::FLAG_ADD_DUMMY_PREFIX } else { 0 })
}

/// Flags of a `Metaspace` pre-tokenizer (replacement `▁`): it prepends `▁` unless the text starts
/// with one, and with `split` (true when absent, as in older files) cuts before every `▁`.
fn metaspace(pre: &Value) -> Result<u32> {
    ensure!(
        pre.get("type").and_then(Value::as_str) == Some("Metaspace"),
        "pre_tokenizer {pre} is not supported (only Metaspace, or none with Llama 2's normalizer)"
    );
    ensure!(pre.get("replacement").and_then(Value::as_str).is_none_or(|r| r == "▁"), "Metaspace replacement must be ▁");
    let prepend = match (pre.get("prepend_scheme").and_then(Value::as_str), pre.get("add_prefix_space").and_then(Value::as_bool)) {
        (Some("always" | "first"), _) => true,
        (Some("never"), _) => false,
        (Some(other), _) => bail!("Metaspace prepend_scheme {other:?} is not supported"),
        (None, add) => add.unwrap_or(true),
    };
    let split = pre.get("split").and_then(Value::as_bool).unwrap_or(true);
    let mut flags = 0;
    if prepend {
        flags |= format::FLAG_ADD_DUMMY_PREFIX | format::FLAG_DUMMY_PREFIX_UNLESS_SPACE;
    }
    if split {
        flags |= format::FLAG_SPLIT_AT_SPACES;
    }
    Ok(flags)
}

/// Whether the decoder drops the first space: a `Strip` of `" "` at the start (Llama 2), or a
/// `Metaspace` decoder that prepends.
fn decoder_strips_leading_space(decoder: &Value) -> bool {
    let steps = match decoder.get("type").and_then(Value::as_str) {
        Some("Sequence") => decoder.get("decoders").and_then(Value::as_array).cloned().unwrap_or_default(),
        _ => vec![decoder.clone()],
    };
    steps.iter().any(|step| match step.get("type").and_then(Value::as_str) {
        Some("Strip") => {
            step.get("content").and_then(Value::as_str) == Some(" ") && step.get("start").and_then(Value::as_u64).unwrap_or(0) >= 1
        }
        Some("Metaspace") => metaspace(step).is_ok_and(|f| f & format::FLAG_ADD_DUMMY_PREFIX != 0),
        _ => false,
    })
}

/// The special tokens a `TemplateProcessing` post-processor puts around a single sequence.
struct PostProcessor {
    /// The special token before `$A`, if any (BOS).
    first: Option<String>,
    /// The special token after `$A`, if any (EOS).
    last: Option<String>,
}

impl PostProcessor {
    fn read(post: &Value) -> Self {
        let mut out = Self { first: None, last: None };
        if post.get("type").and_then(Value::as_str) != Some("TemplateProcessing") {
            return out;
        }
        let single = post.get("single").and_then(Value::as_array).cloned().unwrap_or_default();
        let special = |item: &Value| item.get("SpecialToken").and_then(|s| s.get("id")).and_then(Value::as_str).map(str::to_string);
        if let Some(first) = single.first() {
            out.first = special(first);
        }
        if single.len() > 1 {
            out.last = single.last().and_then(special);
        }
        out
    }
}

/// Reads `tokenizer.model` in `dir` into tables, with `tokenizer_config.json` if present.
pub fn tables_from_model_file(dir: &Path) -> Result<SpTables> {
    let path = dir.join("tokenizer.model");
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let model = SpModel::parse(&bytes).with_context(|| format!("in {}", path.display()))?;
    let config = TokenizerConfig::from_dir(dir)?;
    SpTables::from_model(&model, &config).with_context(|| format!("in {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sp_model::{NormalizerSpec, SpPiece, TrainerSpec};

    /// A tiny BPE model: <unk> <s> </s>, the 256 bytes, then `pieces` (name, score).
    fn model(pieces: &[(&str, f32)]) -> SpModel {
        let mut m = SpModel {
            trainer: TrainerSpec { model_type: model_type::BPE, byte_fallback: true, ..Default::default() },
            normalizer: NormalizerSpec { name: "identity".into(), remove_extra_whitespaces: false, ..Default::default() },
            ..Default::default()
        };
        let piece = |piece: &str, score: f32, kind: i32| SpPiece { piece: piece.into(), score, kind };
        m.pieces.push(piece("<unk>", 0.0, piece_type::UNKNOWN));
        m.pieces.push(piece("<s>", 0.0, piece_type::CONTROL));
        m.pieces.push(piece("</s>", 0.0, piece_type::CONTROL));
        for b in 0..=255u8 {
            m.pieces.push(piece(&format!("<0x{b:02X}>"), 0.0, piece_type::BYTE));
        }
        for &(name, score) in pieces {
            m.pieces.push(piece(name, score, piece_type::NORMAL));
        }
        m
    }

    fn encode(section: &[u8], text: &str) -> Vec<u32> {
        let tok = Tokenizer::from_bytes(section).unwrap();
        let mut out = vec![0; text.len() + 1];
        let n = tok.encode(text, &mut out).unwrap();
        out.truncate(n);
        out
    }

    #[test]
    fn packs_a_small_model_that_the_runtime_reads() {
        // ids: 259 ▁t, 260 he, 261 ▁the, 262 ▁, 263 t, 264 h, 265 e
        let m = model(&[("▁t", -1.0), ("he", -2.0), ("▁the", -3.0), ("▁", -4.0), ("t", -5.0), ("h", -6.0), ("e", -7.0)]);
        let tables = SpTables::from_model(&m, &TokenizerConfig::default()).unwrap();
        // ▁the splits as ▁ + the (no "the"), ▁t + he: one merge; ▁t = ▁ + t; he = h + e.
        assert_eq!(tables.merges, [[262, 263, 0, 259], [264, 265, 1, 260], [259, 260, 2, 261]]);
        let section = tables.section().unwrap();
        assert_eq!(encode(&section, "the"), [261]);
        assert_eq!(encode(&section, "the he"), [261, 262, 260]);
        // "x" has no piece: its byte, after the dummy prefix.
        assert_eq!(encode(&section, "x"), [262, 3 + u32::from(b'x')]);
        let tok = Tokenizer::from_bytes(&section).unwrap();
        assert_eq!(tok.prompt_prefix(), Some(1));
        assert_eq!((tok.bos_id(), tok.eos_id(), tok.unk_id()), (Some(1), Some(2), Some(0)));
    }

    #[test]
    fn refusals_name_the_reason() {
        let err = |m: &SpModel| format!("{:#}", SpTables::from_model(m, &TokenizerConfig::default()).unwrap_err());
        let mut unigram = model(&[("▁", -1.0)]);
        unigram.trainer.model_type = model_type::UNIGRAM;
        assert!(err(&unigram).contains("model_type is UNIGRAM (1)"), "{}", err(&unigram));
        let mut nfkc = model(&[("▁", -1.0)]);
        nfkc.normalizer.name = "nmt_nfkc".into();
        nfkc.normalizer.precompiled_charsmap = vec![1, 2, 3];
        assert!(err(&nfkc).contains("\"nmt_nfkc\""), "{}", err(&nfkc));
        let mut user = model(&[("▁", -1.0), ("<tool>", 0.0)]);
        user.pieces.last_mut().unwrap().kind = piece_type::USER_DEFINED;
        assert!(err(&user).contains("USER_DEFINED"), "{}", err(&user));
        assert!(err(&model(&[("a", -1.0)])).contains("no piece \"▁\""));
        assert!(err(&model(&[("▁", -1.0), ("ab", -2.0), ("a", -3.0)])).contains("holds 'b'"));
        let mut no_bytes = model(&[("▁", -1.0)]);
        no_bytes.pieces.remove(100);
        assert!(err(&no_bytes).contains("no byte piece <0x61>"), "{}", err(&no_bytes));
    }

    #[test]
    fn tokenizer_config_overrides() {
        let c = TokenizerConfig::parse(r#"{"add_bos_token": false, "eos_token": {"content": "</s>"}, "bos_token": "<s>"}"#).unwrap();
        assert_eq!(c.add_bos_token, Some(false));
        assert_eq!(c.eos_token.as_deref(), Some("</s>"));
        let tables = SpTables::from_model(&model(&[("▁", -1.0)]), &c).unwrap();
        assert_eq!(tables.flags & format::FLAG_ADD_BOS, 0);
        let bad = TokenizerConfig { bos_token: Some("<bos>".into()), ..Default::default() };
        let e = format!("{:#}", SpTables::from_model(&model(&[("▁", -1.0)]), &bad).unwrap_err());
        assert!(e.contains("bos_token \"<bos>\""), "{e}");
    }
}
