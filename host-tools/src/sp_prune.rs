//! Vocabulary pruning for SentencePiece BPE vocabularies (`host-tools convert … --keep-vocab
//! FILE [--vocab-size N]` on a Llama checkpoint with a `tokenizer.model` or a byte-fallback
//! `tokenizer.json`): the same cut as [`crate::prune`] does for GPT-2's byte-level BPE, on the
//! SentencePiece tables ([`SpTables`], packed by [`crate::sp_pack`], read by
//! `runtime::tokenizer::sentencepiece`).
//!
//! # What is kept
//!
//! K = S ∪ B ∪ X ∪ closure(S ∪ B ∪ X), where
//! - S: the pieces of FILE's encoding by the full tokenizer (the runtime's encoder on the full
//!   section), or with `--vocab-size N` the N most frequent of them; and the piece `▁` (the
//!   runtime needs one for a space); without byte fallback also every single-character piece
//!   (else a character the full tokenizer spells would become `<unk>`);
//! - B: the 256 byte pieces `<0x00>`‥`<0xFF>` (byte fallback), so any text still encodes and
//!   decodes byte-exact;
//! - X: the specials: `<unk>`, every control piece (`<s>`, `</s>`, …) and the config's
//!   `bos_token_id` / `eos_token_id`;
//! - closure(t): every piece that appears while BPE runs on t's characters alone: t's
//!   characters' pieces, every intermediate merge result, and t.
//!
//! The pruned merge table is every merge (split of a piece into two pieces) whose parts and
//! result are kept, with the ranks renumbered densely in their order (equal ranks stay equal:
//! sentencepiece's ties are pieces of equal score and the splits of one piece). A character
//! whose piece is dropped has no piece in the pruned tokenizer: it falls back to its bytes.
//!
//! # Why kept text encodes to the same pieces, and the logits do not change
//!
//! The argument of [`crate::prune`] carries over with characters for bytes. The runtime's
//! SentencePiece encoder normalizes without looking at the vocabulary, starts from one symbol
//! per character (its piece, or "unknown", which never merges and becomes byte pieces), and
//! merges the lowest-rank pair, the leftmost on ties. Take a text whose full encoding uses only
//! kept pieces. Every symbol of the full run lies inside one final piece's span, and the merges
//! inside a final piece t are the isolated run on t's characters (a pair that is the lowest and
//! leftmost among all pairs is so among the pairs inside one span, whether or not equal ranks
//! belong to different merges), so every piece the run produces, and the starting character
//! pieces, are in closure(t) ⊆ K; unknown characters are byte pieces in both. The pruned table
//! is a subset with the same rank order and ties, so it makes the same choice at every step
//! and stops when the full one does. The segmentation the runtime does first (before each space
//! that follows a non-space, when no merge joins a word to a space; or at every space with
//! `Metaspace` split) cannot change a result: a subset of merges joins no word to a space when
//! the full set does not. Logits: exactly as in [`crate::prune`] (rows kept whole, one dot
//! product per logit). `tests/tests/pruning.rs` tests the claims on `models/llama` (2048
//! pieces) and on a Llama checkpoint with an untied head; `boards/host/tests/pruned.rs` the
//! `--source-ids` commands.

use std::collections::{BTreeSet, HashMap};

use anyhow::{bail, ensure, Result};
use runtime::tokenizer::sentencepiece::format;
use runtime::tokenizer::Tokenizer;

use crate::prune::{bpe_run, KeepSet, KeepVocab, MergeMap, Selection};
use crate::sp_pack::SpTables;

/// The piece-space.
const SPACE: char = '\u{2581}';

/// `merges` by pair: (left, right) -> (rank, result).
pub fn merge_map(tables: &SpTables) -> MergeMap {
    tables.merges.iter().map(|&[l, r, rank, res]| ((l, r), (rank, res))).collect()
}

/// The piece of each character (`▁` for a space).
fn char_map(tables: &SpTables) -> HashMap<char, u32> {
    tables.chars.iter().filter_map(|&(code, id)| Some((char::from_u32(code)?, id))).collect()
}

