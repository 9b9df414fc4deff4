//! The QEMU boards' platform: output and exit through Arm semihosting (QEMU
//! `-semihosting-config enable=on,target=native` writes to its own stdout and stderr and exits
//! with the code the firmware reports), time from SysTick, and the panic handler. [`exit`] also
//! ends the real boards' runs: `probe-rs run` implements semihosting `SYS_EXIT` too.

use core::fmt;

use cortex_m_semihosting::hio;

use crate::counter;
use crate::io::{Counts, Platform, Sink};

/// QEMU with semihosting, timed by SysTick under `-icount shift=0` (see [`counter`]).
pub struct Qemu;

impl Platform for Qemu {
    type Out = Out;
    type Err = Out;
    const COUNTS: Counts = Counts::Instructions;

    fn stdout() -> Out {
        Out::new(hio::hstdout().ok())
    }
    fn stderr() -> Out {
        Out::new(hio::hstderr().ok())
    }
    fn start_counter(core: &mut cortex_m::Peripherals) {
        counter::start(&mut core.SYST);
    }
    fn now() -> u64 {
        counter::now()
    }
    fn on_systick() {
        counter::on_systick();
    }
    fn exit(success: bool) -> ! {
        exit(success)
    }
}

/// A buffered semihosting stream: flushes at each newline and when its 256 bytes are full, so
/// one line costs one host call.
pub struct Out {
    stream: Option<hio::HostStream>,
    buf: [u8; 256],
    len: usize,
}

impl Out {
    fn new(stream: Option<hio::HostStream>) -> Self {
        Self { stream, buf: [0; 256], len: 0 }
    }

    fn write_out(&mut self) {
        if let Some(s) = self.stream.as_mut() {
            let _ = s.write_all(&self.buf[..self.len]);
        }
        self.len = 0;
    }
}

impl Sink for Out {
    fn write_bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = bytes.len().min(self.buf.len() - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            let newline = bytes[..n].contains(&b'\n');
            bytes = &bytes[n..];
            if newline || self.len == self.buf.len() {
                self.write_out();
            }
        }
    }

    fn flush(&mut self) {
        self.write_out();
    }
}

impl fmt::Write for Out {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.write_bytes(s.as_bytes());
        Ok(())
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        self.write_out();
    }
}

/// Ends the program through semihosting `SYS_EXIT`: QEMU (and `probe-rs run`) exit with status
/// 0 (`success`) or 1.
pub fn exit(success: bool) -> ! {
    use cortex_m_semihosting::debug;
    debug::exit(if success { debug::EXIT_SUCCESS } else { debug::EXIT_FAILURE });
    // Only reached without a semihosting host that implements exit.
    loop {
        cortex_m::asm::bkpt();
    }
}

/// QEMU's panic handler: the message on stderr, exit status 1. (With feature `rtt` the real
/// boards use `panic-probe` instead.)
#[cfg(not(feature = "rtt"))]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    cortex_m::interrupt::disable();
    crate::fault::fatal::<Qemu>(format_args!("panic: {info}"))
}
