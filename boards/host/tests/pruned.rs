//! `host` on a pruned blob (`host-tools convert --keep-vocab`), the command shapes outside
//! checks call: `host tokenize … --source-ids`, `host logits --model B --ids <source ids>
//! --source-ids --out F.npy` (`[n, V_source]`, pruned columns at -inf, a pruned input id an
//! error that names it), `host detokenize`, and generation (new ids, the same text).
//!
//! The model: a random GPT-Neo checkpoint (2 layers, 32 wide, window 8, GPT-2's 50257 tokens and
//! tokenizer) pruned to `models/stories/stories.txt`, once full and once pruned; and the same
//! commands on `models/llama` (a SentencePiece vocabulary of 2048 pieces) pruned to that text.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use host_tools::convert::{convert, ConvertOptions, WeightDType};
use host_tools::prune::KeepVocab;
use host_tools::random::{write_random, RandomShape};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn host(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_host")).args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = host(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The last line of stdout (the ids of tokenize, generate --print-ids).
fn last_line(s: &str) -> String {
    s.lines().last().unwrap_or("").to_string()
}

/// (full blob, pruned blob) as files.
fn blobs() -> &'static (String, String) {
    static B: OnceLock<(String, String)> = OnceLock::new();
    B.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("host-pruned-{}", std::process::id()));
        write_random(&dir, RandomShape::gpt_neo(2, 32, 8, 50257, 128, 8), 3).unwrap();
        for f in ["vocab.json", "merges.txt"] {
            std::fs::copy(root().join("tests/fixtures/gpt2-tokenizer").join(f), dir.join(f)).unwrap();
        }
        let text = std::fs::read_to_string(root().join("models/stories/stories.txt")).unwrap();
        let keep = KeepVocab { text, origin: "stories.txt".into(), most_frequent: None };
        let write = |name: &str, keep: Option<KeepVocab>| {
            let conv = convert(&dir, &ConvertOptions { dtype: WeightDType::F32, keep_vocab: keep, ..ConvertOptions::default() }).unwrap();
            let path = dir.join(name);
            std::fs::write(&path, conv.blob).unwrap();
            path.to_str().unwrap().to_string()
        };
        let blobs = (write("full.blob", None), write("pruned.blob", Some(keep)));
        // the checkpoint is not needed any more (the blobs stay for the tests)
        for f in ["model.safetensors", "vocab.json", "merges.txt", "config.json"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        blobs
    })
}

const STORY: &str = "Once upon a time, there was a little girl named Lily. She saw a red kite in a tall tree.";

#[test]
fn tokenize_source_ids_prints_the_full_vocabularys_ids() {
    let (full, pruned) = blobs();
    let want = last_line(&ok(&["tokenize", "--model", full, "--text", STORY]));
    assert_eq!(last_line(&ok(&["tokenize", "--model", pruned, "--text", STORY, "--source-ids"])), want);
    // without --source-ids: the pruned blob's own (dense) ids, other numbers
    let own = last_line(&ok(&["tokenize", "--model", pruned, "--text", STORY]));
    assert_ne!(own, want);
    // detokenize takes either
    assert_eq!(ok(&["detokenize", "--model", pruned, "--ids", &own]), format!("{STORY}\n"));
    assert_eq!(ok(&["detokenize", "--model", pruned, "--ids", &want, "--source-ids"]), format!("{STORY}\n"));
    // --source-ids on an unpruned blob is the identity
    assert_eq!(last_line(&ok(&["tokenize", "--model", full, "--text", STORY, "--source-ids"])), want);
}

fn read_npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    host_tools::npy::read_f32(path).unwrap()
}

#[test]
fn logits_source_ids_writes_the_source_vocabularys_columns() {
    let (full, pruned) = blobs();
    let ids = last_line(&ok(&["tokenize", "--model", full, "--text", STORY]));
    let n = ids.split(',').count() as u64;
    let dir = std::env::temp_dir();
    let (f_npy, p_npy) = (dir.join(format!("host-pruned-f-{}.npy", std::process::id())), dir.join(format!("host-pruned-p-{}.npy", std::process::id())));
    ok(&["logits", "--model", full, "--ids", &ids, "--out", f_npy.to_str().unwrap()]);
    ok(&["logits", "--model", pruned, "--ids", &ids, "--source-ids", "--out", p_npy.to_str().unwrap()]);
    let ((fs, f), (ps, p)) = (read_npy(&f_npy), read_npy(&p_npy));
    assert_eq!(fs, [n, 50257]);
    assert_eq!(ps, [n, 50257], "[n, V_source]");
    let kept: Vec<bool> = (0..50257).map(|c| p[c].is_finite()).collect();
    let n_kept = kept.iter().filter(|&&k| k).count();
    assert!(n_kept > 256 && n_kept < 5000, "{n_kept} finite columns");
    for (i, (a, b)) in p.iter().zip(&f).enumerate() {
        if kept[i % 50257] {
            assert_eq!(a.to_bits(), b.to_bits(), "row {} column {}: pruned {a} vs full {b}", i / 50257, i % 50257);
        } else {
            assert_eq!(*a, f32::NEG_INFINITY, "row {} column {}: a pruned token", i / 50257, i % 50257);
        }
    }
    // the kept columns are the blob's tokens: as many as its vocabulary
    let inspect = host_tools::inspect::inspect(&std::fs::read(pruned).unwrap(), None).unwrap();
    assert!(inspect.contains(&format!("kept                      {n_kept:>12} tokens")), "{inspect}");
}

