//! The serial console on the 16 MB flash / 8 MB PSRAM board (Pimoroni Pico Plus 2): `gpt2_console` on UART0 (GP0 TX, GP1 RX) at
//! 115200 8N1, what the Raspberry Pi Debug Probe's UART port carries to the PC
//! (`picocom -b 115200 /dev/ttyACM0`). It starts in terminal mode (`/echo on`). defmt over RTT
//! still carries a panic's message; `/quit` ends the program under `probe-rs run` and resets the
//! board otherwise. See README.md.

#![no_std]
#![no_main]

use firmware_common::rtt::Probe;
use rp235x_hal as hal;

/// The boot ROM's block (see `src/main.rs`).
#[link_section = ".start_block"]
#[used]
pub static IMAGE_DEF: hal::block::ImageDef = hal::block::ImageDef::secure_exe();

firmware_common::console_board! {
    platform: Probe,
    serial: pico_plus2::ConsoleUart,
    board: pico_plus2::BOARD,
    model_section: ".model",
    buffer_section: ".psram",
    init: pico_plus2::init,
}
