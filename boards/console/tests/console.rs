//! The console over the shipped model, driven through byte slices: chat turns continue the
//! cached conversation exactly as a fresh run over it would, the context shifts by its policy,
//! terminal mode echoes and edits, failing input and output are handled, and `/stats` formats
//! each kind of counter.

use std::convert::Infallible;
use std::path::PathBuf;

use gpt2_console::{Console, Exit, Meter, Settings, Template, Unit, DEFAULT_TEMPLATE};
use host_tools::blob_file::BlobFile;
use runtime::generate::{generate, Control, GenerateOptions};
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::{KvDType, Model, Session, SessionSizes};

const K: usize = 1024;

fn model_file() -> BlobFile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/default/model-q8.blob");
    BlobFile::read(&path).unwrap()
}

fn start() -> Settings {
    Settings {
        max_tokens: 48,
        sampler: SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.0, seed: 42 },
        chat: false,
        echo: false,
    }
}

/// A fixed counter: every reading 1000 units later than the last.
struct Ticks(std::cell::Cell<u64>, Unit);

impl Meter for Ticks {
    fn now(&self) -> u64 {
        self.0.set(self.0.get() + 1000);
        self.0.get()
    }
    fn unit(&self) -> Unit {
        self.1
    }
    fn stack(&self) -> Option<(usize, usize)> {
        matches!(self.1, Unit::Cycles { .. }).then_some((4096, 65536))
    }
    fn name(&self) -> &str {
        "a test"
    }
}

fn ticks(unit: Unit) -> Ticks {
    Ticks(std::cell::Cell::new(0), unit)
}

/// `embedded_io` over a byte slice (input) and a Vec (output).
struct Input<'a>(&'a [u8]);
impl embedded_io::ErrorType for Input<'_> {
    type Error = Infallible;
}
impl embedded_io::Read for Input<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        let n = buf.len().min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}
struct Output(Vec<u8>);
impl embedded_io::ErrorType for Output {
    type Error = Infallible;
}
impl embedded_io::Write for Output {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

fn run(console: &mut Console<'_, K>, input: &[u8], meter: &impl Meter) -> (Exit, String) {
    let mut out = Output(Vec::new());
    let exit = console.run(&mut Input(input), &mut out, meter);
    (exit, String::from_utf8(out.0).unwrap())
}

/// The responses after the banner, split at the prompt markers.
fn responses(transcript: &str) -> Vec<String> {
    transcript.splitn(3, '\n').nth(2).unwrap().split("> ").skip(1).map(str::to_string).collect()
}

/// A fresh run from `prompt`, stopped at the first newline as a chat reply is: the reply text.
fn fresh_chat_reply(model: &Model<'_>, capacity: usize, prompt: &[u32], settings: &Settings) -> String {
    let sizes = SessionSizes::with_kv(model.config(), capacity, 1, KvDType::I8);
    let (mut arena, mut kv, mut window) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len], vec![0; capacity]);
    let mut s = Session::with_kv_dtype(model, &mut arena, &mut kv, capacity, KvDType::I8).unwrap();
    let mut sampler = Sampler::<K>::new(settings.sampler).unwrap();
    let tok = model.tokenizer().unwrap();
    let mut bytes = Vec::new();
    let opts = GenerateOptions { max_tokens: settings.max_tokens, stop_at_eos: true, context_shift: true };
    generate(&mut s, &mut sampler, prompt, &mut window, &opts, |id| {
        let b = tok.token_bytes(id).unwrap();
        match b.iter().position(|&c| c == b'\n') {
            Some(i) => {
                bytes.extend_from_slice(&b[..i]);
                Control::Stop
            }
            None => {
                bytes.extend_from_slice(b);
                Control::Continue
            }
        }
    })
    .unwrap();
    String::from_utf8_lossy(&bytes).into_owned() + "\n"
}

fn encode(model: &Model<'_>, text: &str) -> Vec<u32> {
    let mut ids = vec![0; text.len()];
    let n = model.tokenizer().unwrap().encode(text, &mut ids).unwrap();
    ids.truncate(n);
    ids
}

