//! `host-tools accuracy`: how much each weight dtype and KV-cache dtype costs, measured against
//! the f32 blob of the same checkpoint on held-out text — perplexity, top-1 agreement, KL
//! divergence and max logit error — as a Markdown table.

use std::fmt::Write;
use std::path::Path;

use anyhow::{Context, Result};
use runtime::{KvDType, Session, SessionSizes};

use crate::blob_file::BlobFile;
use crate::convert::{convert, ConvertOptions, WeightDType};

/// One configuration's figures.
#[derive(Debug, Clone)]
pub struct Row {
    /// Weight dtype name.
    pub weights: String,
    /// KV dtype name.
    pub kv: String,
    /// Blob size in bytes.
    pub blob_bytes: usize,
    /// Mean NLL (nats/token).
    pub nll: f64,
    /// Fraction of positions whose argmax equals f32's.
    pub top1: f64,
    /// The same over the positions where f32 is decided: its top logit leads the runner-up by
    /// at least [`DECIDED_MARGIN`].
    pub top1_decided: f64,
    /// Fraction of positions where f32 is decided.
    pub decided: f64,
    /// Mean KL(p_f32 ‖ p_this), nats.
    pub kl: f64,
    /// Max |logit − f32 logit|.
    pub max_err: f32,
}

/// Logits at every scored position (sliding window, stride window/2, as `host perplexity`).
fn scored_logits(blob: &BlobFile, ids: &[u32], window: usize, kv: KvDType) -> Result<(Vec<Vec<f32>>, Vec<u32>)> {
    let model = blob.model()?;
    let sizes = SessionSizes::with_kv(model.config(), window, window.min(64), kv);
    let (mut arena, mut kvb) = (vec![0.0f32; sizes.arena_len], vec![0.0f32; sizes.kv_len]);
    let mut s = Session::with_kv_dtype(&model, &mut arena, &mut kvb, window, kv)?;
    let (n, stride) = (ids.len(), window / 2);
    let (mut rows, mut targets) = (Vec::new(), Vec::new());
    let (mut begin, mut prev_end) = (0, 0);
    while begin < n {
        let end = (begin + window).min(n);
        let first = prev_end.max(1);
        s.reset();
        s.prefill_where(&ids[begin..end], |i| (first..end).contains(&(begin + i + 1)), |i, l| {
            let t = begin + i + 1;
            if t >= first && t < end {
                rows.push(l.to_vec());
                targets.push(ids[t]);
            }
        })?;
        prev_end = end;
        if end == n {
            break;
        }
        begin += stride;
    }
    Ok((rows, targets))
}

fn log_softmax(l: &[f32]) -> Vec<f64> {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max + l.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
    l.iter().map(|&v| v as f64 - lse).collect()
}

/// Logits by which f32's top token must lead its runner-up for a position to count as decided
/// (e^0.1 ≈ 1.105: closer than that, the float model itself is at a near-tie, and which of the two
/// wins turns on the last bits of any rounding, quantization's included).
pub const DECIDED_MARGIN: f32 = 0.1;

/// Top logit minus the runner-up's (0 for fewer than two logits).
pub fn top_margin(l: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in l {
        if v > a {
            (a, b) = (v, a);
        } else if v > b {
            b = v;
        }
    }
    if b.is_finite() { a - b } else { 0.0 }
}

/// Index of the largest logit (the first of equals).
pub fn argmax(l: &[f32]) -> usize {
    (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b })
}

