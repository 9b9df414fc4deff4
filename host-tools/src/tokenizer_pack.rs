//! Packs a checkpoint's tokenizer into the runtime's tokenizer section: GPT-2 style byte-level
//! BPE here, SentencePiece BPE in [`crate::sp_pack`].
//!
//! Input, looked for beside a checkpoint by [`pack_from_dir`], in this order:
//! - `vocab.json` + `merges.txt` (GPT-2's own files; `added_tokens.json` too if present);
//! - `tokenizer.model`: a sentencepiece BPE model (Llama), as SentencePiece. It comes before a
//!   `tokenizer.json` beside it because its ids are the `sentencepiece` package's by definition,
//!   while transformers 5 writes Llama's `tokenizer.json` with a `Metaspace` pre-tokenizer whose
//!   ids differ on text that starts with a space. If it cannot be packed (a user-defined piece,
//!   another normaliser) and a `tokenizer.json` is there, that is packed instead;
//! - `tokenizer.json`: a Hugging Face tokenizer with a byte-level BPE model (GPT-2; SmolLM's
//!   `Digits(individual_digits=true)` + `ByteLevel` too) packs here, one whose BPE model has
//!   `byte_fallback` (Llama 2, TinyLlama) as SentencePiece.
//!
//! Vocab keys are not the tokens' bytes: GPT-2 first maps every byte to a printable character
//! (`bytes_to_unicode` in `encoder.py`, e.g. space -> `Ġ`, newline -> `Ċ`), so the key `"Ġthe"`
//! is the bytes `" the"`. [`token_key_to_bytes`] undoes that mapping; a key that uses
//! characters outside it (a special token such as `<pad>` written literally) is taken as its
//! UTF-8 bytes, and so are added tokens, which Hugging Face stores literally.
//!
//! The output format is drawn in `runtime::tokenizer`; this writer uses the constants of
//! [`runtime::tokenizer::format`] and finally loads its own output with
//! [`runtime::tokenizer::Tokenizer::from_bytes`], so writer and reader cannot disagree silently.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use anyhow::{anyhow, bail, ensure, Context, Result};
use runtime::tokenizer::{format, Tokenizer};
use serde_json::Value;

use crate::sp_pack::{SpTables, TokenizerConfig};

/// GPT-2's `bytes_to_unicode`: the printable character that stands for each byte in vocab keys.
///
/// Printable Latin-1 bytes (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) stand for themselves; the other 68
/// bytes are mapped, in order, to U+0100, U+0101, ... (so space, byte 32, becomes `Ġ` U+0120).
pub fn bytes_to_unicode() -> [char; 256] {
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    let mut table = ['\0'; 256];
    let mut next_unprintable = 0;
    for (b, slot) in (0u32..).zip(table.iter_mut()) {
        let code = if printable(b) {
            b
        } else {
            next_unprintable += 1;
            255 + next_unprintable
        };
        *slot = char::from_u32(code).unwrap_or('\0');
    }
    table
}

/// The inverse of [`bytes_to_unicode`].
fn unicode_to_bytes() -> HashMap<char, u8> {
    bytes_to_unicode().iter().zip(0u8..=255).map(|(&c, b)| (c, b)).collect()
}

/// The bytes of a vocab key: GPT-2's character-per-byte mapping undone, or, if the key uses a
/// character outside that mapping, the key's own UTF-8 bytes.
pub fn token_key_to_bytes(key: &str) -> Vec<u8> {
    let map = unicode_to_bytes();
    key_to_bytes(key, &map)
}

fn key_to_bytes(key: &str, map: &HashMap<char, u8>) -> Vec<u8> {
    key.chars().map(|c| map.get(&c).copied()).collect::<Option<Vec<u8>>>().unwrap_or_else(|| key.as_bytes().to_vec())
}

/// A merge as read from a file, with where it came from (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeLine {
    /// Left part, as a vocab key.
    pub left: String,
    /// Right part, as a vocab key.
    pub right: String,
    /// Where it was read, e.g. `merges.txt line 3`.
    pub origin: String,
}

