//! Trains a small SentencePiece BPE vocabulary from text and writes it as a `tokenizer.model`
//! that the `sentencepiece` package, `transformers` (`LlamaTokenizer`, `AutoTokenizer`) and this
//! project's packer all load, laid out as Llama's:
//!
//! ```text
//! id 0 <unk> (UNKNOWN)   1 <s> (CONTROL)   2 </s> (CONTROL)   3..=258 <0x00>..<0xFF> (BYTE)
//! 259..   the merged pieces in the order they were learned, scores 0, -1, -2, ...
//! then    the single characters, most frequent first, scores continuing downwards
//! ```
//!
//! Training (greedy BPE pair merging, as sentencepiece's BPE trainer does in spirit, not bit for
//! bit):
//! 1. each line of the text is normalized as the model will normalize it: identity, a dummy `▁`
//!    in front, every space a `▁`;
//! 2. the characters that make up 99.95 % of the text (`character_coverage`) become pieces, `▁`
//!    always among them; the rest will fall back to bytes;
//! 3. lines are cut into words before each `▁` that follows a non-`▁` (so a piece holds spaces
//!    only at its start, and runs of spaces are pieces of their own);
//! 4. repeatedly, the most frequent adjacent pair of symbols within a word (ties: the smaller
//!    merged text, then the smaller left part) becomes a piece, until the vocabulary is full or
//!    no pair is left. Digits (`0`-`9`, split_digits) and characters without a piece never
//!    merge; a piece is at most 16 characters.
//!
//! The result is deterministic: the same text and size give the same bytes.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};

use crate::sp_model::{model_type, piece_type, NormalizerSpec, SpModel, SpPiece, TrainerSpec};

/// The piece-space.
const SPACE: char = '\u{2581}';
/// `<unk>`, `<s>`, `</s>` and the 256 byte pieces.
const N_RESERVED: usize = 3 + 256;
/// Share of the text's characters that get a piece of their own.
pub const CHARACTER_COVERAGE: f32 = 0.9995;
/// Longest piece, in characters (sentencepiece's default `max_sentencepiece_length`).
const MAX_PIECE_CHARS: usize = 16;

/// Trains a SentencePiece BPE model of `vocab_size` pieces on `text` and returns the bytes of
/// its `tokenizer.model` (see the [module docs](self)).
pub fn train_sentencepiece_bpe(text: &str, vocab_size: usize) -> Result<Vec<u8>> {
    Ok(train_model(text, vocab_size)?.to_bytes())
}

