//! Vocabulary pruning (`host-tools convert … --keep-vocab FILE [--vocab-size N]`): keep the
//! tokens a text needs, drop every other row of `wte` (and of an untied `lm_head`), and cut the
//! tokenizer down to the kept tokens and the merges among them. A TinyStories-1M's 50257 × 64
//! embedding is 3.2M of its 3.7M parameters; stories use a few thousand tokens. SentencePiece
//! vocabularies (Llama) are pruned the same way by [`crate::sp_prune`], which shares
//! [`bpe_run`] and [`Selection`] with this module.
//!
//! # What is kept
//!
//! K = S ∪ B ∪ X ∪ closure(S ∪ B ∪ X), where
//! - S: the tokens of FILE's encoding by the full tokenizer (the runtime's own encoder on the
//!   checkpoint's full tables), or with `--vocab-size N` only the N most frequent of them (equal
//!   counts: the lower source id first). N counts S alone: bytes, specials and the closure come
//!   on top, and `convert` prints the total;
//! - B: the 256 byte tokens, so that any text still encodes (and round-trips byte-exact: every
//!   kept merge's result is its parts' bytes, which the runtime checks when it loads a table);
//! - X: the special tokens: `bos_token_id`, `eos_token_id` and the tokenizer's added tokens;
//! - closure(t): every token that appears while BPE runs on the bytes of t alone (as one piece,
//!   no pre-tokenisation): the 256-byte start, every merge result, and t's final tokens.
//!
//! Kept tokens get dense new ids in source-id order (so the byte tokens, GPT-2's 0‥255, keep
//! their ids when they come first); the blob's source-vocabulary section records each new id's
//! source id. The pruned merge table is every merge whose two parts and result are all kept,
//! with ranks renumbered in their original order (only the order of ranks matters to BPE).
//!
//! # Why text made of kept tokens encodes to the same tokens (claim (a))
//!
//! Take a text whose full-vocabulary encoding uses only kept tokens. Pre-tokenisation does not
//! look at the vocabulary, so it cuts the text into the same pieces either way; take one piece
//! P, which the full table M encodes as final tokens t_1 … t_n, all kept. BPE only ever joins
//! two adjacent tokens, so every token that appears during the run covers a contiguous span of
//! P that lies inside exactly one final token's span: no merge is ever applied across the
//! boundary between two final tokens.
//!
//! 1. *The merges inside one final token are the isolated run on its bytes.* Fix t_j and let S
//!    be the tokens covering its span at some moment of the full run; only the full run's
//!    merges inside that span change S. When the full run applies one of them, that pair has
//!    the lowest rank among all adjacent pairs of P, and among pairs of that rank it is the
//!    leftmost. S's adjacent pairs are some of P's and include it, so it also has the lowest
//!    rank among S's pairs and is the leftmost of that rank in S (two pairs of equal rank are
//!    the same merge, the same two tokens, at different places, as in "aaa": leftmost is the
//!    only tie-break, and it survives restriction to a span). That is exactly the pair BPE
//!    applies when it runs on S alone. Starting from S = the bytes of t_j, by induction the
//!    isolated run on t_j's bytes performs the full run's merges inside t_j's span in the same
//!    order; it does not stop earlier (while |S| > 1 the full run has another merge inside S,
//!    so S has a mergeable pair) nor later (it ends at [t_j], which has no pair). So every
//!    token the full run produces inside t_j, and both parts of every merge it applies there,
//!    are in closure(t_j) ⊆ K: every merge the full run applies is in the pruned table M'.
//! 2. *The pruned run makes the same choices.* M' ⊆ M, with the ranks in the same order.
//!    Suppose both runs are in the same state before a step. The full run's choice (lowest
//!    rank, leftmost) is in M' by 1; every pair with a merge in M' has that merge in M, so none
//!    ranks below the choice, and among equal ranks the same leftmost position wins. When the
//!    full run stops (no pair has a merge in M) no pair has one in M' either. So the two runs
//!    are identical step by step, and the pruned encoding is the full one with each id mapped
//!    to its new id.
//!
//! Remarks that the argument relies on or that one might worry about:
//! - A token can be the result of several merges (`a`+`bc` and `ab`+`c`). Only the one the
//!   isolated run uses must be kept; another stays in M' exactly when its parts are kept too,
//!   and any subset of M that contains the applied merges gives the same run (step 2).
//! - Some tokens are never produced by BPE from their own bytes (their bytes encode as other
//!   tokens: GPT-2's `<|endoftext|>`, and ordinary tokens that a lower-ranked merge always
//!   pre-empts). By step 1 such a token is never a final token of any encoding, so it can only
//!   be kept as a special; its closure is added anyway (a handful of tokens) so that the
//!   definition has no exception. Each token of S comes from an encoding, so by step 1 its
//!   isolated run ends at itself; [`keep_set`] checks that and stops with an internal error
//!   otherwise.
//! - Text whose full encoding needs a dropped token still encodes (through shorter kept
//!   tokens, at worst its bytes) and decodes to the same bytes (claim (b)), but to other tokens
//!   than the full model would see.
//!
//! # Why the logits at kept tokens do not change (claim (c))
//!
//! Every step before the head reads the `wte` rows of the input tokens (the same rows in both
//! blobs) and weights that pruning does not touch; the head's logit for a token is one dot
//! product of the final hidden state with that token's row, computed on its own (one summation
//! order per output whatever the row count or thread split: the kernels' rule). q8/q4 quantize
//! each row's groups independently, so a kept row quantizes to the same bytes. The logits at
//! kept tokens are therefore the full model's bit for bit, and softmax over them is the full
//! distribution renormalised over the kept set. `tests/tests/pruning.rs` tests all three claims.

