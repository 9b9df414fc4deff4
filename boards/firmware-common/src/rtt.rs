//! The real boards' platform: output as defmt frames over RTT (`defmt-rtt`), which
//! `probe-rs run` reads through the debug probe and prints; time from the DWT cycle counter;
//! exit through semihosting `SYS_EXIT`, which `probe-rs run` turns into its exit status; panics
//! through `panic-probe` (message over defmt, then a HardFault).
//!
//! defmt sends whole records, each printed by the host as one line, so both streams are
//! line-buffered: each line of what QEMU would print becomes one `defmt::println!` frame (no
//! level, so no `DEFMT_LOG` filter applies). The generated text therefore appears a line at a
//! time rather than a token at a time.

use core::fmt;

use defmt_rtt as _;
use panic_probe as _;

use crate::cycles;
use crate::io::{Counts, Platform, Sink};

/// A board run by `probe-rs run`: defmt over RTT, DWT cycles, semihosting exit.
pub struct Probe;

impl Platform for Probe {
    type Out = Lines;
    type Err = Lines;
    const COUNTS: Counts = Counts::Cycles;

    fn stdout() -> Lines {
        Lines::new()
    }
    fn stderr() -> Lines {
        Lines::new()
    }
    fn start_counter(core: &mut cortex_m::Peripherals) {
        cycles::start(core);
    }
    fn now() -> u64 {
        cycles::now()
    }
    fn exit(success: bool) -> ! {
        crate::semihosting::exit(success)
    }
    /// With a debugger attached (`probe-rs run`), the semihosting exit; without one (a board on
    /// USB power, the console on its UART) a semihosting call would fault, so the chip resets
    /// and the console starts again.
    fn quit(success: bool) -> ! {
        if cortex_m::peripheral::DCB::is_debugger_attached() {
            crate::semihosting::exit(success)
        }
        cortex_m::peripheral::SCB::sys_reset()
    }
}

/// A line-buffered defmt stream: each line (without its `\n`) becomes one
/// `defmt::println!("{=str}")` frame. A line longer than the 256-byte buffer is split at the
/// last whole UTF-8 character that fits.
pub struct Lines {
    buf: [u8; 256],
    len: usize,
}

impl Lines {
    fn new() -> Self {
        Self { buf: [0; 256], len: 0 }
    }

    /// Sends the buffered bytes as one frame, up to the last whole UTF-8 character; keeps an
    /// incomplete character for the next frame.
    fn send(&mut self) {
        let (text, keep) = match core::str::from_utf8(&self.buf[..self.len]) {
            Ok(s) => (s, 0),
            Err(e) => {
                let valid = e.valid_up_to();
                // SAFETY: from_utf8 reported the first `valid` bytes as valid UTF-8.
                let s = unsafe { core::str::from_utf8_unchecked(&self.buf[..valid]) };
                // An incomplete character at the end waits for its other bytes; invalid bytes
                // (never produced by the app) are dropped.
                (s, if e.error_len().is_none() { self.len - valid } else { 0 })
            }
        };
        defmt::println!("{=str}", text);
        let start = self.len - keep;
        self.buf.copy_within(start..self.len, 0);
        self.len = keep;
    }
}

impl Sink for Lines {
    fn write_bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.send();
                continue;
            }
            if self.len == self.buf.len() {
                self.send();
            }
            self.buf[self.len] = b;
            self.len += 1;
        }
    }

    /// Keeps a partial line: a frame is always a whole line (or a full buffer).
    fn flush(&mut self) {}
}

impl fmt::Write for Lines {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.write_bytes(s.as_bytes());
        Ok(())
    }
}

impl Drop for Lines {
    /// Sends a partial last line.
    fn drop(&mut self) {
        if self.len > 0 {
            self.send();
        }
    }
}
