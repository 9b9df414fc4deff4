//! The serial console on QEMU's mps2-an386 (Cortex-M4F): `gpt2_console` on UART0, which
//! `boards/console-qemu.sh qemu-m4` connects to stdin and stdout (`-serial stdio`). Semihosting only
//! ends the program (`/quit`, or the EOT the script sends when its stdin ends). The app is
//! `firmware_common::console::run`; statics, `main` and handlers come from
//! `firmware_common::console_board!`.

#![no_std]
#![no_main]

firmware_common::console_board! {
    // Semihosting exit and panic messages, SysTick instruction counts (for /stats).
    platform: firmware_common::semihosting::Qemu,
    serial: qemu_m4::ConsoleUart,
    board: qemu_m4::BOARD,
    // The blob in flash (memory.x: `.model > FLASH`).
    model_section: ".model",
    // The buffers in RAM, in cortex-m-rt's NOLOAD `.uninit` section.
    buffer_section: ".uninit",
}
