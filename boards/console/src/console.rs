//! The console: reads lines, answers each one, keeps going whatever it is sent.

use core::fmt::{self, Write as _};

use embedded_io::{Read, Write};
use runtime::generate::{generate, generate_more, Control, GenerateOptions, StopReason, Summary};
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::tokenizer::{Tokenizer, Utf8Stream};
use runtime::{Error, Session};

use crate::command::{self, Command, Input, Limits};
use crate::line::{Line, LineReader, Step};
use crate::text::{write_decimal, write_escaped, write_ratio};

/// Bytes a line may hold (without its line end). A longer line is discarded with an error that
/// gives its length.
pub const LINE_BYTES: usize = 256;

/// Bytes a chat template may hold, `{line}` not counted.
pub const TEMPLATE_BYTES: usize = 64;

/// Bytes of one chat turn's text: a newline after the previous reply, the template, the line.
pub const TURN_BYTES: usize = 1 + TEMPLATE_BYTES + LINE_BYTES;

/// Largest `/n`.
pub const MAX_TOKENS: usize = 65_535;

/// What the console prints before it reads each line.
pub const PROMPT_MARKER: &str = "> ";

/// End of transmission (Ctrl-D): ends the session like the end of the input. A UART has no end
/// of input, so `boards/console-qemu.sh` sends this byte when its stdin ends.
pub const EOT: u8 = 0x04;

/// The default chat template: what chat fine-tunes of small GPT-2 models (TinyTalk and the
/// like) are trained on.
pub const DEFAULT_TEMPLATE: &str = "User: {line}\nBot:";

/// Reads that fail one after the other without a byte in between before the console gives up on
/// its input (as at its end).
const MAX_READ_ERRORS: u32 = 16;

/// The settings a session starts with and the commands change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Tokens per reply at most (`/n`).
    pub max_tokens: usize,
    /// Temperature, top-k, top-p and seed (`/temp`, `/top-k`, `/top-p`, `/seed`); the repetition
    /// penalty is not a command (keep it 1 for replies equal to `host --prompt`'s default).
    pub sampler: SamplerConfig,
    /// Chat mode (`/chat`).
    pub chat: bool,
    /// Terminal mode (`/echo`): echo what is received, erase on Backspace, write CR LF for LF.
    pub echo: bool,
}

/// A chat template: the text around each of the user's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Template<'t> {
    text: &'t str,
    before: &'t str,
    after: &'t str,
}

/// Why a chat template was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateError {
    /// It has no `{line}`.
    NoPlaceholder,
    /// It is longer than [`TEMPLATE_BYTES`] without `{line}`.
    TooLong {
        /// Bytes without `{line}`.
        len: usize,
        /// [`TEMPLATE_BYTES`].
        limit: usize,
    },
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TemplateError::NoPlaceholder => f.write_str("the chat template has no {line}"),
            TemplateError::TooLong { len, limit } => {
                write!(f, "the chat template has {len} bytes besides {{line}}, more than {limit}")
            }
        }
    }
}

impl<'t> Template<'t> {
    /// Splits `text` at its first `{line}`.
    pub fn new(text: &'t str) -> Result<Self, TemplateError> {
        let (before, after) = text.split_once("{line}").ok_or(TemplateError::NoPlaceholder)?;
        let len = before.len() + after.len();
        if len > TEMPLATE_BYTES {
            return Err(TemplateError::TooLong { len, limit: TEMPLATE_BYTES });
        }
        Ok(Self { text, before, after })
    }

    /// The template as given.
    pub fn text(&self) -> &'t str {
        self.text
    }
}

/// What the counter of [`Meter::now`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Nanoseconds of wall-clock time (the desktop).
    Nanoseconds,
    /// Instructions (a firmware under QEMU `-icount`).
    Instructions,
    /// Processor cycles at `hz` (a board).
    Cycles {
        /// Clock frequency.
        hz: u32,
    },
}

