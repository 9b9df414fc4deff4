//! `host trace` as outside checks call it: `--model B --ids L -n N --out DIR` writes
//! transformers' hidden states and attentions (and tutorial.html beside its page); `--tutorial`
//! walks the tutorial's example to a sampled token, with the tutorial's numbers (`--out`: a page);
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
        // the tutorial's walk beside the page (which links to it), linking back
        let tutorial = std::fs::read_to_string(out.join("tutorial.html")).unwrap();
        assert!(tutorial.contains("href=\"index.html\"") && tutorial.contains("kernels::attention"), "{case}: tutorial.html");
    }
}

fn tutorial(args: &[&str]) -> String {
    let out = host().args(["trace", "--tutorial"]).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The numbers in `s`, as printed (ASCII digits, '.', '-').
fn numbers(s: &str) -> Vec<f32> {
    s.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')).filter_map(|w| w.parse().ok()).collect()
}

/// The vector `name = … = [a, b, c]` states: the one after its last `=`. The statement starts a
/// line (after the indent) or follows three spaces, and runs to the next three spaces.
fn vector(text: &str, name: &str) -> Vec<f32> {
    let head = format!("{name} =");
    let statement = text
        .lines()
        .find_map(|l| {
            let l = l.trim_start();
            if l.starts_with(&head) {
                Some(l)
            } else {
                l.find(&format!("   {head}")).map(|i| &l[i + 3..])
            }
        })
        .unwrap_or_else(|| panic!("no {head:?} in:\n{text}"));
    let statement = &statement[..statement.find("   ").unwrap_or(statement.len())];
    let last = statement.rsplit(" = ").next().unwrap();
    assert!(last.starts_with('[') && last.ends_with(']'), "{statement}");
    numbers(last)
}

/// The number right after the first `key` in `text`.
fn value(text: &str, key: &str) -> f32 {
    let at = text.find(key).unwrap_or_else(|| panic!("no {key:?} in:\n{text}")) + key.len();
    let rest = &text[at..];
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')).unwrap_or(rest.len());
    rest[..end].parse().unwrap_or_else(|_| panic!("{key:?} is followed by {:?}", &rest[..end]))
}

/// The cells after the first of the table row whose first cell is `label` (the `n`th such row).
fn table_row(text: &str, label: &str, n: usize) -> Vec<String> {
    let rows: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with('|') && l.split('|').nth(1).map(str::trim) == Some(label)).collect();
    let row = rows.get(n).unwrap_or_else(|| panic!("no row {n} labelled {label:?} in:\n{text}"));
    row.split('|').map(str::trim).filter(|c| !c.is_empty()).skip(1).map(str::to_string).collect()
}

fn table_numbers(text: &str, label: &str, n: usize) -> Vec<f32> {
    table_row(text, label, n).iter().filter_map(|c| c.parse().ok()).collect()
}