#[test]
fn chat_turns_continue_the_cached_conversation_as_a_fresh_run_would() {
    let file = model_file();
    let model = file.model().unwrap();
    for (capacity, n, lines) in [
        (128, 8, &["Hello.", "Who are you?", "And where is the king?"][..]),
        // a small context: the turns shift it, by the policy of generate_more
        (32, 12, &["Hello, good sir, how do you do?", "Tell me of the king and the queen.", "And then?", "Why?"][..]),
    ] {
        let sizes = SessionSizes::with_kv(model.config(), capacity, 1, KvDType::I8);
        let (mut arena, mut kv, mut window) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len], vec![0; capacity]);
        let session = Session::with_kv_dtype(&model, &mut arena, &mut kv, capacity, KvDType::I8).unwrap();
        let settings = Settings { max_tokens: n, chat: true, ..start() };
        let mut console = Console::<K>::new(session, &mut window, settings, Template::new(DEFAULT_TEMPLATE).unwrap()).unwrap();
        let meter = ticks(Unit::Instructions);
        let mut shifted = false;
        for (turn, line) in lines.iter().enumerate() {
            let before = console.context().to_vec();
            let pending = console.pending();
            let (exit, out) = run(&mut console, format!("{line}\n/stats\n").as_bytes(), &meter);
            assert_eq!(exit, Exit::EndOfInput);
            let r = responses(&out);
            let (reply, stats) = (&r[0], &r[1]);
            let after = console.context().to_vec();
            // the turn's new tokens: the last token of a reply cut by /n, then its text
            let text = format!("{}User: {line}\nBot:", if turn > 0 { "\n" } else { "" });
            let new = encode(&model, &text);
            let prompt_tokens: usize = stats.split("last reply: ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
            let head = prompt_tokens - new.len();
            assert_eq!(head, usize::from(pending.is_some()), "turn {turn}: {prompt_tokens} prompt tokens for {} of text", new.len());
            let shifts: usize = stats.split("shifted the context ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
            let generated: usize = stats.split("prompt tokens, ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
            // what the reply was drawn from: the kept conversation, then the new tokens
            let start = if shifts == 0 {
                // nothing dropped: the cache grew by the new tokens and the reply only
                assert_eq!(&after[..before.len()], &before[..], "turn {turn}: the conversation was re-prefilled or changed");
                assert_eq!(after.len(), before.len() + prompt_tokens + generated - 1, "turn {turn}: {stats}");
                after[..before.len() + prompt_tokens].to_vec()
            } else if before.len() + prompt_tokens <= capacity {
                shifted = true;
                // the new tokens fit beside the conversation: the reply filled the cache, and
                // generation's own shift kept its most recent tokens; a fresh run from the whole
                // conversation shifts the same way
                let mut start = before.clone();
                start.extend(pending);
                start.extend_from_slice(&new);
                // the cache is the end of the conversation and the reply's fed tokens (all but
                // the last drawn): it starts with the end of `start`
                let dropped = (start.len() + generated - 1).checked_sub(after.len()).expect("the cache grew by more than the reply");
                assert!(dropped > 0 && dropped < start.len(), "turn {turn}: {dropped} tokens dropped of {}: {stats}", start.len());
                assert_eq!(&after[..start.len() - dropped], &start[dropped..], "turn {turn}: the shift kept other tokens");
                start
            } else {
                shifted = true;
                // a shift before the reply keeps min(cached, capacity / 2 - new) tokens
                let keep = (capacity / 2).saturating_sub(prompt_tokens).min(before.len());
                let mut kept = before[before.len() - keep..].to_vec();
                kept.extend_from_slice(&after[keep..keep + prompt_tokens]);
                assert_eq!(&after[..kept.len()], &kept[..], "turn {turn}: the shift kept other tokens");
                kept
            };
            assert_eq!(&start[start.len() - new.len()..], &new[..], "turn {turn}: the turn's text");
            assert_eq!(*reply, fresh_chat_reply(&model, capacity, &start, &settings), "turn {turn} (capacity {capacity})");
        }
        if capacity == 32 {
            assert!(shifted, "the small context never shifted");
        }
    }
}

#[test]
fn terminal_mode_echoes_erases_and_ends_lines_with_cr_lf() {
    let file = model_file();
    let model = file.model().unwrap();
    let sizes = SessionSizes::with_kv(model.config(), 128, 1, KvDType::I8);
    let (mut arena, mut kv, mut window) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len], vec![0; 128]);
    let session = Session::with_kv_dtype(&model, &mut arena, &mut kv, 128, KvDType::I8).unwrap();
    let settings = Settings { echo: true, ..start() };
    let mut console = Console::<K>::new(session, &mut window, settings, Template::new(DEFAULT_TEMPLATE).unwrap()).unwrap();
    // a terminal sends CR for Enter, DEL for Backspace
    let (_, out) = run(&mut console, b"/n x\x7f2\r/seed 7\r", &ticks(Unit::Instructions));
    assert!(out.starts_with("gpt2-mcu console: "));
    assert!(out.contains("\r\na line is a prompt"), "{out:?}");
    assert!(out.ends_with("> /n x\x08 \x082\r\nok: n 2\r\n> /seed 7\r\nok: seed 7\r\n> bye\r\n"), "{out:?}");
    assert!(!out.replace("\r\n", "").contains('\n'), "a bare LF in terminal mode: {out:?}");
}

