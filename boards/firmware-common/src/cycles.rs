//! Cycle counter from the DWT (Data Watchpoint and Trace unit): CYCCNT counts processor clock
//! cycles, on real silicon exactly (QEMU does not model it, hence SysTick there).
//!
//! CYCCNT is 32 bits wide and wraps after 2^32 cycles (28.6 s at 150 MHz, 67 s at 64 MHz).
//! [`now`] extends it to 64 bits by counting the wraps it sees between two reads, which is exact
//! as long as it is called at least once per wrap period; the app reads it at least once per
//! generated token and around every phase (the longest, the whole prefill, is about a second).

use core::sync::atomic::{AtomicU32, Ordering};

use cortex_m::peripheral::DWT;

/// The last CYCCNT value [`now`] read, and the wraps it has counted.
static LAST: AtomicU32 = AtomicU32::new(0);
static WRAPS: AtomicU32 = AtomicU32::new(0);

/// Enables tracing (DEMCR.TRCENA, which powers the DWT) and starts CYCCNT from 0.
pub fn start(core: &mut cortex_m::Peripherals) {
    core.DCB.enable_trace();
    core.DWT.set_cycle_count(0);
    core.DWT.enable_cycle_counter();
    LAST.store(0, Ordering::Relaxed);
    WRAPS.store(0, Ordering::Relaxed);
}

/// Cycles since [`start`].
pub fn now() -> u64 {
    cortex_m::interrupt::free(|_| {
        let count = DWT::cycle_count();
        let mut wraps = WRAPS.load(Ordering::Relaxed);
        if count < LAST.load(Ordering::Relaxed) {
            wraps = wraps.wrapping_add(1);
            WRAPS.store(wraps, Ordering::Relaxed);
        }
        LAST.store(count, Ordering::Relaxed);
        (u64::from(wraps) << 32) | u64::from(count)
    })
}