/// The platform's clock, for `/stats` only: nothing else the console prints depends on it.
pub trait Meter {
    /// The counter now, in [`Meter::unit`]s.
    fn now(&self) -> u64;
    /// What it counts.
    fn unit(&self) -> Unit;
    /// Stack high-water mark and size in bytes, where the platform measures them.
    fn stack(&self) -> Option<(usize, usize)> {
        None
    }
    /// What runs the console, for `/stats` (e.g. `qemu-m4`, `the desktop`).
    fn name(&self) -> &str;
}

/// Why [`Console::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// `/quit`.
    Quit,
    /// The input ended (end of file, [`EOT`], or reads that keep failing).
    EndOfInput,
    /// The output failed (a closed pipe, a write error).
    OutputFailed,
}

/// The last reply, for `/stats`.
#[derive(Debug, Clone, Copy)]
struct Last {
    chat: bool,
    /// Tokens prefilled for the line (a turn: with the template, and the previous reply's last
    /// token when it was cut by `/n`).
    prompt_tokens: usize,
    summary: Summary,
    /// The reply stopped at a newline (chat).
    newline: bool,
    /// The last token drawn (not in the cache: generation draws a token, then feeds it back
    /// only if it goes on).
    last_id: Option<u32>,
    /// Counter ticks from the start of the prefill to the first token, and of the other tokens'
    /// steps (sampling included, output excluded).
    prefill: u64,
    decode: u64,
    settings: Settings,
}

/// The serial console over one session.
///
/// `K` is the capacity of its `Sampler<K>` (the largest `/top-k`, 16·K bytes of stack while a
/// reply runs). With the `K` of `host --prompt` (1024), every reply equals what `host --prompt`
/// prints after the prompt with the same settings.
pub struct Console<'a, const K: usize> {
    tok: &'a Tokenizer<'a>,
    session: Session<'a>,
    /// Tokens in the KV cache (`session.pos()` of them), at least `capacity` slots.
    window: &'a mut [u32],
    template: Template<'a>,
    settings: Settings,
    /// Chat turns in the cache since the last reset.
    turns: usize,
    /// The last token of a chat reply cut by `/n`: drawn, not yet in the cache.
    pending: Option<u32>,
    last: Option<Last>,
    /// One turn's text, assembled. (An array and a length, not `heapless::String<TURN_BYTES>`:
    /// with it the M4 console firmware was 104 B larger, .text + .rodata 297,116 B against
    /// 297,012 B, the M55's 192 B smaller; see `LineReader`'s buffer for the other
    /// measurements.)
    text: [u8; TURN_BYTES],
    /// The tokens of a prompt or a turn (byte-level BPE gives at most one per byte).
    tokens: [u32; TURN_BYTES + 2],
}

/// Bytes of the console's own buffers: line, turn text and turn tokens.
pub const BUFFER_BYTES: usize = LINE_BYTES + TURN_BYTES + 4 * (TURN_BYTES + 2);

impl<'a, const K: usize> Console<'a, K> {
    /// A console over `session` (whose model must have a tokenizer), with `window` of at least
    /// `session.capacity()` token ids, starting with `settings` (their sampler settings must
    /// suit `Sampler<K>`; `/n` later takes 1 to [`MAX_TOKENS`]).
    pub fn new(session: Session<'a>, window: &'a mut [u32], settings: Settings, template: Template<'a>) -> Result<Self, Error> {
        let tok = session.model().tokenizer().ok_or(Error::NoTokenizer)?;
        if window.len() < session.capacity() {
            return Err(Error::BufferTooSmall { needed: session.capacity(), available: window.len() });
        }
        settings.sampler.validate(K)?;
        let mut session = session;
        session.reset();
        Ok(Self {
            tok,
            session,
            window,
            template,
            settings,
            turns: 0,
            pending: None,
            last: None,
            text: [0; TURN_BYTES],
            tokens: [0; TURN_BYTES + 2],
        })
    }

    /// The settings now.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The last token of a chat reply cut by `/n`: drawn and printed, not yet in the cache (the
    /// next turn feeds it first).
    pub fn pending(&self) -> Option<u32> {
        self.pending
    }

