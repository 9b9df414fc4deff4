//! The serial console on QEMU's mps3-an547 (Cortex-M55): `gpt2_console` on UART0, which
//! `boards/console-qemu.sh qemu-m55` connects to stdin and stdout (`-serial stdio`). Semihosting only
//! ends the program (`/quit`, or the EOT the script sends when its stdin ends). The app is
//! `firmware_common::console::run`; statics, `main` and handlers come from
//! `firmware_common::console_board!`.

#![no_std]
#![no_main]

firmware_common::console_board! {
    // Semihosting exit and panic messages, SysTick instruction counts (for /stats).
    platform: firmware_common::semihosting::Qemu,
    serial: qemu_m55::ConsoleUart,
    board: qemu_m55::BOARD,
    // The blob in the QSPI flash (memory.x: `.model > QSPI`).
    model_section: ".model",
    // The buffers in the SSE-300 SRAM (memory.x: `.sram`, NOLOAD).
    buffer_section: ".sram",
}