/// Measures every configuration on the first `max_tokens` tokens of `text`.
pub fn measure(hf_dir: &Path, text: &str, window: Option<usize>, max_tokens: usize, group: usize) -> Result<(Vec<Row>, usize, usize)> {
    let base_conv = convert(hf_dir, &ConvertOptions { group, ..ConvertOptions::default() })?;
    let base = BlobFile::from_bytes(&base_conv.blob);
    let model = base.model()?;
    let tok = model.tokenizer().context("the checkpoint has no tokenizer (vocab.json + merges.txt, tokenizer.json or tokenizer.model) to encode the text")?;
    let mut ids = encode(tok, text)?;
    ids.truncate(max_tokens);
    let window = window.unwrap_or(model.config().n_ctx()).min(model.config().n_ctx());
    let (ref_rows, targets) = scored_logits(&base, &ids, window, KvDType::F32)?;
    let ref_lsm: Vec<Vec<f64>> = ref_rows.iter().map(|l| log_softmax(l)).collect();
    // f32's top token at each position, and whether it is decided: the same for every config
    let ref_top: Vec<(usize, bool)> = ref_rows.iter().map(|r| (argmax(r), top_margin(r) >= DECIDED_MARGIN)).collect();
    let decided = ref_top.iter().filter(|&&(_, d)| d).count();

    let configs: [(WeightDType, KvDType); 8] = [
        (WeightDType::F32, KvDType::F32),
        (WeightDType::F16, KvDType::F32),
        (WeightDType::Q8, KvDType::F32),
        (WeightDType::Q4, KvDType::F32),
        (WeightDType::F32, KvDType::F16),
        (WeightDType::F32, KvDType::I8),
        (WeightDType::Q8, KvDType::I8),
        (WeightDType::Q4, KvDType::I8),
    ];
    let mut out = Vec::new();
    for (wd, kv) in configs {
        let conv = convert(hf_dir, &ConvertOptions { dtype: wd, group, ..ConvertOptions::default() })?;
        let blob = BlobFile::from_bytes(&conv.blob);
        let (rows, _) = scored_logits(&blob, &ids, window, kv)?;
        let (mut nll, mut agree, mut kl, mut max_err) = (0.0f64, 0usize, 0.0f64, 0.0f32);
        let mut agree_decided = 0usize;
        for (((l, r), (rl, &t)), &(top, is_decided)) in rows.iter().zip(&ref_rows).zip(ref_lsm.iter().zip(&targets)).zip(&ref_top) {
            let lsm = log_softmax(l);
            nll -= lsm[t as usize];
            let same = argmax(l) == top;
            agree += usize::from(same);
            agree_decided += usize::from(same && is_decided);
            kl += rl.iter().zip(&lsm).map(|(&p, &q)| p.exp() * (p - q)).sum::<f64>();
            max_err = l.iter().zip(r).fold(max_err, |m, (a, b)| m.max((a - b).abs()));
        }
        let k = rows.len().max(1) as f64;
        out.push(Row {
            weights: format!("{wd:?}").to_lowercase(),
            kv: kv.name().to_string(),
            blob_bytes: conv.blob.len(),
            nll: nll / k,
            top1: agree as f64 / k,
            top1_decided: agree_decided as f64 / decided.max(1) as f64,
            decided: decided as f64 / k,
            kl: kl / k,
            max_err,
        });
    }
    Ok((out, targets.len(), window))
}

/// Renders the rows as a Markdown table (perplexity relative to the f32/f32 row).
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let base = rows.first().map_or(1.0, |r| r.nll.exp());
    let decided = rows.first().map_or(0.0, |r| r.decided);
    let _ = writeln!(
        s,
        "| weights | KV cache | blob bytes | perplexity | vs f32 | top-1 agreement | where f32 leads by ≥ {DECIDED_MARGIN} ({:.1}% of positions) | mean KL (nats) | max logit error |",
        decided * 100.0
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let ppl = r.nll.exp();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.4} | {:+.2}% | {:.2}% | {:.2}% | {:.2e} | {:.4} |",
            r.weights,
            r.kv,
            r.blob_bytes,
            ppl,
            (ppl / base - 1.0) * 100.0,
            r.top1 * 100.0,
            r.top1_decided * 100.0,
            r.kl,
            r.max_err
        );
    }
    s
}

/// One model of the pruning comparison.
#[derive(Debug, Clone)]
pub struct PruneRow {
    /// `full f32`, `pruned q8`, …
    pub model: String,
    /// Tokens in its vocabulary.
    pub vocab: usize,
    /// Blob size in bytes.
    pub blob_bytes: usize,
    /// Tokens of the text in its own encoding.
    pub tokens: usize,
    /// Whether its encoding of the text is the full model's (through the source ids): true for
    /// text made of kept tokens.
    pub same_encoding: bool,
    /// Sum of NLL over the scored tokens (every token but the first), nats.
    pub nll_sum: f64,
    /// Tokens scored.
    pub scored: usize,
    /// Bytes of the scored tokens.
    pub scored_bytes: usize,
}