    /// The tokens in the KV cache: the conversation in chat mode, else the last prompt and
    /// reply.
    pub fn context(&self) -> &[u32] {
        self.window.get(..self.session.pos()).unwrap_or(&[])
    }

    /// Runs the session: prints the banner, then reads line after line from `rx` and answers on
    /// `tx` until `/quit`, the end of the input, or a failed write. Bad input of any kind gets
    /// one `error:` line and the console goes on.
    pub fn run<R: Read, W: Write>(&mut self, rx: &mut R, tx: &mut W, meter: &impl Meter) -> Exit {
        let mut out = Out { w: tx, crlf: self.settings.echo, failed: false };
        let mut lines = LineReader::<LINE_BYTES>::new();
        self.banner(&mut out);
        loop {
            out.str(PROMPT_MARKER);
            out.flush();
            if out.failed {
                return Exit::OutputFailed;
            }
            // bytes until a line ends or the input does
            let mut errors = 0;
            let mut lost = None; // an input error in this line: it is discarded
            let ended = loop {
                let mut byte = [0u8];
                match rx.read(&mut byte) {
                    Ok(0) => break true,
                    Ok(_) => errors = 0,
                    Err(e) => {
                        errors += 1;
                        if errors >= MAX_READ_ERRORS {
                            break true;
                        }
                        lost.get_or_insert(e);
                        continue;
                    }
                }
                let [b] = byte;
                if b == EOT {
                    break true;
                }
                match lines.push(b) {
                    Step::End => {
                        if out.crlf {
                            out.str("\n");
                        }
                        break false;
                    }
                    Step::Byte if out.crlf => {
                        out.bytes(&byte);
                        out.flush();
                    }
                    Step::Erased if out.crlf => {
                        out.str("\x08 \x08");
                        out.flush();
                    }
                    _ => {}
                }
            };
            let complete = !ended || lines.finish();
            if complete {
                let flow = match lost.take() {
                    Some(e) => {
                        error(&mut out, format_args!("input lost ({e}); the line was discarded"));
                        Flow::Continue
                    }
                    None => self.handle(lines.line(), &mut out, meter),
                };
                if flow == Flow::Quit {
                    out.flush();
                    return Exit::Quit;
                }
                if ended {
                    // the same transcript as a last line with its line end
                    out.str(PROMPT_MARKER);
                }
            }
            if ended {
                out.str("bye\n");
                out.flush();
                return if out.failed { Exit::OutputFailed } else { Exit::EndOfInput };
            }
        }
    }

    /// One line.
    fn handle<W: Write>(&mut self, line: Line<'_>, out: &mut Out<'_, W>, meter: &impl Meter) -> Flow {
        let bytes = match line {
            Line::TooLong { len } => {
                error(out, format_args!("the line has {len} bytes, more than the {LINE_BYTES} of the line buffer; it was discarded"));
                return Flow::Continue;
            }
            Line::Bytes(bytes) => bytes,
        };
        let text = match core::str::from_utf8(bytes) {
            Ok("") => {
                error(out, format_args!("empty line: type a prompt, or /help"));
                return Flow::Continue;
            }
            Ok(text) => text,
            Err(e) => {
                error(
                    out,
                    format_args!("the line is not UTF-8 (byte {} of its {} is invalid); it was discarded", e.valid_up_to(), bytes.len()),
                );
                return Flow::Continue;
            }
        };
        let limits = Limits { max_top_k: K, max_tokens: MAX_TOKENS };
        match command::parse(text, &limits) {
            Err(e) => error(out, e),
            Ok(Input::Prompt(p)) if self.settings.chat => self.turn(p, out, meter),
            Ok(Input::Prompt(p)) => self.reply(p, out, meter),
            Ok(Input::Command(c)) => return self.command(c, out, meter),
        }
        Flow::Continue
    }

