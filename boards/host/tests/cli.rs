//! The `host` command line, as users and outside checks call it.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_host"))
}

/// Converts a fixture with the real `host-tools` binary logic (library call) into a temp file.
fn fixture_blob(case: &str) -> PathBuf {
    let dir = root().join("tests/fixtures").join(case);
    let conv = host_tools::convert::convert(&dir, &Default::default()).unwrap();
    let out = std::env::temp_dir().join(format!("host-cli-{case}-{}.blob", std::process::id()));
    std::fs::write(&out, conv.blob).unwrap();
    out
}

fn reference(case: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(root().join("tests/fixtures").join(case).join("reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn join(ids: &serde_json::Value) -> String {
    ids.as_array().unwrap().iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",")
}

#[test]
fn logits_writes_the_reference_logits() {
    let blob = fixture_blob("odd");
    let r = reference("odd");
    let out = std::env::temp_dir().join(format!("host-cli-logits-{}.npy", std::process::id()));
    let st = host().args(["logits", "--model"]).arg(&blob).args(["--ids", &join(&r["input_ids"]), "--out"]).arg(&out).status().unwrap();
    assert!(st.success());
    let (shape, got) = host_tools::npy::read_f32(&out).unwrap();
    let (want_shape, want) = host_tools::npy::read_f32(&root().join("tests/fixtures/odd/logits.npy")).unwrap();
    assert_eq!(shape, want_shape);
    let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs() / (1e-4 + 1e-4 * b.abs())).fold(0.0f32, f32::max);
    assert!(worst <= 1.0, "logits off by {worst} x tolerance");
}

