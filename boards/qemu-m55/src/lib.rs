//! What both programs of this crate share: the board description. `src/main.rs` is the fixed
//! demo (semihosting output), `src/bin/console.rs` the serial console on UART0.

#![no_std]

use firmware_common::Board;

/// QEMU's mps3-an547 (Cortex-M55).
pub const BOARD: Board = Board {
    name: "qemu-m55",
    machine: "mps3-an547",
    cpu: "Cortex-M55",
    // SYSCLK of the AN547 image in QEMU (hw/arm/mps2-tz.c): 32 MHz -> 31.25 instructions
    // per tick.
    sysclk_hz: 32_000_000,
    model_region: "QSPI flash",
    buffer_region: "SSE-300 SRAM",
};

/// The console's UART: UART0 of the AN547 (hw/arm/mps2-tz.c: at 0x49303000; its TX and RX
/// interrupts 33 and 34, and their OR, 43, which the driver uses), the one `-serial stdio`
/// connects (`serial_hd(0)`). The core runs Secure with the SAU off, so this address is Secure
/// too (see memory.x).
pub type ConsoleUart = firmware_common::cmsdk::Uart<0x4930_3000, 43>;