/// [`train_sentencepiece_bpe`], as a model.
pub fn train_model(text: &str, vocab_size: usize) -> Result<SpModel> {
    ensure!(i32::try_from(vocab_size).is_ok(), "vocab_size {vocab_size} is too large");
    // 1. Normalized lines.
    let lines: Vec<String> =
        text.lines().filter(|l| !l.is_empty()).map(|l| format!("{SPACE}{}", l.replace(' ', &SPACE.to_string()))).collect();
    ensure!(!lines.is_empty(), "the training text is empty");

    // 2. Characters by frequency (ties: the smaller code point first), up to the coverage.
    let mut char_counts: HashMap<char, u64> = HashMap::new();
    for line in &lines {
        for c in line.chars() {
            *char_counts.entry(c).or_default() += 1;
        }
    }
    let mut by_count: Vec<(char, u64)> = char_counts.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let total: u64 = by_count.iter().map(|&(_, n)| n).sum();
    let mut chars = Vec::new();
    let mut covered = 0u64;
    for &(c, n) in &by_count {
        if (covered as f64) >= f64::from(CHARACTER_COVERAGE) * total as f64 && c != SPACE {
            continue;
        }
        covered += n;
        chars.push(c);
    }
    ensure!(
        N_RESERVED + chars.len() <= vocab_size,
        "vocab_size {vocab_size} is too small: {} reserved pieces and {} characters need {}",
        N_RESERVED,
        chars.len(),
        N_RESERVED + chars.len()
    );

    // Symbols: every character, then every merged piece; `mergeable` says which may merge.
    let mut symbols: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
    let mut symbol_id: HashMap<String, u32> = (0u32..).zip(&symbols).map(|(i, s)| (s.clone(), i)).collect();
    let mut mergeable: Vec<bool> = chars.iter().map(|c| !c.is_ascii_digit()).collect();
    let mut n_chars_of: Vec<usize> = vec![1; symbols.len()];
    const BARRIER: u32 = u32::MAX;

    // 3. Words, with their counts (symbol ids; BARRIER for a character without a piece).
    let mut word_counts: HashMap<Vec<u32>, u64> = HashMap::new();
    for line in &lines {
        let mut word = Vec::new();
        let mut prev_space = true;
        for c in line.chars() {
            let space = c == SPACE;
            if space && !prev_space && !word.is_empty() {
                *word_counts.entry(std::mem::take(&mut word)).or_default() += 1;
            }
            word.push(symbol_id.get(&c.to_string()).copied().unwrap_or(BARRIER));
            prev_space = space;
        }
        if !word.is_empty() {
            *word_counts.entry(word).or_default() += 1;
        }
    }
    let mut words: Vec<(Vec<u32>, u64)> = word_counts.into_iter().collect();
    words.sort();

    // 4. Merge the most frequent pair until the vocabulary is full.
    let mut merged: Vec<u32> = Vec::new();
    while N_RESERVED + chars.len() + merged.len() < vocab_size {
        let mut pair_counts: HashMap<(u32, u32), u64> = HashMap::new();
        for (word, count) in &words {
            for pair in word.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if a == BARRIER || b == BARRIER || !mergeable[a as usize] || !mergeable[b as usize] {
                    continue;
                }
                if n_chars_of[a as usize] + n_chars_of[b as usize] > MAX_PIECE_CHARS {
                    continue;
                }
                *pair_counts.entry((a, b)).or_default() += count;
            }
        }
        let Some(&top) = pair_counts.values().max() else { break };
        let text_of = |(a, b): (u32, u32)| (format!("{}{}", symbols[a as usize], symbols[b as usize]), symbols[a as usize].clone());
        let best = pair_counts.into_iter().filter(|&(_, n)| n == top).map(|(pair, _)| (text_of(pair), pair)).min();
        let Some((_, (a, b))) = best else { break };
        let text = format!("{}{}", symbols[a as usize], symbols[b as usize]);
        let new = match symbol_id.get(&text) {
            Some(&id) => id,
            None => {
                let id = symbols.len() as u32;
                symbols.push(text.clone());
                symbol_id.insert(text, id);
                mergeable.push(true);
                n_chars_of.push(n_chars_of[a as usize] + n_chars_of[b as usize]);
                merged.push(id);
                id
            }
        };
        for (word, _) in &mut words {
            let mut i = 0;
            while i + 1 < word.len() {
                if word[i] == a && word[i + 1] == b {
                    word[i] = new;
                    word.remove(i + 1);
                }
                i += 1;
            }
        }
    }

    // The model: reserved pieces, merged pieces, characters.
    let mut pieces = Vec::with_capacity(vocab_size);
    let piece = |p: &str, score: f32, kind: i32| SpPiece { piece: p.to_string(), score, kind };
    pieces.push(piece("<unk>", 0.0, piece_type::UNKNOWN));
    pieces.push(piece("<s>", 0.0, piece_type::CONTROL));
    pieces.push(piece("</s>", 0.0, piece_type::CONTROL));
    for b in 0..=255u8 {
        pieces.push(piece(&format!("<0x{b:02X}>"), 0.0, piece_type::BYTE));
    }
    let normal = merged.iter().map(|&id| symbols[id as usize].as_str()).chain(symbols.iter().take(chars.len()).map(String::as_str));
    for (k, p) in normal.enumerate() {
        pieces.push(piece(p, -(k as f32), piece_type::NORMAL));
    }
    if pieces.len() < vocab_size {
        bail!("the text has only enough pairs for {} pieces, fewer than vocab_size {vocab_size}", pieces.len());
    }
    Ok(SpModel {
        pieces,
        trainer: TrainerSpec {
            model_type: model_type::BPE,
            vocab_size: vocab_size as i32,
            character_coverage: CHARACTER_COVERAGE,
            split_digits: true,
            allow_whitespace_only_pieces: true,
            byte_fallback: true,
            ..TrainerSpec::default()
        },
        normalizer: NormalizerSpec {
            name: "identity".to_string(),
            add_dummy_prefix: true,
            remove_extra_whitespaces: false,
            escape_whitespaces: true,
            ..NormalizerSpec::default()
        },
        denormalizer: None,
    })
}