    /// A prompt outside chat mode: a new sequence, as `host --prompt` runs it.
    fn reply<W: Write>(&mut self, prompt: &str, out: &mut Out<'_, W>, meter: &impl Meter) {
        // after BOS where the tokenizer says (a SentencePiece one with add_bos_token)
        let n = match self.tok.encode_prompt(prompt, &mut self.tokens) {
            Ok(n) => n,
            Err(e) => return error(out, e),
        };
        let capacity = self.session.capacity();
        if n > capacity {
            return error(out, format_args!("the prompt is {n} tokens; the context holds {capacity}"));
        }
        // the prompt replaces whatever the cache held
        self.forget();
        let opts = GenerateOptions { max_tokens: self.settings.max_tokens, stop_at_eos: true, context_shift: false };
        let prompt = self.tokens.get(..n).unwrap_or(&[]);
        if let Some(last) = stream::<K, W>(&mut self.session, self.window, self.tok, self.settings, prompt, opts, false, out, meter) {
            self.last = Some(last);
        }
    }

    /// A line in chat mode: one turn, appended to the conversation in the cache.
    fn turn<W: Write>(&mut self, line: &str, out: &mut Out<'_, W>, meter: &impl Meter) {
        let separator = if self.turns > 0 { "\n" } else { "" };
        let mut len = 0;
        for part in [separator, self.template.before, line, self.template.after] {
            let Some(dst) = self.text.get_mut(len..len + part.len()) else {
                return error(out, format_args!("the turn does not fit the {TURN_BYTES}-byte turn buffer"));
            };
            dst.copy_from_slice(part.as_bytes());
            len += part.len();
        }
        let Ok(text) = core::str::from_utf8(self.text.get(..len).unwrap_or(&[])) else {
            return error(out, format_args!("the turn is not UTF-8"));
        };
        // the last token of a reply cut by /n goes into the conversation first; a conversation
        // starts with BOS where the tokenizer says
        let head = usize::from(self.pending.is_some());
        if let (Some(p), Some(slot)) = (self.pending, self.tokens.first_mut()) {
            *slot = p;
        }
        let rest = self.tokens.get_mut(head..).unwrap_or(&mut []);
        let encoded = if self.turns == 0 && self.session.pos() == 0 { self.tok.encode_prompt(text, rest) } else { self.tok.encode(text, rest) };
        let n = match encoded {
            Ok(n) => n + head,
            Err(e) => return error(out, e),
        };
        let capacity = self.session.capacity();
        if n > capacity {
            return error(out, format_args!("the turn is {n} tokens with the template; the context holds {capacity}"));
        }
        let opts = GenerateOptions { max_tokens: self.settings.max_tokens, stop_at_eos: true, context_shift: true };
        let tokens = self.tokens.get(..n).unwrap_or(&[]);
        if let Some(last) = stream::<K, W>(&mut self.session, self.window, self.tok, self.settings, tokens, opts, true, out, meter) {
            let cut = last.summary.reason == StopReason::MaxTokens && last.summary.generated > 0;
            self.pending = if cut { last.last_id } else { None };
            self.turns += 1;
            self.last = Some(last);
        }
    }

    /// Clears the KV cache and the conversation.
    fn forget(&mut self) {
        self.session.reset();
        self.turns = 0;
        self.pending = None;
    }

    fn command<W: Write>(&mut self, c: Command, out: &mut Out<'_, W>, meter: &impl Meter) -> Flow {
        let s = &mut self.settings;
        match c {
            Command::MaxTokens(n) => {
                s.max_tokens = n;
                ok(out, format_args!("n {n}"));
            }
            Command::Temperature(t) => {
                s.sampler.temperature = t;
                let _ = write!(out, "ok: temperature ");
                let _ = write_decimal(out, t);
                out.str(if t == 0.0 { " (greedy)\n" } else { "\n" });
            }
            Command::Greedy => {
                s.sampler.temperature = 0.0;
                ok(out, format_args!("temperature 0 (greedy)"));
            }
            Command::TopK(k) => {
                s.sampler.top_k = k;
                ok(out, format_args!("top-k {k}{}", if k == 0 { " (off)" } else { "" }));
            }
            Command::TopP(p) => {
                s.sampler.top_p = p;
                let _ = write!(out, "ok: top-p ");
                let _ = write_decimal(out, p);
                out.str(if p == 1.0 { " (off)\n" } else { "\n" });
            }
            Command::Seed(seed) => {
                s.sampler.seed = seed;
                ok(out, format_args!("seed {seed}"));
            }
            Command::Chat(on) => {
                s.chat = on;
                self.forget();
                if on {
                    let _ = write!(out, "ok: chat on: a line is a turn of \"");
                    let _ = write_escaped(out, self.template.text);
                    out.str("\", the reply ends at a newline, the conversation stays in the context\n");
                } else {
                    ok(out, format_args!("chat off"));
                }
            }
            Command::Reset => {
                self.forget();
                ok(out, format_args!("conversation forgotten, context empty"));
            }
            Command::Echo(on) => {
                s.echo = on;
                out.crlf = on;
                ok(out, format_args!("echo {}", if on { "on" } else { "off" }));
            }
            Command::Stats => self.stats(out, meter),
            Command::Help => self.help(out),
            Command::Quit => {
                out.str("bye\n");
                return Flow::Quit;
            }
        }
        Flow::Continue
    }

