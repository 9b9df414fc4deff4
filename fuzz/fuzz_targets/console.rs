//! The serial console's input side on arbitrary bytes: the line reader, the command parser and
//! (mode bit 0) the whole console over a small model.
//!
//! Input: a mode byte, then the bytes the console receives. Checked besides "no panic":
//! - line reader: a line holds at most `LINE_BYTES` bytes, a longer one is `TooLong` with its
//!   true length; the lines are the line ends (LF, CR, CR LF counted once) plus a last partial
//!   one, as counted independently;
//! - parser: a line that does not start with `/` is the prompt `line`, `//text` the prompt
//!   `/text`; a command's value is in its stated range (`/n` 1..=65535, `/temp` finite and
//!   `>= 0`, `/top-k` at most the sampler's capacity, `/top-p` in (0, 1]); errors format;
//! - console (mode bit 0; the first 512 bytes, skipped when a `/n` asks for more than 32
//!   tokens): `Console<64>` over `tok300-f16` (16-token context) ends at the end of the input or
//!   `/quit`, never on its output; what it writes is UTF-8 unless terminal mode echoed raw input
//!   bytes.

#![no_main]

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::OnceLock;

use gpt2_console::command::{self, Command, Input, Limits};
use gpt2_console::line::{Line, LineReader, Step};
use gpt2_console::{Console, Exit, Meter, Settings, Template, Unit, DEFAULT_TEMPLATE, LINE_BYTES, MAX_TOKENS};
use libfuzzer_sys::fuzz_target;
use runtime::sampler::SamplerConfig;
use runtime::{KvDType, Model, Session, SessionSizes};

mod common;
use common::{Aligned, BLOBS};

const K: usize = 64;

fn model() -> &'static Model<'static> {
    static BLOB: OnceLock<Aligned> = OnceLock::new();
    static MODEL: OnceLock<Model<'static>> = OnceLock::new();
    MODEL.get_or_init(|| {
        let bytes = BLOBS.iter().find(|(n, _)| *n == "tok300-f16").map(|(_, b)| *b).expect("tok300-f16");
        let blob = BLOB.get_or_init(|| Aligned::new(bytes));
        Model::from_blob(blob.bytes()).expect("the base blob loads")
    })
}

fn check_line(line: &[u8], limits: &Limits) {
    let Ok(text) = std::str::from_utf8(line) else { return };
    let parsed = command::parse(text, limits);
    assert_eq!(parsed, command::parse(text, limits), "parsing is deterministic");
    match parsed {
        Ok(Input::Prompt(p)) => {
            if let Some(rest) = text.strip_prefix("//") {
                assert_eq!(p.len(), rest.len() + 1);
                assert_eq!(p, &text[1..]);
            } else {
                assert!(!text.starts_with('/'), "{text:?} parsed as a prompt");
                assert_eq!(p, text);
            }
        }
        Ok(Input::Command(c)) => {
            assert!(text.starts_with('/') && !text.starts_with("//"));
            match c {
                Command::MaxTokens(n) => assert!((1..=limits.max_tokens).contains(&n)),
                Command::Temperature(t) => assert!(t >= 0.0 && t.is_finite()),
                Command::TopK(k) => assert!(k <= limits.max_top_k),
                Command::TopP(p) => assert!(p > 0.0 && p <= 1.0),
                _ => {}
            }
            // every accepted value is one the sampler accepts too
            let mut cfg = SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.0, seed: 0 };
            match c {
                Command::Temperature(t) => cfg.temperature = t,
                Command::TopK(k) => cfg.top_k = k,
                Command::TopP(p) => cfg.top_p = p,
                _ => {}
            }
            cfg.validate(limits.max_top_k).expect("an accepted command gives valid sampler settings");
        }
        Err(e) => {
            assert!(text.starts_with('/') && !text.starts_with("//"));
            let mut s = String::new();
            write!(s, "{e}").unwrap();
            assert!(!s.is_empty() && !s.contains('\n'), "an error is one line: {s:?}");
        }
    }
}

