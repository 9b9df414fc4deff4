//! The merge table both BPE tokenizers share, and the merge loop that runs on it.
//!
//! A table is `M` entries of four ids of width `W` (2 or 4 bytes), `(left, right, rank, result)`,
//! sorted by `(left, right)` with no duplicates, so a pair is found by binary search. The loop
//! repeatedly replaces the adjacent pair with the lowest rank (the leftmost on ties) by its
//! result until no adjacent pair is in the table: GPT-2's `bpe`, tiktoken's `byte_pair_merge`,
//! sentencepiece's `bpe_model.cc` (whose scores become ranks) and Hugging Face's BPE `merge_all`
//! all do this.
//!
//! The tokenizers check the table when they validate their section (ids in range, sort order,
//! result bytes); this module only reads it.

use super::read_u32;

/// [`MergeTable::merge_tagged`] stores 1 + a merge index in 16 bits, so it serves tables with at
/// most this many merges.
pub(super) const MAX_TAGGED_MERGES: u32 = 0xFFFF;

/// One entry of the merge table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Merge {
    pub left: u32,
    pub right: u32,
    pub rank: u32,
    pub result: u32,
}

/// A borrowed merge table (see the [module docs](self)).
#[derive(Debug, Clone, Copy)]
pub(super) struct MergeTable<'a> {
    /// `merges`: (M, 4) ids of width `W`, sorted by (left, right).
    merges: &'a [u8],
    /// `M`.
    n_merges: u32,
    /// `W`: 2 or 4.
    id_bytes: usize,
    /// Whether the symbols being merged fit in 16 bits and the table has at most
    /// [`MAX_TAGGED_MERGES`] entries, so [`merge_tagged`](Self::merge_tagged) can run.
    tagged: bool,
}

/// Removes slot `i` from the live slots `tokens[..len]`, moving the later ones down by one.
fn remove_slot(tokens: &mut [u32], i: usize, len: usize) {
    if let Some(tail) = tokens.get_mut(i..len) {
        if !tail.is_empty() {
            tail.copy_within(1.., 0);
        }
    }
}

impl<'a> MergeTable<'a> {
    /// A view of `merges` (`n_merges` entries of width `id_bytes`). `max_symbol` is the largest
    /// value a slot can hold while merging (an id, or a tokenizer's own marker above the ids).
    pub fn new(merges: &'a [u8], n_merges: u32, id_bytes: usize, max_symbol: u32) -> Self {
        let tagged = id_bytes == 2 && n_merges <= MAX_TAGGED_MERGES && max_symbol <= 0xFFFF;
        Self { merges, n_merges, id_bytes, tagged }
    }

    /// `M`.
    pub fn len(&self) -> u32 {
        self.n_merges
    }

    /// Byte-pair merging of one run of symbols, in place: the merged ids end up in the first `k`
    /// slots of `tokens`; returns `k`.
    ///
    /// Find the adjacent pair with the lowest rank, the leftmost on ties; replace it by its merge
    /// result; repeat until no adjacent pair has a merge. Two implementations give the same
    /// result: [`merge_ref`](Self::merge_ref) is that sentence as code and serves any table;
    /// [`merge_tagged`](Self::merge_tagged) remembers each pair's merge so a step looks up only
    /// the two new pairs, and needs 16-bit symbols.
    pub fn merge(&self, tokens: &mut [u32]) -> usize {
        // `id_bytes == 2` is implied by `tagged`; spelled out, it lets the compiler drop the
        // 4-byte reads from the tagged loop (GPT-2's encoding is 12% slower without it).
        if self.tagged && self.id_bytes == 2 {
            self.merge_tagged(tokens)
        } else {
            self.merge_ref(tokens)
        }
    }