#[test]
fn stats_formats_each_counter_and_nothing_else_prints_timing() {
    let file = model_file();
    let model = file.model().unwrap();
    // the fake counter advances 1000 per reading: 1000 for the prefill, 1000 per decode step
    for (unit, want) in [
        (
            Unit::Nanoseconds,
            "stats: speed on a test: prefill 5 tokens in 0.001 ms (5000000.0 tokens/s), decode 1 tokens in 0.001 ms (1000000.0 tokens/s)\n",
        ),
        (Unit::Instructions, "stats: speed on a test: prefill 5 tokens, 1000 instructions (200 per token), decode 1 tokens, 1000 instructions per token\n"),
        (
            Unit::Cycles { hz: 64_000_000 },
            "stats: speed on a test: prefill 5 tokens, 1000 cycles (200 per token, 0.003 ms), decode 1 tokens, 1000 cycles per token (0.016 ms, 64000.00 tokens/s at 64 MHz); stack high-water 4096 of 65536 B\n",
        ),
    ] {
        let sizes = SessionSizes::with_kv(model.config(), 128, 1, KvDType::I8);
        let (mut arena, mut kv, mut window) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len], vec![0; 128]);
        let session = Session::with_kv_dtype(&model, &mut arena, &mut kv, 128, KvDType::I8).unwrap();
        let mut console = Console::<K>::new(session, &mut window, start(), Template::new(DEFAULT_TEMPLATE).unwrap()).unwrap();
        let (_, out) = run(&mut console, b"/stats\n/n 2\nROMEO:\n/stats\n", &ticks(unit));
        let r = responses(&out);
        let memory = format!("arena {} B, KV cache {} B (int8)", sizes.arena_len * 4, sizes.kv_len * 4);
        assert_eq!(r[0], format!("stats: no reply yet\nstats: context: 0 of 128 positions in use\nstats: memory: {memory}, token window 512 B, sampler 16384 B (1024 candidates), console buffers 1869 B\n"));
        let stats: Vec<&str> = r[3].split_inclusive('\n').collect();
        assert_eq!(stats[0], "stats: last reply: 5 prompt tokens, 2 generated, stopped: 2 tokens (/n)\n");
        assert_eq!(stats[3], "stats: host --prompt LINE -n 2 --temperature 0.8 --top-k 40 --top-p 0.95 --seed 42 --ctx 128 --kv-dtype int8 prints LINE, then this reply\n");
        assert_eq!(stats[4], want);
        // no other line mentions time or a counter
        let other: String = r.iter().enumerate().filter(|(i, _)| *i != 3).map(|(_, s)| s.as_str()).collect();
        for word in ["ms", "tokens/s", "instructions", "cycles"] {
            assert!(!other.split_whitespace().any(|w| w.starts_with(word)), "{word:?} in {other:?}");
        }
    }
}

