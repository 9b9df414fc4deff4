//! What both programs of this crate share: the flash cache setup, the board description and the
//! console's UART. `src/main.rs` is the fixed demo (defmt over RTT), `src/bin/console.rs` the
//! serial console on the DK's virtual COM port. No HAL or PAC: a few documented registers.

#![no_std]

use core::convert::Infallible;

use firmware_common::console::{RingRx, SerialPort};
use firmware_common::Board;

/// NVMC ICACHECNF (nRF52840 Product Specification, NVMC registers: base 0x4001_E000, offset
/// 0x540): bit 0 CACHEEN. The flash cache is off after reset.
const NVMC_ICACHECNF: *mut u32 = 0x4001_E540 as *mut u32;

/// Runs first in `main`: turns on the flash cache, so the loops run from the cache rather than
/// paying flash wait states on every fetch. Nothing else needs setting up: the CPU runs at
/// 64 MHz from reset (HFCLK from the internal oscillator; the crystal only matters for the
/// radio and for accurate time).
pub fn init() {
    // SAFETY: a write to a documented NVMC configuration register; nothing is executing from a
    // cache that is being turned on (it starts empty).
    unsafe { NVMC_ICACHECNF.write_volatile(1) };
    cortex_m::asm::isb();
}

/// The nRF52840-DK: nRF52840, Cortex-M4F at 64 MHz.
pub const BOARD: Board = Board {
    name: "nrf52840-dk",
    machine: "nRF52840-DK, nRF52840",
    cpu: "Cortex-M4F",
    // The nRF52840's only processor clock.
    sysclk_hz: 64_000_000,
    model_region: "FLASH, internal",
    buffer_region: "RAM",
};

// The registers the console uses (nRF52840 Product Specification v1.x; the same offsets as the
// nrf52840-pac crate's `uart0`, `clock` and `p0` blocks).
/// CLOCK: start the 32 MHz crystal (the UART's baud rate is only as good as HFCLK).
const CLOCK: usize = 0x4000_0000;
const TASKS_HFCLKSTART: usize = 0x000;
const EVENTS_HFCLKSTARTED: usize = 0x100;
/// GPIO port 0.
const P0: usize = 0x5000_0000;
const OUTSET: usize = 0x508;
const PIN_CNF: usize = 0x700;
/// UART0, the non-DMA UART (it shares ID 2 and this address with UARTE0; ENABLE = 4 selects
/// it): one byte at a time through RXD/TXD, a 6-byte receive FIFO.
const UART0: usize = 0x4000_2000;
const TASKS_STARTRX: usize = 0x000;
const TASKS_STARTTX: usize = 0x008;
const EVENTS_RXDRDY: usize = 0x108;
const EVENTS_TXDRDY: usize = 0x11C;
const EVENTS_ERROR: usize = 0x124;
const INTENSET: usize = 0x304;
const ERRORSRC: usize = 0x480;
const ENABLE: usize = 0x500;
const PSEL_RTS: usize = 0x508;
const PSEL_TXD: usize = 0x50C;
const PSEL_CTS: usize = 0x510;
const PSEL_RXD: usize = 0x514;
const RXD: usize = 0x518;
const TXD: usize = 0x51C;
const BAUDRATE: usize = 0x524;
const CONFIG: usize = 0x56C;
const ENABLE_UART: u32 = 4;
const BAUDRATE_115200: u32 = 0x01D7_E000;
const INT_RXDRDY: u32 = 1 << 2;
const INT_ERROR: u32 = 1 << 9;
const ERRORSRC_OVERRUN: u32 = 1 << 0;
/// PSEL value of an unused signal (CONNECT = 1: disconnected).
const DISCONNECTED: u32 = 0xFFFF_FFFF;
/// UARTE0_UART0's interrupt.
const UART0_IRQ: u16 = 2;

/// The DK's virtual COM port: the interface MCU (J-Link OB) bridges USB to the nRF52840's
/// UART0 on P0.06 (TXD) and P0.08 (RXD) (nRF52840 DK User Guide, "Virtual COM port"; RTS
/// P0.05 and CTS P0.07 are left unused: no flow control). 115200 8N1.
const TXD_PIN: u32 = 6;
const RXD_PIN: u32 = 8;

