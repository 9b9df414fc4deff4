//! The 16 MB flash / 8 MB PSRAM board (Pimoroni Pico Plus 2: RP2350B, Cortex-M33 at 150 MHz): generates from a fixed
//! prompt with the same runtime code path as the desktop emulator and the QEMU firmwares, prints
//! the text, the ids and the measurements over defmt/RTT. See README.md; the app itself is
//! `firmware_common::run`, the statics, `main` and the exception handlers come from
//! `firmware_common::board!`, the clock setup and the board description from `src/lib.rs`.

#![no_std]
#![no_main]

use firmware_common::rtt::Probe;
use rp235x_hal as hal;

/// Tells the boot ROM that this is a Secure Arm executable. The ROM only boots an image whose
/// first 4 KB of flash hold such a block (memory.x: `.start_block`, after the vector table).
#[link_section = ".start_block"]
#[used]
pub static IMAGE_DEF: hal::block::ImageDef = hal::block::ImageDef::secure_exe();

firmware_common::board! {
    // defmt over RTT, DWT cycle counts, semihosting exit to probe-rs.
    platform: Probe,
    board: pico_plus2::BOARD,
    // The blob in flash (memory.x: `.model > FLASH`).
    model_section: ".model",
    // The buffers in PSRAM (memory.x: `.psram`, NOLOAD), usable after `init`.
    buffer_section: ".psram",
    init: pico_plus2::init,
}
