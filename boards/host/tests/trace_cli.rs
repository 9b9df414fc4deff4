//! `host trace` as outside checks call it: `--model B --ids L -n N --out DIR` writes
//! transformers' hidden states and attentions; `--tutorial` prints the tutorial's numbers;
//! `--digest` prints one line per layer per token of the firmware's run.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_host"))
}

fn reference(case: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(root().join("tests/fixtures").join(case).join("reference.json")).unwrap()).unwrap()
}

fn join(ids: &[serde_json::Value]) -> String {
    ids.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",")
}

/// The command line of the contract, on GPT-2, GPT-Neo (local layers whose rings wrap) and
/// Llama fixtures (grouped-query attention, RoPE, an explicit head_dim): the arrays equal
/// transformers' within 1e-4 + 1e-4·|ref|, and trace.json lists the T tokens they cover.
#[test]
fn trace_writes_transformers_hidden_states_and_attentions() {
    for case in ["tiny", "untied", "neo_alternating", "neo_local_fp16", "llama_gqa", "llama_bf16_untied"] {
        let dir = root().join("tests/fixtures").join(case);
        let conv = host_tools::convert::convert(&dir, &Default::default()).unwrap();
        let tmp = std::env::temp_dir().join(format!("host-trace-cli-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let blob = tmp.join("model.blob");
        std::fs::write(&blob, conv.blob).unwrap();
        let r = reference(case);
        let prompt = r["greedy"]["prompt_ids"].as_array().unwrap();
        let want_ids = r["trace"]["ids"].as_array().unwrap();
        let n = want_ids.len() - prompt.len();
        let out = tmp.join("out");
        let res = host()
            .args(["trace", "--model"])
            .arg(&blob)
            .args(["--ids", &join(prompt), "-n", &n.to_string(), "--greedy", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(res.status.success(), "{}", String::from_utf8_lossy(&res.stderr));
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
        let got_ids: Vec<u64> = json["tokens"].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
        let want: Vec<u64> = want_ids.iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(got_ids, want, "{case}: trace.json's tokens (T = prompt + generated)");
        assert_eq!(json["T"].as_u64().unwrap() as usize, want.len());
        for (ours, theirs) in [("hidden_states.npy", "trace_hidden_states.npy"), ("attentions.npy", "trace_attentions.npy")] {
            let (shape, got) = host_tools::npy::read_f32(&out.join(ours)).unwrap();
            let (want_shape, want) = host_tools::npy::read_f32(&dir.join(theirs)).unwrap();
            assert_eq!(shape, want_shape, "{case}: {ours} shape");
            let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs() / (1e-4 + 1e-4 * b.abs())).fold(0.0f32, f32::max);
            assert!(worst <= 1.0, "{case}: {ours} off by {worst} x tolerance");
        }
        // and every stage has its array, with the shape trace.json gives
        for (name, shape) in json["files"].as_object().unwrap() {
            let (s, _) = host_tools::npy::read_f32(&out.join(name)).unwrap();
            let want: Vec<u64> = shape.as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
            assert_eq!(s, want, "{case}: {name}");
        }
        // the two transformers-shaped arrays and one per stage the model has (GPT-2 and GPT-Neo
        // have no rot_q, rot_k or mlp_pre_linear; Llama no pos_embed)
        let config = host_tools::convert::convert(&dir, &Default::default()).unwrap().config;
        let stages = runtime::observe::Stage::ALL.iter().filter(|s| s.applies(&config)).count();
        assert_eq!(json["files"].as_object().unwrap().len(), 2 + stages, "{case}: files");
        assert_eq!(stages, if config.learned_positions() { 22 } else { 24 }, "{case}: stages");
    }
}

/// The numbers of the worked example, as the tutorial states them (to 0.01).
#[test]
fn tutorial_prints_the_tutorials_numbers() {
    let out = host().args(["trace", "--tutorial"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // numbers on the line that starts with `prefix` (after it)
    let nums = |prefix: &str| -> Vec<f32> {
        let line = text.lines().find(|l| l.trim_start().starts_with(prefix)).unwrap_or_else(|| panic!("no line {prefix:?} in:\n{text}"));
        let rest = &line.trim_start()[prefix.len()..];
        rest.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')).filter_map(|w| w.parse().ok()).collect()
    };
    let close = |got: &[f32], want: &[f32], what: &str| {
        assert!(got.len() >= want.len(), "{what}: {got:?}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 0.01, "{what}: {got:?} vs the tutorial's {want:?}");
        }
    };
    let h0: Vec<f32> = nums("H0[2] =");
    close(&h0[h0.len() - 5..h0.len() - 2], &[0.6, 0.4, 0.9], "H0[2]");
    close(&nums("H0[0] =")[6..9], &[0.2, 1.0, 0.1], "H0[0]");
    // the rows of q2 in the scores table, then in the weights table
    let q2: Vec<Vec<f32>> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("q2 ") && !l.contains('='))
        .map(|l| l.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect())
        .collect();
    assert_eq!(q2.len(), 2, "scores and weights rows of q2:\n{text}");
    close(&q2[0], &[0.35, 0.54, 0.77], "scores Q·Kᵀ/√d of q2");
    close(&q2[1], &[0.27, 0.32, 0.41], "softmax weights of q2");
    close(&nums("z2 ="), &[0.59, 0.46, 0.52], "z2");
    for dtype in ["f32 KV", "f16 KV", "int8 KV"] {
        let line = text.lines().find(|l| l.contains(dtype)).unwrap();
        let z: Vec<f32> = line.split("z2 =").nth(1).unwrap().split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')).filter_map(|w| w.parse().ok()).collect();
        close(&z, &[0.59, 0.46, 0.52], dtype);
    }
    assert!(text.contains("(bit for bit the z above)"), "f32 decode from the cache equals the full attention");
    let ln = text.lines().find(|l| l.contains("mean")).unwrap();
    assert!(ln.contains("mean 1.28") && ln.contains("std 0.34"), "{ln}");
    close(&nums("GELU(-0.40) ="), &[-0.14], "GELU(-0.40)");
    close(&nums("GELU(-0.33) ="), &[-0.12], "GELU(-0.33)");
    // Korean stage names
    let ko = String::from_utf8(host().args(["trace", "--tutorial", "--lang", "ko"]).output().unwrap().stdout).unwrap();
    for word in ["임베딩", "위치 인코딩", "어텐션 점수", "소프트맥스 가중치", "KV 캐시", "레이어 정규화"] {
        assert!(ko.contains(word), "--lang ko lacks {word}");
    }
    assert_eq!(ko.lines().count(), text.lines().count(), "the same walkthrough in both languages");
}

/// `--digest`: one line per layer per processed token of the firmware's run, in order.
#[test]
fn digest_prints_a_line_per_layer_per_token() {
    let out = host().args(["trace", "--digest"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // the shipped q8 model: 4 layers; the prompt's 13 tokens + 47 of the 48 generated run through the pass
    assert_eq!(lines.len(), 60 * 4);
    for (i, line) in lines.iter().enumerate() {
        let (pos, layer) = (i / 4, i % 4);
        let head = format!("digest: pos {pos} layer {layer} resid_post crc32 ");
        assert!(line.starts_with(&head), "line {i}: {line}");
        assert_eq!(line.len(), head.len() + 8, "{line}");
    }
    // deterministic, and different rows give different digests
    let again = String::from_utf8(host().args(["trace", "--digest"]).output().unwrap().stdout).unwrap();
    assert_eq!(again, text);
    let crcs: std::collections::BTreeSet<&str> = lines.iter().map(|l| &l[l.len() - 8..]).collect();
    assert_eq!(crcs.len(), lines.len());
}