#[test]
fn greedy_print_ids_matches_transformers() {
    for case in ["tiny", "untied"] {
        let blob = fixture_blob(case);
        let r = reference(case);
        let want = join(&r["greedy"]["new_ids"]);
        let n = r["greedy"]["new_ids"].as_array().unwrap().len();
        let out = host()
            .arg("--model")
            .arg(&blob)
            .args(["--ids", &join(&r["greedy"]["prompt_ids"]), "-n", &n.to_string(), "--greedy", "--print-ids"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(stdout.lines().last().unwrap(), want, "{case}");
    }
}

/// Errors: non-zero exit, exactly one line on stderr, no panic message.
fn assert_one_line_error(args: &[&str], needle: &str) {
    let out = host().args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: stderr has several lines:\n{err}");
    assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn bad_input_gets_one_clear_line() {
    let blob = fixture_blob("tiny");
    let b = blob.to_str().unwrap();
    assert_one_line_error(&["--model", b, "--ids", "1,2,64", "-n", "3", "--greedy"], "token id 64 is out of range (vocab_size 64)");
    assert_one_line_error(&["--model", b, "--ids", "1,x", "-n", "3"], "invalid value");
    assert_one_line_error(&["--model", "/nonexistent.blob", "--ids", "1", "-n", "3"], "not found");
    assert_one_line_error(&["--bogus-flag"], "--bogus-flag");
    let ids: Vec<String> = (0..33).map(|i| (i % 64).to_string()).collect();
    assert_one_line_error(&["logits", "--model", b, "--ids", &ids.join(","), "--out", "/tmp/x.npy"], "33 ids do not fit");
    assert_one_line_error(&["--model", b, "--ids", &ids.join(","), "-n", "1", "--greedy"], "the context holds 32");
    let garbage = std::env::temp_dir().join("host-cli-garbage.blob");
    std::fs::write(&garbage, b"this is not a blob, just some bytes that are long enough").unwrap();
    assert_one_line_error(&["--model", garbage.to_str().unwrap(), "--ids", "1"], "not a model blob");
}

/// `cargo run -p host` with no arguments: the shipped model streams text.
#[test]
fn no_arguments_streams_text_from_the_default_model() {
    let out = host().output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let words = text.split_whitespace().count();
    assert!(words > 50, "expected a few hundred tokens of text, got {words} words:\n{text}");
    let err = String::from_utf8(out.stderr).unwrap();
    for needle in ["prompt tokens:", "prefill:", "decode:", "memory: arena"] {
        assert!(err.contains(needle), "stats lack {needle:?}:\n{err}");
    }
}

/// The streamed text is exactly the detokenized ids, and tokenize/detokenize round-trip.
#[test]
fn streamed_text_tokenize_and_detokenize_agree() {
    let out = host().args(["--prompt", "ROMEO:", "-n", "40", "--seed", "3", "--print-ids", "--ignore-eos"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    // stdout is the streamed text, one newline, then the ids and a newline; the text itself may
    // end in newlines, so split at the last one before the ids, not by lines
    let (streamed, ids) = stdout.strip_suffix('\n').unwrap().rsplit_once('\n').unwrap();
    assert_eq!(ids.split(',').count(), 40);
    let de = host().args(["detokenize", "--ids", ids]).output().unwrap();
    assert!(de.status.success());
    let detok = String::from_utf8(de.stdout).unwrap(); // the text and one newline
    assert_eq!(format!("ROMEO:{}", detok.strip_suffix('\n').unwrap()), streamed);

    let text = "To be, or not to be: that is the question.\n  Whether 'tis nobler — naïve café";
    let tk = host().args(["tokenize", "--text", text]).output().unwrap();
    assert!(tk.status.success());
    let ids = String::from_utf8(tk.stdout).unwrap().lines().last().unwrap().to_string();
    let de = host().args(["detokenize", "--ids", &ids]).output().unwrap();
    assert_eq!(String::from_utf8(de.stdout).unwrap(), format!("{text}\n"));
}

#[test]
fn same_seed_same_text_and_stop_string() {
    let run = |args: &[&str]| String::from_utf8(host().args(args).output().unwrap().stdout).unwrap();
    let a = run(&["--prompt", "KING:", "-n", "30", "--seed", "9"]);
    let b = run(&["--prompt", "KING:", "-n", "30", "--seed", "9"]);
    let c = run(&["--prompt", "KING:", "-n", "30", "--seed", "10"]);
    assert_eq!(a, b);
    assert_ne!(a, c);
    // stop at the first "e": the text up to it and nothing after
    let full = run(&["--prompt", "KING:", "-n", "30", "--seed", "9", "--ignore-eos"]);
    let stopped = run(&["--prompt", "KING:", "-n", "30", "--seed", "9", "--ignore-eos", "--stop", "e"]);
    let cut = full.trim_end_matches('\n');
    let at = cut["KING:".len()..].find('e').map(|i| i + "KING:".len()).unwrap();
    assert_eq!(stopped.trim_end_matches('\n'), &cut[..at]);
}

#[test]
fn perplexity_prints_loss_and_rejects_bad_sampling() {
    let file = std::env::temp_dir().join(format!("host-cli-ppl-{}.txt", std::process::id()));
    std::fs::write(&file, "ROMEO: But soft, what light through yonder window breaks?\n").unwrap();
    let out = host().args(["perplexity", "--file"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("mean cross-entropy:") && s.contains("perplexity:"), "{s}");
    // nats per character = nats/token × tokens scored / characters of the file
    let field = |key: &str| -> f64 {
        let line = s.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key:?} line in {s}"));
        line[key.len()..].split_whitespace().next().unwrap().parse().unwrap()
    };
    let (tokens, per_token, per_char) = (field("tokens scored:"), field("mean cross-entropy:"), field("nats per character:"));
    let chars = "ROMEO: But soft, what light through yonder window breaks?\n".chars().count() as f64;
    assert!(s.contains(&format!("({chars} characters)")), "{s}");
    assert!((per_char - per_token * tokens / chars).abs() < 1e-5, "{per_char} vs {per_token} x {tokens} / {chars}");
    // each names the broken rule and the value given, not every rule
    assert_one_line_error(&["--prompt", "x", "--temperature", "-1"], "--temperature -1: must be a finite number ≥ 0 (0 is greedy)");
    assert_one_line_error(&["--prompt", "x", "--top-p", "1.5"], "--top-p 1.5: must be in (0, 1]");
    assert_one_line_error(&["--prompt", "x", "--top-p", "NaN"], "--top-p NaN: must be in (0, 1]");
    assert_one_line_error(&["--prompt", "x", "--top-k", "5000"], "--top-k 5000: must be at most 1024");
    assert_one_line_error(&["--prompt", "x", "--repetition-penalty", "0"], "--repetition-penalty 0: must be a finite number > 0");
    assert_one_line_error(&["--prompt", "", "-n", "3"], "empty");
    // a prompt longer than the model's whole context: only shortening can help, so --ctx is not
    // suggested; with a smaller --ctx, raising it can, up to the model's
    let long = "word ".repeat(400);
    assert_one_line_error(&["--prompt", &long, "-n", "3"], "(the model's n_ctx is 128: shorten the prompt)");
    assert_one_line_error(&["--prompt", "To be, or not to be, that is the question:", "--ctx", "4", "-n", "3"], "(shorten it, or raise --ctx up to the model's 128)");
}

fn q8_blob() -> String {
    root().join("models/default/model-q8.blob").to_str().unwrap().to_string()
}

/// `--board qemu-m4` with the firmware's run settings allocates what the firmware allocates
/// (context 128, int8 KV, prefill batch 1) and prints exactly the blessed firmware transcript.
#[test]
fn board_that_fits_runs_like_its_firmware() {
    let out = host()
        .args(["--board", "qemu-m4", "--model", &q8_blob(), "--prompt", "To be, or not to be, that is the question:"])
        .args(["-n", "48", "--temperature", "0.8", "--top-k", "40", "--top-p", "0.95", "--seed", "42", "--print-ids"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let want = std::fs::read_to_string(root().join("boards/expected/qemu-m4.run")).unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), want, "host --board qemu-m4 differs from the firmware transcript");
    let err = String::from_utf8(out.stderr).unwrap();
    let budget = err.lines().next().unwrap();
    assert!(budget.starts_with("board qemu-m4: context 128, KV cache int8; RAM "), "{budget}");
    assert!(budget.contains(" of 4,194,304 B (arena "), "{budget}");

    // logits: the board's session (here with an f32 cache) gives the reference logits.
    let blob = fixture_blob("odd");
    let r = reference("odd");
    let npy = std::env::temp_dir().join(format!("host-cli-board-logits-{}.npy", std::process::id()));
    let st = host()
        .args(["logits", "--board", "pico2", "--kv-dtype", "f32", "--model"])
        .arg(&blob)
        .args(["--ids", &join(&r["input_ids"]), "--out"])
        .arg(&npy)
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    assert!(String::from_utf8_lossy(&st.stderr).starts_with("board pico2: context "));
    let (_, got) = host_tools::npy::read_f32(&npy).unwrap();
    let (_, want) = host_tools::npy::read_f32(&root().join("tests/fixtures/odd/logits.npy")).unwrap();
    let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs() / (1e-4 + 1e-4 * b.abs())).fold(0.0f32, f32::max);
    assert!(worst <= 1.0, "logits off by {worst} x tolerance");
}

/// A model that does not fit: non-zero exit, one line, the byte counts, what would fit.
#[test]
fn board_that_does_not_fit_fails_with_byte_counts() {
    let q8 = q8_blob();
    // 1 MB of q8 weights in 512 KB of flash, 152 KB of buffers in 128 KB of RAM.
    let args = ["--board", "nucleo-f446re", "--model", &q8, "--prompt", "ROMEO:", "-n", "3"];
    assert_one_line_error(&args, "error: model does not fit nucleo-f446re: flash needs ");
    for needle in ["board has 524,288 B (short by ", "; RAM needs ", "board has 131,072 B (short by ", "; largest context that fits: "] {
        assert_one_line_error(&args, needle);
    }
    // Flash alone: the context cannot help.
    assert_one_line_error(&["--board", "nrf52840-dk", "--model", &q8], "board has 1,048,576 B (short by ");
    assert_one_line_error(&["--board", "nrf52840-dk", "--model", &q8], "a smaller context does not help");
    // The largest context is the planner's (the last one whose RAM fits 128 KiB).
    let err = String::from_utf8(host().args(args).output().unwrap().stderr).unwrap();
    let target = host_tools::plan::Target::board(host_tools::boards::find("nucleo-f446re").unwrap());
    let plan = host_tools::plan::Plan::new(&std::fs::read(&q8).unwrap(), target, None, None).unwrap();
    let largest = plan.largest_ctx.unwrap();
    assert!(err.contains(&format!("largest context that fits: {largest} (of n_ctx 128")), "{err}");
    assert_one_line_error(&["logits", "--board", "nucleo-f446re", "--model", &q8, "--ids", "1,2", "--out", "/tmp/x.npy"], "model does not fit nucleo-f446re");
}

#[test]
fn unknown_board_lists_the_known_ones() {
    assert_one_line_error(&["--board", "arduino-uno", "--prompt", "x"], "unknown board \"arduino-uno\"; known boards: qemu-m4, qemu-m55, pico2, pico-plus2, nrf52840-dk");
}

/// `host bench` (the performance issue's command shape) prints every figure it promises,
/// with numbers (not timing-checked: any speed passes).
#[test]
fn bench_prints_its_figures() {
    let out = host().args(["bench", "--prompt-len", "4", "-n", "2", "--runs", "1"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    for label in ["prefill:", "decode:", "weight bytes per decoded token:", "memory read bandwidth", "KV cache bytes read per decoded token:", "on 2 MiB pages"] {
        let line = stdout.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no '{label}' line in:\n{stdout}"));
        assert!(line.chars().any(|c| c.is_ascii_digit()) || line.contains("unknown"), "no figure in '{line}'");
    }
    // the bound is read with as many threads as decode ran with
    assert!(stdout.contains("memory read bandwidth (this blob, 1 thread): "), "{stdout}");
    let two = host().args(["bench", "--prompt-len", "4", "-n", "2", "--runs", "1", "--threads", "2"]).output().unwrap();
    assert!(two.status.success(), "{}", String::from_utf8_lossy(&two.stderr));
    let two = String::from_utf8(two.stdout).unwrap();
    let line = two.lines().find(|l| l.starts_with("memory read bandwidth")).unwrap_or_else(|| panic!("no bandwidth line in:\n{two}"));
    assert!(line.starts_with("memory read bandwidth (this blob, 2 threads): ") && line.contains("best of 1-4 streams a thread: "), "{line}");
}

/// The demo (`cargo run -p host`, no arguments) is the command its help text names: the shipped
/// model from the demo prompt with context shift, so a newcomer can reproduce and vary it.
#[test]
fn the_demo_is_the_command_its_help_names() {
    let help = String::from_utf8(host().arg("--help").output().unwrap().stdout).unwrap();
    let line = help.lines().find(|l| l.contains("host --prompt")).expect("the help names the demo's command");
    let prompt = line.split('\'').nth(1).expect("the prompt in single quotes").replace("\\n", "\n");
    let demo = host().args(["-n", "40"]).output().unwrap();
    assert!(demo.status.success(), "{}", String::from_utf8_lossy(&demo.stderr));
    let same = host().args(["--prompt", &prompt, "--context-shift", "-n", "40"]).output().unwrap();
    assert!(same.status.success(), "{}", String::from_utf8_lossy(&same.stderr));
    assert_eq!(String::from_utf8_lossy(&demo.stdout), String::from_utf8_lossy(&same.stdout));
    assert!(String::from_utf8_lossy(&demo.stdout).starts_with(&prompt), "the demo echoes its prompt");
}

#[test]
fn a_closed_stdout_ends_quietly() {
    // `host bench … | head -1`: the reader goes away after one line; host must not panic in
    // println! (Rust ignores SIGPIPE unless told otherwise), it ends as other Unix tools do
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let blob = fixture_blob("tiny");
    let mut child = host()
        .args(["bench", "--model"])
        .arg(&blob)
        .args(["--prompt-len", "4", "-n", "4", "--runs", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("model:"), "{first:?}");
    // the pipe's read end is closed here: the rest of bench's lines go nowhere
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert!(out.status.success() || out.status.signal() == Some(13), "{:?}: {stderr}", out.status);
    }
}