/// Everything needed to pack a tokenizer, as vocab keys.
#[derive(Debug, Clone, Default)]
pub struct BpeFiles {
    /// Vocab key -> id (keys in GPT-2's byte-to-unicode form).
    pub vocab: HashMap<String, u32>,
    /// Merges in rank order (first = applied first).
    pub merges: Vec<MergeLine>,
    /// Added/special tokens: literal text -> id.
    pub added: Vec<(String, u32)>,
    /// Every numeric character is a piece of its own before GPT-2's regex (a `tokenizer.json`
    /// with `Digits(individual_digits=true)` before `ByteLevel`, as SmolLM's).
    pub individual_digits: bool,
}

/// A tokenizer found beside a checkpoint, as tables by id, not yet packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerTables {
    /// GPT-2 style byte-level BPE.
    ByteLevel(BpeTables),
    /// SentencePiece BPE (Llama).
    SentencePiece(SpTables),
}

impl TokenizerTables {
    /// Packs the tables into a tokenizer section.
    pub fn section(&self) -> Result<Vec<u8>> {
        match self {
            Self::ByteLevel(t) => t.section(),
            Self::SentencePiece(t) => t.section(),
        }
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::ByteLevel(t) => t.tokens.len(),
            Self::SentencePiece(t) => t.vocab_size(),
        }
    }
}

/// Looks for tokenizer files in `dir` and packs them (see the [module docs](self) for the
/// order). `Ok(None)` if there are none.
pub fn pack_from_dir(dir: &Path) -> Result<Option<Vec<u8>>> {
    tokenizer_from_dir(dir)?.map(|t| t.section().with_context(|| format!("packing the tokenizer in {}", dir.display()))).transpose()
}

/// The tokenizer in `dir` (as [`pack_from_dir`] finds it) as tables by id, not yet packed.
/// `Ok(None)` if there is none.
pub fn tokenizer_from_dir(dir: &Path) -> Result<Option<TokenizerTables>> {
    let context = || format!("packing the tokenizer in {}", dir.display());
    match find_in_dir(dir)? {
        Some(Found::ByteLevel(files)) => Ok(Some(TokenizerTables::ByteLevel(BpeTables::from_files(&files).with_context(context)?))),
        Some(Found::SentencePiece(tables)) => Ok(Some(TokenizerTables::SentencePiece(tables))),
        None => Ok(None),
    }
}

/// The byte-level BPE tokenizer in `dir` (as [`pack_from_dir`] finds it) as tables by id, not
/// yet packed. `Ok(None)` if there are no tokenizer files; an error if they hold a
/// SentencePiece tokenizer.
pub fn tables_from_dir(dir: &Path) -> Result<Option<BpeTables>> {
    match tokenizer_from_dir(dir)? {
        Some(TokenizerTables::ByteLevel(tables)) => Ok(Some(tables)),
        Some(TokenizerTables::SentencePiece(_)) => {
            bail!("the tokenizer in {} is SentencePiece BPE, not byte-level BPE", dir.display())
        }
        None => Ok(None),
    }
}

/// Reads (without packing) the byte-level BPE tokenizer files in `dir`, as [`pack_from_dir`]
/// finds them. `Ok(None)` if there are none; an error if they hold a SentencePiece tokenizer.
pub fn load_from_dir(dir: &Path) -> Result<Option<BpeFiles>> {
    match find_in_dir(dir)? {
        Some(Found::ByteLevel(files)) => Ok(Some(files)),
        Some(Found::SentencePiece(_)) => bail!("the tokenizer in {} is SentencePiece BPE, not byte-level BPE", dir.display()),
        None => Ok(None),
    }
}

/// What [`find_in_dir`] found.
enum Found {
    ByteLevel(BpeFiles),
    SentencePiece(SpTables),
}

