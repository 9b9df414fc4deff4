//! What both programs of this crate share: the board description. `src/main.rs` is the fixed
//! demo (semihosting output), `src/bin/console.rs` the serial console on UART0.

#![no_std]

use firmware_common::Board;

/// QEMU's mps2-an386 (Cortex-M4F).
pub const BOARD: Board = Board {
    name: "qemu-m4",
    machine: "mps2-an386",
    cpu: "Cortex-M4F",
    // SYSCLK of the MPS2 FPGA images in QEMU (hw/arm/mps2.c): 25 MHz -> 40 instructions
    // per tick.
    sysclk_hz: 25_000_000,
    model_region: "FLASH, ZBT SSRAM1",
    buffer_region: "RAM, ZBT SSRAM2&3",
};

/// The console's UART: UART0 of the MPS2 (hw/arm/mps2.c: at 0x40004000, RX interrupt 0, TX 1), the one
/// `-serial stdio` connects (`serial_hd(0)`).
pub type ConsoleUart = firmware_common::cmsdk::Uart<0x4000_4000, 0>;
