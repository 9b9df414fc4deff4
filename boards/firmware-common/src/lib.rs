#![doc = include_str!("../README.md")]
#![cfg_attr(not(feature = "build"), no_std)]

pub mod settings;

#[cfg(feature = "build")]
pub mod build;

#[cfg(all(target_arch = "arm", target_os = "none"))]
mod app;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod counter;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod fault;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod io;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod stack;

#[cfg(all(target_arch = "arm", target_os = "none"))]
pub use app::run;

/// Aligns its contents to 64 bytes: wraps the `include_bytes!` model blob so the runtime can
/// read its tensors in place (the blob needs 16-byte alignment; 64 matches its tensor
/// alignment). `?Sized` so that `&Aligned<[u8; N]>` coerces to `&Aligned<[u8]>`.
#[repr(C, align(64))]
pub struct Aligned<T: ?Sized>(pub T);

/// What the common code needs to know about a board.
#[derive(Debug, Clone, Copy)]
pub struct Board {
    /// Crate name, e.g. `qemu-m4`.
    pub name: &'static str,
    /// QEMU machine, e.g. `mps2-an386`.
    pub machine: &'static str,
    /// Processor, e.g. `Cortex-M4F`.
    pub cpu: &'static str,
    /// Frequency of the processor clock that SysTick counts (CLKSOURCE = 1), in Hz. Under
    /// `-icount shift=0` QEMU runs one instruction per nanosecond of virtual time, so one tick is
    /// `1e9 / sysclk_hz` instructions.
    pub sysclk_hz: u32,
    /// Where the model blob lives (memory.x region), for the report.
    pub model_region: &'static str,
    /// Where the arena and the KV cache live (memory.x region), for the report.
    pub buffer_region: &'static str,
}

/// Zero-fills a static buffer that sits in a NOLOAD section (not cleared at reset) and returns it
/// as a slice.
///
/// # Safety
/// `buf` must point to a `static` that nothing else references, and this must be called at most
/// once per buffer (the returned `&'static mut` is the only reference to it).
pub unsafe fn zeroed<T: Copy + Default, const N: usize>(buf: *mut core::mem::MaybeUninit<[T; N]>) -> &'static mut [T] {
    // SAFETY: the caller guarantees `buf` is a valid, unaliased static; every element is written
    // before the slice is created.
    unsafe {
        let first = buf.cast::<T>();
        for i in 0..N {
            first.add(i).write(T::default());
        }
        core::slice::from_raw_parts_mut(first, N)
    }
}
