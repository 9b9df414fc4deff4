//! GPT-2 on the nRF52840-DK (nRF52840, Cortex-M4F at 64 MHz): generates from a fixed prompt with
//! the same runtime code path as the desktop emulator and the QEMU firmwares, prints the text,
//! the ids and the measurements over defmt/RTT. See README.md; the app itself is
//! `firmware_common::run`, the statics, `main` and the exception handlers come from
//! `firmware_common::board!`, the flash cache setup and the board description from `src/lib.rs`.

#![no_std]
#![no_main]

use firmware_common::rtt::Probe;

firmware_common::board! {
    // defmt over RTT, DWT cycle counts, semihosting exit to probe-rs.
    platform: Probe,
    board: nrf52840_dk::BOARD,
    // The blob in flash (memory.x: `.model > FLASH`).
    model_section: ".model",
    // The buffers in RAM, in cortex-m-rt's NOLOAD `.uninit` section.
    buffer_section: ".uninit",
    init: nrf52840_dk::init,
}