use std::collections::{BTreeSet, HashMap};

use anyhow::{bail, ensure, Context, Result};
use runtime::tokenizer::Tokenizer;

use crate::tokenizer_pack::BpeTables;

/// `--keep-vocab FILE [--vocab-size N]`.
#[derive(Debug, Clone)]
pub struct KeepVocab {
    /// FILE's text.
    pub text: String,
    /// Where it came from (for messages), e.g. the file name.
    pub origin: String,
    /// `--vocab-size N`: keep only the N most frequent tokens of the text's encoding (plus
    /// bytes, specials and closure). None: every token of the encoding.
    pub most_frequent: Option<usize>,
}

/// The kept vocabulary and how it came about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeepSet {
    /// Source ids of the kept tokens, strictly increasing; a token's new id is its index here.
    pub kept: Vec<u32>,
    /// Tokens in the text's encoding by the full tokenizer.
    pub text_tokens: usize,
    /// Distinct tokens in that encoding.
    pub distinct: usize,
    /// Of those, the ones selected (all, or the N most frequent).
    pub selected: usize,
    /// Tokens of the text's encoding that are kept (all of them without `--vocab-size`).
    pub covered_tokens: usize,
    /// The special tokens kept (bos, eos, added tokens), source ids.
    pub specials: Vec<u32>,
    /// Tokens kept only because the closure needs them (not selected, not bytes or specials).
    pub closure_only: usize,
}

impl KeepSet {
    /// The new id of source token `src`, if kept.
    pub fn new_id(&self, src: u32) -> Option<u32> {
        self.kept.binary_search(&src).ok().map(|i| i as u32)
    }
}

/// The full table's merges by pair: (left, right) -> (rank, result).
pub type MergeMap = HashMap<(u32, u32), (u32, u32)>;

/// `merges` by pair.
pub fn merge_map(tables: &BpeTables) -> MergeMap {
    tables.merges.iter().map(|&[l, r, rank, res]| ((l, r), (rank, res))).collect()
}

/// BPE on `bytes` as one piece, as the runtime's encoder runs it on a piece (lowest rank first,
/// leftmost on ties), recording every token that appears: returns (tokens seen, final tokens).
pub fn isolated_run(tables: &BpeTables, merges: &MergeMap, bytes: &[u8]) -> (BTreeSet<u32>, Vec<u32>) {
    bpe_run(bytes.iter().map(|&b| tables.byte_to_id[b as usize]).collect(), merges)
}

/// BPE from the symbols `state` with `merges` (lowest rank first, leftmost on ties), as both of
/// the runtime's encoders run it on a piece or segment, recording every token that appears:
/// returns (tokens seen, final tokens).
pub fn bpe_run(mut state: Vec<u32>, merges: &MergeMap) -> (BTreeSet<u32>, Vec<u32>) {
    let mut seen: BTreeSet<u32> = state.iter().copied().collect();
    loop {
        // (rank, position, result) of the lowest-rank pair, the leftmost on ties
        let mut best: Option<(u32, usize, u32)> = None;
        for (i, pair) in state.windows(2).enumerate() {
            if let Some(&(rank, result)) = merges.get(&(pair[0], pair[1])) {
                if best.is_none_or(|(r, _, _)| rank < r) {
                    best = Some((rank, i, result));
                }
            }
        }
        let Some((_, i, result)) = best else { break };
        state[i] = result;
        state.remove(i + 1);
        seen.insert(result);
    }
    (seen, state)
}

