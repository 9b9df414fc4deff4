//! What the app needs from a board besides memory: two output streams, a counter, an exit.
//!
//! The app (`run`) is generic over a [`Platform`], so one code path serves every board:
//!
//! | platform | stdout / stderr | counter | exit |
//! |---|---|---|---|
//! | [`semihosting::Qemu`](crate::semihosting::Qemu) (QEMU boards) | semihosting, QEMU's own stdout and stderr | SysTick, converted to instructions under `-icount shift=0` | semihosting `SYS_EXIT`: QEMU's exit status |
//! | [`rtt::Probe`](crate::rtt::Probe) (real boards) | one defmt frame per line over RTT, read by `probe-rs run` | DWT CYCCNT: processor cycles | semihosting `SYS_EXIT`: `probe-rs run`'s exit status |

use core::fmt;

/// An output stream: `fmt::Write` plus raw bytes and a flush.
pub trait Sink: fmt::Write {
    /// Appends bytes (UTF-8 text: the prompt, decoded token pieces).
    fn write_bytes(&mut self, bytes: &[u8]);
    /// A good moment to show what is buffered (after each generated token). A stream whose
    /// records are whole lines may keep a partial line until its newline.
    fn flush(&mut self);
}

/// What the board's counter counts, which decides how the report names and converts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counts {
    /// Ticks of SysTick on the processor clock under QEMU's `-icount shift=0`, where one
    /// instruction is one nanosecond: `ticks x 1e9 / sysclk_hz` instructions.
    Instructions,
    /// Processor clock cycles (DWT CYCCNT): real time at `sysclk_hz`.
    Cycles,
}

/// A board's output, counter and exit. Everything is an associated function: each exists once
/// per program, like the peripherals behind it.
pub trait Platform {
    /// Where the generated text and the ids line go (what `host --print-ids` prints on stdout).
    type Out: Sink;
    /// Where the report goes: board, model, memory, measurements, errors.
    type Err: Sink;
    /// What [`Platform::now`] counts.
    const COUNTS: Counts;

    /// Opens the stdout stream.
    fn stdout() -> Self::Out;
    /// Opens the stderr stream.
    fn stderr() -> Self::Err;
    /// Starts the counter; called once, before anything is timed.
    fn start_counter(core: &mut cortex_m::Peripherals);
    /// Counter value since [`Platform::start_counter`].
    fn now() -> u64;
    /// Body of the `SysTick` exception handler.
    fn on_systick() {}
    /// Ends the program with status 0 (`success`) or 1, as the runner reports it.
    fn exit(success: bool) -> !;
    /// Ends the console firmware (`/quit`, the end of the input). By default [`Platform::exit`];
    /// a board that may run without a debugger attached restarts instead (see `rtt::Probe`).
    fn quit(success: bool) -> ! {
        Self::exit(success)
    }
}
