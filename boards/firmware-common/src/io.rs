//! Output and exit through Arm semihosting (QEMU `-semihosting-config enable=on,target=native`
//! writes to its own stdout and stderr and exits with the code the firmware reports).

use core::fmt;

use cortex_m_semihosting::{debug, hio};

/// A buffered semihosting stream: flushes at each newline and when its 256 bytes are full, so
/// one line costs one host call.
pub struct Out {
    stream: Option<hio::HostStream>,
    buf: [u8; 256],
    len: usize,
}

impl Out {
    /// The host's standard output (the generated text and the ids line).
    pub fn stdout() -> Self {
        Self { stream: hio::hstdout().ok(), buf: [0; 256], len: 0 }
    }

    /// The host's standard error (report and measurements).
    pub fn stderr() -> Self {
        Self { stream: hio::hstderr().ok(), buf: [0; 256], len: 0 }
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) {
        if let Some(s) = self.stream.as_mut() {
            let _ = s.write_all(&self.buf[..self.len]);
        }
        self.len = 0;
    }

    /// Appends bytes (flushing as needed).
    pub fn write_bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = bytes.len().min(self.buf.len() - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            let newline = bytes[..n].contains(&b'\n');
            bytes = &bytes[n..];
            if newline || self.len == self.buf.len() {
                self.flush();
            }
        }
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
        self.flush();
    }
}

/// Ends the program: QEMU exits with status 0 (`success`) or 1.
pub fn exit(success: bool) -> ! {
    debug::exit(if success { debug::EXIT_SUCCESS } else { debug::EXIT_FAILURE });
    // Only reached without a semihosting host that implements exit.
    loop {
        cortex_m::asm::bkpt();
    }
}