#[test]
fn failing_input_and_output_are_handled() {
    let file = model_file();
    let model = file.model().unwrap();
    let sizes = SessionSizes::with_kv(model.config(), 128, 1, KvDType::I8);
    let (mut arena, mut kv, mut window) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len], vec![0; 128]);
    let session = Session::with_kv_dtype(&model, &mut arena, &mut kv, 128, KvDType::I8).unwrap();
    let mut console = Console::<K>::new(session, &mut window, start(), Template::new(DEFAULT_TEMPLATE).unwrap()).unwrap();

    // a read error in the middle of a line (a UART overrun): that line is reported and dropped
    struct Flaky(Vec<Result<u8, &'static str>>);
    #[derive(Debug)]
    struct Lost(&'static str);
    impl std::fmt::Display for Lost {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Lost {}
    impl embedded_io::Error for Lost {
        fn kind(&self) -> embedded_io::ErrorKind {
            embedded_io::ErrorKind::Other
        }
    }
    impl embedded_io::ErrorType for Flaky {
        type Error = Lost;
    }
    impl embedded_io::Read for Flaky {
        fn read(&mut self, buf: &mut [u8]) -> Result<usize, Lost> {
            if self.0.is_empty() {
                return Ok(0);
            }
            match self.0.remove(0) {
                Ok(b) => {
                    buf[0] = b;
                    Ok(1)
                }
                Err(e) => Err(Lost(e)),
            }
        }
    }
    let bytes = |s: &str| s.bytes().map(Ok).collect::<Vec<_>>();
    let mut input = bytes("/n 3");
    input.push(Err("3 bytes lost"));
    input.extend(bytes("\n/seed 9\n"));
    let mut out = Output(Vec::new());
    assert_eq!(console.run(&mut Flaky(input), &mut out, &ticks(Unit::Instructions)), Exit::EndOfInput);
    let r = responses(&String::from_utf8(out.0).unwrap());
    assert_eq!(r, ["error: input lost (3 bytes lost); the line was discarded\n", "ok: seed 9\n", "bye\n"]);
    assert_eq!(console.settings().max_tokens, 48);

    // input that keeps failing ends the session
    let mut out = Output(Vec::new());
    let errors: Vec<_> = (0..100).map(|_| Err("gone")).collect();
    assert_eq!(console.run(&mut Flaky(errors), &mut out, &ticks(Unit::Instructions)), Exit::EndOfInput);

    // a closed output ends it too
    struct Closed;
    impl embedded_io::ErrorType for Closed {
        type Error = embedded_io::ErrorKind;
    }
    impl embedded_io::Write for Closed {
        fn write(&mut self, _: &[u8]) -> Result<usize, embedded_io::ErrorKind> {
            Err(embedded_io::ErrorKind::BrokenPipe)
        }
        fn flush(&mut self) -> Result<(), embedded_io::ErrorKind> {
            Ok(())
        }
    }
    assert_eq!(console.run(&mut Input(b"ROMEO:\n"), &mut Closed, &ticks(Unit::Instructions)), Exit::OutputFailed);
}

#[test]
fn refuses_what_it_cannot_run() {
    let file = model_file();
    let model = file.model().unwrap();
    let sizes = SessionSizes::with_kv(model.config(), 16, 1, KvDType::I8);
    let (mut arena, mut kv, mut window) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len], vec![0; 16]);
    let t = Template::new(DEFAULT_TEMPLATE).unwrap();
    let session = Session::with_kv_dtype(&model, &mut arena, &mut kv, 16, KvDType::I8).unwrap();
    assert_eq!(
        Console::<K>::new(session, &mut window[..15], start(), t).err(),
        Some(runtime::Error::BufferTooSmall { needed: 16, available: 15 })
    );
    let session = Session::with_kv_dtype(&model, &mut arena, &mut kv, 16, KvDType::I8).unwrap();
    let bad = Settings { sampler: SamplerConfig { top_k: 41, ..start().sampler }, ..start() };
    assert!(Console::<40>::new(session, &mut window, bad, t).is_err());
    assert_eq!(Template::new("no placeholder").unwrap_err(), gpt2_console::TemplateError::NoPlaceholder);
    let long = format!("{}{{line}}", "x".repeat(65));
    assert_eq!(Template::new(&long).unwrap_err(), gpt2_console::TemplateError::TooLong { len: 65, limit: 64 });
    // a turn longer than a small context is refused with its numbers, and the chat goes on
    let session = Session::with_kv_dtype(&model, &mut arena, &mut kv, 16, KvDType::I8).unwrap();
    let mut console = Console::<K>::new(session, &mut window, Settings { chat: true, max_tokens: 2, ..start() }, t).unwrap();
    let (_, out) = run(&mut console, b"one two three four five six seven eight nine ten\nhi\n", &ticks(Unit::Instructions));
    let r = responses(&out);
    assert!(r[0].starts_with("error: the turn is ") && r[0].ends_with(" tokens with the template; the context holds 16\n"), "{r:?}");
    assert_eq!(r[1].lines().count(), 1);
}