    /// The naive merge loop: every step looks up every adjacent pair (O(n^2) look-ups for a run
    /// of n symbols).
    pub fn merge_ref(&self, tokens: &mut [u32]) -> usize {
        let mut len = tokens.len();
        loop {
            // The best merge among all adjacent pairs: (rank, position, result).
            let mut best: Option<(u32, usize, u32)> = None;
            let live = tokens.get(..len).unwrap_or(&[]);
            for (i, pair) in live.windows(2).enumerate() {
                let (Some(&left), Some(&right)) = (pair.first(), pair.get(1)) else { continue };
                if let Some(merge) = self.find(left, right).and_then(|k| self.at(k)) {
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

    /// The same merge loop for 16-bit symbols, with each pair's merge remembered in its slot:
    /// while merging, a slot holds `symbol | tag << 16`, where `tag` is 1 + the merge-table index
    /// of the pair (this symbol, next symbol), or 0 if that pair has no merge. After a merge only
    /// the pairs on either side of the new token change, so a step costs two look-ups and a scan
    /// of the tags instead of a look-up per pair.
    pub fn merge_tagged(&self, tokens: &mut [u32]) -> usize {
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
                if let Some(merge) = self.at(tag as usize - 1) {
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

    /// Sets the tag of slot `i` (see [`merge_tagged`](Self::merge_tagged)) from the pair
    /// (slot i, slot i + 1); the last live slot gets tag 0.
    // `inline(always)` on `retag`, `find`, `at` and `read_id`: with the table shared by both
    // tokenizers (more callers), the compiler stopped inlining them into the merge loop, and
    // GPT-2's encoding of models/default/val.txt took 20.3 ms instead of 18.2 ms.
    #[inline(always)]
    fn retag(&self, tokens: &mut [u32], i: usize, len: usize) {
        let left = tokens.get(i).map_or(0, |&slot| slot & 0xFFFF);
        let next = if i + 1 < len { tokens.get(i + 1) } else { None };
        let tag = next.and_then(|&slot| self.find(left, slot & 0xFFFF)).map_or(0, |k| k as u32 + 1);
        if let Some(slot) = tokens.get_mut(i) {
            *slot = left | tag << 16;
        }
    }

    /// Binary search for the pair `(left, right)`; returns its index in the table.
    #[inline(always)]
    pub fn find(&self, left: u32, right: u32) -> Option<usize> {
        // Compare (left, right) as one integer: left in the high half, right in the low half.
        let w = self.id_bytes;
        let key = (u64::from(left) << (8 * w)) | u64::from(right);
        let entry_bytes = MERGE_FIELDS * w;
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

    /// Entry `i` (`None` past the end).
    #[inline(always)]
    pub fn at(&self, i: usize) -> Option<Merge> {
        let base = MERGE_FIELDS * i;
        let id = |field: usize| {
            let index = base + field;
            if index * self.id_bytes + self.id_bytes > self.merges.len() {
                None
            } else {
                Some(read_id(self.merges, self.id_bytes, index))
            }
        };
        Some(Merge { left: id(0)?, right: id(1)?, rank: id(2)?, result: id(3)? })
    }
}

/// Ids and ranks per merge entry: left, right, rank, result.
pub(super) const MERGE_FIELDS: usize = 4;

/// Id number `index` of a table of `id_bytes`-wide ids (`u32::MAX` past the end, which no check
/// accepts as an id).
#[inline(always)]
pub(super) fn read_id(table: &[u8], id_bytes: usize, index: usize) -> u32 {
    let offset = index * id_bytes;
    let id = if id_bytes == 2 { super::read_u16(table, offset).map(u32::from) } else { read_u32(table, offset) };
    id.unwrap_or(u32::MAX)
}

impl MergeTable<'_> {
    /// The checks both section readers make on their merge table, which starts at byte
    /// `merges_at` of the section: every entry readable, strictly sorted by (left, right), rank
    /// `< M`, and the result's bytes (`bytes_of`) the left token's followed by the right one's
    /// (an id without bytes, e.g. `>= vocab_size`, fails). `each` adds the caller's own checks.
    /// Errors point at the entry, its rank or its result.
    /// (Trait objects, not generics: one copy of this code serves both readers.)
    pub fn validate<'b>(
        &self,
        merges_at: usize,
        bytes_of: &dyn Fn(u32) -> Option<&'b [u8]>,
        each: &mut dyn FnMut(&Merge, usize) -> Result<(), crate::Error>,
    ) -> Result<(), crate::Error> {
        use super::bad;
        let mut prev_key = None;
        for i in 0..self.n_merges as usize {
            let offset = merges_at + MERGE_FIELDS * self.id_bytes * i;
            let merge = self.at(i).ok_or(bad(offset))?;
            if merge.rank >= self.n_merges {
                return Err(bad(offset + 2 * self.id_bytes));
            }
            let key = (merge.left, merge.right);
            if prev_key.is_some_and(|p| p >= key) {
                return Err(bad(offset));
            }
            prev_key = Some(key);
            let (Some(l), Some(r), Some(res)) = (bytes_of(merge.left), bytes_of(merge.right), bytes_of(merge.result))
            else {
                return Err(bad(offset));
            };
            if res.len() != l.len() + r.len() || !res.starts_with(l) || !res.ends_with(r) {
                return Err(bad(offset + 3 * self.id_bytes));
            }
            each(&merge, offset)?;
        }
        Ok(())
    }
}
