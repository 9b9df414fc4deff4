//! GPT-2 on QEMU's mps3-an547 (Cortex-M55): generates from a fixed prompt with the same runtime
//! code path as the desktop emulator, and reports instruction counts and stack use.
//! See README.md; the app itself is `firmware_common::run`.

#![no_std]
#![no_main]

use core::mem::MaybeUninit;

use cortex_m_rt::{entry, exception, ExceptionFrame};
use firmware_common::{Aligned, Board};

// BLOB_LEN, CAPACITY, ARENA_LEN, KV_LEN: written by build.rs from the blob's config.
include!(concat!(env!("OUT_DIR"), "/consts.rs"));

/// The model blob, compiled in and placed in the QSPI flash by memory.x (`.model`); the runtime
/// reads its weights in place.
#[link_section = ".model"]
static MODEL: Aligned<[u8; BLOB_LEN]> = Aligned(*include_bytes!(env!("MODEL_BLOB_PATH")));

// Run state in the SSE-300 SRAM (memory.x: `.sram`, NOLOAD), sized at compile time;
// `firmware_common::zeroed` clears each buffer once before use.
#[link_section = ".sram.ARENA"]
static mut ARENA: MaybeUninit<[f32; ARENA_LEN]> = MaybeUninit::uninit(); // activations + logits
#[link_section = ".sram.KV"]
static mut KV: MaybeUninit<[f32; KV_LEN]> = MaybeUninit::uninit(); // (n_layer, 2, CAPACITY, n_embd)
#[link_section = ".sram.WINDOW"]
static mut WINDOW: MaybeUninit<[u32; CAPACITY]> = MaybeUninit::uninit(); // token ids in the cache

const BOARD: Board = Board {
    name: "qemu-m55",
    machine: "mps3-an547",
    cpu: "Cortex-M55",
    // SYSCLK of the AN547 image in QEMU (hw/arm/mps2-tz.c): 32 MHz -> 31.25 instructions per tick.
    sysclk_hz: 32_000_000,
    model_region: "QSPI flash",
    buffer_region: "SSE-300 SRAM",
};

#[entry]
fn main() -> ! {
    // SAFETY: main runs once and is the only user of these statics.
    let (arena, kv, window) = unsafe {
        (
            firmware_common::zeroed(&raw mut ARENA),
            firmware_common::zeroed(&raw mut KV),
            firmware_common::zeroed(&raw mut WINDOW),
        )
    };
    firmware_common::run(&BOARD, &MODEL.0, arena, kv, window, CAPACITY)
}

#[exception]
fn SysTick() {
    firmware_common::counter::on_systick();
}

#[exception]
unsafe fn HardFault(ef: &ExceptionFrame) -> ! {
    firmware_common::fault::hard_fault(ef)
}

#[exception]
unsafe fn DefaultHandler(irqn: i16) {
    firmware_common::fault::unexpected_exception(irqn)
}
