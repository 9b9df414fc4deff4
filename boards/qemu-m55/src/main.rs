//! GPT-2 on QEMU's mps3-an547 (Cortex-M55): generates from a fixed prompt with the same runtime
//! code path as the desktop emulator, and reports instruction counts and stack use.
//! See README.md; the app itself is `firmware_common::run`, the statics, `main` and the
//! exception handlers come from `firmware_common::board!`.

#![no_std]
#![no_main]

use firmware_common::Board;

firmware_common::board! {
    // Semihosting output and exit, SysTick instruction counts.
    platform: firmware_common::semihosting::Qemu,
    board: Board {
        name: "qemu-m55",
        machine: "mps3-an547",
        cpu: "Cortex-M55",
        // SYSCLK of the AN547 image in QEMU (hw/arm/mps2-tz.c): 32 MHz -> 31.25 instructions
        // per tick.
        sysclk_hz: 32_000_000,
        model_region: "QSPI flash",
        buffer_region: "SSE-300 SRAM",
    },
    // The blob in the QSPI flash (memory.x: `.model > QSPI`).
    model_section: ".model",
    // The buffers in the SSE-300 SRAM (memory.x: `.sram`, NOLOAD).
    buffer_section: ".sram",
}
