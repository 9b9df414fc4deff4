//! The console firmware: the serial console (`gpt2_console`, the code `host console` runs) on
//! the board's UART, over the same static buffers and runtime path as the fixed demo.
//!
//! What it prints on the UART is the console's transcript and nothing else (no boot report), so
//! the same script gives the same bytes as `host console` with the same blob. `/quit` (or the end
//! of the input, EOT) ends the program with status 0 through [`Platform::quit`]; a blob that does
//! not load prints one `error:` line on the UART and ends it with status 1.
//!
//! What a board provides is a [`SerialPort`]: the UART set up at 115200 8N1, its receive
//! interrupt filling a ring buffer (`gpt2_console::ring`), blocking writes.

use core::fmt;
use core::marker::PhantomData;

use embedded_io::Write;
use gpt2_console::ring::ByteRing;
use gpt2_console::{Console, Exit, Meter, Template, Unit};
use runtime::{Model, Session};

use crate::io::{Counts, Platform};
use crate::{counter, settings, stack, Board};

/// A board's console UART.
pub trait SerialPort {
    /// The receiving half: blocks until at least one byte is there (reads from the ring the
    /// interrupt fills).
    type Rx: embedded_io::Read;
    /// The transmitting half: blocking writes.
    type Tx: embedded_io::Write;
    /// Whether the console starts in terminal mode (`/echo on`: echo, Backspace, CR LF): yes on
    /// a real board, where a person types into a terminal; no under QEMU, where a script is
    /// piped in and the transcript must equal `host console`'s.
    const TERMINAL: bool;
    /// For the documentation and reports, e.g. `UART0 (CMSDK APB UART)`.
    const NAME: &'static str;
    /// Sets up the UART and unmasks its receive interrupt; called once, after the board's `init`.
    fn open() -> (Self::Rx, Self::Tx);
    /// Body of the interrupt handler (`DefaultHandler`): handles `irqn` and returns true if it is
    /// this port's interrupt.
    fn on_interrupt(irqn: i16) -> bool;
}

/// Runs the console on `S` until `/quit` or the end of the input, then ends the program:
/// status 0, or 1 when the blob does not load or the UART fails.
///
/// `arena`, `kv` and `window` are the board's statics, sized as for the fixed demo.
pub fn run<P: Platform, S: SerialPort>(
    board: &Board,
    blob: &'static [u8],
    arena: &'static mut [f32],
    kv: &'static mut [f32],
    window: &'static mut [u32],
    capacity: usize,
) -> ! {
    let ok = match cortex_m::Peripherals::take() {
        Some(mut p) => {
            P::start_counter(&mut p);
            console::<P, S>(board, blob, arena, kv, window, capacity)
        }
        None => false,
    };
    P::quit(ok)
}

fn console<P: Platform, S: SerialPort>(
    board: &Board,
    blob: &'static [u8],
    arena: &'static mut [f32],
    kv: &'static mut [f32],
    window: &'static mut [u32],
    capacity: usize,
) -> bool {
    let (mut rx, mut tx) = S::open();
    // the whole blob validated once, CRC-32 included
    let model = match Model::from_blob(blob) {
        Ok(m) => m,
        Err(e) => return fail(&mut tx, e),
    };
    let session = match Session::with_kv_dtype(&model, arena, kv, capacity, settings::KV_DTYPE) {
        Ok(s) => s,
        Err(e) => return fail(&mut tx, e),
    };
    let template = match Template::new(settings::CHAT_TEMPLATE) {
        Ok(t) => t,
        Err(e) => return fail(&mut tx, e),
    };
    let start = settings::console_settings(S::TERMINAL);
    let mut console = match Console::<{ settings::CONSOLE_TOP_K_CAPACITY }>::new(session, window, start, template) {
        Ok(c) => c,
        Err(e) => return fail(&mut tx, e),
    };
    let meter = BoardMeter::<P> { board, platform: PhantomData };
    console.run(&mut rx, &mut tx, &meter) != Exit::OutputFailed
}

/// One `error:` line on the UART; false.
fn fail(tx: &mut impl Write, e: impl fmt::Display) -> bool {
    struct Text<'t, W>(&'t mut W);
    impl<W: Write> fmt::Write for Text<'_, W> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0.write_all(s.as_bytes()).map_err(|_| fmt::Error)
        }
    }
    let _ = fmt::Write::write_fmt(&mut Text(tx), format_args!("error: {e}\n"));
    let _ = tx.flush();
    false
}

/// `/stats` on a board: the platform's counter (instructions under QEMU, cycles on hardware)
/// and the stack high-water mark.
struct BoardMeter<'b, P> {
    board: &'b Board,
    platform: PhantomData<P>,
}

impl<P: Platform> Meter for BoardMeter<'_, P> {
    fn now(&self) -> u64 {
        match P::COUNTS {
            Counts::Instructions => counter::instructions(P::now(), self.board.sysclk_hz),
            Counts::Cycles => P::now(),
        }
    }

    fn unit(&self) -> Unit {
        match P::COUNTS {
            Counts::Instructions => Unit::Instructions,
            Counts::Cycles => Unit::Cycles { hz: self.board.sysclk_hz },
        }
    }

    fn stack(&self) -> Option<(usize, usize)> {
        Some(stack::high_water())
    }

    fn name(&self) -> &str {
        self.board.name
    }
}

/// Bytes of a real board's receive ring ([`RingRx`]).
pub const RX_BUFFER_BYTES: usize = 1024;

/// The receive ring of a real board's UART, filled by its interrupt handler ([`received`]).
static RX_RING: ByteRing<RX_BUFFER_BYTES> = ByteRing::new();

/// Interrupt side: one byte from the UART. A real UART cannot hold the sender back (no flow
/// control), so when the ring is full the byte is dropped and counted; the console reports the
/// count on the line it spoiled ([`InputLost`]).
pub fn received(byte: u8) {
    if !RX_RING.push(byte) {
        RX_RING.note_lost();
    }
}

/// Interrupt side: a byte the UART itself dropped (a receive FIFO overrun).
pub fn lost() {
    RX_RING.note_lost();
}

/// The receiving half of a real board's port: reads the ring [`received`] fills, sleeping in
/// `WFI` while it is empty.
pub struct RingRx;

/// Bytes the input lost before the console read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLost(pub u32);

impl fmt::Display for InputLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes lost: the {RX_BUFFER_BYTES}-byte receive buffer was full, or the UART overran", self.0)
    }
}

impl core::error::Error for InputLost {}

impl embedded_io::Error for InputLost {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::Other
    }
}

impl embedded_io::ErrorType for RingRx {
    type Error = InputLost;
}

impl embedded_io::Read for RingRx {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, InputLost> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let lost = RX_RING.take_lost();
            if lost > 0 {
                return Err(InputLost(lost));
            }
            let n = RX_RING.pop_into(buf);
            if n > 0 {
                return Ok(n);
            }
            // checked with interrupts masked: a byte arriving before the WFI still ends it
            cortex_m::interrupt::free(|_| {
                if RX_RING.is_empty() {
                    cortex_m::asm::wfi();
                }
            });
        }
    }
}
