//! Instruction counter from SysTick.
//!
//! SysTick counts the processor clock (CLKSOURCE = 1) down from 0xFF_FFFF; its exception counts
//! the wraps, so [`now`] is a 64-bit tick count. Under QEMU's `-icount shift=0` every instruction
//! advances virtual time by exactly 1 ns, so `ticks · 1e9 / sysclk_hz` is the number of
//! instructions executed (to within one tick: 40 instructions at 25 MHz). Without `-icount` the
//! same numbers are host wall-clock time and mean little.

use core::sync::atomic::{AtomicU32, Ordering};

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::{SCB, SYST};

/// SysTick reload value: the full 24-bit range, one wrap per 2^24 ticks.
const RELOAD: u32 = 0x00FF_FFFF;

/// Wraps counted by [`on_systick`].
static WRAPS: AtomicU32 = AtomicU32::new(0);

/// Starts SysTick from the processor clock with the wrap interrupt enabled.
pub fn start(syst: &mut SYST) {
    syst.disable_counter();
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(RELOAD);
    syst.clear_current();
    syst.enable_interrupt();
    syst.enable_counter();
}

/// Call from the `SysTick` exception handler.
pub fn on_systick() {
    WRAPS.fetch_add(1, Ordering::Relaxed);
}

/// Ticks since [`start`].
pub fn now() -> u64 {
    cortex_m::interrupt::free(|_| {
        let mut wraps = WRAPS.load(Ordering::Relaxed);
        let mut current = SYST::get_current();
        // A wrap that happened since interrupts were masked is pending, not yet counted:
        // re-read the counter (now certainly after the wrap) and count it.
        if SCB::is_pendst_pending() {
            current = SYST::get_current();
            wraps += 1;
        }
        ((wraps as u64) << 24) + u64::from(RELOAD - current)
    })
}

/// A tick count converted to instructions (under `-icount shift=0`) for a `sysclk_hz` clock.
pub fn instructions(ticks: u64, sysclk_hz: u32) -> u64 {
    ticks * 1_000_000_000 / u64::from(sysclk_hz)
}

/// Runs a loop of exactly `2 * iterations` instructions (`subs` + `bne`), the counter check:
/// the platform's counter around it should read `2 n` instructions under QEMU (give or take one
/// tick and the few instructions of reading the counter), or show the cycles they take on
/// hardware.
#[inline(always)]
pub fn spin(iterations: u32) {
    // SAFETY: a register-only countdown loop; touches no memory and no stack.
    unsafe {
        core::arch::asm!(
            "2:",
            "subs {n}, {n}, #1",
            "bne 2b",
            n = inout(reg) iterations.max(1) => _,
            options(nomem, nostack),
        );
    }
}
