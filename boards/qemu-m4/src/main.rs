//! GPT-2 on QEMU's mps2-an386 (Cortex-M4F): generates from a fixed prompt with the same runtime
//! code path as the desktop emulator, and reports instruction counts and stack use.
//! See README.md; the app itself is `firmware_common::run`, the statics, `main` and the
//! exception handlers come from `firmware_common::board!`.

#![no_std]
#![no_main]

firmware_common::board! {
    // Semihosting output and exit, SysTick instruction counts.
    platform: firmware_common::semihosting::Qemu,
    board: qemu_m4::BOARD,
    // The blob in flash (memory.x: `.model > FLASH`).
    model_section: ".model",
    // The buffers in RAM, in cortex-m-rt's NOLOAD `.uninit` section.
    buffer_section: ".uninit",
}
