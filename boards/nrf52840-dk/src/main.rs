//! GPT-2 on the nRF52840-DK (nRF52840, Cortex-M4F at 64 MHz): generates from a fixed prompt with
//! the same runtime code path as the desktop emulator and the QEMU firmwares, prints the text,
//! the ids and the measurements over defmt/RTT. See README.md; the app itself is
//! `firmware_common::run`, the statics, `main` and the exception handlers come from
//! `firmware_common::board!`.

#![no_std]
#![no_main]

use firmware_common::rtt::Probe;
use firmware_common::Board;

/// NVMC ICACHECNF (nRF52840 Product Specification, NVMC registers: base 0x4001_E000, offset
/// 0x540): bit 0 CACHEEN. The flash cache is off after reset.
const NVMC_ICACHECNF: *mut u32 = 0x4001_E540 as *mut u32;

/// Runs first in `main`: turns on the flash cache, so the loops run from the cache rather than
/// paying flash wait states on every fetch. Nothing else needs setting up: the CPU runs at
/// 64 MHz from reset (HFCLK from the internal oscillator; the crystal only matters for the
/// radio and for accurate time).
fn init() {
    // SAFETY: a write to a documented NVMC configuration register; nothing is executing from a
    // cache that is being turned on (it starts empty).
    unsafe { NVMC_ICACHECNF.write_volatile(1) };
    cortex_m::asm::isb();
}

firmware_common::board! {
    // defmt over RTT, DWT cycle counts, semihosting exit to probe-rs.
    platform: Probe,
    board: Board {
        name: "nrf52840-dk",
        machine: "nRF52840-DK, nRF52840",
        cpu: "Cortex-M4F",
        // The nRF52840's only processor clock.
        sysclk_hz: 64_000_000,
        model_region: "FLASH, internal",
        buffer_region: "RAM",
    },
    // The blob in flash (memory.x: `.model > FLASH`).
    model_section: ".model",
    // The buffers in RAM, in cortex-m-rt's NOLOAD `.uninit` section.
    buffer_section: ".uninit",
    init: init,
}
