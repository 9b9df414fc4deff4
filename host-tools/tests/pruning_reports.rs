//! What `host-tools` says about vocabulary pruning: `convert --keep-vocab` (its summary line
//! and errors), `inspect` (the source vocabulary, the kept count, the bytes saved) and
//! `accuracy --keep-vocab` (pruned against full perplexity). The checkpoint: a random GPT-Neo
//! (2 layers, 16 wide, GPT-2's 50257 tokens and tokenizer); the keep text
//! `models/stories/stories.txt`.

use std::path::{Path, PathBuf};
use std::process::Command;

use host_tools::accuracy::measure_pruning;
use host_tools::convert::{convert, ConvertOptions, WeightDType};
use host_tools::inspect::inspect;
use host_tools::prune::KeepVocab;
use host_tools::random::{write_random, RandomShape};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fresh checkpoint directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn checkpoint(name: &str, tokenizer: bool) -> Scratch {
    let dir = std::env::temp_dir().join(format!("host-tools-pruning-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // random writes GPT-2's tokenizer beside a 50257-token checkpoint: the fixture's files
    write_random(&dir, RandomShape::gpt_neo(2, 16, 4, 50257, 64, 8), 11).unwrap();
    for f in ["vocab.json", "merges.txt"] {
        let fixture = std::fs::read(root().join("tests/fixtures/gpt2-tokenizer").join(f)).unwrap();
        assert_eq!(std::fs::read(dir.join(f)).unwrap(), fixture, "{f}");
        if !tokenizer {
            std::fs::remove_file(dir.join(f)).unwrap();
        }
    }
    Scratch(dir)
}

fn stories() -> String {
    std::fs::read_to_string(root().join("models/stories/stories.txt")).unwrap()
}

fn keep(most_frequent: Option<usize>) -> KeepVocab {
    KeepVocab { text: stories(), origin: "stories.txt".into(), most_frequent }
}

fn host_tools(args: &[&str], dir: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_host-tools")).args(args).arg(dir).output().unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn convert_prints_what_it_kept_and_inspect_what_it_saved() {
    let dir = checkpoint("convert", true);
    let blob = dir.0.join("pruned.blob");
    let stories_path = root().join("models/stories/stories.txt");
    let (ok, _, err) = host_tools(&["convert", "--dtype", "q8", "--keep-vocab", stories_path.to_str().unwrap(), "-o", blob.to_str().unwrap()], &dir.0);
    assert!(ok, "{err}");
    let full = convert(&dir.0, &ConvertOptions { dtype: WeightDType::Q8, ..ConvertOptions::default() }).unwrap();
    let pruned = std::fs::read(&blob).unwrap();
    let summary = err.lines().find(|l| l.starts_with("vocabulary pruned to ")).unwrap_or_else(|| panic!("no summary in:\n{err}"));
    // "saves about N bytes": within the alignment padding of the real difference
    let saved: i64 = summary.split("saves about ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let real = full.blob.len() as i64 - pruned.len() as i64;
    assert!((saved - real).abs() <= 3 * 64, "{summary}: the blobs differ by {real} bytes");
    assert!(summary.contains(" of 50257 tokens: ") && summary.contains("the 256 byte tokens, 1 special(s)"), "{summary}");
    assert!(summary.contains("tokenizer 922395 -> "), "{summary}");

    let text = inspect(&pruned, None).unwrap();
    let kept = host_tools::blob_file::BlobFile::from_bytes(&pruned).model().unwrap().config().vocab_size;
    for line in [
        format!("vocabulary pruned: {kept} of the source vocabulary's 50257 tokens kept"),
        "source vocabulary                50257 tokens".to_string(),
        format!("kept                      {kept:>12} tokens ({} dropped", 50257 - kept),
        // q8 rows of 16: 16 values + one scale of 4 bytes
        format!("wte.weight rows dropped   {:>12} bytes saved ({} rows of ~20 B, q8)", 20 * (50257 - kept), 50257 - kept),
        format!("source-id table           {:>12} bytes spent (4 per kept token)", 4 * kept),
        format!("source ids (pruned vocab) {:>12}", 4 * kept),
    ] {
        assert!(text.contains(&line), "inspect does not say {line:?}:\n{text}");
    }
    // an unpruned blob says nothing about it
    assert!(!inspect(&full.blob, None).unwrap().contains("vocabulary pruned"));
}

#[test]
fn convert_pruning_errors_are_one_line() {
    let dir = checkpoint("errors", false);
    let stories_path = root().join("models/stories/stories.txt");
    let (ok, _, err) = host_tools(&["convert", "--keep-vocab", stories_path.to_str().unwrap(), "-o", "/tmp/never.blob"], &dir.0);
    assert!(!ok);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("the checkpoint has no tokenizer"), "{err}");
    let (ok, _, err) = host_tools(&["convert", "--vocab-size", "100", "-o", "/tmp/never.blob"], &dir.0);
    assert!(!ok && err.contains("--keep-vocab"), "{err}");
    let (ok, _, err) = host_tools(&["convert", "--keep-vocab", "/nonexistent.txt", "-o", "/tmp/never.blob"], &dir.0);
    assert!(!ok && err.contains("cannot read /nonexistent.txt"), "{err}");
}

/// `accuracy --keep-vocab`: on the keep text every pruned model sees the full model's tokens, and
/// the pruned f32 model gives each of them at least the full model's probability (its
/// distribution is the full one renormalised over a subset), so its perplexity is at most the
/// full one's; on other text the pruned encodings differ and are scored per byte.
#[test]
fn accuracy_compares_pruned_with_full() {
    let dir = checkpoint("accuracy", true);
    let rows = measure_pruning(&dir.0, &stories(), &keep(None), None, 300, 32).unwrap();
    assert_eq!(rows.iter().map(|r| r.model.as_str()).collect::<Vec<_>>(), ["full f32", "pruned f32", "pruned q8", "pruned q4"]);
    let (full, pruned) = (&rows[0], &rows[1]);
    assert_eq!((full.vocab, full.tokens), (50257, 300));
    assert!(rows.iter().all(|r| r.same_encoding && r.tokens == 300 && r.scored == 299), "{rows:?}");
    assert!(pruned.vocab < 5000 && pruned.blob_bytes * 2 < full.blob_bytes);
    assert!(pruned.nll_sum < full.nll_sum, "pruned {} vs full {} nats", pruned.nll_sum, full.nll_sum);
    // random weights: near-uniform, so the full model's perplexity is about its vocabulary size
    // and the pruned one's about its own
    let ppl = |r: &host_tools::accuracy::PruneRow| (r.nll_sum / r.scored as f64).exp();
    assert!((ppl(full) / 50257.0 - 1.0).abs() < 0.2 && (ppl(pruned) / pruned.vocab as f64 - 1.0).abs() < 0.2, "{rows:?}");
    let table = host_tools::accuracy::pruning_table(&rows);
    assert!(table.starts_with("| model | vocab | blob bytes |") && table.lines().count() == 6, "{table}");

    // Shakespeare needs tokens the stories do not: other encodings, more tokens
    let val = std::fs::read_to_string(root().join("models/default/val.txt")).unwrap();
    let rows = measure_pruning(&dir.0, &val, &keep(None), None, 300, 32).unwrap();
    assert!(!rows[1].same_encoding && rows[1].tokens > rows[0].tokens, "{rows:?}");
    // the same text: the scored bytes differ only by the first tokens' lengths (never scored)
    assert!(rows[0].scored_bytes.abs_diff(rows[1].scored_bytes) < 16, "{rows:?}");
}

/// A random Llama with a 32,000-piece SentencePiece tokenizer (`random` completes it, as for
/// stories15m), small enough to convert quickly: 1 layer, 16 wide.
fn llama_checkpoint(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("host-tools-pruning-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    write_random(&dir, RandomShape::llama(1, 16, 2, 1, 32, 32000, 64), 12).unwrap();
    assert!(dir.join("tokenizer.model").is_file(), "random writes a tokenizer of 32,000 pieces");
    Scratch(dir)
}

#[test]
fn sentencepiece_pruning_reports_and_errors() {
    let dir = llama_checkpoint("sp");
    let blob = dir.0.join("pruned.blob");
    let stories_path = root().join("models/stories/stories.txt");
    let (ok, _, err) = host_tools(&["convert", "--dtype", "q8", "--keep-vocab", stories_path.to_str().unwrap(), "-o", blob.to_str().unwrap()], &dir.0);
    assert!(ok, "{err}");
    let summary = err.lines().find(|l| l.starts_with("vocabulary pruned to ")).unwrap_or_else(|| panic!("no summary in:\n{err}"));
    assert!(summary.contains(" of 32000 tokens: ") && summary.contains("the 256 byte tokens, 3 special(s)"), "{summary}");
    let full = convert(&dir.0, &ConvertOptions { dtype: WeightDType::Q8, ..ConvertOptions::default() }).unwrap();
    let pruned = std::fs::read(&blob).unwrap();
    let saved: i64 = summary.split("saves about ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let real = full.blob.len() as i64 - pruned.len() as i64;
    assert!((saved - real).abs() <= 3 * 64, "{summary}: the blobs differ by {real} bytes");
    let kept = host_tools::blob_file::BlobFile::from_bytes(&pruned).model().unwrap().config().vocab_size;
    assert!((1000..5000).contains(&kept), "{summary}");
    assert!(inspect(&pruned, None).unwrap().contains(&format!("vocabulary pruned: {kept} of the source vocabulary's 32000 tokens kept")));

    // accuracy --keep-vocab: on the keep text the pruned models see the full model's pieces
    let rows = measure_pruning(&dir.0, &stories(), &keep(None), None, 200, 32).unwrap();
    assert!(rows.iter().all(|r| r.same_encoding && r.scored == 200), "{rows:?}");
    assert!(rows[1].nll_sum < rows[0].nll_sum, "{rows:?}");

    // a tokenizer larger than the model (32,000 pieces for 2,000 rows): one line with the
    // numbers, no panic
    let small = std::env::temp_dir().join(format!("host-tools-pruning-{}-sp-small", std::process::id()));
    let _ = std::fs::remove_dir_all(&small);
    write_random(&small, RandomShape::llama(1, 16, 2, 1, 32, 2000, 64), 12).unwrap();
    let small = Scratch(small);
    for f in ["tokenizer.model", "tokenizer_config.json"] {
        std::fs::copy(dir.0.join(f), small.0.join(f)).unwrap();
    }
    let (ok, _, err) = host_tools(&["convert", "--keep-vocab", stories_path.to_str().unwrap(), "-o", "/tmp/never.blob"], &small.0);
    assert!(!ok && err.trim_end().lines().count() == 1 && !err.contains("panicked"), "{err}");
    assert!(err.contains("32000") && err.contains("2000"), "{err}");
}