fn find_in_dir(dir: &Path) -> Result<Option<Found>> {
    let read = |name: &str| {
        let path = dir.join(name);
        fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    };
    let (vocab_path, merges_path) = (dir.join("vocab.json"), dir.join("merges.txt"));
    if vocab_path.is_file() && merges_path.is_file() {
        let vocab = parse_vocab_json(&read("vocab.json")?).with_context(|| format!("in {}", vocab_path.display()))?;
        let merges = parse_merges_txt(&read("merges.txt")?).with_context(|| format!("in {}", merges_path.display()))?;
        let added = if dir.join("added_tokens.json").is_file() {
            let map = parse_vocab_json(&read("added_tokens.json")?).context("in added_tokens.json")?;
            let mut added: Vec<(String, u32)> = map.into_iter().collect();
            added.sort_by_key(|&(_, id)| id);
            added
        } else {
            Vec::new()
        };
        return Ok(Some(Found::ByteLevel(BpeFiles { vocab, merges, added, individual_digits: false })));
    }
    let json_path = dir.join("tokenizer.json");
    let from_json = || -> Result<Found> {
        let text = read("tokenizer.json")?;
        let in_file = || format!("in {}", json_path.display());
        let root: Value = serde_json::from_str(&text).context("tokenizer.json is not valid JSON").with_context(in_file)?;
        if is_byte_fallback_bpe(&root) {
            let config = TokenizerConfig::from_dir(dir)?;
            return Ok(Found::SentencePiece(SpTables::from_tokenizer_json(&root, &config).with_context(in_file)?));
        }
        Ok(Found::ByteLevel(files_from_tokenizer_json(&root).with_context(in_file)?))
    };
    if dir.join("tokenizer.model").is_file() {
        return match crate::sp_pack::tables_from_model_file(dir) {
            Ok(tables) => Ok(Some(Found::SentencePiece(tables))),
            // a tokenizer.json beside it may hold what the model file's packer refuses
            Err(e) if json_path.is_file() => from_json().map(Some).map_err(|_| e),
            Err(e) => Err(e),
        };
    }
    if json_path.is_file() {
        return from_json().map(Some);
    }
    Ok(None)
}

/// Whether a `tokenizer.json` is SentencePiece-style: a BPE model with `byte_fallback` and no
/// `ByteLevel` pre-tokenizer.
fn is_byte_fallback_bpe(root: &Value) -> bool {
    let model = root.get("model").unwrap_or(&Value::Null);
    let bpe = model.get("type").and_then(Value::as_str).is_none_or(|t| t == "BPE");
    let byte_fallback = model.get("byte_fallback") == Some(&Value::Bool(true));
    let byte_level = root.get("pre_tokenizer").is_some_and(|p| p.to_string().contains("\"ByteLevel\""));
    bpe && byte_fallback && !byte_level
}

/// Parses a `vocab.json` (a JSON object of key -> id).
pub fn parse_vocab_json(text: &str) -> Result<HashMap<String, u32>> {
    let value: Value = serde_json::from_str(text).context("vocab is not valid JSON")?;
    vocab_from_value(&value)
}

fn vocab_from_value(value: &Value) -> Result<HashMap<String, u32>> {
    let object = value.as_object().ok_or_else(|| anyhow!("vocab must be a JSON object of token -> id"))?;
    object
        .iter()
        .map(|(key, id)| {
            let id = id
                .as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| anyhow!("vocab token {key:?} has id {id}, not a u32"))?;
            Ok((key.clone(), id))
        })
        .collect()
}

/// Parses GPT-2's `merges.txt`: an optional `#version ...` first line, then one `left right`
/// pair per line, in rank order. Empty lines are skipped.
pub fn parse_merges_txt(text: &str) -> Result<Vec<MergeLine>> {
    let mut merges = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.strip_suffix('\r').unwrap_or(line);
        // Only the first line may be the version comment: later lines such as "# #" are merges.
        if (i == 0 && line.starts_with("#version")) || line.is_empty() {
            continue;
        }
        let origin = format!("merges.txt line {line_no}");
        let (left, right) = split_merge(line).with_context(|| format!("{origin}: {line:?}"))?;
        merges.push(MergeLine { left, right, origin });
    }
    Ok(merges)
}

