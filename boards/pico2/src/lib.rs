//! What both programs of this crate share: the clock setup, the board description and the
//! console's UART. `src/main.rs` is the fixed demo (defmt over RTT), `src/bin/console.rs` the
//! serial console on UART0.

#![no_std]

use firmware_common::console::{RingRx, SerialPort};
use firmware_common::rtt::Probe;
use firmware_common::Board;
use hal::fugit::RateExtU32;
use hal::gpio::{FunctionUart, Pin, PullDown};
use hal::uart::{DataBits, Enabled, StopBits, UartConfig, UartPeripheral};
use rp235x_hal as hal;

/// The Pico 2's crystal.
const XTAL_FREQ_HZ: u32 = 12_000_000;

/// The processor clock after [`init`]: PLL_SYS from the 12 MHz crystal, the RP2350's rated
/// 150 MHz. `init_clocks_and_plls` runs clk_peri (the UARTs' clock) from it too.
pub const SYSCLK_HZ: u32 = 150_000_000;

/// The console's line speed (8N1).
pub const BAUD: u32 = 115_200;

/// The RP2350's UART0 interrupt (`UART0_IRQ`, 33).
const UART0_IRQ: u16 = 33;

/// Runs first in `main`: releases the spinlocks a previous run (reset by the debugger) may hold,
/// and starts the crystal and the PLLs (clk_sys 150 MHz).
pub fn init() {
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

/// The Pico 2: RP2350, Cortex-M33 at 150 MHz.
pub const BOARD: Board = Board {
    name: "pico2",
    machine: "Raspberry Pi Pico 2, RP2350",
    cpu: "Cortex-M33",
    sysclk_hz: SYSCLK_HZ,
    model_region: "FLASH, QSPI through XIP",
    buffer_region: "RAM, SRAM0-9",
};

/// GP0 (TX, pin 1) and GP1 (RX, pin 2) in their UART0 function.
type Pins = (Pin<hal::gpio::bank0::Gpio0, FunctionUart, PullDown>, Pin<hal::gpio::bank0::Gpio1, FunctionUart, PullDown>);

/// The console's port: UART0 on GP0 (TX) and GP1 (RX), the pins the Raspberry Pi Debug Probe's
/// UART connector plugs into, at 115200 8N1. Received bytes go from the PL011's 32-byte FIFO
/// into the 1 KiB ring from the RX and RX-timeout interrupts; writes block on the TX FIFO.
pub struct ConsoleUart;

#[derive(Clone, Copy)]
struct Irq(u16);

// SAFETY: 33 is UART0_IRQ, a valid RP2350 interrupt.
unsafe impl cortex_m::interrupt::InterruptNumber for Irq {
    fn number(self) -> u16 {
        self.0
    }
}

impl SerialPort for ConsoleUart {
    type Rx = RingRx;
    type Tx = UartPeripheral<Enabled, hal::pac::UART0, Pins>;
    const TERMINAL: bool = true;
    const NAME: &'static str = "UART0 on GP0/GP1";

    fn open() -> (RingRx, Self::Tx) {
        // SAFETY: `init` has finished with the peripherals it took (the clocks and the
        // watchdog); this takes the others the UART needs, once.
        let mut pac = unsafe { hal::pac::Peripherals::steal() };
        let sio = hal::Sio::new(pac.SIO);
        let pins = hal::gpio::Pins::new(pac.IO_BANK0, pac.PADS_BANK0, sio.gpio_bank0, &mut pac.RESETS);
        let pins: Pins = (pins.gpio0.into_function(), pins.gpio1.into_function());
        let config = UartConfig::new(BAUD.Hz(), DataBits::Eight, None, StopBits::One);
        let mut uart = match UartPeripheral::new(pac.UART0, pins, &mut pac.RESETS).enable(config, SYSCLK_HZ.Hz()) {
            Ok(uart) => uart,
            Err(_) => firmware_common::fault::fatal::<Probe>(format_args!("error: UART0 cannot run at {BAUD} baud")),
        };
        uart.enable_rx_interrupt();
        // SAFETY: the handler (`on_interrupt`) only reads UART0 and fills the ring.
        unsafe { cortex_m::peripheral::NVIC::unmask(Irq(UART0_IRQ)) };
        (RingRx, uart)
    }

    fn on_interrupt(irqn: i16) -> bool {
        if i32::from(irqn) != i32::from(UART0_IRQ) {
            return false;
        }
        // SAFETY: reads of UART0's flag and data registers; the console only writes (TX).
        let uart = unsafe { &*hal::pac::UART0::ptr() };
        while uart.uartfr().read().rxfe().bit_is_clear() {
            let dr = uart.uartdr().read();
            if dr.oe().bit_is_set() {
                firmware_common::console::lost();
            }
            firmware_common::console::received(dr.data().bits());
        }
        true
    }
}