/// `host trace --tutorial` reproduces the numbers the tutorial prints (the Korean worked example
/// the project grew from: V = 6, d = 3, 나는 밥을 먹었다), to the digits it prints them with. The
/// expected values below are the tutorial's, section by section; the output prints two decimals,
/// so parsing them back gives exactly the tutorial's f32 literals.
#[test]
fn tutorial_prints_the_tutorials_numbers() {
    let text = tutorial(&[]);
    // part 1 (its code's `print(H0)`): H0 = W_E[ids] + P
    assert_eq!(vector(&text, "H0[0]"), [0.2, 1.0, 0.1]);
    assert_eq!(vector(&text, "H0[1]"), [0.9, 0.1, 0.4]);
    assert_eq!(vector(&text, "H0[2]"), [0.6, 0.4, 0.9]);
    // part 2, step 2: 먹었다's score with itself, 1.33; step 3: √3 ≈ 1.73
    assert_eq!(value(&text, "q2·k2 = "), 1.33);
    assert_eq!(value(&text, "√3 = "), 1.73);
    // part 2, step 4: the scaled row of 먹었다 is [0.35, 0.54, 0.77], its softmax 27%, 32%, 41%
    assert_eq!(table_numbers(&text, "q2", 0), [0.35, 0.54, 0.77], "scores q·k/√3 of q2");
    assert_eq!(table_numbers(&text, "q2", 1), [0.27, 0.32, 0.41], "softmax weights of q2");
    // the causal mask: q0 sees k0 only
    assert_eq!(table_row(&text, "q0", 0)[1..], ["masked", "masked"]);
    // part 2, step 5, and part 5's decode: z₃ = [0.59, 0.47, 0.52]. The tutorial's 0.47 mixes
    // with the weights rounded to 0.27/0.32/0.41 (0.4636 unrounded): ours prints 0.46 and says so.
    let z2 = vector(&text, "z2");
    assert_eq!([z2[0], z2[2]], [0.59, 0.52]);
    assert!((z2[1] - 0.47).abs() <= 0.01 + 1e-6, "{z2:?}");
    assert!(text.lines().any(|l| l.contains("[differs]") && l.contains("0.47") && l.contains("z2[1]")), "the note on 0.47");
    // part 3 (and part 4's input): the multi-head output's 먹었다 row, [0.74, 0.44, 0.77]
    assert_eq!(vector(&text, "attn_out[2]"), [0.74, 0.44, 0.77]);
    // part 4: the residual, [0.74, 0.44, 0.77] + H0[2], then its mean 1.28 and std 0.34
    assert_eq!(vector(&text, "resid_mid[2]"), [1.34, 0.84, 1.67]);
    assert_eq!(value(&text, "mean[2] = "), 1.28);
    assert_eq!(value(&text, "std[2] = "), 0.34);
    // part 4's MLP: h holds 1.61, 1.21, -0.40 and -0.33, and GELU(-0.40) = -0.14,
    // GELU(-0.33) = -0.12 (the unit order is ours)
    let h2 = vector(&text, "h[2]");
    for want in [1.61, 1.21, -0.40, -0.33] {
        assert!(h2.contains(&want), "h[2] = {h2:?} lacks {want}");
    }
    // (the unit table: the rows labelled h0…h5 after W_2's)
    let gelu: Vec<Vec<f32>> = (0..6).map(|j| table_numbers(&text, &format!("h{j}"), 1)).collect();
    for (x, want) in [(-0.40, -0.14), (-0.33, -0.12)] {
        let row = gelu.iter().find(|r| r[0] == x).unwrap_or_else(|| panic!("no unit with h = {x}: {gelu:?}"));
        assert_eq!(row[1], want, "GELU({x}) (tanh form)");
    }
    // part 5: decoding 먹었다 from a cache holding 나는 밥을 gives the same row: bit for bit with
    // the f32 cache, the same printed digits with f16 and int8
    for dtype in ["f32 KV", "f16 KV", "int8 KV"] {
        let line = text.lines().find(|l| l.contains(dtype) && l.contains("z2 =")).unwrap();
        assert_eq!(numbers(&line[line.find('[').unwrap()..line.find(']').unwrap()]), z2, "{line}");
    }
    assert!(text.contains("(bit for bit the z2 above)"));
    let block = text.lines().find(|l| l.contains("f32 KV: resid_post[2] =")).unwrap();
    assert!(block.contains("bit for bit the prefill's row, and the same logits"), "{block}");
}

/// The walk goes on to a sampled next token: the output layer over the six tokens, the
/// sampler's probabilities, and one draw that the seed repeats. Every stage names what made it.
#[test]
fn tutorial_ends_in_a_sampled_token() {
    let text = tutorial(&[]);
    let logits = vector(&text, "logits[2]");
    assert_eq!(logits.len(), 6, "one logit per token of the vocabulary");
    // the sampling table: the softmax column sums to 1 (to its rounding); top-k keeps 3, top-p
    // at most those; the drawn token is among the kept
    let tokens = ["0 나는", "1 밥을", "2 먹었다", "3 그리고", "4 물을", "5 ."];
    let rows: Vec<Vec<String>> = tokens.iter().map(|t| table_row(&text, t, 0)).collect();
    let softmax: f32 = rows.iter().map(|r| r[1].parse::<f32>().unwrap()).sum();
    assert!((softmax - 1.0).abs() <= 0.03, "{softmax}");
    for (r, l) in rows.iter().zip(&logits) {
        assert_eq!(r[0].parse::<f32>().unwrap(), *l, "the table's logit is logits[2]'s");
    }
    let kept = |col: usize| rows.iter().filter(|r| r[col] != "dropped").count();
    assert_eq!(kept(3), 3, "top-k 3");
    assert!((1..=3).contains(&kept(4)), "top-p keeps some of the top-k");
    let last = text.lines().last().unwrap();
    let next = last.rsplit("→ ").next().unwrap();
    let id = tokens.iter().position(|t| t.ends_with(&format!(" {next}"))).unwrap_or_else(|| panic!("{last}"));
    assert_ne!(rows[id][4], "dropped", "the drawn token {next} is one top-p kept");
    assert!(last.starts_with("나는 밥을 먹었다 → "), "{last}");
    let u = text.lines().find(|l| l.trim_start().starts_with("u = ")).unwrap();
    assert!(u.contains("seed 42"), "{u}");
    // reproducible, and --seed draws again
    assert_eq!(tutorial(&[]), text);
    let draws: std::collections::BTreeSet<String> =
        (0..12).map(|s| tutorial(&["--seed", &s.to_string()]).lines().find(|l| l.trim_start().starts_with("u = ")).unwrap().to_string()).collect();
    assert!(draws.len() > 6, "{draws:?}");
    // every numbered stage says what made it
    let lines: Vec<&str> = text.lines().collect();
    let stages: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].split_once(". ").is_some_and(|(n, _)| n.parse::<usize>().is_ok())).collect();
    assert!(stages.len() >= 12, "{}", stages.len());
    for i in stages {
        let by = lines[i + 1];
        assert!(
            by.starts_with("   (made by: ") && (by.contains("kernels::") || by.contains("KvCache") || by.contains("runtime::sampler")),
            "{}\n{by}",
            lines[i]
        );
    }
    for kernel in ["kernels::embedding_row", "kernels::linear", "kernels::attention", "kernels::softmax", "kernels::layer_norm", "kernels::activate", "runtime::sampler::Sampler"] {
        assert!(text.contains(kernel), "{kernel}");
    }
}

