//! `host console`: the boards' serial console (`gpt2-console`) on stdin and stdout.
//!
//! The same code as the console firmware, over the same session shape (context
//! `min(128, n_ctx)`, int8 KV cache, prefill batch 1, `Sampler<1024>`) and the same starting
//! settings (`firmware_common::settings`), so a scripted session gives the same bytes here as on
//! the UART of `boards/console-qemu.sh qemu-m4|qemu-m55`, except the `stats: speed:` line.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use firmware_common::settings;
use host_tools::plan::KvArg;
use gpt2_console::{Console, Exit, Meter, Template, Unit};
use runtime::{Model, Session, SessionSizes};

use super::{capacity_for, load, FIRMWARE_MODEL, MAX_TOP_K};

const _: () = assert!(MAX_TOP_K == settings::CONSOLE_TOP_K_CAPACITY, "the console must sample as host --prompt does");

#[derive(Args, Clone)]
pub struct ConsoleArgs {
    /// Model blob (made by `host-tools convert`, with a tokenizer). Default: the model shipped
    /// in the repo as the boards' console runs it, q8 (models/default/model-q8.blob).
    #[arg(long, default_value = FIRMWARE_MODEL, hide_default_value = true)]
    model: PathBuf,
    /// Storage of the KV cache: f32, f16 or int8 (default: the firmware's, int8).
    #[arg(long, value_enum)]
    kv_dtype: Option<KvArg>,
    /// KV-cache capacity in tokens (default: the firmware's, min(128, n_ctx)).
    #[arg(long)]
    ctx: Option<usize>,
    /// Chat template: the text around each line in chat mode, with `{line}` where the line
    /// goes; `\n` is a newline.
    #[arg(long, default_value = "User: {line}\\nBot:")]
    chat_template: String,
}

/// Wall-clock nanoseconds since the console started.
struct Clock(Instant);

impl Meter for Clock {
    fn now(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
    fn unit(&self) -> Unit {
        Unit::Nanoseconds
    }
    fn name(&self) -> &str {
        "the desktop"
    }
}

/// std's stdin as an `embedded_io::Read` (what a UART driver is on a board).
struct In<R>(R);

impl<R: std::io::Read> embedded_io::ErrorType for In<R> {
    type Error = std::io::Error;
}

impl<R: std::io::Read> embedded_io::Read for In<R> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, std::io::Error> {
        loop {
            match self.0.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
}

/// std's stdout as an `embedded_io::Write`.
struct Out<W>(W);

impl<W: std::io::Write> embedded_io::ErrorType for Out<W> {
    type Error = std::io::Error;
}

impl<W: std::io::Write> embedded_io::Write for Out<W> {
    fn write(&mut self, buf: &[u8]) -> Result<usize, std::io::Error> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> Result<(), std::io::Error> {
        self.0.flush()
    }
}

pub fn cmd_console(args: &ConsoleArgs) -> Result<()> {
    let template_text = args.chat_template.replace("\\n", "\n");
    let template = Template::new(&template_text).map_err(|e| anyhow::anyhow!("--chat-template: {e}"))?;
    let file = load(&args.model)?;
    let model: Model<'_> = file.model()?;
    if model.tokenizer().is_none() {
        bail!("this blob has no tokenizer; the console needs one to read prompts");
    }
    let n_ctx = model.config().n_ctx();
    let capacity = match args.ctx {
        Some(_) => capacity_for(&model, args.ctx)?,
        None => settings::capacity(n_ctx),
    };
    let kv = args.kv_dtype.map_or(settings::KV_DTYPE, KvArg::dtype);
    // a board's buffers, sized the same way (its prefill batch too, so /stats reads the same)
    let sizes = SessionSizes::with_kv(model.config(), capacity, settings::PREFILL_BATCH, kv);
    let mut arena = vec![0.0f32; sizes.arena_len];
    let mut kv_buf = vec![0.0f32; sizes.kv_len];
    let mut window = vec![0u32; capacity];
    let session = Session::with_kv_dtype(&model, &mut arena, &mut kv_buf, capacity, kv)?;
    let mut console = Console::<MAX_TOP_K>::new(session, &mut window, settings::console_settings(false), template)?;
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let exit = console.run(&mut In(stdin.lock()), &mut Out(stdout.lock()), &Clock(Instant::now()));
    match exit {
        Exit::Quit | Exit::EndOfInput => Ok(()),
        Exit::OutputFailed => bail!("writing to stdout failed"),
    }
}
