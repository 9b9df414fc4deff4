//! Stack high-water mark.
//!
//! cortex-m-rt's `paint-stack` feature fills the whole stack region, from `_stack_end` (the end of
//! the statics) up to `_stack_start` (the initial stack pointer), with `0xCCCC_CCCC` before
//! `main`. The deepest the stack ever reached is where the paint stops: scanning up from
//! `_stack_end`, the first word that is not paint.

/// cortex-m-rt's paint value (`cortex_m_rt::STACK_PAINT_VALUE`).
const PAINT: u32 = 0xCCCC_CCCC;

extern "C" {
    static _stack_start: u32;
    static _stack_end: u32;
}

/// (bytes of stack used at most so far, bytes of stack region).
pub fn high_water() -> (usize, usize) {
    let top = (&raw const _stack_start) as usize;
    let bottom = (&raw const _stack_end) as usize;
    let mut addr = bottom;
    while addr < top {
        // SAFETY: addr is word-aligned and inside the stack region [_stack_end, _stack_start),
        // which is RAM owned by this program; a volatile read of it has no side effects.
        if unsafe { core::ptr::read_volatile(addr as *const u32) } != PAINT {
            break;
        }
        addr += 4;
    }
    (top - addr, top - bottom)
}
