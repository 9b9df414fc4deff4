//! `host console`, as a user and the CI check drive it: every reply to a prompt outside chat mode
//! is exactly what `host --prompt LINE` prints after LINE with the settings in force; every bad
//! line gets one `error:` line and the session goes on; the session ends at `/quit`, at the end
//! of the input and at EOT.
//!
//! `session_replies_equal_host_prompt` walks the committed session `boards/console-session.txt`
//! (or `CONSOLE_SESSION`), through `host console` or, when `CONSOLE_TRANSCRIPT` names one, a
//! transcript made elsewhere (`boards/console-check.sh` passes the QEMU firmware's).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn q8_blob() -> PathBuf {
    root().join("models/default/model-q8.blob")
}

/// `host console --model BLOB` with `input` on stdin: its stdout (the exit status must be 0).
fn console(model: &Path, input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["console", "--model"])
        .arg(model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // write from a thread: the console answers while it reads, and its stdout must be drained
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "host console failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "host console wrote to stderr: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The lines of a script as the console splits them: at LF, CR or CR LF; the input ends at the
/// first EOT (Ctrl-D), and a last line without its line end counts.
fn script_lines(bytes: &[u8]) -> Vec<&[u8]> {
    let bytes = &bytes[..bytes.iter().position(|&b| b == gpt2_console::EOT).unwrap_or(bytes.len())];
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                lines.push(&bytes[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&bytes[start..i]);
                if bytes.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if start < bytes.len() {
        lines.push(&bytes[start..]);
    }
    lines
}

/// A line as typed: its bytes after Backspace and DEL erased characters (`None` if it is longer
/// than the line buffer: then it is discarded whole, erasures included), and what terminal mode
/// echoes while it is typed (each byte; `\b \b` for an erased character).
fn typed(raw: &[u8]) -> (Option<Vec<u8>>, Vec<u8>) {
    let (mut line, mut echo, mut overflow) = (Vec::new(), Vec::new(), false);
    for &b in raw {
        if (b == 0x08 || b == 0x7f) && !overflow {
            if line.is_empty() {
                continue;
            }
            while line.last().is_some_and(|&c| c & 0xC0 == 0x80) && line.len() > 1 {
                line.pop();
            }
            line.pop();
            echo.extend_from_slice(b"\x08 \x08");
            continue;
        }
        echo.push(b);
        if !overflow {
            line.push(b);
            overflow = line.len() > gpt2_console::LINE_BYTES;
        }
    }
    echo.extend_from_slice(b"\r\n");
    ((!overflow).then_some(line), echo)
}

/// The settings a reply is made with, as the script wrote their values (`host` parses them as
/// the console does).
#[derive(Debug, Clone)]
struct Settings {
    n: String,
    temperature: String,
    top_k: String,
    top_p: String,
    seed: String,
    chat: bool,
    echo: bool,
}

impl Settings {
    /// The firmware's (boards/firmware-common/src/settings.rs), written out independently.
    fn start() -> Self {
        let s = |v: &str| v.to_string();
        Self { n: s("48"), temperature: s("0.8"), top_k: s("40"), top_p: s("0.95"), seed: s("42"), chat: false, echo: false }
    }

    /// Applies an accepted command line.
    fn apply(&mut self, line: &str) {
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        let value = || words.get(1).map(|v| v.to_string()).unwrap();
        match words[0] {
            "/n" => self.n = value(),
            "/temp" => self.temperature = value(),
            "/greedy" => self.temperature = "0".into(),
            "/top-k" => self.top_k = value(),
            "/top-p" => self.top_p = value(),
            "/seed" => self.seed = value(),
            "/chat" => self.chat = words[1] == "on",
            "/echo" => self.echo = words[1] == "on",
            "/reset" | "/stats" | "/help" => {}
            other => panic!("accepted command {other:?} the check does not know"),
        }
    }
}

/// What `host --prompt PROMPT` prints with `settings`: Ok(stdout) or Err(stderr).
fn host_prompt(model: &Path, prompt: &str, s: &Settings, ctx: &str, kv: &str) -> Result<Vec<u8>, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_host"))
        .arg("--model")
        .arg(model)
        .arg(format!("--prompt={prompt}"))
        .args(["-n", &s.n, "--temperature", &s.temperature, "--top-k", &s.top_k, "--top-p", &s.top_p, "--seed", &s.seed])
        .args(["--ctx", ctx, "--kv-dtype", kv])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn crlf(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 16);
    for &b in bytes {
        if b == b'\n' {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

/// Reads up to and including the newline that ends the response: the one followed by the next
/// prompt marker, or the end of the transcript. (For responses the console itself writes:
/// command answers and error lines never hold "\n> ".)
fn take_response<'t>(rest: &mut &'t [u8]) -> &'t [u8] {
    let end = rest.windows(3).position(|w| w == b"\n> ").map_or(rest.len(), |i| i + 1);
    let (response, tail) = rest.split_at(end);
    *rest = tail;
    response
}

/// What a walk found.
#[derive(Debug, Default)]
struct Walk {
    /// Replies outside chat mode, each equal to `host --prompt`'s.
    replies: usize,
    /// Prompts `host --prompt` refuses as too long for the context, refused by the console too.
    too_long: usize,
    /// Chat replies (one line each).
    chat: usize,
    /// `error:` lines.
    errors: usize,
    /// Accepted commands.
    commands: usize,
    /// Prompts with a NUL, which `host --prompt` cannot be given (not compared).
    unchecked: usize,
}

/// Walks `transcript` along the `script` it answered: every line gets its response in order;
/// every reply to a prompt outside chat mode is compared with `host --prompt`. Panics with the
/// line number and both texts at the first difference.
fn walk(model: &Path, script: &[u8], transcript: &[u8]) -> Walk {
    let mut rest = transcript;
    // the banner: two lines; the context and KV dtype `host --prompt` needs are in the first
    let banner = take_response(&mut rest);
    let first = String::from_utf8_lossy(banner.split(|&b| b == b'\n').next().unwrap()).into_owned();
    let ctx = first.split("context ").nth(1).unwrap().split(' ').next().unwrap().to_string();
    let kv = first.split("tokens, ").nth(1).unwrap().split(' ').next().unwrap().to_string();
    let mut s = Settings::start();
    let mut w = Walk::default();
    let mut quit = false;
    for (i, raw) in script_lines(script).into_iter().enumerate() {
        let at = format!("script line {} ({:?})", i + 1, String::from_utf8_lossy(raw));
        assert!(rest.starts_with(b"> "), "{at}: no prompt marker, transcript continues {:?}", String::from_utf8_lossy(&rest[..rest.len().min(200)]));
        rest = &rest[2..];
        let (line, echoed) = typed(raw);
        if s.echo {
            assert!(rest.starts_with(&echoed), "{at}: the line is not echoed");
            rest = &rest[echoed.len()..];
        }
        let line = line.unwrap_or_default();
        let text = std::str::from_utf8(&line).ok().filter(|t| !t.is_empty());
        let Some(text) = text else {
            // empty, not UTF-8, longer than the line buffer
            let r = take_response(&mut rest);
            assert!(r.starts_with(b"error: ") && r.iter().filter(|&&b| b == b'\n').count() == 1, "{at}: {:?}", String::from_utf8_lossy(r));
            w.errors += 1;
            continue;
        };
        if text.starts_with('/') && !text.starts_with("//") {
            let r = take_response(&mut rest);
            if r.starts_with(b"error: ") {
                assert_eq!(r.iter().filter(|&&b| b == b'\n').count(), 1, "{at}: an error is one line");
                w.errors += 1;
            } else if text.split_ascii_whitespace().next() == Some("/quit") {
                assert_eq!(r, if s.echo { &b"bye\r\n"[..] } else { b"bye\n" }, "{at}");
                quit = true;
                break;
            } else {
                if !text.starts_with("/stats") && !text.starts_with("/help") {
                    assert!(r.starts_with(b"ok: "), "{at}: {:?}", String::from_utf8_lossy(r));
                }
                s.apply(text);
                w.commands += 1;
            }
            continue;
        }
        let prompt = text.strip_prefix('/').filter(|_| text.starts_with("//")).unwrap_or(text);
        if prompt.contains('\0') && !s.chat {
            // a prompt `host --prompt` cannot take (no NUL in a command line): not compared
            take_response(&mut rest);
            w.unchecked += 1;
            continue;
        }
        if s.chat {
            let r = take_response(&mut rest);
            let newlines = r.iter().filter(|&&b| b == b'\n').count();
            assert!(newlines == 1 && r.ends_with(b"\n"), "{at}: a chat reply is one line: {:?}", String::from_utf8_lossy(r));
            w.chat += 1;
            continue;
        }
        match host_prompt(model, prompt, &s, &ctx, &kv) {
            Ok(stdout) => {
                let reply = stdout.strip_prefix(prompt.as_bytes()).unwrap_or_else(|| panic!("{at}: host did not echo the prompt"));
                let want = if s.echo { crlf(reply) } else { reply.to_vec() };
                if !rest.starts_with(&want) {
                    let got = &rest[..rest.len().min(want.len() + 40)];
                    panic!(
                        "{at}: the reply differs from host --prompt with {s:?}\n host:    {:?}\n console: {:?}",
                        String::from_utf8_lossy(&want),
                        String::from_utf8_lossy(got)
                    );
                }
                rest = &rest[want.len()..];
                w.replies += 1;
            }
            Err(stderr) => {
                // host's refusal names the prompt's tokens and the context; the console's must too
                let tokens = stderr.split("the prompt has ").nth(1).and_then(|t| t.split(' ').next()).unwrap_or_else(|| panic!("{at}: host failed: {stderr}"));
                let r = take_response(&mut rest);
                let want = format!("error: the prompt is {tokens} tokens; the context holds {ctx}\n");
                assert_eq!(String::from_utf8_lossy(r), want, "{at}");
                w.too_long += 1;
            }
        }
    }
    if !quit {
        assert_eq!(rest, b"> bye\n", "the end of the input ends the session");
        rest = &[];
    }
    assert!(rest.is_empty(), "the transcript goes on after the session ended: {:?}", String::from_utf8_lossy(rest));
    w
}

#[test]
fn replies_equal_host_prompt_for_several_prompts_and_settings() {
    // the default model (f32), and the q8 one the firmware runs
    let script = "ROMEO:\n\
                  /n 30\nTo be, or not to be:\n\
                  /temp 0.3\n/seed 1\nKING LEAR:\n\
                  /greedy\nO, what a rogue and peasant slave am I!\n\
                  /temp 1.2\n/top-k 0\n/top-p 0.7\nnaïve café — 日本\n\
                  /top-p 1\n/top-k 1024\n  leading spaces and a tab\tin it\n\
                  /temp 0.9\n/top-k 3\n/top-p 0.5\n/n 128\n//slash: a prompt that starts with /\n\
                  /n 1\nx\n";
    for model in [root().join("models/default/model.blob"), q8_blob()] {
        let transcript = console(&model, script.as_bytes());
        let w = walk(&model, script.as_bytes(), &transcript);
        assert_eq!(w.replies, 8, "{w:?}");
        assert_eq!(w.errors, 0, "{w:?}");
    }
}

#[test]
fn edited_lines_terminal_mode_and_eot_are_walked_too() {
    // Backspace and DEL edit, CR and CR LF end lines, terminal mode echoes, EOT ends the input
    let script = b"/n 5\nROM\x08\x08OMEO:\r/echo on\r\nJULIT\x7fET:\n\x7f\x7fHA\x7fAMLET:\r/echo off\r\x00a NUL\n/n 3\x04/n 9\nignored\n";
    let transcript = console(&q8_blob(), script);
    let w = walk(&q8_blob(), script, &transcript);
    assert_eq!((w.replies, w.unchecked, w.commands, w.errors), (3, 1, 4, 0), "{w:?}");
}

#[test]
fn session_replies_equal_host_prompt() {
    let session = std::env::var_os("CONSOLE_SESSION").map_or(root().join("boards/console-session.txt"), PathBuf::from);
    let model = std::env::var_os("CONSOLE_MODEL").map_or(q8_blob(), PathBuf::from);
    let script = std::fs::read(&session).unwrap();
    let transcript = match std::env::var_os("CONSOLE_TRANSCRIPT") {
        Some(path) => std::fs::read(path).unwrap(),
        None => console(&model, &script),
    };
    let w = walk(&model, &script, &transcript);
    println!(
        "{}: {} replies equal host --prompt, {} prompts too long for the context refused by both, {} chat replies, {} commands, {} error lines, {} prompts with a NUL not compared",
        session.display(),
        w.replies,
        w.too_long,
        w.chat,
        w.commands,
        w.errors,
        w.unchecked
    );
    if std::env::var_os("CONSOLE_SESSION").is_none() {
        // the committed session holds every kind of line
        assert!(w.replies >= 10 && w.too_long >= 1 && w.chat >= 4 && w.commands >= 15 && w.errors >= 12, "{w:?}");
    }
}

/// The lines after the banner, one response each (for sessions without multi-line replies).
fn responses(transcript: &[u8]) -> Vec<String> {
    let text = String::from_utf8(transcript.to_vec()).unwrap();
    let body = text.splitn(3, '\n').nth(2).unwrap();
    body.split("> ").skip(1).map(|r| r.to_string()).collect()
}

#[test]
fn every_bad_line_gets_one_error_with_its_numbers_and_the_session_goes_on() {
    let long = "x".repeat(300);
    let cjk = "日本語のテキスト".repeat(10);
    let mut input = Vec::new();
    for line in ["/n 1", "", &long, &cjk, "/nope", "/n", "/n 70000", "/temp x", "/top-p 2", "/top-k 1025", "/seed 1.5", "/chat yes", "/stats now"] {
        input.extend_from_slice(line.as_bytes());
        input.push(b'\n');
    }
    input.extend_from_slice(b"caf\xe9\n\xff\n\xc3\n");
    input.extend_from_slice(b"ROMEO:\n");
    let out = console(&q8_blob(), &input);
    let r = responses(&out);
    let want: Vec<&str> = vec![
        "ok: n 1\n",
        "error: empty line: type a prompt, or /help\n",
        "error: the line has 300 bytes, more than the 256 of the line buffer; it was discarded\n",
        "error: the prompt is 240 tokens; the context holds 128\n",
        "error: unknown command /nope (/help lists the commands; //text sends a prompt that starts with /)\n",
        "error: /n needs a value, e.g. /n 48\n",
        "error: /n 70000: must be between 1 and 65535\n",
        "error: /temp \"x\" is not a number\n",
        "error: /top-p 2: must be more than 0 and at most 1\n",
        "error: /top-k 1025: must be between 0 and 1024\n",
        "error: /seed \"1.5\" is not a whole number from 0 to 18446744073709551615\n",
        "error: /chat takes on or off (found \"yes\")\n",
        "error: /stats takes no further value (found \"now\")\n",
        "error: the line is not UTF-8 (byte 3 of its 4 is invalid); it was discarded\n",
        "error: the line is not UTF-8 (byte 0 of its 1 is invalid); it was discarded\n",
        "error: the line is not UTF-8 (byte 0 of its 1 is invalid); it was discarded\n",
    ];
    assert_eq!(&r[..want.len()], &want[..]);
    // and then the session goes on: a one-token reply, then the end of the input
    assert_eq!(r.len(), want.len() + 2, "{r:?}");
    assert_eq!(r[want.len()].lines().count(), 1);
    assert_eq!(r[want.len() + 1], "bye\n");
}

#[test]
fn the_input_ends_at_eof_and_at_eot_like_quit() {
    // a last line without its line end is still a line
    let a = console(&q8_blob(), b"/n 2\n/seed 3");
    let b = console(&q8_blob(), b"/n 2\n/seed 3\n");
    let c = console(&q8_blob(), b"/n 2\n/seed 3\n/quit\n");
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert!(a.ends_with(b"> ok: seed 3\n> bye\n"), "{}", String::from_utf8_lossy(&a));
    // EOT (Ctrl-D) ends it; nothing after it is read
    let d = console(&q8_blob(), b"/n 2\n/seed 3\x04/seed 4\nROMEO:\n");
    assert_eq!(a, d);
    // and an empty input is the banner and bye
    let e = console(&q8_blob(), b"");
    assert_eq!(responses(&e), ["bye\n"]);
}

#[test]
fn chat_turns_prefill_only_their_new_text() {
    let input = b"/chat on\n/n 5\nHello there.\n/stats\nAnd then?\n/stats\n";
    let out = String::from_utf8(console(&q8_blob(), input)).unwrap();
    let stats: Vec<&str> = out
        .lines()
        .map(|l| l.trim_start_matches("> "))
        .filter(|l| l.starts_with("stats: last reply:") || l.starts_with("stats: context:"))
        .collect();
    assert_eq!(stats.len(), 4, "{out}");
    // `host tokenize` counts each turn's text: the first "User: ...\nBot:", the next with the
    // newline that closes the previous reply (and its last token if /n cut it)
    let count = |text: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_host")).args(["tokenize", "--model"]).arg(q8_blob()).args(["--text", text]).output().unwrap();
        String::from_utf8(o.stdout).unwrap().trim().split(',').count()
    };
    let first = count("User: Hello there.\nBot:");
    let second = count("\nUser: And then?\nBot:");
    let prompt_tokens = |l: &str| l.split("last reply: ").nth(1).unwrap().split(' ').next().unwrap().parse::<usize>().unwrap();
    let positions = |l: &str| l.split("context: ").nth(1).unwrap().split(' ').next().unwrap().parse::<usize>().unwrap();
    let generated = |l: &str| l.split("prompt tokens, ").nth(1).unwrap().split(' ').next().unwrap().parse::<usize>().unwrap();
    assert_eq!(prompt_tokens(stats[0]), first, "{stats:?}");
    let cut = stats[0].contains("stopped: 5 tokens");
    assert_eq!(prompt_tokens(stats[2]), second + usize::from(cut), "{stats:?}");
    // the cache grows by the new text and the reply: nothing is prefilled twice
    let after_first = positions(stats[1]);
    assert_eq!(after_first, first + generated(stats[0]) - 1);
    assert_eq!(positions(stats[3]), after_first + prompt_tokens(stats[2]) + generated(stats[2]) - 1);
}

#[test]
fn help_and_the_old_command_lines_still_work() {
    let out = Command::new(env!("CARGO_BIN_EXE_host")).args(["console", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in ["--model", "--kv-dtype", "--ctx", "--chat-template"] {
        assert!(help.contains(flag), "{help}");
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_host")).args(["console", "--chat-template", "no placeholder"]).output().unwrap();
    assert!(!bad.status.success());
    assert_eq!(String::from_utf8(bad.stderr).unwrap(), "error: --chat-template: the chat template has no {line}\n");
}