struct In<'a>(&'a [u8]);
impl embedded_io::ErrorType for In<'_> {
    type Error = Infallible;
}
impl embedded_io::Read for In<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        let n = buf.len().min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}
struct Out(Vec<u8>);
impl embedded_io::ErrorType for Out {
    type Error = Infallible;
}
impl embedded_io::Write for Out {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}
struct Clock(std::cell::Cell<u64>);
impl Meter for Clock {
    fn now(&self) -> u64 {
        self.0.set(self.0.get().wrapping_add(7));
        self.0.get()
    }
    fn unit(&self) -> Unit {
        Unit::Cycles { hz: 1_000_000 }
    }
    fn name(&self) -> &str {
        "the fuzzer"
    }
}

/// True if some `/n` in `input` asks for more than `max` tokens (a fuzz input should stay fast).
fn asks_for_many_tokens(input: &[u8], max: u64) -> bool {
    input.windows(2).enumerate().filter(|(_, w)| w == b"/n").any(|(i, _)| {
        let digits: Vec<u8> = input[i + 2..].iter().skip_while(|b| b.is_ascii_whitespace() || **b == b'+').take_while(|b| b.is_ascii_digit()).copied().collect();
        std::str::from_utf8(&digits).ok().and_then(|d| d.parse::<u64>().ok()).map_or(digits.len() > 2, |n| n > max)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, input)) = data.split_first() else { return };
    let limits = Limits { max_top_k: K, max_tokens: MAX_TOKENS };

    // the line reader against an independent count of line ends
    let mut reader = LineReader::<LINE_BYTES>::new();
    let mut lines = 0usize;
    let (mut ends, mut after_cr) = (0usize, false);
    for &b in input {
        match b {
            b'\n' if after_cr => after_cr = false,
            b'\n' | b'\r' => {
                ends += 1;
                after_cr = b == b'\r';
            }
            _ => after_cr = false,
        }
        if reader.push(b) == Step::End {
            lines += 1;
            match reader.line() {
                Line::Bytes(line) => {
                    assert!(line.len() <= LINE_BYTES);
                    assert!(!line.contains(&b'\n') && !line.contains(&b'\r'));
                    check_line(line, &limits);
                }
                Line::TooLong { len } => assert!(len > LINE_BYTES),
            }
        }
    }
    assert_eq!(lines, ends, "one line per line end");
    if reader.finish() {
        if let Line::Bytes(line) = reader.line() {
            check_line(line, &limits);
        }
    }

    // the whole console, on a short input
    if mode & 1 == 0 {
        return;
    }
    let input = &input[..input.len().min(512)];
    if asks_for_many_tokens(input, 32) {
        return;
    }
    let model = model();
    let capacity = model.config().n_ctx().min(16);
    let sizes = SessionSizes::with_kv(model.config(), capacity, 1, KvDType::I8);
    let (mut arena, mut kv, mut window) = (vec![0.0f32; sizes.arena_len], vec![0.0f32; sizes.kv_len], vec![0u32; capacity]);
    let session = Session::with_kv_dtype(model, &mut arena, &mut kv, capacity, KvDType::I8).expect("session");
    let settings = Settings {
        max_tokens: 8,
        sampler: SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.0, seed: u64::from(mode) },
        chat: mode & 2 != 0,
        echo: mode & 4 != 0,
    };
    let template = Template::new(DEFAULT_TEMPLATE).expect("the default template");
    let mut console = Console::<K>::new(session, &mut window, settings, template).expect("console");
    let mut out = Out(Vec::new());
    let exit = console.run(&mut In(input), &mut out, &Clock(std::cell::Cell::new(0)));
    assert!(matches!(exit, Exit::Quit | Exit::EndOfInput), "{exit:?}");
    let echoed = settings.echo || input.windows(8).any(|w| w == b"/echo on");
    if !echoed {
        assert!(std::str::from_utf8(&out.0).is_ok(), "the console wrote invalid UTF-8");
    }
    assert!(out.0.starts_with(b"gpt2-mcu console: "));
    assert!(console.context().len() <= capacity);
});