/// Pruned (`--keep-vocab`, f32/q8/q4) against full (f32) on `text`: each model encodes the text
/// (the bytes of the full encoding's first `max_tokens` tokens) with its own tokenizer and is
/// scored with the sliding window of `host perplexity`. Per-token perplexities of different
/// encodings are not comparable; nats per byte are.
pub fn measure_pruning(hf_dir: &Path, text: &str, keep: &crate::prune::KeepVocab, window: Option<usize>, max_tokens: usize, group: usize) -> Result<Vec<PruneRow>> {
    let full_conv = convert(hf_dir, &ConvertOptions { group, ..ConvertOptions::default() })?;
    let full_file = BlobFile::from_bytes(&full_conv.blob);
    let full = full_file.model()?;
    let tok = full.tokenizer().context("the checkpoint has no tokenizer (vocab.json + merges.txt) to encode the text")?;
    let full_ids = encode(tok, text)?;
    let n_bytes: usize = full_ids.iter().take(max_tokens).map(|&id| tok.token_bytes(id).map_or(0, <[u8]>::len)).sum();
    let cut = (0..=n_bytes.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    let text = &text[..cut];
    let full_ids = encode(tok, text)?;
    let window = window.unwrap_or(full.config().n_ctx()).min(full.config().n_ctx());
    let mut rows = vec![score("full f32", &full, &full_ids, true, full_conv.blob.len(), window)?];
    for dtype in [WeightDType::F32, WeightDType::Q8, WeightDType::Q4] {
        let conv = convert(hf_dir, &ConvertOptions { dtype, group, keep_vocab: Some(keep.clone()), ..ConvertOptions::default() })?;
        let file = BlobFile::from_bytes(&conv.blob);
        let model = file.model()?;
        let ids = encode(model.tokenizer().context("the pruned blob has no tokenizer")?, text)?;
        let as_source: Vec<u32> = ids.iter().filter_map(|&id| model.source_id(id)).collect();
        let name = format!("pruned {}", format!("{dtype:?}").to_lowercase());
        rows.push(score(&name, &model, &ids, as_source == full_ids, conv.blob.len(), window)?);
    }
    Ok(rows)
}

/// The text's ids after the tokenizer's prompt prefix (BOS for a SentencePiece tokenizer with
/// add_bos_token), as `host perplexity` encodes a file.
fn encode(tok: &runtime::tokenizer::Tokenizer<'_>, text: &str) -> Result<Vec<u32>> {
    let mut ids = vec![0u32; tok.max_encoded_len(text.len()) + 1];
    let n = tok.encode_prompt(text, &mut ids)?;
    ids.truncate(n);
    Ok(ids)
}

fn score(name: &str, model: &runtime::Model<'_>, ids: &[u32], same_encoding: bool, blob_bytes: usize, window: usize) -> Result<PruneRow> {
    anyhow::ensure!(ids.len() >= 2, "the text has {} tokens; scoring needs at least 2", ids.len());
    let p = crate::eval::perplexity(model, ids, window.max(2), KvDType::F32)?;
    let tok = model.tokenizer().context("no tokenizer")?;
    let scored_bytes = ids.iter().skip(1).map(|&id| tok.token_bytes(id).map_or(0, <[u8]>::len)).sum();
    Ok(PruneRow {
        model: name.to_string(),
        vocab: model.config().vocab_size(),
        blob_bytes,
        tokens: ids.len(),
        same_encoding,
        nll_sum: p.nll_sum,
        scored: p.tokens,
        scored_bytes,
    })
}

/// Renders the pruning comparison as a Markdown table (nats per byte relative to the first row).
pub fn pruning_table(rows: &[PruneRow]) -> String {
    let mut s = String::new();
    let per_byte = |r: &PruneRow| r.nll_sum / r.scored_bytes.max(1) as f64;
    let base = rows.first().map_or(1.0, per_byte);
    let _ = writeln!(s, "| model | vocab | blob bytes | tokens of the text | same tokens as full | perplexity (per token) | nats/byte | vs full |");
    let _ = writeln!(s, "|---|---:|---:|---:|---|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.4} | {:.5} | {:+.2}% |",
            r.model,
            r.vocab,
            r.blob_bytes,
            r.tokens,
            if r.same_encoding { "yes" } else { "no" },
            (r.nll_sum / r.scored.max(1) as f64).exp(),
            per_byte(r),
            (per_byte(r) / base - 1.0) * 100.0
        );
    }
    s
}
