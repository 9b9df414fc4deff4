//! The CMSDK APB UART of Arm's MPS2/MPS3 FPGA images, the serial port of the QEMU boards, as
//! QEMU 7.2 models it (`hw/char/cmsdk-apb-uart.c`):
//!
//! - registers `DATA` (0x00), `STATE` (0x04: bit 0 TX full, bit 1 RX full), `CTRL` (0x08: bit 0
//!   TX enable, 1 RX enable, 3 RX interrupt enable), `INTSTATUS`/`INTCLEAR` (0x0c, write 1 to
//!   clear), `BAUDDIV` (0x10); always 8N1;
//! - **receive**: a one-byte buffer. QEMU hands the UART a byte from its character backend
//!   (stdin with `-serial stdio`) only while that buffer is empty and RX is enabled, and reads no
//!   more from stdin until then: input is held back, never dropped, however fast it arrives (a
//!   piped script arrives all at once). Each byte sets `INTSTATUS.RX` if the RX interrupt is
//!   enabled; the interrupt line is that bit, so the handler clears it;
//! - **transmit**: a write to `DATA` goes to the backend at once; `STATE.TXFULL` stays set while
//!   the backend (a full pipe) is not ready.
//!
//! The driver: the RX interrupt moves bytes into a 1 KiB ring ([`gpt2_console::ring`]) as they
//! come, so the console reads while the model computes, and `read` sleeps in `WFI` while the
//! ring is empty. When the ring is full the handler turns the RX interrupt off instead of
//! dropping a byte: the byte stays in the UART, QEMU stops reading stdin, and `read` turns the
//! interrupt back on once it has room. Writes poll `TXFULL`.
//!
//! `IRQ` is the interrupt the driver enables: the RX interrupt on the MPS2 (AN386: UART0 RX is
//! IRQ 0), the UART's combined interrupt on the MPS3 (AN547: UART0 is IRQ 43, the OR of its TX,
//! RX and overrun interrupts; only RX is enabled).

use core::convert::Infallible;
use core::sync::atomic::{AtomicBool, Ordering};

use cortex_m::interrupt::InterruptNumber;
use cortex_m::peripheral::NVIC;
use gpt2_console::ring::ByteRing;

use crate::console::SerialPort;

/// Bytes of the receive ring.
pub const RX_BUFFER_BYTES: usize = 1024;

const DATA: usize = 0x00;
const STATE: usize = 0x04;
const CTRL: usize = 0x08;
const INTCLEAR: usize = 0x0c;
const BAUDDIV: usize = 0x10;

const STATE_TXFULL: u32 = 1 << 0;
const STATE_RXFULL: u32 = 1 << 1;
const CTRL_TX_EN: u32 = 1 << 0;
const CTRL_RX_EN: u32 = 1 << 1;
const CTRL_RX_INTEN: u32 = 1 << 3;
const INT_RX: u32 = 1 << 1;

/// APB clock of the UARTs on both machines in QEMU (AN386: SYSCLK 25 MHz; AN547: the 25 MHz
/// APB peripheral clock).
const PCLK_HZ: u32 = 25_000_000;

/// The console's line speed. QEMU does not pace the bytes by it (it only passes it to a real
/// serial backend); a value below 16 would leave the UART unconfigured.
const BAUD: u32 = 115_200;

/// Bytes received and not yet read.
static RING: ByteRing<RX_BUFFER_BYTES> = ByteRing::new();

/// The handler turned the RX interrupt off because the ring was full.
static PAUSED: AtomicBool = AtomicBool::new(false);

/// The UART at `BASE`, its receive interrupt `IRQ`.
pub struct Uart<const BASE: usize, const IRQ: u16>;

/// Its receiving half: reads from the ring.
pub struct Rx<const BASE: usize, const IRQ: u16>;

/// Its transmitting half.
pub struct Tx<const BASE: usize>;

#[derive(Clone, Copy)]
struct Irq(u16);

// SAFETY: `number` returns the interrupt number the board gave, a valid NVIC interrupt of its
// machine.
unsafe impl InterruptNumber for Irq {
    fn number(self) -> u16 {
        self.0
    }
}