/// BPE on piece `id`'s characters alone, as the runtime runs it on a segment: (pieces seen,
/// final pieces); None when a character of it has no piece (BPE cannot reach such a piece) or
/// it is not a NORMAL piece.
pub fn isolated_run(tables: &SpTables, chars: &HashMap<char, u32>, merges: &MergeMap, id: u32) -> Option<(BTreeSet<u32>, Vec<u32>)> {
    if tables.types.get(id as usize) != Some(&format::TYPE_NORMAL) {
        return None;
    }
    let text = std::str::from_utf8(&tables.text[id as usize]).ok()?;
    let state = text.chars().map(|c| chars.get(&if c == ' ' { SPACE } else { c }).copied()).collect::<Option<Vec<u32>>>()?;
    Some(bpe_run(state, merges))
}

/// The kept pieces (see the [module docs](self)): `full` is the section packed from `tables`,
/// `specials` the config's BOS and EOS ids, `model_vocab` the model's vocabulary size (at least
/// the tokenizer's).
pub fn keep_set(tables: &SpTables, full: &Tokenizer<'_>, keep: &KeepVocab, specials: &[u32], model_vocab: u32) -> Result<KeepSet> {
    let v = tables.vocab_size();
    ensure!(full.vocab_size() == v, "internal error: the packed tokenizer has {} pieces, its tables {v}", full.vocab_size());
    // 1. The text's encoding and the selected pieces.
    let sel = Selection::new(full, keep)?;

    // 2. Bytes, specials, the space piece (and every character without byte fallback).
    let chars = char_map(tables);
    let mut specials: Vec<u32> = specials.to_vec();
    specials.extend((0..v as u32).filter(|&id| matches!(tables.types[id as usize], format::TYPE_UNKNOWN | format::TYPE_CONTROL)));
    specials.sort_unstable();
    specials.dedup();
    if let Some(&bad) = specials.iter().find(|&&id| id >= model_vocab) {
        bail!("special token id {bad} is outside the model's vocabulary ({model_vocab} tokens)");
    }
    let mut roots: BTreeSet<u32> = sel.selected.iter().copied().collect();
    roots.extend(tables.byte_to_id.iter().flatten().copied());
    roots.extend(specials.iter().copied());
    roots.extend(chars.get(&SPACE).copied());
    if tables.byte_to_id.is_none() {
        roots.extend(chars.values().copied());
    }

    // 3. The closure: every piece of BPE's run on each kept piece's characters alone.
    let merges = merge_map(tables);
    let mut kept = roots.clone();
    for &t in &roots {
        let run = isolated_run(tables, &chars, &merges, t);
        // A piece that occurs in an encoding is its own isolated run's end (step 1 of the argument).
        let is_normal = tables.types.get(t as usize) == Some(&format::TYPE_NORMAL);
        if sel.counts.contains_key(&t) && is_normal && run.as_ref().is_none_or(|(_, fin)| fin != &[t]) {
            let fin = run.map(|(_, fin)| fin);
            bail!("internal error: piece {t} occurs in the encoding of {} but BPE on its characters alone gives {fin:?}", keep.origin);
        }
        if let Some((seen, _)) = run {
            kept.extend(seen);
        }
    }
    if let Some(&bad) = kept.iter().find(|&&id| id >= model_vocab) {
        bail!("the tokenizer's piece {bad} is outside the model's vocabulary ({model_vocab} tokens)");
    }
    Ok(sel.keep_set(kept, &roots, specials))
}