    fn banner<W: Write>(&self, out: &mut Out<'_, W>) {
        let model = self.session.model();
        let cfg = model.config();
        let _ = writeln!(
            out,
            "gpt2-mcu console: {} layers, n_embd {}, n_head {}, vocab {}, {} weights; context {} tokens, {} KV cache",
            cfg.n_layer,
            cfg.n_embd,
            cfg.n_head,
            cfg.vocab_size,
            model.weight_dtype().name(),
            self.session.capacity(),
            self.session.kv_dtype().name()
        );
        out.str("a line is a prompt and the reply continues it; /help lists the commands\n");
    }

    fn help<W: Write>(&self, out: &mut Out<'_, W>) {
        let s = &self.settings;
        let on = |b: bool| if b { "on" } else { "off" };
        let _ = writeln!(out, "a line is a prompt: the reply continues it, from a new start each time, sampled from the seed");
        let _ = writeln!(out, "  //text        a prompt that starts with /");
        let _ = writeln!(out, "  /n N          tokens per reply, 1 to {MAX_TOKENS} (now {})", s.max_tokens);
        let _ = write!(out, "  /temp T       temperature, 0 = greedy (now ");
        let _ = write_decimal(out, s.sampler.temperature);
        let _ = writeln!(out, ")");
        let _ = writeln!(out, "  /top-k K      keep the K most likely tokens, 0 = off, at most {K} (now {})", s.sampler.top_k);
        let _ = write!(out, "  /top-p P      keep the most likely tokens up to probability P, 1 = off (now ");
        let _ = write_decimal(out, s.sampler.top_p);
        let _ = writeln!(out, ")");
        let _ = writeln!(out, "  /seed S       seed of the sampler (now {})", s.sampler.seed);
        let _ = writeln!(out, "  /greedy       always the most likely token (/temp 0)");
        let _ = write!(out, "  /chat on|off  chat: a line is a turn of \"");
        let _ = write_escaped(out, self.template.text);
        let _ = writeln!(out, "\", the reply ends at a newline, the conversation stays in the context (now {})", on(s.chat));
        let _ = writeln!(out, "  /reset        forget the conversation");
        let _ = writeln!(out, "  /echo on|off  echo what is typed, Backspace erases, CR LF line ends: for terminals that do neither (now {})", on(s.echo));
        let _ = writeln!(out, "  /stats        the last reply: tokens, why it stopped, speed; memory");
        let _ = writeln!(out, "  /help         this list");
        let _ = writeln!(out, "  /quit         end the session (so does Ctrl-D)");
        let _ = writeln!(
            out,
            "a line holds up to {LINE_BYTES} bytes; a full context ({} tokens) ends a reply, in chat mode the oldest half of it is dropped",
            self.session.capacity()
        );
    }

