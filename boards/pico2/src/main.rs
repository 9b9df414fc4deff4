//! GPT-2 on the Raspberry Pi Pico 2 (RP2350, Cortex-M33 at 150 MHz): generates from a fixed
//! prompt with the same runtime code path as the desktop emulator and the QEMU firmwares, prints
//! the text, the ids and the measurements over defmt/RTT. See README.md; the app itself is
//! `firmware_common::run`, the statics, `main` and the exception handlers come from
//! `firmware_common::board!`.

#![no_std]
#![no_main]

use firmware_common::rtt::Probe;
use firmware_common::Board;
use rp235x_hal as hal;

/// Tells the boot ROM that this is a Secure Arm executable. The ROM only boots an image whose
/// first 4 KB of flash hold such a block (memory.x: `.start_block`, after the vector table).
#[link_section = ".start_block"]
#[used]
pub static IMAGE_DEF: hal::block::ImageDef = hal::block::ImageDef::secure_exe();

/// The Pico 2's crystal.
const XTAL_FREQ_HZ: u32 = 12_000_000;

/// The processor clock after [`init`]: PLL_SYS from the 12 MHz crystal, the RP2350's rated
/// 150 MHz.
const SYSCLK_HZ: u32 = 150_000_000;

/// Runs first in `main`: releases the spinlocks a previous run (reset by the debugger) may hold,
/// and starts the crystal and the PLLs (clk_sys 150 MHz).
fn init() {
    // SAFETY: called once, before anything takes a spinlock (the critical sections that
    // defmt-rtt and `Peripherals::take` use are spinlock 31).
    unsafe { hal::sio::spinlock_reset() };
    let Some(mut pac) = hal::pac::Peripherals::take() else {
        firmware_common::fault::fatal::<Probe>(format_args!("error: RP2350 peripherals already taken"))
    };
    let mut watchdog = hal::Watchdog::new(pac.WATCHDOG);
    let clocks = match hal::clocks::init_clocks_and_plls(
        XTAL_FREQ_HZ,
        pac.XOSC,
        pac.CLOCKS,
        pac.PLL_SYS,
        pac.PLL_USB,
        &mut pac.RESETS,
        &mut watchdog,
    ) {
        Ok(clocks) => clocks,
        Err(_) => firmware_common::fault::fatal::<Probe>(format_args!("error: clock setup failed (crystal or PLL)")),
    };
    use hal::Clock as _;
    let hz = clocks.system_clock.freq().to_Hz();
    if hz != SYSCLK_HZ {
        firmware_common::fault::fatal::<Probe>(format_args!("error: clk_sys is {hz} Hz, expected {SYSCLK_HZ} Hz"));
    }
}

firmware_common::board! {
    // defmt over RTT, DWT cycle counts, semihosting exit to probe-rs.
    platform: Probe,
    board: Board {
        name: "pico2",
        machine: "Raspberry Pi Pico 2, RP2350",
        cpu: "Cortex-M33",
        sysclk_hz: SYSCLK_HZ,
        model_region: "FLASH, QSPI through XIP",
        buffer_region: "RAM, SRAM0-9",
    },
    // The blob in flash (memory.x: `.model > FLASH`).
    model_section: ".model",
    // The buffers in SRAM, in cortex-m-rt's NOLOAD `.uninit` section.
    buffer_section: ".uninit",
    init: init,
}