/// The tables of the pruned tokenizer: the kept pieces under their new ids (an id beyond the
/// tokenizer's pieces, kept because the config names it, as an empty control piece), the byte
/// and character tables mapped, and the merges whose parts and result are kept, ranks
/// renumbered densely in order.
pub fn prune_tables(tables: &SpTables, keep: &KeepSet) -> Result<SpTables> {
    let new = |src: u32| keep.new_id(src);
    let v = tables.vocab_size();
    let mut out = SpTables {
        names: Vec::with_capacity(keep.kept.len()),
        text: Vec::with_capacity(keep.kept.len()),
        types: Vec::with_capacity(keep.kept.len()),
        byte_to_id: None,
        chars: Vec::new(),
        merges: Vec::new(),
        flags: tables.flags,
        unk_id: tables.unk_id.and_then(new),
        bos_id: tables.bos_id.and_then(new),
        eos_id: tables.eos_id.and_then(new),
    };
    for &src in &keep.kept {
        let s = src as usize;
        if s < v {
            out.names.push(tables.names[s].clone());
            out.text.push(tables.text[s].clone());
            out.types.push(tables.types[s]);
        } else {
            out.names.push(String::new());
            out.text.push(Vec::new());
            out.types.push(format::TYPE_CONTROL);
        }
    }
    if let Some(bytes) = &tables.byte_to_id {
        let mapped: Option<Vec<u32>> = bytes.iter().map(|&src| new(src)).collect();
        let Some(mapped) = mapped else { bail!("internal error: a byte piece was not kept") };
        out.byte_to_id = Some(mapped);
    }
    // (code points stay sorted: a filter of a sorted list)
    out.chars = tables.chars.iter().filter_map(|&(code, id)| Some((code, new(id)?))).collect();
    let mut merges: Vec<[u32; 4]> =
        tables.merges.iter().filter_map(|&[l, r, rank, res]| Some([new(l)?, new(r)?, rank, new(res)?])).collect();
    let mut ranks: Vec<u32> = merges.iter().map(|m| m[2]).collect();
    ranks.sort_unstable();
    ranks.dedup();
    for m in &mut merges {
        m[2] = ranks.binary_search(&m[2]).unwrap_or(0) as u32;
    }
    merges.sort_by_key(|&[l, r, rank, _]| (rank, l, r));
    out.merges = merges;
    for (what, before, after) in [("unk", tables.unk_id, out.unk_id), ("bos", tables.bos_id, out.bos_id), ("eos", tables.eos_id, out.eos_id)] {
        ensure!(before.is_some() == after.is_some(), "internal error: the {what} piece {before:?} was not kept");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sp_model::{model_type, piece_type, NormalizerSpec, SpModel, SpPiece, TrainerSpec};
    use crate::sp_pack::TokenizerConfig;

    /// <unk> <s> </s>, the 256 bytes, then `pieces` (name, score): equal scores give equal ranks.
    fn model(pieces: &[(&str, f32)], byte_fallback: bool) -> SpModel {
        let mut m = SpModel {
            trainer: TrainerSpec { model_type: model_type::BPE, byte_fallback, ..Default::default() },
            normalizer: NormalizerSpec { name: "identity".into(), remove_extra_whitespaces: false, ..Default::default() },
            ..Default::default()
        };
        let piece = |piece: &str, score: f32, kind: i32| SpPiece { piece: piece.into(), score, kind };
        m.pieces.push(piece("<unk>", 0.0, piece_type::UNKNOWN));
        m.pieces.push(piece("<s>", 0.0, piece_type::CONTROL));
        m.pieces.push(piece("</s>", 0.0, piece_type::CONTROL));
        if byte_fallback {
            for b in 0..=255u8 {
                m.pieces.push(piece(&format!("<0x{b:02X}>"), 0.0, piece_type::BYTE));
            }
        }
        for &(name, score) in pieces {
            m.pieces.push(piece(name, score, piece_type::NORMAL));
        }
        m
    }

    /// A toy over a, b, c with ties: `abc` from `ab`+`c` and from `a`+`bc`; `ca` and `bc` of
    /// equal score (equal rank, different merges); `aa`, `aaa`; words with `▁`.
    fn toy(byte_fallback: bool) -> SpTables {
        let pieces = [
            ("▁", -20.0),
            ("a", -21.0),
            ("b", -22.0),
            ("c", -23.0),
            ("bc", -1.0),
            ("ca", -1.0),
            ("ab", -2.0),
            ("abc", -3.0),
            ("aa", -4.0),
            ("aaa", -5.0),
            ("▁a", -6.0),
            ("▁ab", -7.0),
            ("cab", -8.0),
            ("▁c", -9.0),
        ];
        SpTables::from_model(&model(&pieces, byte_fallback), &TokenizerConfig::default()).unwrap()
    }

    fn encode(tok: &Tokenizer<'_>, text: &str) -> Vec<u32> {
        let mut out = vec![0; tok.max_encoded_len(text.len())];
        let n = tok.encode(text, &mut out).unwrap();
        out.truncate(n);
        out
    }

    fn decode(tok: &Tokenizer<'_>, ids: &[u32]) -> Vec<u8> {
        ids.iter().flat_map(|&id| tok.token_bytes(id).unwrap().iter().copied()).collect()
    }

    fn words(max: usize, alphabet: &[&str]) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..max {
            last = last.iter().flat_map(|w| alphabet.iter().map(move |c| format!("{w}{c}"))).collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    /// Claims (a) and (b) exhaustively on the toy: for every keep text of up to 3 symbols and
    /// every text of up to 6 over {a, b, c, space}, with and without byte fallback.
    #[test]
    fn toy_claims_hold_for_every_short_text() {
        for byte_fallback in [true, false] {
            let tables = toy(byte_fallback);
            let section = tables.section().unwrap();
            let full = Tokenizer::from_bytes(&section).unwrap();
            let (keeps, texts) = (words(3, &["a", "b", "c", " "]), words(6, &["a", "b", "c", " "]));
            let (mut same, mut other) = (0, 0);
            for keep_text in &keeps {
                let keep = KeepVocab { text: keep_text.clone(), origin: "toy".into(), most_frequent: None };
                let ks = keep_set(&tables, &full, &keep, &[], tables.vocab_size() as u32).unwrap();
                let pruned_tables = prune_tables(&tables, &ks).unwrap();
                let pruned_section = pruned_tables.section().unwrap();
                let pruned = Tokenizer::from_bytes(&pruned_section).unwrap();
                for text in &texts {
                    let f = encode(&full, text);
                    let p = encode(&pruned, text);
                    // (b): the same text back (both decode to the normalized text)
                    assert_eq!(decode(&pruned, &p), decode(&full, &f), "keep {keep_text:?}, text {text:?}");
                    if f.iter().all(|&id| ks.new_id(id).is_some()) {
                        let mapped: Vec<u32> = p.iter().map(|&id| ks.kept[id as usize]).collect();
                        assert_eq!(mapped, f, "(a) keep {keep_text:?}, text {text:?}");
                        same += 1;
                    } else {
                        other += 1;
                    }
                }
            }
            assert!(same > 1000 && other > 1000, "{same} covered, {other} not");
        }
    }

    #[test]
    fn bytes_specials_and_closure_are_kept() {
        let tables = toy(true);
        let section = tables.section().unwrap();
        let full = Tokenizer::from_bytes(&section).unwrap();
        let keep = KeepVocab { text: "abc".into(), origin: "toy".into(), most_frequent: None };
        let ks = keep_set(&tables, &full, &keep, &[1, 2], tables.vocab_size() as u32).unwrap();
        let name = |id: u32| tables.names[id as usize].as_str();
        let kept: Vec<&str> = ks.kept.iter().map(|&id| name(id)).filter(|n| !n.starts_with("<0x")).collect();
        // "abc" encodes as ▁ abc: bc ranks first, then a+bc (▁a ranks below both)
        assert_eq!(kept, ["<unk>", "<s>", "</s>", "▁", "a", "b", "c", "bc", "abc"]);
        assert_eq!(ks.specials, [0, 1, 2]);
        assert_eq!(ks.kept.len(), 3 + 256 + 6);
        let pruned = prune_tables(&tables, &ks).unwrap();
        assert_eq!(pruned.merges.len(), 2, "{:?}", pruned.merges); // b+c, a+bc (ab is gone)
        assert_eq!(pruned.merges.iter().map(|m| m[2]).collect::<Vec<_>>(), [0, 1]);
        // bos/eos outside the model's vocabulary: one line with the numbers
        let e = keep_set(&tables, &full, &keep, &[1, 9999], tables.vocab_size() as u32).unwrap_err().to_string();
        assert_eq!(e, format!("special token id 9999 is outside the model's vocabulary ({} tokens)", tables.vocab_size()));
        let e = keep_set(&tables, &full, &keep, &[], 100).unwrap_err().to_string();
        assert!(e.contains("is outside the model's vocabulary (100 tokens)"), "{e}");
    }
}
