//! The serial console on the nRF52840-DK: `gpt2_console` on UART0 at 115200 8N1, which the DK's
//! interface MCU carries to the PC as a virtual COM port on the same USB cable as the debugger
//! (`picocom -b 115200 /dev/ttyACM0`). It starts in terminal mode (`/echo on`). defmt over RTT
//! still carries a panic's message; `/quit` ends the program under `probe-rs run` and resets the
//! chip otherwise. See README.md.

#![no_std]
#![no_main]

use firmware_common::rtt::Probe;

firmware_common::console_board! {
    platform: Probe,
    serial: nrf52840_dk::ConsoleUart,
    board: nrf52840_dk::BOARD,
    model_section: ".model",
    buffer_section: ".uninit",
    init: nrf52840_dk::init,
}