fn read(addr: usize) -> u32 {
    // SAFETY: `addr` is one of the documented peripheral registers above: device memory,
    // 32-bit aligned; reading RXD takes the received byte, nothing else has side effects.
    unsafe { core::ptr::read_volatile(addr as *const u32) }
}

fn write(addr: usize, value: u32) {
    // SAFETY: as in `read`; a write to a documented register.
    unsafe { core::ptr::write_volatile(addr as *mut u32, value) }
}

/// The console's port; received bytes go from the UART into the 1 KiB ring from the RXDRDY
/// interrupt.
pub struct ConsoleUart;

/// Its transmitting half: one byte at a time, waiting for TXDRDY.
pub struct Tx;

#[derive(Clone, Copy)]
struct Irq(u16);

// SAFETY: 2 is UARTE0_UART0, a valid nRF52840 interrupt.
unsafe impl cortex_m::interrupt::InterruptNumber for Irq {
    fn number(self) -> u16 {
        self.0
    }
}

impl SerialPort for ConsoleUart {
    type Rx = RingRx;
    type Tx = Tx;
    const TERMINAL: bool = true;
    const NAME: &'static str = "UART0 on P0.06/P0.08 (virtual COM port)";

    fn open() -> (RingRx, Tx) {
        // HFXO for an accurate baud rate
        write(CLOCK + EVENTS_HFCLKSTARTED, 0);
        write(CLOCK + TASKS_HFCLKSTART, 1);
        while read(CLOCK + EVENTS_HFCLKSTARTED) == 0 {}
        // TXD an output, high when idle; RXD an input with its pull-up (the line idles high)
        write(P0 + OUTSET, 1 << TXD_PIN);
        write(P0 + PIN_CNF + 4 * TXD_PIN as usize, 0b11); // DIR output, input buffer disconnected
        write(P0 + PIN_CNF + 4 * RXD_PIN as usize, 0b11 << 2); // DIR input, connected, PULL up
        write(UART0 + ENABLE, 0);
        write(UART0 + PSEL_TXD, TXD_PIN);
        write(UART0 + PSEL_RXD, RXD_PIN);
        write(UART0 + PSEL_RTS, DISCONNECTED);
        write(UART0 + PSEL_CTS, DISCONNECTED);
        write(UART0 + BAUDRATE, BAUDRATE_115200);
        write(UART0 + CONFIG, 0); // no parity, no flow control, one stop bit
        write(UART0 + ENABLE, ENABLE_UART);
        write(UART0 + EVENTS_RXDRDY, 0);
        write(UART0 + EVENTS_ERROR, 0);
        write(UART0 + INTENSET, INT_RXDRDY | INT_ERROR);
        write(UART0 + TASKS_STARTRX, 1);
        write(UART0 + TASKS_STARTTX, 1);
        // SAFETY: the handler (`on_interrupt`) only reads UART0 and fills the ring.
        unsafe { cortex_m::peripheral::NVIC::unmask(Irq(UART0_IRQ)) };
        (RingRx, Tx)
    }

    fn on_interrupt(irqn: i16) -> bool {
        if i32::from(irqn) != i32::from(UART0_IRQ) {
            return false;
        }
        if read(UART0 + EVENTS_ERROR) != 0 {
            write(UART0 + EVENTS_ERROR, 0);
            let source = read(UART0 + ERRORSRC);
            write(UART0 + ERRORSRC, source); // write 1 to clear
            if source & ERRORSRC_OVERRUN != 0 {
                firmware_common::console::lost();
            }
        }
        while read(UART0 + EVENTS_RXDRDY) != 0 {
            // clear the event before taking the byte: a next byte from the FIFO sets it again
            write(UART0 + EVENTS_RXDRDY, 0);
            let _ = read(UART0 + EVENTS_RXDRDY); // the write reaches the peripheral before the return
            firmware_common::console::received(read(UART0 + RXD) as u8);
        }
        true
    }
}

impl embedded_io::ErrorType for Tx {
    type Error = Infallible;
}

impl embedded_io::Write for Tx {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        for &b in buf {
            write(UART0 + EVENTS_TXDRDY, 0);
            write(UART0 + TXD, u32::from(b));
            while read(UART0 + EVENTS_TXDRDY) == 0 {}
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(()) // each write waits for its byte
    }
}