    fn stats<W: Write>(&self, out: &mut Out<'_, W>, meter: &impl Meter) {
        let capacity = self.session.capacity();
        match &self.last {
            None => out.str("stats: no reply yet\n"),
            Some(last) => {
                let s = &last.summary;
                let _ = write!(out, "stats: last reply: {} prompt tokens, {} generated, stopped: ", last.prompt_tokens, s.generated);
                let _ = match s.reason {
                    StopReason::Eos => writeln!(out, "end-of-text token"),
                    StopReason::MaxTokens => writeln!(out, "{} tokens (/n)", last.settings.max_tokens),
                    StopReason::Stopped if last.newline => writeln!(out, "newline"),
                    StopReason::Stopped => writeln!(out, "by the console"),
                    StopReason::ContextFull { capacity } => writeln!(out, "context full ({capacity} tokens)"),
                    StopReason::Error(e) => writeln!(out, "error: {e}"),
                };
            }
        }
        let _ = write!(out, "stats: context: {} of {capacity} positions in use", self.session.pos());
        if self.settings.chat {
            let _ = write!(out, ", {} chat turns", self.turns);
        }
        if let Some(last) = &self.last {
            let _ = write!(out, "; the last reply shifted the context {} times, re-prefilling {} tokens", last.summary.shifts, last.summary.reprefilled);
        }
        out.str("\n");
        let (arena, kv) = self.session.memory_bytes();
        let _ = writeln!(
            out,
            "stats: memory: arena {arena} B, KV cache {kv} B ({}), token window {} B, sampler {} B ({K} candidates), console buffers {BUFFER_BYTES} B",
            self.session.kv_dtype().name(),
            4 * capacity,
            16 * K
        );
        let Some(last) = &self.last else { return };
        if !last.chat {
            let s = &last.settings;
            let _ = write!(out, "stats: host --prompt LINE -n {} --temperature ", s.max_tokens);
            let _ = write_decimal(out, s.sampler.temperature);
            let _ = write!(out, " --top-k {} --top-p ", s.sampler.top_k);
            let _ = write_decimal(out, s.sampler.top_p);
            let _ = writeln!(
                out,
                " --seed {} --ctx {capacity} --kv-dtype {} prints LINE, then this reply",
                s.sampler.seed,
                self.session.kv_dtype().name()
            );
        }
        write_speed(out, meter, last);
    }
}

/// Whether the console goes on after a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Quit,
}

/// Runs one reply: a new sequence (`chat == false`, [`generate`]) or a turn appended to the
/// cache ([`generate_more`]), streaming the text to `out` as it is drawn, then a newline. A
/// turn's reply ends at the first newline the model writes. Returns what `/stats` needs, or
/// None after an error line (nothing ran).
#[allow(clippy::too_many_arguments)]
fn stream<const K: usize, W: Write>(
    session: &mut Session<'_>,
    window: &mut [u32],
    tok: &Tokenizer<'_>,
    settings: Settings,
    tokens: &[u32],
    opts: GenerateOptions,
    chat: bool,
    out: &mut Out<'_, W>,
    meter: &impl Meter,
) -> Option<Last> {
    let mut sampler = match Sampler::<K>::new(settings.sampler) {
        Ok(s) => s,
        Err(e) => {
            error(out, e);
            return None;
        }
    };
    let mut utf8 = Utf8Stream::new();
    let (mut prefill, mut decode, mut newline, mut last) = (0u64, 0u64, false, None);
    let start = meter.now();
    let mut prev = start;
    let on_token = |id: u32| {
        let t = meter.now();
        if last.is_none() {
            prefill = t.wrapping_sub(start);
        } else {
            decode = decode.wrapping_add(t.wrapping_sub(prev));
        }
        // The token before this one (the prompt's last for the first): SentencePiece drops a
        // word's ▁ after BOS.
        let before = last.or(tokens.last().copied());
        last = Some(id);
        let mut bytes = tok.token_text(before, id).unwrap_or(&[]);
        if chat {
            if let Some(i) = bytes.iter().position(|&b| b == b'\n') {
                bytes = bytes.get(..i).unwrap_or(&[]);
                newline = true;
            }
        }
        for piece in utf8.push(bytes) {
            out.str(piece);
        }
        out.flush();
        prev = meter.now();
        if newline || out.failed {
            Control::Stop
        } else {
            Control::Continue
        }
    };
    let result = if chat {
        generate_more(session, &mut sampler, tokens, window, &opts, on_token)
    } else {
        generate(session, &mut sampler, tokens, window, &opts, on_token)
    };
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            error(out, e);
            return None;
        }
    };
    out.str(utf8.finish());
    out.str("\n");
    if let StopReason::Error(e) = summary.reason {
        error(out, format_args!("the reply stopped after {} tokens: {e}", summary.generated));
    }
    Some(Last { chat, prompt_tokens: tokens.len(), summary, newline, last_id: last, prefill, decode, settings })
}