fn split_merge(line: &str) -> Result<(String, String)> {
    match line.split(' ').collect::<Vec<_>>().as_slice() {
        [left, right] if !left.is_empty() && !right.is_empty() => Ok((left.to_string(), right.to_string())),
        _ => bail!("a merge must be two tokens separated by one space"),
    }
}

/// Parses a Hugging Face `tokenizer.json` whose model is GPT-2 style byte-level BPE. Anything
/// the runtime would not reproduce (a normalizer, another pre-tokenizer, a prefix space, word
/// suffixes, byte fallback, `ignore_merges`) is rejected with the reason. The pre-tokenizer is
/// `ByteLevel`, or a `Sequence` of `Digits(individual_digits=true)` then `ByteLevel` (SmolLM).
pub fn parse_tokenizer_json(text: &str) -> Result<BpeFiles> {
    let root: Value = serde_json::from_str(text).context("tokenizer.json is not valid JSON")?;
    files_from_tokenizer_json(&root)
}

fn files_from_tokenizer_json(root: &Value) -> Result<BpeFiles> {
    let model = root.get("model").ok_or_else(|| anyhow!("no \"model\" object"))?;
    if let Some(kind) = model.get("type").and_then(Value::as_str) {
        ensure!(kind == "BPE", "model type is {kind:?}; only byte-level \"BPE\" is supported");
    }

    // The runtime only implements GPT-2's pipeline: no normalizer, ByteLevel pre-tokenizer with
    // GPT-2's regex and no prefix space.
    // Unset: absent, null, false or "" (GPT-2's own file has `"end_of_word_suffix": ""`).
    let is_set =
        |v: Option<&Value>| v.is_some_and(|v| !(v.is_null() || v == &Value::Bool(false) || v.as_str() == Some("")));
    ensure!(
        !is_set(root.get("normalizer")),
        "a normalizer is set ({}); the runtime does not normalize text",
        root.get("normalizer").map(Value::to_string).unwrap_or_default()
    );
    let mut pre = root.get("pre_tokenizer").unwrap_or(&Value::Null);
    let mut individual_digits = false;
    if pre.get("type").and_then(Value::as_str) == Some("Sequence") {
        match pre.get("pretokenizers").and_then(Value::as_array).map(Vec::as_slice) {
            Some([digits, byte_level])
                if digits.get("type").and_then(Value::as_str) == Some("Digits")
                    && digits.get("individual_digits") == Some(&Value::Bool(true)) =>
            {
                individual_digits = true;
                pre = byte_level;
            }
            _ => bail!("pre_tokenizer is {pre}; the runtime implements GPT-2's ByteLevel pre-tokenizer, alone or after Digits(individual_digits=true)"),
        }
    }
    ensure!(
        pre.get("type").and_then(Value::as_str) == Some("ByteLevel"),
        "pre_tokenizer is {pre}; the runtime implements only GPT-2's ByteLevel pre-tokenizer"
    );
    ensure!(!is_set(pre.get("add_prefix_space")), "ByteLevel add_prefix_space=true is not supported");
    ensure!(pre.get("use_regex") != Some(&Value::Bool(false)), "ByteLevel use_regex=false is not supported");
    for key in ["continuing_subword_prefix", "end_of_word_suffix", "byte_fallback", "ignore_merges"] {
        ensure!(
            !is_set(model.get(key)),
            "model.{key} = {} is not supported",
            model.get(key).map(Value::to_string).unwrap_or_default()
        );
    }

    let vocab =
        vocab_from_value(model.get("vocab").ok_or_else(|| anyhow!("no model.vocab"))?).context("in model.vocab")?;
    let raw_merges = model.get("merges").and_then(Value::as_array).ok_or_else(|| anyhow!("no model.merges array"))?;
    let mut merges = Vec::with_capacity(raw_merges.len());
    for (i, merge) in raw_merges.iter().enumerate() {
        let origin = format!("model.merges[{i}]");
        // Older files write "left right"; newer ones ["left", "right"].
        let (left, right) = match merge {
            Value::String(line) => split_merge(line),
            Value::Array(parts) => match parts.as_slice() {
                [Value::String(l), Value::String(r)] => Ok((l.clone(), r.clone())),
                _ => Err(anyhow!("a merge array must hold two strings")),
            },
            _ => Err(anyhow!("a merge must be a string or a pair of strings")),
        }
        .with_context(|| format!("{origin}: {merge}"))?;
        merges.push(MergeLine { left, right, origin });
    }

    let mut added = Vec::new();
    for token in root.get("added_tokens").and_then(Value::as_array).into_iter().flatten() {
        let content = token.get("content").and_then(Value::as_str);
        let id = token.get("id").and_then(Value::as_u64).and_then(|id| u32::try_from(id).ok());
        let (Some(content), Some(id)) = (content, id) else {
            bail!("added_tokens entry {token} needs a string \"content\" and a u32 \"id\"");
        };
        added.push((content.to_string(), id));
    }
    Ok(BpeFiles { vocab, merges, added, individual_digits })
}