/// Step 1 of [`keep_set`] (shared with [`crate::sp_prune`]): the text's encoding by the full
/// tokenizer, how often each token occurs, and the selected tokens (all, or the N most frequent:
/// equal counts, the lower id first).
pub struct Selection {
    /// The encoding.
    pub ids: Vec<u32>,
    /// Occurrences of each token of it.
    pub counts: HashMap<u32, usize>,
    /// The selected tokens, most frequent first.
    pub selected: Vec<u32>,
}

impl Selection {
    /// Encodes `keep.text` with `full` and selects.
    pub fn new(full: &Tokenizer<'_>, keep: &KeepVocab) -> Result<Self> {
        let mut ids = vec![0u32; full.max_encoded_len(keep.text.len()).max(1)];
        let n = full.encode(&keep.text, &mut ids).map_err(|e| anyhow::anyhow!("encoding {}: {e}", keep.origin))?;
        ids.truncate(n);
        let mut counts: HashMap<u32, usize> = HashMap::new();
        for &id in &ids {
            *counts.entry(id).or_default() += 1;
        }
        let mut by_count: Vec<(u32, usize)> = counts.iter().map(|(&id, &c)| (id, c)).collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let selected: Vec<u32> = match keep.most_frequent {
            Some(n) => by_count.iter().take(n).map(|&(id, _)| id).collect(),
            None => by_count.iter().map(|&(id, _)| id).collect(),
        };
        Ok(Self { ids, counts, selected })
    }

    /// The [`KeepSet`] of `kept` (closure included), `roots` the tokens kept before the closure.
    pub fn keep_set(&self, kept: BTreeSet<u32>, roots: &BTreeSet<u32>, specials: Vec<u32>) -> KeepSet {
        let selected_set: BTreeSet<u32> = self.selected.iter().copied().collect();
        KeepSet {
            closure_only: kept.difference(roots).count(),
            kept: kept.into_iter().collect(),
            text_tokens: self.ids.len(),
            distinct: self.counts.len(),
            selected: self.selected.len(),
            covered_tokens: self.ids.iter().filter(|id| selected_set.contains(id)).count(),
            specials,
        }
    }
}

/// Computes the kept vocabulary: the tokens of `keep.text` encoded by the full tokenizer
/// (`full`, packed from `tables`), or the most frequent of them, plus the 256 byte tokens, the
/// `specials`, and the closure (see the [module docs](self)). `model_vocab` is the model's
/// vocabulary size (at least the tokenizer's).
pub fn keep_set(tables: &BpeTables, full: &Tokenizer<'_>, keep: &KeepVocab, specials: &[u32], model_vocab: u32) -> Result<KeepSet> {
    ensure!(
        full.vocab_size() == tables.tokens.len(),
        "internal error: the packed tokenizer has {} tokens, its tables {}",
        full.vocab_size(),
        tables.tokens.len()
    );
    // 1. The text's encoding by the full tokenizer, and how often each token occurs.
    let sel = Selection::new(full, keep)?;
    let (counts, selected) = (&sel.counts, &sel.selected);

    // 2. Bytes and specials.
    let mut specials: Vec<u32> = specials.iter().chain(&tables.added).copied().collect();
    specials.sort_unstable();
    specials.dedup();
    if let Some(&bad) = specials.iter().find(|&&id| id >= model_vocab) {
        bail!("special token id {bad} is outside the model's vocabulary ({model_vocab} tokens)");
    }
    let mut roots: BTreeSet<u32> = selected.iter().copied().collect();
    roots.extend(tables.byte_to_id.iter().copied());
    roots.extend(specials.iter().copied());

    // 3. The closure: every token of BPE's run on each kept token's bytes alone.
    let merges = merge_map(tables);
    let mut kept = roots.clone();
    for &t in &roots {
        let Some(bytes) = tables.tokens.get(t as usize) else { continue };
        let (seen, fin) = isolated_run(tables, &merges, bytes);
        // Step 1 of the argument: a token that occurs in an encoding is its own isolated run's end.
        if counts.contains_key(&t) && fin != [t] {
            bail!("internal error: token {t} occurs in the encoding of {} but BPE on its bytes alone gives {fin:?}", keep.origin);
        }
        kept.extend(seen);
    }
    if let Some(&bad) = kept.iter().find(|&&id| id >= model_vocab) {
        bail!("the tokenizer's token {bad} is outside the model's vocabulary ({model_vocab} tokens)");
    }
    Ok(sel.keep_set(kept, &roots, specials))
}