fn read(base: usize, offset: usize) -> u32 {
    // SAFETY: a register of the UART at `base` (a board constant): device memory, 32-bit
    // aligned, and reading it has no effect beyond the documented one (DATA: takes the byte).
    unsafe { core::ptr::read_volatile((base + offset) as *const u32) }
}

fn write(base: usize, offset: usize, value: u32) {
    // SAFETY: as in `read`; a write to a UART register.
    unsafe { core::ptr::write_volatile((base + offset) as *mut u32, value) }
}

/// The interrupt handler's body: bytes from the UART into the ring, until it is empty or the
/// ring is full.
fn drain(base: usize) {
    // clear first: a byte that arrives from here on raises the interrupt again
    write(base, INTCLEAR, INT_RX);
    while read(base, STATE) & STATE_RXFULL != 0 {
        if RING.len() >= RX_BUFFER_BYTES {
            // hold the byte in the UART (QEMU then stops reading stdin) until `read` has room
            write(base, CTRL, read(base, CTRL) & !CTRL_RX_INTEN);
            PAUSED.store(true, Ordering::Release);
            return;
        }
        RING.push(read(base, DATA) as u8);
    }
}

impl<const BASE: usize, const IRQ: u16> SerialPort for Uart<BASE, IRQ> {
    type Rx = Rx<BASE, IRQ>;
    type Tx = Tx<BASE>;
    const TERMINAL: bool = false;
    const NAME: &'static str = "UART0 (CMSDK APB UART)";

    fn open() -> (Self::Rx, Self::Tx) {
        write(BASE, BAUDDIV, PCLK_HZ / BAUD);
        write(BASE, CTRL, CTRL_TX_EN | CTRL_RX_EN | CTRL_RX_INTEN);
        // SAFETY: the handler (`on_interrupt`) only touches the ring and this UART; nothing
        // relies on the interrupt being masked.
        unsafe { NVIC::unmask(Irq(IRQ)) };
        (Rx, Tx)
    }

    fn on_interrupt(irqn: i16) -> bool {
        if i32::from(irqn) != i32::from(IRQ) {
            return false;
        }
        drain(BASE);
        true
    }
}

impl<const BASE: usize, const IRQ: u16> embedded_io::ErrorType for Rx<BASE, IRQ> {
    type Error = Infallible;
}

impl<const BASE: usize, const IRQ: u16> embedded_io::Read for Rx<BASE, IRQ> {
    /// Waits (in `WFI`) for at least one byte. Never returns 0: a UART has no end of input
    /// (`boards/console-qemu.sh` sends EOT when its stdin ends).
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let n = RING.pop_into(buf);
            if PAUSED.load(Ordering::Acquire) {
                // room again: RX interrupt on, and run the handler for the byte that waits
                cortex_m::interrupt::free(|_| {
                    PAUSED.store(false, Ordering::Relaxed);
                    write(BASE, CTRL, read(BASE, CTRL) | CTRL_RX_INTEN);
                    NVIC::pend(Irq(IRQ));
                });
            }
            if n > 0 {
                return Ok(n);
            }
            // sleep until an interrupt; checked with interrupts masked so that a byte arriving
            // between the check and the WFI still wakes it (a pending interrupt ends WFI even
            // when PRIMASK masks it; its handler runs when the critical section ends)
            cortex_m::interrupt::free(|_| {
                if RING.is_empty() && !PAUSED.load(Ordering::Relaxed) {
                    cortex_m::asm::wfi();
                }
            });
        }
    }
}

impl<const BASE: usize> embedded_io::ErrorType for Tx<BASE> {
    type Error = Infallible;
}

impl<const BASE: usize> embedded_io::Write for Tx<BASE> {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        for &b in buf {
            while read(BASE, STATE) & STATE_TXFULL != 0 {}
            write(BASE, DATA, u32::from(b));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> Result<(), Infallible> {
        while read(BASE, STATE) & STATE_TXFULL != 0 {}
        Ok(())
    }
}