/// Packs a vocab (keys in GPT-2's byte-to-unicode form) and merges (in rank order) into a
/// tokenizer section.
pub fn pack(vocab: &HashMap<String, u32>, merges: &[(String, String)]) -> Result<Vec<u8>> {
    let merges: Vec<MergeLine> = merges
        .iter()
        .enumerate()
        .map(|(rank, (left, right))| MergeLine {
            left: left.clone(),
            right: right.clone(),
            origin: format!("merge {rank}"),
        })
        .collect();
    pack_files(&BpeFiles { vocab: vocab.clone(), merges, added: Vec::new(), individual_digits: false })
}

/// Packs [`BpeFiles`] into a tokenizer section.
pub fn pack_files(files: &BpeFiles) -> Result<Vec<u8>> {
    BpeTables::from_files(files)?.section()
}

/// A byte-level BPE by ids: exactly what a tokenizer section holds, before it is packed (and
/// what [`crate::prune`] cuts down to a kept vocabulary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpeTables {
    /// `tokens[id]`: the bytes of each token (empty for an id no token uses). (V,)
    pub tokens: Vec<Vec<u8>>,
    /// `byte_to_id[b]`: the token of the single byte `b`. (256,)
    pub byte_to_id: Vec<u32>,
    /// `[left, right, rank, result]` in rank order (`merges[r][2] == r`). (M, 4)
    pub merges: Vec<[u32; 4]>,
    /// Ids of the added (special) tokens, stored literally (e.g. `<|endoftext|>` in a
    /// `tokenizer.json`); GPT-2's `vocab.json` holds its `<|endoftext|>` as an ordinary key.
    pub added: Vec<u32>,
    /// Numeric characters are cut out one by one before GPT-2's regex (see [`BpeFiles`]).
    pub individual_digits: bool,
}