/// The tables of the pruned tokenizer: the kept tokens under their new ids, the byte table
/// mapped, and the merges whose parts and result are all kept, ranks renumbered in order.
pub fn prune_tables(tables: &BpeTables, keep: &KeepSet) -> Result<BpeTables> {
    let new = |src: u32| keep.new_id(src);
    let tokens = keep.kept.iter().map(|&src| tables.tokens.get(src as usize).cloned().unwrap_or_default()).collect();
    let byte_to_id = tables
        .byte_to_id
        .iter()
        .map(|&src| new(src).with_context(|| format!("internal error: byte token {src} was not kept")))
        .collect::<Result<_>>()?;
    let mut merges = Vec::new();
    // tables.merges is in rank order: the kept ones keep that order, renumbered 0, 1, …
    for &[l, r, _, res] in &tables.merges {
        if let (Some(l), Some(r), Some(res)) = (new(l), new(r), new(res)) {
            merges.push([l, r, merges.len() as u32, res]);
        }
    }
    let added = tables.added.iter().filter_map(|&src| new(src)).collect();
    Ok(BpeTables { tokens, byte_to_id, merges, added, individual_digits: tables.individual_digits })
}

/// The rows of a row-major `[V, cols]` matrix for the kept tokens, in new-id order.
pub fn keep_rows(data: &[f32], cols: usize, keep: &KeepSet) -> Vec<f32> {
    keep.kept.iter().flat_map(|&src| &data[src as usize * cols..(src as usize + 1) * cols]).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer_pack::{bytes_to_unicode, pack, BpeFiles, MergeLine};

    /// A toy byte-level BPE over `a`, `b`, `c` where ties and two merges with one result occur:
    /// `bc`, `ab`, `abc` (from `ab`+`c`), `abc` again (from `a`+`bc`), `aa`, `aaa`, `ca`, `cab`.
    fn toy() -> BpeTables {
        let pairs = [("b", "c"), ("a", "b"), ("ab", "c"), ("a", "bc"), ("a", "a"), ("aa", "a"), ("c", "a"), ("ca", "b")];
        let mut vocab: HashMap<String, u32> = bytes_to_unicode().into_iter().map(String::from).zip(0..).collect();
        for (l, r) in pairs {
            let key = format!("{l}{r}");
            let next = vocab.len() as u32;
            vocab.entry(key).or_insert(next);
        }
        let merges = pairs.iter().enumerate().map(|(i, &(l, r))| MergeLine { left: l.into(), right: r.into(), origin: format!("merge {i}") }).collect();
        let files = BpeFiles { vocab: vocab.clone(), merges, added: Vec::new(), individual_digits: false };
        let t = BpeTables::from_files(&files).unwrap();
        // the same tables as the public packer makes
        let plain: Vec<(String, String)> = pairs.iter().map(|&(l, r)| (l.to_string(), r.to_string())).collect();
        assert_eq!(t.section().unwrap(), pack(&vocab, &plain).unwrap());
        t
    }

    fn encode(tok: &Tokenizer<'_>, text: &str) -> Vec<u32> {
        let mut out = vec![0; text.len().max(1)];
        let n = tok.encode(text, &mut out).unwrap();
        out.truncate(n);
        out
    }

    /// Claim (a) exhaustively on the toy table: for every keep text of up to 4 letters and every
    /// text of up to 7 letters over {a, b, c}, a text whose full encoding is kept encodes the
    /// same way with the pruned table; every text round-trips.
    #[test]
    fn toy_claims_hold_for_every_short_text() {
        let tables = toy();
        let section = tables.section().unwrap();
        let full = Tokenizer::from_bytes(&section).unwrap();
        let words = |max: usize| -> Vec<String> {
            let mut all = vec![String::new()];
            let mut last = vec![String::new()];
            for _ in 0..max {
                last = last.iter().flat_map(|w| ["a", "b", "c"].map(|c| format!("{w}{c}"))).collect();
                all.extend(last.iter().cloned());
            }
            all
        };
        let (keeps, texts) = (words(4), words(7));
        let (mut same, mut other) = (0, 0);
        for keep_text in &keeps {
            let keep = KeepVocab { text: keep_text.clone(), origin: "toy".into(), most_frequent: None };
            let ks = keep_set(&tables, &full, &keep, &[], tables.tokens.len() as u32).unwrap();
            let pruned_tables = prune_tables(&tables, &ks).unwrap();
            let pruned_section = pruned_tables.section().unwrap();
            let pruned = Tokenizer::from_bytes(&pruned_section).unwrap();
            for text in &texts {
                let f = encode(&full, text);
                let p = encode(&pruned, text);
                let mut bytes = vec![0; text.len()];
                let n = pruned.decode(&p, &mut bytes).unwrap();
                assert_eq!(&bytes[..n], text.as_bytes(), "round trip of {text:?} (keep {keep_text:?})");
                let mapped: Option<Vec<u32>> = f.iter().map(|&id| ks.new_id(id)).collect();
                if let Some(mapped) = mapped {
                    assert_eq!(p, mapped, "{text:?} with the vocabulary of {keep_text:?}");
                    same += 1;
                } else {
                    other += 1;
                }
            }
        }
        // both kinds of text occur (the check above is not vacuous)
        assert!(same > 10_000 && other > 10_000, "{same} covered, {other} not");
    }

    #[test]
    fn closure_follows_the_isolated_run() {
        let tables = toy();
        let id = |key: &str| tables.tokens.iter().position(|t| t == key.as_bytes()).unwrap() as u32;
        let merges = merge_map(&tables);
        // "abc": (b, c) ranks below (a, b), so the run goes a|bc, then a+bc; "ab" is not needed
        let (seen, fin) = isolated_run(&tables, &merges, b"abc");
        assert_eq!(fin, [id("abc")]);
        assert_eq!(seen, [id("a"), id("b"), id("c"), id("bc"), id("abc")].into_iter().collect());
        // "aaa": the leftmost (a, a) first
        let (seen, fin) = isolated_run(&tables, &merges, b"aaa");
        assert_eq!((seen.contains(&id("aa")), fin), (true, vec![id("aaa")]));
        // "cab": c+a first (rank 6) would need "ca", but (a, b) ranks lower: c|ab, and no merge
        // joins them, so BPE never produces "cab" from its own bytes
        let (_, fin) = isolated_run(&tables, &merges, b"cab");
        assert_eq!(fin, [id("c"), id("ab")]);
        let full_section = tables.section().unwrap();
        let full = Tokenizer::from_bytes(&full_section).unwrap();
        let keep = KeepVocab { text: "abc".into(), origin: "toy".into(), most_frequent: None };
        let ks = keep_set(&tables, &full, &keep, &[id("cab")], tables.tokens.len() as u32).unwrap();
        // kept: 256 bytes, bc, abc (selected), cab (special) and its closure ab
        assert_eq!(ks.kept.len(), 256 + 4);
        assert_eq!((ks.selected, ks.closure_only, ks.specials.clone()), (1, 2, vec![id("cab")]));
        let pruned = prune_tables(&tables, &ks).unwrap();
        // merges among kept tokens: b+c, a+b, ab+c, a+bc (ca is dropped, and so is ca+b)
        assert_eq!(pruned.merges.len(), 4);
        assert_eq!(pruned.merges.iter().map(|m| m[2]).collect::<Vec<_>>(), [0, 1, 2, 3]);
    }

    #[test]
    fn vocab_size_keeps_the_most_frequent() {
        let tables = toy();
        let section = tables.section().unwrap();
        let full = Tokenizer::from_bytes(&section).unwrap();
        let id = |key: &str| tables.tokens.iter().position(|t| t == key.as_bytes()).unwrap() as u32;
        // "aaa" ×3, "bc" ×2, "abc" ×1 (words separated by spaces: one piece each)
        // pieces "aaa", " bc", " aaa", " abc", …: " " ×5, "aaa" ×3, "bc" ×2, "abc" ×1 (the toy has
        // no merge with a space)
        let keep = KeepVocab { text: "aaa bc aaa abc aaa bc".into(), origin: "toy".into(), most_frequent: Some(2) };
        let ks = keep_set(&tables, &full, &keep, &[], tables.tokens.len() as u32).unwrap();
        assert!(ks.new_id(id("aaa")).is_some() && ks.new_id(id("aa")).is_some());
        assert!(ks.new_id(id("abc")).is_none() && ks.new_id(id("bc")).is_none());
        assert_eq!((ks.text_tokens, ks.distinct, ks.selected, ks.covered_tokens), (11, 4, 2, 8));
        assert_eq!((ks.kept.len(), ks.closure_only), (256 + 2, 1));
    }
}