/// `stats: speed on ...`, the one line that depends on the machine: transcripts compare without
/// it.
fn write_speed<W: Write>(out: &mut Out<'_, W>, meter: &impl Meter, last: &Last) {
    let p = last.prompt_tokens as u64;
    let d = last.summary.generated.saturating_sub(1) as u64;
    let _ = write!(out, "stats: speed on {}: prefill {p} tokens", meter.name());
    match meter.unit() {
        Unit::Nanoseconds => {
            let _ = write!(out, " in ");
            let _ = write_ratio(out, last.prefill, 1_000_000, 3);
            let _ = write!(out, " ms (");
            let _ = write_ratio(out, p.saturating_mul(1_000_000_000), last.prefill, 1);
            let _ = write!(out, " tokens/s), decode {d} tokens in ");
            let _ = write_ratio(out, last.decode, 1_000_000, 3);
            let _ = write!(out, " ms (");
            let _ = write_ratio(out, d.saturating_mul(1_000_000_000), last.decode, 1);
            let _ = write!(out, " tokens/s)");
        }
        Unit::Instructions => {
            let _ = write!(
                out,
                ", {} instructions ({} per token), decode {d} tokens, {} instructions per token",
                last.prefill,
                last.prefill / p.max(1),
                last.decode / d.max(1)
            );
        }
        Unit::Cycles { hz } => {
            let hz = u64::from(hz);
            let per = last.decode / d.max(1);
            let _ = write!(out, ", {} cycles ({} per token, ", last.prefill, last.prefill / p.max(1));
            let _ = write_ratio(out, last.prefill.saturating_mul(1000) / p.max(1), hz, 3);
            let _ = write!(out, " ms), decode {d} tokens, {per} cycles per token (");
            let _ = write_ratio(out, per.saturating_mul(1000), hz, 3);
            let _ = write!(out, " ms, ");
            let _ = write_ratio(out, hz, per, 2);
            let _ = write!(out, " tokens/s at {} MHz)", hz / 1_000_000);
        }
    }
    if let Some((used, size)) = meter.stack() {
        let _ = write!(out, "; stack high-water {used} of {size} B");
    }
    out.str("\n");
}

fn ok<W: Write>(out: &mut Out<'_, W>, what: impl fmt::Display) {
    let _ = writeln!(out, "ok: {what}");
}

fn error<W: Write>(out: &mut Out<'_, W>, what: impl fmt::Display) {
    let _ = writeln!(out, "error: {what}");
}

/// The output stream: bytes as given, or with CR LF line ends in terminal mode. The first write
/// error is kept (and every later write skipped), so a closed pipe ends the session cleanly.
struct Out<'w, W: Write> {
    w: &'w mut W,
    crlf: bool,
    failed: bool,
}

impl<W: Write> Out<'_, W> {
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn bytes(&mut self, mut bytes: &[u8]) {
        if self.crlf {
            while let Some(i) = bytes.iter().position(|&b| b == b'\n') {
                let (line, rest) = bytes.split_at(i);
                self.raw(line);
                self.raw(b"\r\n");
                bytes = rest.get(1..).unwrap_or(&[]);
            }
        }
        self.raw(bytes);
    }

    fn raw(&mut self, bytes: &[u8]) {
        if !self.failed && !bytes.is_empty() && self.w.write_all(bytes).is_err() {
            self.failed = true;
        }
    }

    fn flush(&mut self) {
        if !self.failed && self.w.flush().is_err() {
            self.failed = true;
        }
    }
}

impl<W: Write> fmt::Write for Out<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.str(s);
        Ok(())
    }
}