impl BpeTables {
    /// The tables of [`BpeFiles`] (vocab keys turned into bytes, merges into ids), checked: every
    /// merge's parts and result are in the vocab and the result's bytes are the parts' bytes.
    pub fn from_files(files: &BpeFiles) -> Result<Self> {
        let map = unicode_to_bytes();

        // Ids -> bytes. vocab_size is the largest id + 1; ids no token uses decode to nothing.
        let max_id = files.vocab.values().chain(files.added.iter().map(|(_, id)| id)).max().copied();
        let vocab_size = max_id.ok_or_else(|| anyhow!("the vocab is empty"))? as usize + 1;
        let n_keys = files.vocab.len() + files.added.len();
        ensure!(
            vocab_size <= 2 * n_keys + 1024,
            "the largest token id is {} but there are only {n_keys} tokens: the ids are far from dense",
            vocab_size - 1
        );
        let mut names: Vec<Option<&str>> = vec![None; vocab_size];
        let mut tokens: Vec<Vec<u8>> = vec![Vec::new(); vocab_size];
        let mut keys: Vec<(&String, &u32)> = files.vocab.iter().collect();
        keys.sort_by_key(|&(_, &id)| id);
        for (key, &id) in keys {
            if let Some(other) = names[id as usize] {
                bail!("vocab tokens {other:?} and {key:?} both have id {id}");
            }
            names[id as usize] = Some(key);
            tokens[id as usize] = key_to_bytes(key, &map);
        }
        // Added tokens are stored literally (Hugging Face matches and decodes them as plain text).
        for (content, id) in &files.added {
            match names[*id as usize] {
                Some(other) if other != content => {
                    bail!("added token {content:?} has id {id}, which the vocab gives to {other:?}")
                }
                _ => {}
            }
            names[*id as usize] = Some(content);
            tokens[*id as usize] = content.as_bytes().to_vec();
        }

        // The 256 byte tokens: byte-level BPE starts every piece from them.
        let byte_to_id: Vec<u32> = bytes_to_unicode()
            .iter()
            .enumerate()
            .map(|(byte, &c)| {
                files.vocab.get(&c.to_string()).copied().ok_or_else(|| {
                    anyhow!(
                        "the vocab has no token for byte {byte:#04x} (key {:?}); byte-level BPE needs all 256",
                        c.to_string()
                    )
                })
            })
            .collect::<Result<_>>()?;

        // Merges: ids of both parts and of the result (the parts' keys concatenated).
        let mut merges: Vec<[u32; 4]> = Vec::with_capacity(files.merges.len());
        let mut origin_of: HashMap<(u32, u32), &str> = HashMap::with_capacity(files.merges.len());
        for (rank, merge) in files.merges.iter().enumerate() {
            let describe = || format!("{} ({:?} + {:?})", merge.origin, merge.left, merge.right);
            let id_of = |key: &str, what: &str| {
                files.vocab.get(key).copied().ok_or_else(|| anyhow!("{}: {what} {key:?} is not in the vocab", describe()))
            };
            let left = id_of(&merge.left, "left part")?;
            let right = id_of(&merge.right, "right part")?;
            let result_key = format!("{}{}", merge.left, merge.right);
            let result = id_of(&result_key, "result")?;
            let (l, r, res) = (&tokens[left as usize], &tokens[right as usize], &tokens[result as usize]);
            ensure!(
                res.len() == l.len() + r.len() && res.starts_with(l) && res.ends_with(r),
                "{}: the result's bytes {res:?} are not the parts' bytes {l:?} + {r:?}",
                describe()
            );
            if let Some(first) = origin_of.insert((left, right), &merge.origin) {
                bail!("{}: the same pair is already merged at {first}", describe());
            }
            merges.push([left, right, u32::try_from(rank)?, result]);
        }
        let added = files.added.iter().map(|&(_, id)| id).collect();
        Ok(Self { tokens, byte_to_id, merges, added, individual_digits: files.individual_digits })
    }

    /// Packs the tables into a tokenizer section (loaded back by the runtime before it is
    /// returned).
    pub fn section(&self) -> Result<Vec<u8>> {
        let flags = if self.individual_digits { format::FLAG_INDIVIDUAL_DIGITS } else { 0 };
        write_section_with_flags(&self.tokens, &self.byte_to_id, &mut self.merges.clone(), flags)
    }
}

/// Writes the section bytes. `tokens[id]` are the bytes of each token, `byte_to_id[b]` the token
/// of byte `b`, `merges` `[left, right, rank, result]` entries (sorted here).
pub fn write_section(tokens: &[Vec<u8>], byte_to_id: &[u32], merges: &mut [[u32; 4]]) -> Result<Vec<u8>> {
    write_section_with_flags(tokens, byte_to_id, merges, 0)
}