/// A `tokenizer_config.json` for the trained model, so that `transformers`' `AutoTokenizer`
/// loads it as Llama's tokenizer (`LlamaTokenizer`), with BOS added to every prompt.
pub fn llama_tokenizer_config_json() -> String {
    let config = serde_json::json!({
        "tokenizer_class": "LlamaTokenizer",
        "add_bos_token": true,
        "add_eos_token": false,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "clean_up_tokenization_spaces": false,
        "legacy": false,
        "model_max_length": 1_000_000,
    });
    serde_json::to_string_pretty(&config).unwrap_or_default() + "\n"
}

/// Trains on `text` and writes `tokenizer.model` and `tokenizer_config.json` into `dir`.
pub fn write_tokenizer_dir(dir: &Path, text: &str, vocab_size: usize) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let model = train_sentencepiece_bpe(text, vocab_size)?;
    let path = dir.join("tokenizer.model");
    std::fs::write(&path, model).with_context(|| format!("writing {}", path.display()))?;
    let path = dir.join("tokenizer_config.json");
    std::fs::write(&path, llama_tokenizer_config_json()).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sp_pack::{SpTables, TokenizerConfig};
    use runtime::tokenizer::Tokenizer;

    const TEXT: &str = "the cat sat on the mat\nthe dog sat on the log  twice\nthere were 12 cats and 3 dogs\n";

    #[test]
    fn trains_a_model_the_packer_and_runtime_accept() {
        let model = train_model(TEXT, 300).unwrap();
        assert_eq!(model.pieces.len(), 300);
        assert_eq!(model.pieces[259].piece, "▁t"); // "▁t" is the most frequent pair
        let multi = model.pieces.iter().filter(|p| p.kind == piece_type::NORMAL && p.piece.chars().count() > 1);
        assert!(multi.clone().all(|p| !p.piece.contains(|c: char| c.is_ascii_digit())), "split_digits");
        assert!(multi.clone().all(|p| !p.piece.trim_start_matches(SPACE).contains(SPACE)), "spaces only at the start");
        let bytes = model.to_bytes();
        assert_eq!(bytes, train_sentencepiece_bpe(TEXT, 300).unwrap(), "deterministic");
        assert_eq!(SpModel::parse(&bytes).unwrap(), model);
        let section = SpTables::from_model(&model, &TokenizerConfig::default()).unwrap().section().unwrap();
        let tok = Tokenizer::from_bytes(&section).unwrap();
        let mut out = [0u32; 64];
        let n = tok.encode("the cat sat", &mut out).unwrap();
        let mut text = [0u8; 64];
        let len = tok.decode(&out[..n], &mut text).unwrap();
        assert_eq!(&text[..len], b"the cat sat");
        assert!(n <= 4, "{:?}", &out[..n]);
    }

    #[test]
    fn too_small_a_vocabulary_is_an_error() {
        let e = train_model(TEXT, 270).unwrap_err().to_string();
        assert!(e.contains("too small"), "{e}");
        assert!(train_model("", 300).is_err());
    }
}