/// `--lang ko`: the same walk with Korean words, its tables aligned on screen (a Korean
/// character takes two columns: every row's `|` sit at the header's display columns).
#[test]
fn tutorial_in_korean_lines_up() {
    use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};
    let (en, ko) = (tutorial(&[]), tutorial(&["--lang", "ko"]));
    for word in ["임베딩", "위치 임베딩", "어텐션 점수", "소프트맥스", "KV 캐시", "레이어 정규화", "다음 토큰", "마스킹"] {
        assert!(ko.contains(word), "--lang ko lacks {word}");
    }
    assert_eq!(ko.lines().count(), en.lines().count(), "the same walk in both languages");
    assert_eq!(ko.lines().last(), en.lines().last(), "the same token drawn");
    let bars = |l: &str| -> Vec<usize> {
        let mut col = 0;
        let mut at = Vec::new();
        for ch in l.chars() {
            if ch == '|' {
                at.push(col);
            }
            col += ch.width().unwrap_or(0);
        }
        at
    };
    let (mut tables, mut wide) = (0, 0);
    let lines: Vec<&str> = ko.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with('|') {
            i += 1;
            continue;
        }
        let start = i;
        while i < lines.len() && lines[i].trim_start().starts_with('|') {
            i += 1;
        }
        let table = &lines[start..i];
        for l in table {
            assert_eq!(bars(l), bars(table[0]), "misaligned:\n{}", table.join("\n"));
            assert_eq!(l.width(), table[0].width());
        }
        tables += 1;
        wide += table.iter().filter(|l| l.contains("마스킹") || l.contains("먹었다")).count();
    }
    assert!(tables >= 10 && wide >= 4, "{tables} tables, {wide} rows with Korean cells");
}

/// `--out DIR`: the same walk as one self-contained page, DIR/tutorial.html.
#[test]
fn tutorial_writes_a_page() {
    let dir = std::env::temp_dir().join(format!("host-tutorial-page-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for lang in ["en", "ko"] {
        let out = host().args(["trace", "--tutorial", "--lang", lang, "--out"]).arg(&dir).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.is_empty(), "the walk goes to the page");
        let page = std::fs::read_to_string(dir.join("tutorial.html")).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>") && page.contains(&format!("<html lang=\"{lang}\">")));
        // self-contained: nothing fetched
        for external in ["http://", "https://", "<script", "<link", "<img", "url(", "@import"] {
            assert!(!page.contains(external), "{lang}: the page refers to {external}");
        }
        // the same numbers: every line of vectors the terminal prints is on the page
        let text = tutorial(&["--lang", lang]);
        let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
        let mut checked = 0;
        for l in text.lines().filter(|l| l.contains(" = [")) {
            let l = l.trim_start();
            let l = l.strip_prefix("note: ").or_else(|| l.strip_prefix("참고: ")).unwrap_or(l);
            assert!(page.contains(&esc(l)), "{lang}: the page lacks {l:?}");
            checked += 1;
        }
        assert!(checked >= 40, "{checked}");
        for cell in ["<td>0.35</td>", "<td>0.27</td>", "<td>-0.14</td>"] {
            assert!(page.contains(cell), "{lang}: {cell}");
        }
        assert!(!page.contains("index.html"), "no trace beside it to link to");
    }
    let _ = std::fs::remove_dir_all(&dir);
    // and --help says so
    let help = String::from_utf8(host().args(["trace", "--help"]).output().unwrap().stdout).unwrap();
    assert!(help.contains("host trace --tutorial [--lang ko] [--seed S] [--out DIR]") && help.contains("DIR/tutorial.html"), "{help}");
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