/// [`write_section`] with version-2 flags (`format::FLAG_*`); without flags the section is
/// version 1.
pub fn write_section_with_flags(tokens: &[Vec<u8>], byte_to_id: &[u32], merges: &mut [[u32; 4]], flags: u8) -> Result<Vec<u8>> {
    let (vocab_size, n_merges) = (tokens.len(), merges.len());
    let token_bytes_len: usize = tokens.iter().map(Vec::len).sum();
    let id_bytes = format::id_bytes_for(vocab_size, n_merges);
    let section_len = format::section_len(id_bytes, vocab_size, n_merges, token_bytes_len)
        .filter(|&len| u32::try_from(len).is_ok())
        .ok_or_else(|| anyhow!("the tokenizer is too large for the section format (> 4 GiB)"))?;
    ensure!(byte_to_id.len() == format::N_BYTES, "byte_to_id must have 256 entries");

    let mut out = Vec::with_capacity(section_len);
    let u32_field = |n: usize| u32::try_from(n).map(u32::to_le_bytes);
    // Header.
    out.extend_from_slice(&format::MAGIC);
    let version = if flags == 0 { format::VERSION } else { format::VERSION_FLAGS };
    out.extend_from_slice(&version.to_le_bytes());
    out.push(id_bytes as u8);
    out.push(flags);
    for field in [vocab_size, n_merges, token_bytes_len, section_len] {
        out.extend_from_slice(&u32_field(field)?);
    }
    let push_id = |out: &mut Vec<u8>, id: u32| {
        if id_bytes == 2 {
            out.extend_from_slice(&(id as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&id.to_le_bytes());
        }
    };
    // byte_to_id[256].
    for &id in byte_to_id {
        push_id(&mut out, id);
    }
    // merges[M], sorted by (left, right) for binary search.
    merges.sort_unstable_by_key(|&[left, right, _, _]| (left, right));
    for merge in merges.iter() {
        for &field in merge {
            push_id(&mut out, field);
        }
    }
    // token_offsets[V + 1], then token_bytes.
    let mut offset = 0;
    out.extend_from_slice(&u32_field(0)?);
    for token in tokens {
        offset += token.len();
        out.extend_from_slice(&u32_field(offset)?);
    }
    for token in tokens {
        out.extend_from_slice(token);
    }
    ensure!(out.len() == section_len, "internal error: wrote {} bytes, expected {section_len}", out.len());

    // The reader is the judge of the format.
    Tokenizer::from_bytes(&out).map_err(|e| anyhow!("internal error: the packed section does not load: {e}"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_to_unicode_matches_gpt2() {
        let table = bytes_to_unicode();
        assert_eq!(table[b' ' as usize], 'Ġ');
        assert_eq!(table[b'\n' as usize], 'Ċ');
        assert_eq!(table[b'!' as usize], '!');
        assert_eq!(table[0], 'Ā');
        assert_eq!(table[0xAD], 'Ń');
        assert_eq!(token_key_to_bytes("Ġthe"), b" the");
        assert_eq!(token_key_to_bytes("<|endoftext|>"), b"<|endoftext|>");
        // '€' is not in the mapping: the key is taken literally.
        assert_eq!(token_key_to_bytes("<€>"), "<€>".as_bytes());
    }

    /// A byte-level vocab with all 256 byte keys plus `extra` keys, ids in order.
    fn vocab(extra: &[&str]) -> HashMap<String, u32> {
        let keys = bytes_to_unicode().into_iter().map(String::from).chain(extra.iter().map(|s| s.to_string()));
        keys.zip(0..).collect()
    }

    fn merges(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|&(l, r)| (l.to_string(), r.to_string())).collect()
    }

    fn error_of(result: Result<Vec<u8>>) -> String {
        format!("{:#}", result.unwrap_err())
    }

    #[test]
    fn packs_a_small_vocab_that_the_runtime_reads() {
        let section = pack(&vocab(&["Ġt", "he", "Ġthe"]), &merges(&[("Ġ", "t"), ("h", "e"), ("Ġt", "he")])).unwrap();
        let tok = Tokenizer::from_bytes(&section).unwrap();
        assert_eq!((tok.vocab_size(), tok.n_merges()), (259, 3));
        let mut out = [0; 16];
        let n = tok.encode(" the", &mut out).unwrap();
        assert_eq!(&out[..n], [258]);
        assert_eq!(tok.token_bytes(256), Some(&b" t"[..]));
    }

    #[test]
    fn errors_name_the_bad_merge_or_token() {
        let v = vocab(&["ab"]);
        let e = error_of(pack(&v, &merges(&[("a", "x")])));
        assert!(e.contains("merge 0") && e.contains("result \"ax\" is not in the vocab"), "{e}");
        let e = error_of(pack(&v, &merges(&[("a", "b"), ("zz", "b")])));
        assert!(e.contains("merge 1") && e.contains("left part \"zz\""), "{e}");
        let e = error_of(pack(&v, &merges(&[("a", "b"), ("a", "b")])));
        assert!(e.contains("already merged at merge 0"), "{e}");
        let mut missing = v.clone();
        missing.remove("Ċ");
        let e = error_of(pack(&missing, &[]));
        assert!(e.contains("no token for byte 0x0a") && e.contains("Ċ"), "{e}");
        let mut dup = v.clone();
        dup.insert("zz".to_string(), 256);
        let e = error_of(pack(&dup, &[]));
        assert!(e.contains("both have id 256"), "{e}");
        // A literal (non byte-mapped) key whose bytes are not its parts' bytes.
        let e = error_of(pack(&vocab(&["€", "Ġ€"]), &merges(&[("Ġ", "€")])));
        assert!(e.contains("are not the parts' bytes"), "{e}");
    }

    #[test]
    fn tokenizer_json_merges_in_both_spellings_and_added_tokens() {
        let json = |merges: &str, extra: &str| {
            format!(
                r#"{{"added_tokens": [{{"id": 258, "content": "<|endoftext|>"}}], "normalizer": null,
                   "pre_tokenizer": {{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}},
                   "model": {{"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                              "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, {extra}
                              "vocab": {vocab}, "merges": {merges}}}}}"#,
                vocab = serde_json::to_string(&vocab(&["ab", "abc"])).unwrap()
            )
        };
        let a = parse_tokenizer_json(&json(r#"["a b", "ab c"]"#, "")).unwrap();
        let b = parse_tokenizer_json(&json(r#"[["a", "b"], ["ab", "c"]]"#, r#""ignore_merges": false,"#)).unwrap();
        let (a, b) = (pack_files(&a).unwrap(), pack_files(&b).unwrap());
        assert_eq!(a, b);
        let tok = Tokenizer::from_bytes(&a).unwrap();
        assert_eq!(tok.token_bytes(258), Some(&b"<|endoftext|>"[..]));

        let e = format!("{:#}", parse_tokenizer_json(&json(r#"["a b c"]"#, "")).unwrap_err());
        assert!(e.contains("model.merges[0]"), "{e}");
        let e = format!("{:#}", parse_tokenizer_json(&json("[]", r#""ignore_merges": true,"#)).unwrap_err());
        assert!(e.contains("ignore_merges"), "{e}");
        let sentencepiece = json("[]", "").replace(r#""type": "ByteLevel""#, r#""type": "Metaspace""#);
        let e = format!("{:#}", parse_tokenizer_json(&sentencepiece).unwrap_err());
        assert!(e.contains("ByteLevel"), "{e}");
    }

    #[test]
    fn pack_from_dir_finds_nothing_in_an_empty_dir() {
        let dir = std::env::temp_dir().join(format!("tokenizer-pack-empty-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert!(pack_from_dir(&dir).unwrap().is_none());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn merges_txt_version_line_and_hash_tokens() {
        let merges = parse_merges_txt("#version: 0.2\nĠ t\n# #\n\n").unwrap();
        assert_eq!(merges.len(), 2);
        assert_eq!((merges[1].left.as_str(), merges[1].right.as_str()), ("#", "#"));
        assert_eq!(merges[1].origin, "merges.txt line 3");
        let err = parse_merges_txt("a b\nabc\n").unwrap_err();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
    }
}
