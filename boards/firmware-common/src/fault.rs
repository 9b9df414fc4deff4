//! Fatal paths: HardFault and unexpected exceptions (and, under QEMU, panics) report on stderr
//! and end the program with a non-zero status, so a broken firmware fails fast instead of
//! spinning until the runner's `timeout`.

use core::fmt::{self, Write};

use cortex_m_rt::ExceptionFrame;

use crate::io::{Platform, Sink};

/// Writes `\n<what>` on the platform's stderr and exits with status 1.
#[cold]
#[inline(never)]
pub fn fatal<P: Platform>(what: fmt::Arguments<'_>) -> ! {
    let mut err = P::stderr();
    let _ = writeln!(err, "\n{what}");
    err.flush();
    drop(err);
    P::exit(false)
}

/// Body of the board's `HardFault` handler: prints the stacked registers and the fault status
/// registers, then exits with status 1.
pub fn hard_fault<P: Platform>(ef: &ExceptionFrame) -> ! {
    // SAFETY: reads of the System Control Block's fault status registers (no side effects).
    let (hfsr, cfsr, mmfar, bfar) = unsafe {
        let scb = &*cortex_m::peripheral::SCB::PTR;
        (scb.hfsr.read(), scb.cfsr.read(), scb.mmfar.read(), scb.bfar.read())
    };
    fatal::<P>(format_args!(
        "HardFault: pc={:#010x} lr={:#010x} xpsr={:#010x} r0={:#010x} r1={:#010x} r2={:#010x} r3={:#010x} r12={:#010x}\n\
         HFSR={hfsr:#010x} CFSR={cfsr:#010x} MMFAR={mmfar:#010x} BFAR={bfar:#010x}",
        ef.pc(),
        ef.lr(),
        ef.xpsr(),
        ef.r0(),
        ef.r1(),
        ef.r2(),
        ef.r3(),
        ef.r12()
    ))
}

/// Body of the board's `DefaultHandler`: any exception or interrupt nobody expects.
pub fn unexpected_exception<P: Platform>(irqn: i16) -> ! {
    fatal::<P>(format_args!("unexpected exception {irqn}"))
}
