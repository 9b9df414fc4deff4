#![doc = include_str!("../README.md")]
#![cfg_attr(not(feature = "build"), no_std)]

pub mod settings;

#[cfg(feature = "build")]
pub mod build;

#[cfg(all(target_arch = "arm", target_os = "none"))]
mod app;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod cmsdk;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod console;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod counter;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod cycles;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod fault;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod io;
#[cfg(all(target_arch = "arm", target_os = "none", feature = "rtt"))]
pub mod rtt;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod semihosting;
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod kernels;
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
    /// QEMU machine or board, e.g. `mps2-an386`, `Raspberry Pi Pico 2`.
    pub machine: &'static str,
    /// Processor, e.g. `Cortex-M4F`.
    pub cpu: &'static str,
    /// Frequency of the processor clock, in Hz. Under QEMU it is what SysTick counts
    /// (CLKSOURCE = 1), and under `-icount shift=0` one instruction takes one nanosecond of
    /// virtual time, so one tick is `1e9 / sysclk_hz` instructions. On hardware it turns the
    /// cycle counts into time.
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

/// Declares a board's program: the model blob and buffer statics, `main`, and the exception
/// handlers, all delegating to this crate. A board crate's `src/main.rs` is its memory map and
/// this:
///
/// ```ignore
/// firmware_common::board! {
///     platform: firmware_common::semihosting::Qemu, // output, counter, exit (`io::Platform`)
///     board: Board { name: "qemu-m4", /* ... */ },
///     model_section: ".model",    // memory.x section of the blob (in flash, read in place)
///     buffer_section: ".uninit",  // NOLOAD section of the arena, KV cache and token window
///     init: || {},                // run first in `main`, e.g. the clock setup (optional)
/// }
/// ```
///
/// It includes `$OUT_DIR/consts.rs` (`BLOB_LEN`, `CAPACITY`, `ARENA_LEN`, `KV_LEN`, written by
/// the build script from the blob) and `include_bytes!`s `MODEL_BLOB_PATH`. The board crate
/// needs `cortex-m-rt` as a direct dependency (the `entry` and `exception` attributes).
#[macro_export]
macro_rules! board {
    (
        platform: $platform:ty,
        board: $board:expr,
        model_section: $model:literal,
        buffer_section: $buffers:literal
        $(, init: $init:expr)?
        $(,)?
    ) => {
        $crate::__board_statics!($model, $buffers);

        const BOARD: $crate::Board = $board;

        #[cortex_m_rt::entry]
        fn main() -> ! {
            $( ($init)(); )?
            // SAFETY: main runs once and is the only user of these statics.
            let (arena, kv, window) = unsafe {
                (
                    $crate::zeroed(&raw mut ARENA),
                    $crate::zeroed(&raw mut KV),
                    $crate::zeroed(&raw mut WINDOW),
                )
            };
            $crate::run::<$platform>(&BOARD, &MODEL.0, arena, kv, window, CAPACITY)
        }

        #[cortex_m_rt::exception]
        fn SysTick() {
            <$platform as $crate::io::Platform>::on_systick();
        }

        #[cortex_m_rt::exception]
        unsafe fn HardFault(ef: &cortex_m_rt::ExceptionFrame) -> ! {
            $crate::fault::hard_fault::<$platform>(ef)
        }

        #[cortex_m_rt::exception]
        unsafe fn DefaultHandler(irqn: i16) {
            $crate::fault::unexpected_exception::<$platform>(irqn)
        }
    };
}

/// Declares a board's console program (a second binary beside the fixed demo, e.g.
/// `src/bin/console.rs`): the same statics as [`board!`], a `main` that runs
/// [`console::run`](crate::console::run) on the board's [`SerialPort`](crate::console::SerialPort),
/// and the exception handlers, `DefaultHandler` first offering each interrupt to the port.
///
/// ```ignore
/// firmware_common::console_board! {
///     platform: firmware_common::semihosting::Qemu,
///     serial: firmware_common::cmsdk::Uart<0x4000_4000, 0>, // the console's UART
///     board: qemu_m4::BOARD,
///     model_section: ".model",
///     buffer_section: ".uninit",
///     init: || {},                                           // optional
/// }
/// ```
#[macro_export]
macro_rules! console_board {
    (
        platform: $platform:ty,
        serial: $serial:ty,
        board: $board:expr,
        model_section: $model:literal,
        buffer_section: $buffers:literal
        $(, init: $init:expr)?
        $(,)?
    ) => {
        $crate::__board_statics!($model, $buffers);

        const BOARD: $crate::Board = $board;

        #[cortex_m_rt::entry]
        fn main() -> ! {
            $( ($init)(); )?
            // SAFETY: main runs once and is the only user of these statics.
            let (arena, kv, window) = unsafe {
                (
                    $crate::zeroed(&raw mut ARENA),
                    $crate::zeroed(&raw mut KV),
                    $crate::zeroed(&raw mut WINDOW),
                )
            };
            $crate::console::run::<$platform, $serial>(&BOARD, &MODEL.0, arena, kv, window, CAPACITY)
        }

        #[cortex_m_rt::exception]
        fn SysTick() {
            <$platform as $crate::io::Platform>::on_systick();
        }

        #[cortex_m_rt::exception]
        unsafe fn HardFault(ef: &cortex_m_rt::ExceptionFrame) -> ! {
            $crate::fault::hard_fault::<$platform>(ef)
        }

        #[cortex_m_rt::exception]
        unsafe fn DefaultHandler(irqn: i16) {
            if !<$serial as $crate::console::SerialPort>::on_interrupt(irqn) {
                $crate::fault::unexpected_exception::<$platform>(irqn)
            }
        }
    };
}

/// The statics both program macros declare (not for direct use).
#[doc(hidden)]
#[macro_export]
macro_rules! __board_statics {
    ($model:literal, $buffers:literal) => {
        // BLOB_LEN, CAPACITY, ARENA_LEN, KV_LEN: written by build.rs from the blob's config.
        include!(concat!(env!("OUT_DIR"), "/consts.rs"));

        /// The model blob, compiled in and placed by memory.x; the runtime reads its weights in
        /// place.
        #[link_section = $model]
        static MODEL: $crate::Aligned<[u8; BLOB_LEN]> = $crate::Aligned(*include_bytes!(env!("MODEL_BLOB_PATH")));

        // Run state sized at compile time, in a NOLOAD section (not cleared at reset: saves
        // zeroing it twice); `firmware_common::zeroed` clears each buffer once before use.
        #[link_section = concat!($buffers, ".ARENA")]
        static mut ARENA: ::core::mem::MaybeUninit<[f32; ARENA_LEN]> = ::core::mem::MaybeUninit::uninit(); // activations + logits
        #[link_section = concat!($buffers, ".KV")]
        static mut KV: ::core::mem::MaybeUninit<[f32; KV_LEN]> = ::core::mem::MaybeUninit::uninit(); // (n_layer, 2, CAPACITY, n_embd)
        #[link_section = concat!($buffers, ".WINDOW")]
        static mut WINDOW: ::core::mem::MaybeUninit<[u32; CAPACITY]> = ::core::mem::MaybeUninit::uninit(); // token ids in the cache
    };
}
