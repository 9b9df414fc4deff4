//! Fatal paths: panic, HardFault and unexpected exceptions all report on stderr and end QEMU
//! with a non-zero status, so a broken firmware fails fast instead of spinning until the
//! runner's `timeout`.

use core::fmt::Write;
use core::panic::PanicInfo;

use cortex_m_rt::ExceptionFrame;

use crate::io::{exit, Out};

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    cortex_m::interrupt::disable();
    let mut err = Out::stderr();
    let _ = writeln!(err, "\npanic: {info}");
    err.flush();
    exit(false)
}

/// Body of the board's `HardFault` handler: prints the stacked registers and the fault status
/// registers, then exits with status 1.
pub fn hard_fault(ef: &ExceptionFrame) -> ! {
    let mut err = Out::stderr();
    // SAFETY: reads of the System Control Block's fault status registers (no side effects).
    let (hfsr, cfsr, mmfar, bfar) = unsafe {
        let scb = &*cortex_m::peripheral::SCB::PTR;
        (scb.hfsr.read(), scb.cfsr.read(), scb.mmfar.read(), scb.bfar.read())
    };
    let _ = writeln!(
        err,
        "\nHardFault: pc={:#010x} lr={:#010x} xpsr={:#010x} r0={:#010x} r1={:#010x} r2={:#010x} r3={:#010x} r12={:#010x}",
        ef.pc(), ef.lr(), ef.xpsr(), ef.r0(), ef.r1(), ef.r2(), ef.r3(), ef.r12()
    );
    let _ = writeln!(err, "HFSR={hfsr:#010x} CFSR={cfsr:#010x} MMFAR={mmfar:#010x} BFAR={bfar:#010x}");
    err.flush();
    exit(false)
}

/// Body of the board's `DefaultHandler`: any exception or interrupt nobody expects.
pub fn unexpected_exception(irqn: i16) -> ! {
    let mut err = Out::stderr();
    let _ = writeln!(err, "\nunexpected exception {irqn}");
    err.flush();
    exit(false)
}