#[test]
fn a_pruned_or_out_of_range_source_id_is_an_error_that_names_it() {
    let (_, pruned) = blobs();
    // 12345 is no token the stories need (nor of their closure); 60000 is outside GPT-2's vocabulary
    for (ids, needle) in [
        ("7454,12345", "source token id 12345 was pruned from this blob's vocabulary"),
        ("7454,60000", "source token id 60000 is out of range (source vocabulary 50257 tokens)"),
    ] {
        for cmd in [&["logits", "--out", "/tmp/never.npy"][..], &["detokenize"][..]] {
            let mut args = cmd.to_vec();
            args.extend(["--model", pruned, "--ids", ids, "--source-ids"]);
            let out = host(&args);
            assert!(!out.status.success(), "{args:?}");
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
            assert!(err.contains(needle) && !err.contains("panicked"), "{args:?}: {err}");
        }
    }
    let err = String::from_utf8(host(&["--model", pruned, "--ids", "7454,12345", "--source-ids", "-n", "2"]).stderr).unwrap();
    assert!(err.contains("source token id 12345 was pruned"), "{err}");
}

#[test]
fn generation_on_a_pruned_blob_streams_the_text_of_its_ids() {
    let (_, pruned) = blobs();
    let out = ok(&["--model", pruned, "--prompt", "Once upon a time", "-n", "24", "--seed", "5", "--ignore-eos", "--print-ids"]);
    let mut lines: Vec<&str> = out.lines().collect();
    let ids = lines.pop().unwrap().to_string();
    let streamed = lines.join("\n");
    assert_eq!(ids.split(',').count(), 24);
    let text = ok(&["detokenize", "--model", pruned, "--ids", &ids]);
    assert_eq!(format!("Once upon a time{}", text.strip_suffix('\n').unwrap()), streamed);
    // the same run printing source ids: the same draws, each mapped
    let src = last_line(&ok(&["--model", pruned, "--prompt", "Once upon a time", "-n", "24", "--seed", "5", "--ignore-eos", "--print-ids", "--source-ids"]));
    assert_eq!(ok(&["detokenize", "--model", pruned, "--ids", &src, "--source-ids"]), text);
    assert_ne!(src, ids);
}

// ---- a SentencePiece vocabulary: models/llama -------------------------------------------------

/// (full blob, pruned blob) of `models/llama` (f32), as files.
fn sp_blobs() -> &'static (String, String) {
    static B: OnceLock<(String, String)> = OnceLock::new();
    B.get_or_init(|| {
        let src = root().join("models/llama");
        let dir = std::env::temp_dir().join(format!("host-pruned-sp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = std::fs::read_to_string(root().join("models/stories/stories.txt")).unwrap();
        let keep = KeepVocab { text, origin: "stories.txt".into(), most_frequent: None };
        let write = |name: &str, keep: Option<KeepVocab>| {
            let conv = convert(&src, &ConvertOptions { dtype: WeightDType::F32, keep_vocab: keep, ..ConvertOptions::default() }).unwrap();
            let path = dir.join(name);
            std::fs::write(&path, conv.blob).unwrap();
            path.to_str().unwrap().to_string()
        };
        (write("full.blob", None), write("pruned.blob", Some(keep)))
    })
}

#[test]
fn sentencepiece_tokenize_logits_and_detokenize_take_source_ids() {
    let (full, pruned) = sp_blobs();
    // tokenize: the full vocabulary's ids (BOS 1 first with --bos), from the pruned blob
    for bos in [&[][..], &["--bos"][..]] {
        let mut args = vec!["tokenize", "--model", full.as_str(), "--text", STORY];
        args.extend(bos);
        let want = last_line(&ok(&args));
        args[2] = pruned;
        let own = last_line(&ok(&args));
        args.push("--source-ids");
        assert_eq!(last_line(&ok(&args)), want, "{bos:?}");
        assert_ne!(own, want);
        // detokenize takes either
        assert_eq!(ok(&["detokenize", "--model", pruned, "--ids", &own]), format!("{STORY}\n"));
        assert_eq!(ok(&["detokenize", "--model", pruned, "--ids", &want, "--source-ids"]), format!("{STORY}\n"));
    }
    // logits: [n, 2048], the kept columns bit-identical, the others -inf
    let ids = last_line(&ok(&["tokenize", "--model", full, "--text", STORY, "--bos"]));
    let n = ids.split(',').count() as u64;
    let dir = std::env::temp_dir();
    let (f_npy, p_npy) = (dir.join(format!("host-pruned-sp-f-{}.npy", std::process::id())), dir.join(format!("host-pruned-sp-p-{}.npy", std::process::id())));
    ok(&["logits", "--model", full, "--ids", &ids, "--out", f_npy.to_str().unwrap()]);
    ok(&["logits", "--model", pruned, "--ids", &ids, "--source-ids", "--out", p_npy.to_str().unwrap()]);
    let ((fs, f), (ps, p)) = (read_npy(&f_npy), read_npy(&p_npy));
    assert_eq!((fs, ps), (vec![n, 2048], vec![n, 2048]));
    let kept = (0..2048).filter(|&c| p[c].is_finite()).count();
    assert!(kept > 259 && kept < 2048, "{kept} finite columns");
    for (i, (a, b)) in p.iter().zip(&f).enumerate() {
        if p[i % 2048].is_finite() {
            assert_eq!(a.to_bits(), b.to_bits(), "row {} column {}: pruned {a} vs full {b}", i / 2048, i % 2048);
        } else {
            assert_eq!(*a, f32::NEG_INFINITY, "row {} column {}", i / 2048, i % 2048);
        }
    }
    // a source id that was pruned: one line naming it
    let dropped = (259..2048).find(|&c| !p[c].is_finite()).unwrap().to_string();
    let out = host(&["detokenize", "--model", pruned, "--ids", &format!("1,{dropped}"), "--source-ids"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success() && err.trim_end().lines().count() == 1, "{err}");
    assert!(err.contains(&format!("source token id {dropped} was pruned")), "{err}");
}
