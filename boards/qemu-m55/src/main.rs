//! GPT-2 on QEMU's mps3-an547 (Cortex-M55): generates from a fixed prompt with the same runtime
//! code path as the desktop emulator, and reports instruction counts and stack use.
//! See README.md; the app itself is `firmware_common::run`, the statics, `main` and the
//! exception handlers come from `firmware_common::board!`.

#![no_std]
#![no_main]

firmware_common::board! {
    // Semihosting output and exit, SysTick instruction counts.
    platform: firmware_common::semihosting::Qemu,
    board: qemu_m55::BOARD,
    // The blob in the QSPI flash (memory.x: `.model > QSPI`).
    model_section: ".model",
    // The buffers in the SSE-300 SRAM (memory.x: `.sram`, NOLOAD).
    buffer_section: ".sram",
}
