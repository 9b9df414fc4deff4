//! Trains a small SentencePiece BPE vocabulary from text and writes it as a `tokenizer.model`
//! that the `sentencepiece` package, `transformers` (`LlamaTokenizer`, `AutoTokenizer`) and this
//! project's packer all load, laid out as Llama's:
//!
//! ```text
//! id 0 <unk> (UNKNOWN)   1 <s> (CONTROL)   2 </s> (CONTROL)   3..=258 <0x00>..<0xFF> (BYTE)
//! 259..   the merged pieces in the order they were learned, scores 0, -1, -2, ...
//! then    the completed pieces, if any (step 5), scores continuing downwards
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
//!    merge; a piece is at most 16 characters;
//! 5. when no pair is left before the vocabulary is full (the repository's 200 KB of text gives
//!    about 16,400 pieces; llama2.c's stories models have 32,000), the rest is completed
//!    directly: pieces made of two pieces (left ones from the most frequent down, right ones not
//!    starting with `▁`, no digits, at most 16 characters), scored below every trained piece,
//!    each taken only if BPE on its characters ends in two pieces, so that BPE reaches it by
//!    one last merge. Every piece stays reachable, the packer accepts the model, and
//!    `sentencepiece` encodes with it as the runtime does (`tests/tests/sentencepiece_parity.rs`).
//!    The completed pieces go after the trained ones (before the characters).
//!
//! The result is deterministic: the same text and size give the same bytes.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
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

