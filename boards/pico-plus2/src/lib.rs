//! What both programs of this crate share: the clock and PSRAM setup, the board description and
//! the console's UART. `src/main.rs` is the fixed demo (defmt over RTT), `src/bin/console.rs` the
//! serial console on UART0.
//!
//! The board class: 16 MB of QSPI flash and 8 MB of QSPI PSRAM beside an RP2350B, as on the
//! Pimoroni Pico Plus 2 (PSRAM chip select on GPIO47). The model is read in place from flash;
//! the arena, KV cache and token window live in PSRAM, which [`init`] maps at 0x1100_0000
//! (QMI window 1) before the firmware first touches them.

#![no_std]

use firmware_common::console::{RingRx, SerialPort};
use firmware_common::rtt::Probe;
use firmware_common::Board;
use hal::fugit::RateExtU32;
use hal::gpio::{FunctionUart, Pin, PullDown};
use hal::uart::{DataBits, Enabled, StopBits, UartConfig, UartPeripheral};
use rp235x_hal as hal;

/// The board's crystal.
const XTAL_FREQ_HZ: u32 = 12_000_000;

/// The processor clock after [`init`]: PLL_SYS from the 12 MHz crystal, the RP2350's rated
/// 150 MHz. `init_clocks_and_plls` runs clk_peri (the UARTs' clock) from it too.
pub const SYSCLK_HZ: u32 = 150_000_000;

/// The console's line speed (8N1).
pub const BAUD: u32 = 115_200;

/// The RP2350's UART0 interrupt (`UART0_IRQ`, 33).
const UART0_IRQ: u16 = 33;

/// The GPIO that carries the PSRAM's chip select (QMI CS1) on the Pimoroni Pico Plus 2.
const PSRAM_CS_GPIO: usize = 47;
/// IO_BANK0 function 9 on GPIO 0, 8, 19 and 47: QMI chip select 1 (RP2350 datasheet, GPIO
/// function table).
const FUNCSEL_XIP_CS1: u8 = 9;
/// The APS6404L's fastest quad read clock.
const PSRAM_MAX_HZ: u32 = 133_000_000;

/// Runs first in `main`: releases the spinlocks a previous run (reset by the debugger) may hold,
/// starts the crystal and the PLLs (clk_sys 150 MHz), then the PSRAM ([`init_psram`]).
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
    init_psram(&pac.IO_BANK0, &pac.PADS_BANK0, &pac.QMI, &pac.XIP_CTRL);
}

/// Maps the 8 MB APS6404L PSRAM at 0x1100_0000 for reads and writes through the XIP cache: CS1
/// on [`PSRAM_CS_GPIO`], the chip put in QPI mode by direct-mode commands, then QMI window 1's
/// timing (at most 133 MHz, chip select held ≤ 8 µs, released ≥ 18 ns: the APS6404L's
/// limits at clk_sys [`SYSCLK_HZ`]) and its quad read (0xEB, 6 wait cycles) and write (0x38)
/// formats; XIP_CTRL then allows writes to window 1. (Not yet run on the hardware: CI builds it.)
fn init_psram(io: &hal::pac::IO_BANK0, pads: &hal::pac::PADS_BANK0, qmi: &hal::pac::QMI, xip: &hal::pac::XIP_CTRL) {
    // the chip-select pin in its QMI function, input enabled, output not disabled, then the pad
    // isolation (set at reset on the RP2350) released
    pads.gpio(PSRAM_CS_GPIO).modify(|_, w| w.ie().set_bit().od().clear_bit());
    // SAFETY: FUNCSEL_XIP_CS1 is a valid function number for this GPIO.
    io.gpio(PSRAM_CS_GPIO).gpio_ctrl().write(|w| unsafe { w.funcsel().bits(FUNCSEL_XIP_CS1) });
    pads.gpio(PSRAM_CS_GPIO).modify(|_, w| w.iso().clear_bit());

    let wait = || while qmi.direct_csr().read().busy().bit_is_set() {};
    // direct mode, a slow clock (clk_sys / 30), chip select 1 asserted while a transfer runs
    // SAFETY: 30 fits CLKDIV's 8 bits.
    qmi.direct_csr().write(|w| unsafe { w.clkdiv().bits(30) }.en().set_bit().auto_cs1n().set_bit());
    wait();
    // leave QPI mode (0xF5, sent four bits wide) if a previous run left the chip in it, then
    // enter it (0x35, one bit wide)
    // SAFETY: the data field takes any u16; IWIDTH 2 is quad.
    qmi.direct_tx().write(|w| unsafe { w.oe().set_bit().iwidth().bits(2).nopush().set_bit().data().bits(0xF5) });
    wait();
    // SAFETY: as above; IWIDTH 0 is single.
    qmi.direct_tx().write(|w| unsafe { w.nopush().set_bit().data().bits(0x35) });
    wait();

    // timing at clk_sys: the divisor, the read delay, max select in units of 64 clocks, min
    // deselect in clocks (less half a divisor, as the QMI counts it)
    let divisor = SYSCLK_HZ.div_ceil(PSRAM_MAX_HZ).max(if SYSCLK_HZ > 100_000_000 { 2 } else { 1 });
    let rxdelay = divisor + u32::from(SYSCLK_HZ / divisor > 100_000_000);
    let period_fs = 1_000_000_000_000_000u64 / u64::from(SYSCLK_HZ);
    let max_select = (125_000_000 / period_fs).min(63) as u8; // 8 µs / 64 clocks
    let min_deselect = (18_000_000u64.div_ceil(period_fs) as u32).saturating_sub(divisor.div_ceil(2)).min(31) as u8;
    // SAFETY: every value is clamped to its field's width above.
    qmi.m1_timing().write(|w| unsafe {
        w.cooldown().bits(1).pagebreak()._1024().max_select().bits(max_select).min_deselect().bits(min_deselect).rxdelay().bits(rxdelay as u8).clkdiv().bits(divisor as u8)
    });
    qmi.m1_rfmt().write(|w| {
        w.prefix_width().q().addr_width().q().suffix_width().q().dummy_width().q().data_width().q().prefix_len()._8().dummy_len()._24()
    });
    // SAFETY: command bytes.
    qmi.m1_rcmd().write(|w| unsafe { w.prefix().bits(0xEB) });
    qmi.m1_wfmt().write(|w| w.prefix_width().q().addr_width().q().suffix_width().q().dummy_width().q().data_width().q().prefix_len()._8());
    // SAFETY: command byte.
    qmi.m1_wcmd().write(|w| unsafe { w.prefix().bits(0x38) });
    // back to memory-mapped mode, then allow writes through window 1
    // SAFETY: 0 disables direct mode.
    qmi.direct_csr().write(|w| unsafe { w.bits(0) });
    xip.ctrl().modify(|_, w| w.writable_m1().set_bit());
}

/// The 16 MB flash / 8 MB PSRAM board: RP2350B, Cortex-M33 at 150 MHz.
pub const BOARD: Board = Board {
    name: "pico-plus2",
    machine: "Pimoroni Pico Plus 2, RP2350B",
    cpu: "Cortex-M33",
    sysclk_hz: SYSCLK_HZ,
    model_region: "FLASH, 16 MB QSPI through XIP",
    buffer_region: "PSRAM, 8 MB QSPI through XIP window 1",
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