/// A merge candidate in the heap: its count, then the ties broken toward the smaller text of the
/// merged piece and of its left part (as `Reverse`), then the pair.
type Candidate = (u64, Reverse<String>, Reverse<String>, (u32, u32));

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
    const BARRIER: u32 = u32::MAX;
    let mut symbols: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
    let mut symbol_id: HashMap<String, u32> = (0u32..).zip(&symbols).map(|(i, s)| (s.clone(), i)).collect();
    let mut mergeable: Vec<bool> = chars.iter().map(|c| !c.is_ascii_digit()).collect();
    let mut n_chars_of: Vec<usize> = vec![1; symbols.len()];

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

    // 4. Merge the most frequent pair until the vocabulary is full. Pair counts are kept up to
    //    date word by word (only the words holding the merged pair change), and the best pair
    //    comes from a heap whose stale entries (a count that has changed since) are skipped.
    let eligible = |a: u32, b: u32, mergeable: &[bool], n_chars_of: &[usize]| {
        a != BARRIER
            && b != BARRIER
            && mergeable[a as usize]
            && mergeable[b as usize]
            && n_chars_of[a as usize] + n_chars_of[b as usize] <= MAX_PIECE_CHARS
    };
    let mut pair_counts: HashMap<(u32, u32), u64> = HashMap::new();
    let mut words_of: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
    for (w, (word, count)) in (0u32..).zip(&words) {
        for pair in word.windows(2) {
            if eligible(pair[0], pair[1], &mergeable, &n_chars_of) {
                *pair_counts.entry((pair[0], pair[1])).or_default() += count;
                words_of.entry((pair[0], pair[1])).or_default().push(w);
            }
        }
    }
    let entry = |pair: (u32, u32), count: u64, symbols: &[String]| {
        let (a, b) = (&symbols[pair.0 as usize], &symbols[pair.1 as usize]);
        // the most frequent; ties: the smaller merged text, then the smaller left part
        (count, Reverse(format!("{a}{b}")), Reverse(a.clone()), pair)
    };
    let mut heap: BinaryHeap<Candidate> =
        pair_counts.iter().map(|(&pair, &count)| entry(pair, count, &symbols)).collect();
    let mut merged: Vec<u32> = Vec::new();
    while N_RESERVED + chars.len() + merged.len() < vocab_size {
        let Some((count, _, _, (a, b))) = heap.pop() else { break };
        if pair_counts.get(&(a, b)) != Some(&count) {
            continue; // stale
        }
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
        let mut ws = words_of.remove(&(a, b)).unwrap_or_default();
        ws.dedup(); // (pushed in word order, so duplicates are adjacent)
        let mut changed: Vec<(u32, u32)> = Vec::new();
        for w in ws {
            let (word, count) = &mut words[w as usize];
            let count = *count;
            if !word.windows(2).any(|p| p == [a, b]) {
                continue;
            }
            for pair in word.windows(2) {
                if eligible(pair[0], pair[1], &mergeable, &n_chars_of) {
                    *pair_counts.entry((pair[0], pair[1])).or_default() -= count;
                    changed.push((pair[0], pair[1]));
                }
            }
            let mut i = 0;
            while i + 1 < word.len() {
                if word[i] == a && word[i + 1] == b {
                    word[i] = new;
                    word.remove(i + 1);
                }
                i += 1;
            }
            for pair in word.windows(2) {
                if eligible(pair[0], pair[1], &mergeable, &n_chars_of) {
                    *pair_counts.entry((pair[0], pair[1])).or_default() += count;
                    changed.push((pair[0], pair[1]));
                    let list = words_of.entry((pair[0], pair[1])).or_default();
                    if list.last() != Some(&w) {
                        list.push(w);
                    }
                }
            }
        }
        changed.sort_unstable();
        changed.dedup();
        for pair in changed {
            match pair_counts.get(&pair) {
                Some(0) => {
                    pair_counts.remove(&pair);
                }
                Some(&count) => heap.push(entry(pair, count, &symbols)),
                None => {}
            }
        }
    }

    // 5. Complete the vocabulary when the text gives too few pairs (see the module docs).
    let missing = vocab_size.saturating_sub(N_RESERVED + chars.len() + merged.len());
    let completed = complete(&mut symbols, &mut symbol_id, &merged, chars.len(), missing);
    if completed.len() < missing {
        bail!(
            "the text has only enough pairs for {} pieces, and {} more made of two pieces each, fewer than vocab_size {vocab_size}",
            N_RESERVED + chars.len() + merged.len(),
            completed.len()
        );
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
    let normal = merged
        .iter()
        .chain(&completed)
        .map(|&id| symbols[id as usize].as_str())
        .chain(symbols.iter().take(chars.len()).map(String::as_str));
    for (k, p) in normal.enumerate() {
        pieces.push(piece(p, -(k as f32), piece_type::NORMAL));
    }
    ensure!(pieces.len() == vocab_size, "internal error: {} pieces for vocab_size {vocab_size}", pieces.len());
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

/// Step 5: up to `missing` more pieces, each the concatenation of two pieces (the left one
/// before the right one in score order, pairs taken by the sum of their places, then the left
/// one's), scored below every piece before it, taken only when BPE on its characters ends in
/// two pieces, which it then merges: so every piece stays reachable (it is never merged earlier
/// than its last step, having the worst score, and never merged inside an older piece, whose run
/// ends before the new merge could apply). The right part does not start with `▁` (a piece
/// holds spaces only at its start), and no piece holds a digit or more than 16 characters.
/// `symbols[..n_chars]` are the characters, `merged` the trained pieces in score order. Returns
/// the new symbols, in score order.
fn complete(symbols: &mut Vec<String>, symbol_id: &mut HashMap<String, u32>, merged: &[u32], n_chars: usize, missing: usize) -> Vec<u32> {
    if missing == 0 {
        return Vec::new();
    }
    // The merge table as the packer builds it: every split of a piece into two pieces, with the
    // piece's rank (its place in score order).
    let mut merges: HashMap<(u32, u32), (u32, u32)> = HashMap::new();
    let split_merges = |id: u32, rank: u32, symbols: &[String], symbol_id: &HashMap<String, u32>, merges: &mut HashMap<(u32, u32), (u32, u32)>| {
        let text = &symbols[id as usize];
        for (i, _) in text.char_indices().skip(1) {
            if let (Some(&l), Some(&r)) = (symbol_id.get(&text[..i]), symbol_id.get(&text[i..])) {
                merges.insert((l, r), (rank, id));
            }
        }
    };
    let mut rank_of: HashMap<u32, u32> = HashMap::new();
    for (rank, &id) in (0u32..).zip(merged) {
        split_merges(id, rank, symbols, symbol_id, &mut merges);
        rank_of.insert(id, rank);
    }
    // pieces by text and by reversed text, to find the older pieces a new piece is a part of
    let mut by_text: BTreeSet<String> = symbols.iter().cloned().collect();
    let reversed = |s: &str| s.chars().rev().collect::<String>();
    let mut by_reversed: BTreeSet<String> = symbols.iter().map(|s| reversed(s)).collect();
    let order: Vec<u32> = merged.iter().copied().chain(0..n_chars as u32).collect();
    let usable = |id: u32, symbols: &[String]| !symbols[id as usize].contains(|c: char| c.is_ascii_digit());
    let n_chars_of = |s: &str| s.chars().count();
    let mut out = Vec::new();
    for sum in 0..2 * order.len() {
        for i in sum.saturating_sub(order.len() - 1)..=sum.min(order.len() - 1) {
            let (x, y) = (order[i], order[sum - i]);
            let (xt, yt) = (&symbols[x as usize], &symbols[y as usize]);
            if yt.starts_with(SPACE) || !usable(x, symbols) || !usable(y, symbols) || n_chars_of(xt) + n_chars_of(yt) > MAX_PIECE_CHARS {
                continue;
            }
            let text = format!("{xt}{yt}");
            if symbol_id.contains_key(&text) {
                continue;
            }
            // BPE on its characters must end in two pieces
            let state: Vec<u32> = text.chars().map(|c| symbol_id[&c.to_string()]).collect();
            let (_, fin) = crate::prune::bpe_run(state, &merges);
            if fin.len() != 2 {
                continue;
            }
            let id = symbols.len() as u32;
            let rank = (merged.len() + out.len()) as u32;
            symbols.push(text.clone());
            symbol_id.insert(text.clone(), id);
            rank_of.insert(id, rank);
            split_merges(id, rank, symbols, symbol_id, &mut merges);
            // older pieces of which it is the left or the right part
            for q in by_text.range(text.clone()..).take_while(|q| q.starts_with(text.as_str())) {
                if let (Some(&r), Some(&qid)) = (symbol_id.get(&q[text.len()..]), symbol_id.get(q)) {
                    if let Some(&qrank) = rank_of.get(&qid) {
                        merges.insert((id, r), (qrank, qid));
                    }
                }
            }
            let rev = reversed(&text);
            for qr in by_reversed.range(rev.clone()..).take_while(|q| q.starts_with(rev.as_str())) {
                let q = reversed(qr);
                let cut = q.len() - text.len();
                if let (Some(&l), Some(&qid)) = (symbol_id.get(&q[..cut]), symbol_id.get(&q)) {
                    if let Some(&qrank) = rank_of.get(&qid) {
                        merges.insert((l, id), (qrank, qid));
                    }
                }
            }
            by_text.insert(text);
            by_reversed.insert(rev);
            out.push(id);
            if out.len() == missing {
                return out;
            }
        }
    }
    out
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

    /// Every NORMAL piece of `model` is where BPE on its own characters ends (reachable).
    fn assert_every_piece_reachable(model: &SpModel) {
        let tables = SpTables::from_model(model, &TokenizerConfig::default()).unwrap();
        let chars: HashMap<char, u32> = tables.chars.iter().map(|&(c, id)| (char::from_u32(c).unwrap(), id)).collect();
        let merges = crate::sp_prune::merge_map(&tables);
        for id in 0..tables.vocab_size() as u32 {
            if let Some((_, fin)) = crate::sp_prune::isolated_run(&tables, &chars, &merges, id) {
                assert_eq!(fin, [id], "piece {id} {:?}", tables.names[id as usize]);
            }
        }
    }

    #[test]
    fn a_text_without_enough_pairs_is_completed() {
        let trained = train_model(TEXT, 200_000).unwrap_err().to_string();
        assert!(trained.contains("fewer than vocab_size 200000"), "{trained}");
        let model = train_model(TEXT, 600).unwrap();
        assert_eq!(model.pieces.len(), 600);
        let names: std::collections::HashSet<&str> = model.pieces.iter().map(|p| p.piece.as_str()).collect();
        assert_eq!(names.len(), 600, "distinct pieces");
        // scores strictly decreasing over the normal pieces; the characters last
        let normal: Vec<&SpPiece> = model.pieces.iter().filter(|p| p.kind == piece_type::NORMAL).collect();
        assert!(normal.windows(2).all(|w| w[0].score > w[1].score));
        assert!(normal.iter().rev().take_while(|p| p.piece.chars().count() == 1).count() >= 15);
        for p in &normal {
            assert!(!p.piece.trim_start_matches(SPACE).contains(SPACE) && p.piece.chars().count() <= 16, "{:?}", p.piece);
        }
        assert_every_piece_reachable(&model);
        // a completed model's first pieces are the trained ones
        let small = train_model(TEXT, 300).unwrap();
        assert_eq!(model.pieces[..280].iter().map(|p| &p.piece).collect::<Vec<_>>(), small.pieces[..280].iter().map(|p| &p.piece).collect::<Vec<_>>());
    }

    /// The stories15m / stories42m size on the repository's text: 32,000 pieces, every one
    /// reachable, in well under the time `random` may take.
    #[test]
    fn the_repository_text_completes_to_32000_pieces() {
        let text = crate::random::TOKENIZER_TEXT.join("\n");
        let t = std::time::Instant::now();
        let model = train_model(&text, 32000).unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(model.pieces.len(), 32000);
        assert_every_piece_reachable(&model);
        assert!(secs < 60.0, "{secs} s");
    }

    #[test]
    fn too_small_a_vocabulary_is_an_error() {
        let e = train_model(TEXT, 270).unwrap_err().to_string();
        assert!(e.contains("too small"), "{e}");
        assert!(train_model("", 300).is_err());
    }
}
