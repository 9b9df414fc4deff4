//! Cortex-M builds of the quantized mat-vec, in assembly:
//! - q8 and q4 [`super::linear`] on rows of 4 to 16 groups of 28 or 32 (every matrix of the
//!   default model): the quad kernels of [`quads`], one function per dtype and group size that
//!   runs all the rows of a token, four groups unrolled at a time (the cheapest path; q8
//!   1.51 / 0.51 instructions per multiply-accumulate on the M4 / M55 for `mlp.c_fc`,
//!   quantizing included);
//! - whole rows for the other q8 and q4 shapes ([`linear_quant`]): a row's exact integer
//!   group sums and their float combination ([`super::combine_groups`]: group g into lane g
//!   mod 16, then the reduction tree) in one asm block, the 16 lanes in the FPU registers
//!   s16-s31;
//! - the activations quantized for them ([`quantize_group_pairs16`], and
//!   `kernels::quantize_group_q8_int` for every int8 quantization on these builds);
//! - the two integer group kernels, [`super::dot_i8`] (an int8 weight group against int8
//!   activations) and [`super::dot_q4_group`] (packed 4-bit weights against int8
//!   activations), which the portable row loop runs for the shapes the row kernels leave.
//!
//! Stable Rust does not report Arm target features to `cfg(target_feature)` (see `rustc --print
//! cfg --target thumbv7em-none-eabihf -C target-cpu=cortex-m4`: no `dsp`, no `mve`), so the
//! firmware chooses with a cargo feature of `runtime`:
//!
//! | feature | needs | kernels |
//! |---|---|---|
//! | `arm-dsp` | the DSP extension: Cortex-M4, M7, M33/M35P with DSP, M55, M85 (`-C target-cpu=...`) | `SXTB16` + `SMLAD`: two 16-bit multiply-accumulates per instruction |
//! | `arm-helium` | MVE (Helium) integer: Cortex-M55, M85 (`-C target-cpu=cortex-m55` or `+mve`) | `VLDRB` + `VMLADAVA.S8`: sixteen 8-bit multiply-accumulates per instruction, tail-predicated loops |
//!
//! With both, Helium is used. A target without the extension fails to assemble (the build
//! stops; nothing is decided at run time). Off Arm the features do nothing. Both need the
//! single-precision FPU (`thumbv7em-none-eabihf`, `thumbv8m.main-none-eabihf`).
//!
//! Everything here computes the portable code's bits. Integer sums are exact, and where an
//! i32 could overflow both wrap (two's complement, `SMLAD` and `VMLADAVA` accumulate modulo
//! 2^32 as release-build Rust does). The row kernels' float side is the portable code's
//! sequence of IEEE single-precision operations, operand for operand: `VCVT` of the group sum,
//! `VMUL` of the two scales, `VMUL`, `VADD` into the lane, no fused multiply-add (on the scalar
//! FPU: Helium's vector float instructions flush denormals to zero). So every build gives the
//! same bits, host and board alike. The group kernels handle lengths as the portable code:
//! up to the shorter input, tails included; they return `Option` so that a kernel may decline
//! an input (the portable code then runs), but these take everything: inputs not aligned as
//! LDRD needs (never the model's groups) go to a small out-of-line loop here, which keeps the
//! portable kernel and its sixteen accumulators out of the hot loop's register allocation.
//! The row kernels take groups of 28 and 32 (what the converter picks for rows of 112·k and
//! 32·k) and q8 groups of 172 (llama2.c stories260K's `down_proj` rows, one group each), and
//! fall back to the portable row loop for anything else.
//!
//! `cargo test` cannot run them, so the firmware checks them at boot against naive references
//! (`boards/firmware-common/src/kernels.rs`: `self_check`, the group kernels on lengths 0 to
//! 768, extreme values, every alignment, and the quantizer on its corners (ties, NaN,
//! infinities, denormals); `linear_check`, `linear` on every row length the quad kernels take
//! and on random q8 and q4 shapes, taken by the quad or row kernels or left to the fallback)
//! and exits 1 on a difference;
//! `boards/qemu-check.sh` then requires the firmware's generated tokens to equal the host's.
//! On the desktop, `cargo test` checks the DSP kernels' activation layouts with the
//! arithmetic their assembly does (`kernels::tests`, `pairs16_*`, `nibbles16_*`).
//!
//! Cost of the row kernels (the quad kernels' costs are in [`quads`]), in executed
//! instructions (what QEMU's `-icount` counts), per group
//! of 28 / 32 weights, everything included (integer dot, storing and reloading its sum, the
//! float steps):
//! - `arm-dsp`, q8: 46 / 50 (1.64 / 1.56 per multiply-accumulate). The integer dot takes 36 /
//!   40: per 8 weights one `LDRD` of weights, one `LDM` of 4 words of activations widened once
//!   per call to int16 pairs in `SXTB16` order ([`super::QuantOrder::Pairs16`]), 2 + 2 `SXTB16`
//!   for the weights and 4 `SMLAD`: 1.25 per multiply-accumulate, the floor for int8 weights
//!   with `SMLAD` (1.0 for its `SXTB16` + `SMLAD` alone, plus the loads; only int16 weights,
//!   twice the flash, would do without the `SXTB16`).
//! - `arm-dsp`, q4: 55 / 55: per 8 weights one `LDR`, one `LDM`, the nibbles masked in place
//!   (3 `AND`, `LSR` + `AND`: unsigned, at four scales the activations are laid out to match,
//!   [`super::QuantOrder::Nibbles16`]) and 4 `SMLAD`; each group's sum starts at `-2048·Σx`
//!   (the + 8 of the stored nibbles) and ends with `ASR #8`.
//! - `arm-helium`, q8: 17 / 16: `VLDRB` ×2 + `VMLADAV` per 16 weights, the tail predicated.
//! - `arm-helium`, q4: 24 / 22: the same with the nibbles unpacked by `VSLI`, `VBIC`, `VSUB`.
//!
//! plus about 20 per row in the kernel (setting up, the jumps into the float steps and the
//! tree, the min(groups, 16) - 1 adds of the tree) and about 18 in its Rust loop (bias,
//! accumulate, store). The activations are quantized once per call.
//!
//! The group kernels, which the portable loop calls once per group:
//! - `arm-dsp`, q8: per 4 weights, 4 `SXTB16` (two for the weights, two for the activations)
//!   + 2 `SMLAD`, plus one `LDRD` per 8 bytes of each input: 1.75 per multiply-accumulate, and
//!   2 loop instructions per 16; a group of 28 takes 57 instructions, one of 32 takes 65.
//! - `arm-dsp`, q4: per 8 weights, 1 `EOR` + 2 `AND` + 4 `SXTB16` for the weights, 2 `PKHBT`/
//!   `PKHTB` + 4 `SXTB16` for the activations, 4 `SMLAD`, 3 loads and 2 loop instructions:
//!   2.6 per multiply-accumulate; a 2-byte head or tail (groups of 28: 14 bytes) takes a
//!   14-instruction step.
//! - `arm-helium`, q8: per 16 weights, 2 `VLDRB` + 1 `VMLADAVA` + 1 `LETP`; a group of 28 or
//!   32 takes 9 instructions.
//! - `arm-helium`, q4: per 16 weights, 1 `VLDRB.U16` + `VSLI` + `VBIC` + `VSUB` (unpack to signed
//!   bytes) + 1 `VLDRB` + 1 `VMLADAVA` + 1 `LETP`.

/// `Σ a[i]·b[i]` over the shorter length, as [`super::dot_i8`].
#[cfg(feature = "arm-helium")]
#[inline(always)]
pub(super) fn dot_i8(a: &[i8], b: &[i8]) -> Option<i32> {
    let n = a.len().min(b.len());
    let mut acc: i32 = 0;
    // SAFETY: WLSTP/LETP run ceil(n / 16) iterations with tail predication: every VLDRB reads
    // only the lanes still below n (inactive lanes neither load nor add), so the loads stay
    // inside a[..n] and b[..n]. VLDRB.8 has no alignment requirement. Only registers are
    // written: the pointer copies, r0 (VMLADAVA needs an even register), lr (the loop count)
    // and q0, q1 (d0-d3).
    unsafe {
        core::arch::asm!(
            "wlstp.8 lr, {n}, 2f",
            "1:",
            "vldrb.s8 q0, [{a}], #16",
            "vldrb.s8 q1, [{b}], #16",
            "vmladava.s8 r0, q0, q1",
            "letp lr, 1b",
            "2:",
            a = inout(reg) a.as_ptr() => _,
            b = inout(reg) b.as_ptr() => _,
            n = in(reg) n,
            inout("r0") acc,
            out("lr") _,
            out("d0") _, out("d1") _, out("d2") _, out("d3") _,
            options(pure, readonly, nostack),
        );
    }
    Some(acc)
}

/// `Σ (nibble - 8)·x` over `min(w.len(), x.len() / 2)` weight bytes, as
/// [`super::dot_q4_group`].
#[cfg(feature = "arm-helium")]
#[inline(always)]
pub(super) fn dot_q4_group(w: &[u8], x: &[i8]) -> Option<i32> {
    let n = w.len().min(x.len() / 2);
    let mut acc: i32 = 0;
    // Each iteration takes 8 weight bytes (VLDRB.U16: one byte per 16-bit lane, b = hi·16 + lo),
    // turns each lane into the two bytes (lo, hi) — the weights in activation order — with
    // VSLI (b<<4 | b&15 = hi<<8 | lo<<4 | lo) and VBIC (clear bits 4-7), subtracts 8 from every
    // byte, and multiply-accumulates with 16 activations.
    // SAFETY: WLSTP.16/LETP run ceil(n / 8) iterations predicated on the n remaining 16-bit
    // elements: the widening load reads only w[..n]; for the byte loads and the byte
    // multiply-accumulate the same predicate enables the first 2·(remaining) bytes, so only
    // x[..2n] is read and only those products are added. No alignment requirement. Only
    // registers are written: the pointer copies (the weights' in r1: the widening VLDRB takes
    // only r0-r7 as base), r0, lr and q0-q2 (d0-d5).
    unsafe {
        core::arch::asm!(
            "vmov.i8 q2, #8",
            "wlstp.16 lr, {n}, 2f",
            "1:",
            "vldrb.u16 q0, [r1], #8",
            "vsli.16 q0, q0, #4",
            "vbic.i16 q0, #0xf0",
            "vsub.i8 q0, q0, q2",
            "vldrb.s8 q1, [{x}], #16",
            "vmladava.s8 r0, q0, q1",
            "letp lr, 1b",
            "2:",
            inout("r1") w.as_ptr() => _,
            x = inout(reg) x.as_ptr() => _,
            n = in(reg) n,
            inout("r0") acc,
            out("lr") _,
            out("d0") _, out("d1") _, out("d2") _, out("d3") _, out("d4") _, out("d5") _,
            options(pure, readonly, nostack),
        );
    }
    Some(acc)
}

/// `Σ a[i]·b[i]` over the shorter length, as [`super::dot_i8`]. Inputs that are not both
/// 4-byte aligned (LDRD needs it; the model's groups always are) take [`dot_i8_scalar`].
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
#[inline(always)]
pub(super) fn dot_i8(a: &[i8], b: &[i8]) -> Option<i32> {
    if (a.as_ptr() as usize | b.as_ptr() as usize) & 3 != 0 {
        return Some(dot_i8_scalar(a, b));
    }
    let n = a.len().min(b.len());
    // SAFETY: n ≤ both lengths, both pointers are 4-byte aligned (checked above).
    let mut acc = unsafe { dot_i8_words(a.as_ptr(), b.as_ptr(), n) };
    if n & 3 != 0 {
        let t = n & !3..n;
        acc = acc.wrapping_add(dot_i8_scalar(a.get(t.clone()).unwrap_or(&[]), b.get(t).unwrap_or(&[])));
    }
    Some(acc)
}

/// `Σ a[i]·b[i]` over the first `n & !3` bytes.
///
/// # Safety
/// `a` and `b` must be 4-byte aligned and readable for `n & !3` bytes.
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
#[inline(always)]
unsafe fn dot_i8_words(a: *const i8, b: *const i8, n: usize) -> i32 {
    let mut acc: i32 = 0;
    // 16 bytes per iteration, then one 8-byte and one 4-byte step as the remainder's bits 3
    // and 2 say (LSLS #29 puts bit 3 in C and bit 2 in N). Per word: SXTB16 takes bytes 0 and
    // 2 sign-extended into the two halves, SXTB16 ROR #8 bytes 1 and 3, and SMLAD adds the two
    // products of each pair of halves.
    // SAFETY: the asm reads exactly the first n & !3 bytes of a and b (bits 0-1 of n are
    // ignored), readable by the caller's contract, with LDRD/LDR at 4-byte aligned addresses
    // (the caller's contract; every step advances by a multiple of 4). It writes only
    // registers: its operands and the flags.
    unsafe {
        core::arch::asm!(
            "subs {n}, {n}, #16",
            "blo 3f",
            "2:",
            "ldrd {w0}, {w1}, [{a}], #8",
            "ldrd {x0}, {x1}, [{b}], #8",
            "sxtb16 {t}, {w0}",
            "sxtb16 {u}, {x0}",
            "smlad {acc}, {t}, {u}, {acc}",
            "sxtb16 {w0}, {w0}, ror #8",
            "sxtb16 {x0}, {x0}, ror #8",
            "smlad {acc}, {w0}, {x0}, {acc}",
            "sxtb16 {t}, {w1}",
            "sxtb16 {u}, {x1}",
            "smlad {acc}, {t}, {u}, {acc}",
            "sxtb16 {w1}, {w1}, ror #8",
            "sxtb16 {x1}, {x1}, ror #8",
            "smlad {acc}, {w1}, {x1}, {acc}",
            "ldrd {w0}, {w1}, [{a}], #8",
            "ldrd {x0}, {x1}, [{b}], #8",
            "sxtb16 {t}, {w0}",
            "sxtb16 {u}, {x0}",
            "smlad {acc}, {t}, {u}, {acc}",
            "sxtb16 {w0}, {w0}, ror #8",
            "sxtb16 {x0}, {x0}, ror #8",
            "smlad {acc}, {w0}, {x0}, {acc}",
            "sxtb16 {t}, {w1}",
            "sxtb16 {u}, {x1}",
            "smlad {acc}, {t}, {u}, {acc}",
            "sxtb16 {w1}, {w1}, ror #8",
            "sxtb16 {x1}, {x1}, ror #8",
            "smlad {acc}, {w1}, {x1}, {acc}",
            "subs {n}, {n}, #16",
            "bhs 2b",
            // n = remainder - 16: its low 4 bits are the remainder's.
            "3:",
            "lsls {n}, {n}, #29",
            "bcc 4f",
            "ldrd {w0}, {w1}, [{a}], #8",
            "ldrd {x0}, {x1}, [{b}], #8",
            "sxtb16 {t}, {w0}",
            "sxtb16 {u}, {x0}",
            "smlad {acc}, {t}, {u}, {acc}",
            "sxtb16 {w0}, {w0}, ror #8",
            "sxtb16 {x0}, {x0}, ror #8",
            "smlad {acc}, {w0}, {x0}, {acc}",
            "sxtb16 {t}, {w1}",
            "sxtb16 {u}, {x1}",
            "smlad {acc}, {t}, {u}, {acc}",
            "sxtb16 {w1}, {w1}, ror #8",
            "sxtb16 {x1}, {x1}, ror #8",
            "smlad {acc}, {w1}, {x1}, {acc}",
            // (LDRD, SXTB16 and SMLAD leave N as LSLS set it.)
            "4:",
            "bpl 5f",
            "ldr {w0}, [{a}]",
            "ldr {x0}, [{b}]",
            "sxtb16 {t}, {w0}",
            "sxtb16 {u}, {x0}",
            "smlad {acc}, {t}, {u}, {acc}",
            "sxtb16 {w0}, {w0}, ror #8",
            "sxtb16 {x0}, {x0}, ror #8",
            "smlad {acc}, {w0}, {x0}, {acc}",
            "5:",
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            n = inout(reg) n => _,
            acc = inout(reg) acc,
            w0 = out(reg) _,
            w1 = out(reg) _,
            x0 = out(reg) _,
            x1 = out(reg) _,
            t = out(reg) _,
            u = out(reg) _,
            options(pure, readonly, nostack),
        );
    }
    acc
}

/// `Σ a[i]·b[i]` element by element, out of line: for misaligned inputs and the last 1-3
/// bytes of a length that is not a multiple of 4 (neither occurs in the model's groups).
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
#[cold]
#[inline(never)]
fn dot_i8_scalar(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).fold(0i32, |s, (&x, &y)| s.wrapping_add(x as i32 * y as i32))
}

/// Weight bytes [`dot_q4_group`]'s assembly takes at most: it keeps the sum ×16, which stays
/// inside i32 up to 32 768 bytes (65 536 weights · 16·8·128 = 2^30). Longer inputs (no model
/// has such a group) take [`q4_scalar`].
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
const Q4_MAX_BYTES: usize = 32 * 1024;

/// `Σ (nibble - 8)·x` over `min(w.len(), x.len() / 2)` weight bytes, as
/// [`super::dot_q4_group`]. Needs the weights 2-byte and the activations 4-byte aligned (the
/// model's groups: 14 or 16 bytes of weights, 28 or 32 activations); other inputs take
/// [`q4_scalar`].
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
#[inline(always)]
pub(super) fn dot_q4_group(w: &[u8], x: &[i8]) -> Option<i32> {
    let n = w.len().min(x.len() / 2);
    if (w.as_ptr() as usize & 1) | (x.as_ptr() as usize & 3) != 0 || n > Q4_MAX_BYTES {
        return Some(q4_scalar(w, x));
    }
    // SAFETY: n ≤ w.len() and 2n ≤ x.len(); w is 2-byte and x 4-byte aligned (checked above).
    let mut acc = unsafe { q4_pairs(w.as_ptr(), x.as_ptr(), n) };
    if n & 1 != 0 {
        let last = n - 1;
        acc = acc.wrapping_add(q4_scalar(w.get(last..n).unwrap_or(&[]), x.get(2 * last..2 * n).unwrap_or(&[])));
    }
    Some(acc)
}

/// The portable q4 sum, out of line: for inputs the assembly does not take and the last byte
/// of an odd count (neither occurs in the model's groups).
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
#[cold]
#[inline(never)]
fn q4_scalar(w: &[u8], x: &[i8]) -> i32 {
    w.iter().zip(x.chunks_exact(2)).fold(0i32, |s, (&b, xp)| {
        let (lo, hi) = ((b & 0x0F) as i32 - 8, (b >> 4) as i32 - 8);
        let (x0, x1) = (xp.first().copied().unwrap_or(0) as i32, xp.get(1).copied().unwrap_or(0) as i32);
        s.wrapping_add(lo * x0 + hi * x1)
    })
}

/// One step of [`q4_pairs`] over 2 weight bytes (4 weights, LDRH) and 4 activations (LDR):
/// spreads the four nibbles of the halfword h into the high nibbles of four bytes, in weight
/// order (`t = (h | h<<8) & 0x00FF00FF` puts the two bytes in bytes 0 and 2, then
/// `((t<<4) | (t<<8)) & 0xF0F0F0F0`), EOR 0x80808080 turns each 16·(q+8) into 16·q as a signed
/// byte, and SXTB16 / SXTB16 ROR #8 pair weights 0,2 and 1,3 with the activations the same.
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
macro_rules! q4_half_step {
    () => {
        concat!(
            "ldrh {q}, [{w}], #2\n",
            "ldr {x0}, [{x}], #4\n",
            "orr {q}, {q}, {q}, lsl #8\n",
            "and {q}, {q}, #0x00FF00FF\n",
            "lsl {l}, {q}, #4\n",
            "orr {l}, {l}, {q}, lsl #8\n",
            "and {l}, {l}, {m}\n",
            "eor {l}, {l}, #0x80808080\n",
            "sxtb16 {u}, {l}\n",
            "sxtb16 {t}, {x0}\n",
            "smlad {acc}, {u}, {t}, {acc}\n",
            "sxtb16 {u}, {l}, ror #8\n",
            "sxtb16 {t}, {x0}, ror #8\n",
            "smlad {acc}, {u}, {t}, {acc}\n",
        )
    };
}

/// The q4 sum over the first `n & !1` weight bytes.
///
/// Per weight word (8 weights, byte k = w[2k+1]·16 + w[2k], each stored as q + 8): EOR
/// 0x88888888 makes every nibble its 4-bit two's complement q; AND 0xF0F0F0F0 leaves the high
/// nibbles, AND of the word shifted left by 4 the low ones, each as 16·q in a signed byte, and
/// SXTB16 / SXTB16 ROR #8 widen bytes 0,2 / 1,3 into halves: (w0,w4), (w2,w6), (w1,w5),
/// (w3,w7), all ×16. The activations x0..x7 (two words) are packed to [x0 x1 x4 x5] (PKHBT)
/// and [x2 x3 x6 x7] (PKHTB) and widened the same way to match. A weight pointer at 2 mod 4
/// first takes one 2-byte step ([`q4_half_step`]), and a 2-byte remainder another. The sum is
/// 16× the true one (exact and inside i32 for at most [`Q4_MAX_BYTES`]), so it ends with ASR #4.
///
/// # Safety
/// `w` must be 2-byte aligned and readable for `n & !1` bytes, `x` 4-byte aligned and readable
/// for `2·(n & !1)` bytes, and `n` at most [`Q4_MAX_BYTES`].
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
#[inline(always)]
unsafe fn q4_pairs(w: *const u8, x: *const i8, n: usize) -> i32 {
    let mut acc: i32 = 0;
    // SAFETY: reads the first n & !1 bytes of w (LDRH, then LDR once w is 4-byte aligned: the
    // head step runs exactly when w is 2 mod 4) and the first 2·(n & !1) bytes of x (LDR/LDRD,
    // 4-byte aligned throughout: every step advances x by 4 or 8), all within the caller's
    // bounds. Writes only its register operands and the flags.
    unsafe {
        core::arch::asm!(
            "tst {w}, #2",
            "beq 1f",
            "cmp {n}, #2",
            "blo 1f",
            q4_half_step!(),
            "subs {n}, {n}, #2",
            "1:",
            "subs {n}, {n}, #4",
            "blo 3f",
            "2:",
            "ldr {q}, [{w}], #4",
            "ldrd {x0}, {x1}, [{x}], #8",
            "eor {q}, {q}, #0x88888888",
            "and {l}, {m}, {q}, lsl #4",
            "and {q}, {q}, {m}",
            "pkhbt {t}, {x0}, {x1}, lsl #16",
            "pkhtb {x1}, {x1}, {x0}, asr #16",
            "sxtb16 {x0}, {t}",
            "sxtb16 {u}, {l}",
            "smlad {acc}, {u}, {x0}, {acc}",
            "sxtb16 {x0}, {t}, ror #8",
            "sxtb16 {u}, {q}",
            "smlad {acc}, {u}, {x0}, {acc}",
            "sxtb16 {x0}, {x1}",
            "sxtb16 {u}, {l}, ror #8",
            "smlad {acc}, {u}, {x0}, {acc}",
            "sxtb16 {x0}, {x1}, ror #8",
            "sxtb16 {u}, {q}, ror #8",
            "smlad {acc}, {u}, {x0}, {acc}",
            "subs {n}, {n}, #4",
            "bhs 2b",
            // n = remainder - 4: bit 1 is the remainder's.
            "3:",
            "tst {n}, #2",
            "beq 4f",
            q4_half_step!(),
            "4:",
            "asrs {acc}, {acc}, #4",
            w = inout(reg) w => _,
            x = inout(reg) x => _,
            n = inout(reg) n => _,
            m = in(reg) 0xF0F0_F0F0u32,
            acc = inout(reg) acc,
            q = out(reg) _,
            l = out(reg) _,
            x0 = out(reg) _,
            x1 = out(reg) _,
            t = out(reg) _,
            u = out(reg) _,
            options(pure, readonly, nostack),
        );
    }
    acc
}

// ---- Quantizing activations ----------------------------------------------------------------

/// `quantize_group_q8` (here [`super::quantize_group_q8_int`]) into the
/// [`QuantOrder::Pairs16`] layout directly: per 4 values q0..q3 the words `q0 | q2 << 16`,
/// `q1 | q3 << 16` (int16 halves). `w` holds `x.len() / 2` words (x a multiple of 4 long; a
/// shorter `w` stops early).
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
#[inline(always)]
pub(super) fn quantize_group_pairs16(x: &[f32], w: &mut [u32]) -> f32 {
    let (s, inv2, tiny) = super::q8_scale(x);
    let half = |q: i32| q as u32 & 0xFFFF;
    if tiny {
        super::quantize_tiny(x, inv2, |i, v| {
            // value i is half (i / 2) % 2 of word 2·(i / 4) + i % 2
            if let Some(w) = w.get_mut(2 * (i / 4) + i % 2) {
                let shift = 16 * (i / 2 % 2);
                *w = (*w & !(0xFFFF << shift)) | half(v) << shift;
            }
        });
    } else {
        for (v, w) in x.as_chunks::<4>().0.iter().zip(w.as_chunks_mut::<2>().0) {
            let q = v.map(|v| super::round_q8_doubled(v * inv2));
            *w = [half(q[0]) | half(q[2]) << 16, half(q[1]) | half(q[3]) << 16];
        }
    }
    s
}

// ---- Whole rows: the group dots and the float combine in one asm block ---------------------

use super::{quantize_rows, QuantOrder, QuantRows};
use crate::model::{Matrix, MatrixData};

mod quads;

/// Group sums of one round (up to 16 groups) of a row kernel. The kernels store through a
/// pointer that runs up to the end of this buffer and stop when it reaches a 64-byte boundary,
/// which needs no count register (the DSP kernels use all twelve free core registers).
#[repr(C, align(64))]
struct GroupSums([i32; 16]);

/// q8 and q4 [`super::linear`]: rows of 4 to 16 groups through the quad kernels
/// ([`quads`]), the rest through the row kernels below, for groups of 28 and 32 (what the
/// converter picks for rows of 112·k and 32·k) and q8 groups of 172 (rows of 172). Other groups, shapes the kernels do not
/// take (q4 on the DSP build: rows of a multiple of 8 values, so that every row starts on a
/// word) and short buffers return false, having written only the scratch; the portable loop
/// with this file's group dots then runs.
pub(super) fn linear_quant(out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], accumulate: bool, scratch: &mut [f32]) -> bool {
    let quad = match w.data {
        MatrixData::Q8 { values, scales, group } => Some((bytemuck::cast_slice(values), scales, false, group)),
        MatrixData::Q4 { packed, scales, group } => Some((packed, scales, true, group)),
        MatrixData::F32(_) | MatrixData::F16(_) => None,
    };
    if let Some((weights, scales, q4, group)) = quad {
        if quads::linear(out, x, weights, scales, q4, group, w.rows, w.cols, bias, accumulate, scratch) {
            return true;
        }
    }
    let m = Rows { rows: w.rows, cols: w.cols, bias, accumulate };
    match w.data {
        MatrixData::Q8 { values, scales, group: 32 } => m.run::<32, false>(out, x, bytemuck::cast_slice(values), scales, scratch),
        MatrixData::Q8 { values, scales, group: 28 } => m.run::<28, false>(out, x, bytemuck::cast_slice(values), scales, scratch),
        // one group a row of 172 (what the converter picks for llama2.c stories260K's hidden
        // size, 4·43, which no group of 8 to 32 divides): 21 steps of 8 and one of 4
        MatrixData::Q8 { values, scales, group: 172 } => m.run::<172, false>(out, x, bytemuck::cast_slice(values), scales, scratch),
        MatrixData::Q4 { packed, scales, group: 32 } => m.run::<32, true>(out, x, packed, scales, scratch),
        MatrixData::Q4 { packed, scales, group: 28 } => m.run::<28, true>(out, x, packed, scales, scratch),
        _ => false,
    }
}

/// The activation layout each build's row kernels read ([`QuantOrder`]): on the DSP build
/// int16 pairs ready for `SMLAD` (q4: laid out for its nibble masks), with Helium the int8
/// values as they are.
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
const fn order(q4: bool) -> QuantOrder {
    if q4 {
        QuantOrder::Nibbles16
    } else {
        QuantOrder::Pairs16
    }
}
#[cfg(feature = "arm-helium")]
const fn order(_q4: bool) -> QuantOrder {
    QuantOrder::Natural
}

/// One `linear` call's shape and epilogue.
struct Rows<'b> {
    rows: usize,
    cols: usize,
    bias: &'b [f32],
    accumulate: bool,
}

impl Rows<'_> {
    /// [`linear_quant`] for groups of `GS` (`Q4`: packed 4-bit weights, else int8): checks
    /// every bound the kernels rely on, quantizes the activations, then runs the kernel over
    /// every token and row and stores what [`super::store_out`] stores (`y + bias[o]`, 0.0
    /// past the end of `bias`; added to `out` with `accumulate`).
    #[inline(always)]
    fn run<const GS: usize, const Q4: bool>(&self, out: &mut [f32], x: &[f32], weights: &[u8], scales: &[f32], scratch: &mut [f32]) -> bool {
        let Self { rows, cols, bias, accumulate } = *self;
        let gpr = cols / GS;
        let row_bytes = if Q4 { cols / 2 } else { cols };
        let order = order(Q4);
        // the DSP kernels load weights by the word (LDRD/LDR; q4: whole words and half-words
        // in a fixed pattern from the start of each row)
        let dsp = order != QuantOrder::Natural;
        let aligned = !dsp || ((weights.as_ptr() as usize).is_multiple_of(4) && row_bytes.is_multiple_of(4));
        let fits = |len: usize, per_row: usize| rows.checked_mul(per_row).is_some_and(|n| n <= len);
        if rows == 0 || gpr == 0 || !cols.is_multiple_of(GS) || !aligned || !fits(weights.len(), row_bytes) || !fits(scales.len(), gpr) {
            return false;
        }
        let tokens = (x.len() / cols).min(out.len() / rows);
        // bytes of one token's activations in the kernel's layout (words before its scales)
        let x_bytes = match order {
            QuantOrder::Pairs16 => 2 * cols,
            QuantOrder::Nibbles16 => 2 * cols + 4 * gpr,
            QuantOrder::Natural | QuantOrder::Q4Pairs => cols,
        };
        if scratch.len() < tokens * (x_bytes / 4 + gpr) {
            return false;
        }
        let QuantRows { q, scales: xs, pairs, .. } = quantize_rows(x, cols, GS, tokens, scratch, order);
        let xq: &[u8] = if dsp { bytemuck::cast_slice(pairs) } else { bytemuck::cast_slice(q) };
        if xq.len() < tokens * x_bytes || xs.len() < tokens * gpr {
            return false;
        }
        let mut sums = GroupSums([0; 16]);
        let sums_end = sums.0.as_mut_ptr_range().end;
        for (t, out_t) in out.chunks_exact_mut(rows).take(tokens).enumerate() {
            // SAFETY: token t < tokens: its activations (x_bytes) and scales (gpr) are inside
            // xq and xs (checked above).
            let (xt, xst) = unsafe { (xq.as_ptr().add(t * x_bytes), xs.as_ptr().add(t * gpr)) };
            // each call returns the next row's weights and scales (the rows are contiguous)
            let (mut wrow, mut wsc) = (weights.as_ptr(), scales.as_ptr());
            let mut b = bias.iter();
            // Without `accumulate` the outputs start at 0.0 and get the same add, which leaves
            // every result as it is: y below is never -0.0 (a row's result never is, see
            // reduce_tree!, so neither is result + bias), and 0.0 + y is y then, NaN included.
            // (No test in the loop, which the compiler would hoist by copying the loop and the
            // kernel in it.)
            if !accumulate {
                out_t.fill(0.0);
            }
            for dst in out_t.iter_mut() {
                // SAFETY: this is row o < rows (out_t has rows entries), so wrow = weights +
                // o·row_bytes holds gpr groups of GS weights (on the DSP build 4-byte aligned:
                // the weights and row_bytes are) and wsc = scales + o·gpr holds gpr scales
                // (lengths checked above); xt and xst are one token's activations, in the
                // layout of `order(Q4)`, and scales (above); sums_end is the end of a
                // GroupSums that nothing else touches.
                let (y, w_next, ws_next) = unsafe { row::<GS, Q4>(wrow, wsc, xt, xst, gpr, sums_end) };
                (wrow, wsc) = (w_next, ws_next);
                let y = y + b.next().copied().unwrap_or(0.0);
                *dst += y;
            }
        }
        true
    }
}

/// The float side of one group in a row kernel, [`super::combine_groups`]' order: the group
/// sum (`VLDMDB`: the sums are read back from the last one down), converted, times
/// `ws[k] · xs[k]` (r1, r2: the round's weight and activation scales), then added to lane
/// `s(16 + k)`: as `0.0 + term` in a row's first round (s8 holds +0.0), `lane + term` after it.
/// Separate multiplies and adds, in the portable code's operand order.
macro_rules! lane_step {
    (first, $label:expr, $off:literal, $lane:literal) => {
        lane_step!(@ $label, $off, concat!("vadd.f32 s", $lane, ", s8, s0\n"))
    };
    (accumulate, $label:expr, $off:literal, $lane:literal) => {
        lane_step!(@ $label, $off, concat!("vadd.f32 s", $lane, ", s", $lane, ", s0\n"))
    };
    (@ $label:expr, $off:literal, $add:expr) => {
        concat!(
            $label, ":\n",
            "vldmdb r12!, {{s0}}\n",
            "vcvt.f32.s32 s0, s0\n",
            "vldr s1, [r1, #", $off, "]\n",
            "vldr s2, [r2, #", $off, "]\n",
            "vmul.f32 s1, s1, s2\n",
            "vmul.f32 s0, s0, s1\n",
            $add,
        )
    };
}

/// The float side of a round of n groups (n - 1 in r9): a jump (`TBB`, its table of byte
/// offsets right behind it) into a chain of the 16 lane steps laid out from group 15 down to
/// group 0, entered at group n - 1. The labels are `$table` for the table and `$l` followed by
/// k for group k's step (numeric local labels: the asm may be inlined more than once).
macro_rules! lane_chain {
    ($kind:ident, $table:literal, $l:literal) => {
        lane_chain!(@ $kind, $table, $l, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $kind:ident, $table:literal, $l:literal, $($k:tt)*) => {
        concat!(
            "tbb [pc, r9]\n",
            $table, ":\n",
            $(".byte (", $l, $k, "f - ", $table, "b) / 2\n",)*
            ".p2align 1\n",
            lane_step!($kind, concat!($l, 15), 60, 31),
            lane_step!($kind, concat!($l, 14), 56, 30),
            lane_step!($kind, concat!($l, 13), 52, 29),
            lane_step!($kind, concat!($l, 12), 48, 28),
            lane_step!($kind, concat!($l, 11), 44, 27),
            lane_step!($kind, concat!($l, 10), 40, 26),
            lane_step!($kind, concat!($l, 9), 36, 25),
            lane_step!($kind, concat!($l, 8), 32, 24),
            lane_step!($kind, concat!($l, 7), 28, 23),
            lane_step!($kind, concat!($l, 6), 24, 22),
            lane_step!($kind, concat!($l, 5), 20, 21),
            lane_step!($kind, concat!($l, 4), 16, 20),
            lane_step!($kind, concat!($l, 3), 12, 19),
            lane_step!($kind, concat!($l, 2), 8, 18),
            lane_step!($kind, concat!($l, 1), 4, 17),
            lane_step!($kind, concat!($l, 0), 0, 16),
        )
    };
}

/// The end of a row: [`super::combine_groups`]' reduction tree over the T = min(groups, 16)
/// lanes the row touched (T - 1 in r9), the result in s16. Laid out as one chain, the tree's
/// levels one after the other and each level's adds from the highest lane down, so that
/// entering it at T's label runs exactly the adds whose both lanes were touched: the others
/// add +0.0 to a lane, which leaves it unchanged (a lane is never -0.0: it starts as
/// 0.0 + term, and a sum is -0.0 only when both terms are), or add two untouched +0.0 lanes.
macro_rules! reduce_tree {
    () => {
        concat!(
            "tbb [pc, r9]\n",
            "32:\n",
            ".byte (80f - 32b) / 2, (81f - 32b) / 2, (82f - 32b) / 2, (83f - 32b) / 2\n",
            ".byte (84f - 32b) / 2, (85f - 32b) / 2, (86f - 32b) / 2, (87f - 32b) / 2\n",
            ".byte (88f - 32b) / 2, (89f - 32b) / 2, (810f - 32b) / 2, (811f - 32b) / 2\n",
            ".byte (812f - 32b) / 2, (813f - 32b) / 2, (814f - 32b) / 2, (815f - 32b) / 2\n",
            ".p2align 1\n",
            // 16 -> 8: lane i += lane i + 8 (entries for T = 16 .. 9)
            "815:\n", "vadd.f32 s23, s23, s31\n",
            "814:\n", "vadd.f32 s22, s22, s30\n",
            "813:\n", "vadd.f32 s21, s21, s29\n",
            "812:\n", "vadd.f32 s20, s20, s28\n",
            "811:\n", "vadd.f32 s19, s19, s27\n",
            "810:\n", "vadd.f32 s18, s18, s26\n",
            "89:\n", "vadd.f32 s17, s17, s25\n",
            "88:\n", "vadd.f32 s16, s16, s24\n",
            // 8 -> 4 (T = 8 .. 5)
            "87:\n", "vadd.f32 s19, s19, s23\n",
            "86:\n", "vadd.f32 s18, s18, s22\n",
            "85:\n", "vadd.f32 s17, s17, s21\n",
            "84:\n", "vadd.f32 s16, s16, s20\n",
            // 4 -> 2 (T = 4, 3)
            "83:\n", "vadd.f32 s17, s17, s19\n",
            "82:\n", "vadd.f32 s16, s16, s18\n",
            // 2 -> 1 (T = 2)
            "81:\n", "vadd.f32 s16, s16, s17\n",
            "80:\n",
        )
    };
}

/// A row kernel: `$group` (one group's integer dot, or two with a round-end test between
/// them: the weights at r10 (Helium: r5), the activations at r11, both advanced past the
/// group, the sum in r0; it may use r0-r5, r8, r9, q0, q1) in the frame that turns the group
/// sums of a row into its result, the portable [`super::combine_groups`] bit for bit:
///
/// - in: r1 the row's weight scales, r2 the token's activation scales, r11 its activations,
///   r12 the end of a [`GroupSums`], lr the row's groups (≥ 1); out: r0 the result (f32
///   bits), r1 the next row's scales, the weight register past the row; r2, r11, r12 and lr
///   as they came in;
/// - rounds of n = min(groups left, 16) groups: the integer loop stores the n group sums into
///   the buffer (r12 starts n words before its end, stores with post-increment, and the loop
///   ends at the 64-byte boundary that is the end, so no count register is needed), then
///   [`lane_chain`] reads them back and adds each group's term into its lane s16-s31;
/// - the first round's steps write 0.0 (s8) + term into their lanes, as the portable lanes
///   start at 0.0; rows of more than 16 groups (more than 448 or 512 weights) go on with
///   rounds that add into the lanes, the scale pointers (kept in s9, s10 while the integer
///   loop has the core registers) advanced by 16 groups a round;
/// - then [`reduce_tree`] over the min(groups, 16) lanes touched.
///
/// r9 is the integer loop's scratch and the round's n - 1 (`USAT #4` clamps groups - 1 to
/// 15). Labels: 2, 3 the integer loops, 8 right after each (for two-group bodies), 6 the
/// later rounds, 7 and 5 the ends, 30-32 and 40-415, 60-615, 80-815 the jump tables and their
/// targets.
macro_rules! row_frame {
    ($group:expr) => {
        concat!(
            "vmov s9, r1\n",
            "vmov s10, r2\n",
            "vmov s11, r11\n",
            "movs r0, #0\n",
            "vmov s8, r0\n",
            // round 1
            "subs r9, lr, #1\n",
            "usat r9, #4, r9\n",
            "sub r12, r12, r9, lsl #2\n",
            "sub r12, r12, #4\n",
            "2:\n",
            $group,
            "str r0, [r12], #4\n",
            "tst r12, #63\n",
            "bne 2b\n",
            "8:\n",
            "vmov r1, s9\n",
            "vmov r2, s10\n",
            "subs r9, lr, #1\n",
            "usat r9, #4, r9\n",
            lane_chain!(first, 30, 4),
            "cmp lr, #16\n",
            "bls 7f\n",
            // rows of more than 16 groups: rounds 2, 3, ... (lr and r2 kept for the end)
            "vmov s13, lr\n",
            "vmov s14, r2\n",
            "6:\n",
            "sub lr, lr, #16\n",
            "add r12, r12, #64\n",
            "add r1, r1, #64\n",
            "vmov s9, r1\n",
            "add r2, r2, #64\n",
            "vmov s10, r2\n",
            "subs r9, lr, #1\n",
            "usat r9, #4, r9\n",
            "sub r12, r12, r9, lsl #2\n",
            "sub r12, r12, #4\n",
            "3:\n",
            $group,
            "str r0, [r12], #4\n",
            "tst r12, #63\n",
            "bne 3b\n",
            "8:\n",
            "vmov r1, s9\n",
            "vmov r2, s10\n",
            "subs r9, lr, #1\n",
            "usat r9, #4, r9\n",
            lane_chain!(accumulate, 31, 6),
            "cmp lr, #16\n",
            "bhi 6b\n",
            // r12 back to the buffer's end, r1 to the next row's scales (the last round's
            // base + its groups), groups and xs as they came in; all 16 lanes were touched
            "add r12, r12, r9, lsl #2\n",
            "add r12, r12, #4\n",
            "add r1, r1, lr, lsl #2\n",
            "vmov lr, s13\n",
            "vmov r2, s14\n",
            "movs r9, #15\n",
            "b 5f\n",
            // one round: the same, lanes 0 to groups - 1 touched
            "7:\n",
            "add r12, r12, r9, lsl #2\n",
            "add r12, r12, #4\n",
            "add r1, r1, lr, lsl #2\n",
            "5:\n",
            reduce_tree!(),
            "vmov r0, s16\n",
            "vmov r11, s11\n",
        )
    };
}

/// One q8 group of `k8`·8 + `t4`·4 weights (`SXTB16` + `SMLAD`) against activations in
/// [`QuantOrder::Pairs16`] layout: per 8 weights one `LDRD` of weights, one `LDM` of 4 words of
/// int16 pairs, 4 `SXTB16`, 4 `SMLAD` (the first of the group an `SMUAD`, which starts the sum).
/// r1, r2 weights, r3-r5, r8 activations, r9 scratch.
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
macro_rules! dsp_q8_group {
    () => {
        concat!(
            ".if {k8}\n",
            "ldrd r1, r2, [r10], #8\n",
            "ldm r11!, {{r3, r4, r5, r8}}\n",
            "sxtb16 r9, r1\n",
            "smuad r0, r9, r3\n",
            "sxtb16 r1, r1, ror #8\n",
            "smlad r0, r1, r4, r0\n",
            "sxtb16 r9, r2\n",
            "smlad r0, r9, r5, r0\n",
            "sxtb16 r2, r2, ror #8\n",
            "smlad r0, r2, r8, r0\n",
            ".rept {k8} - 1\n",
            "ldrd r1, r2, [r10], #8\n",
            "ldm r11!, {{r3, r4, r5, r8}}\n",
            "sxtb16 r9, r1\n",
            "smlad r0, r9, r3, r0\n",
            "sxtb16 r1, r1, ror #8\n",
            "smlad r0, r1, r4, r0\n",
            "sxtb16 r9, r2\n",
            "smlad r0, r9, r5, r0\n",
            "sxtb16 r2, r2, ror #8\n",
            "smlad r0, r2, r8, r0\n",
            ".endr\n",
            ".endif\n",
            ".if {t4}\n",
            "ldr r1, [r10], #4\n",
            "ldrd r3, r4, [r11], #8\n",
            "sxtb16 r9, r1\n",
            ".if {k8}\n",
            "smlad r0, r9, r3, r0\n",
            ".else\n",
            "smuad r0, r9, r3\n",
            ".endif\n",
            "sxtb16 r1, r1, ror #8\n",
            "smlad r0, r1, r4, r0\n",
            ".endif\n",
        )
    };
}

/// 8 q4 weights (one word: nibble i is weight i, stored + 8) against 4 words of
/// [`QuantOrder::Nibbles16`] activations: the nibbles masked in place (0x000F000F,
/// 0x00F000F0, 0x0F000F00, and 0x0F000F00 after LSR #4 give the int16 pairs (w0, w4),
/// 16·(w1, w5), 256·(w2, w6), 256·(w3, w7), unsigned) and one `SMLAD` each against activation
/// pairs scaled to match (256·(x0, x4), 16·(x1, x5), (x2, x6), (x3, x7)): 256 × the sum. `$ldm`
/// loads the activations (with the group's start value into r0 for its first step).
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
macro_rules! dsp_q4_word {
    ($ldm:literal) => {
        concat!(
            "ldr r1, [r10], #4\n",
            $ldm,
            "and r2, r1, #0x000F000F\n",
            "smlad r0, r2, r3, r0\n",
            "and r2, r1, #0x00F000F0\n",
            "smlad r0, r2, r4, r0\n",
            "and r2, r1, #0x0F000F00\n",
            "smlad r0, r2, r5, r0\n",
            "lsr r1, r1, #4\n",
            "and r1, r1, #0x0F000F00\n",
            "smlad r0, r1, r8, r0\n",
        )
    };
}

/// 4 q4 weights (one half-word, the group's tail or head when groups are 8k + 4 long) against
/// 2 words of [`QuantOrder::Nibbles16`] activations (256·x0 | 16·x1, x2 | x3): the same masks,
/// then `SMLABB`/`SMLABT` (the masked values are all in the bottom half).
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
macro_rules! dsp_q4_half {
    ($ldm:literal) => {
        concat!(
            "ldrh r1, [r10], #2\n",
            $ldm,
            "and r2, r1, #0x000F000F\n",
            "smlabb r0, r2, r3, r0\n",
            "and r2, r1, #0x00F000F0\n",
            "smlabt r0, r2, r3, r0\n",
            "and r2, r1, #0x0F000F00\n",
            "smlabb r0, r2, r4, r0\n",
            "lsr r1, r1, #4\n",
            "and r1, r1, #0x0F000F00\n",
            "smlabt r0, r1, r4, r0\n",
        )
    };
}

/// One or two q4 groups of `k8`·8 + `t4`·4 weights: the sum starts at the group's start value
/// (`-2048·Σx`, loaded with the first activations), collects 256 × Σ (nibble)·x, and ends
/// with ASR #8 (exact: the sum is a multiple of 256). Groups of 8k + 4 (14 bytes for 28
/// weights) alternate between starting on a word (whole words, then the half-word) and in the
/// middle of one (the half-word first); since rows start on a word, the loop body takes an
/// even-odd pair of groups, leaving after the first when the round ends there (label 8 of
/// [`row_frame`]'s frame).
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
macro_rules! dsp_q4_group {
    () => {
        concat!(
            ".if {k8}\n",
            dsp_q4_word!("ldm r11!, {{r0, r3, r4, r5, r8}}\n"),
            ".rept {k8} - 1\n",
            dsp_q4_word!("ldm r11!, {{r3, r4, r5, r8}}\n"),
            ".endr\n",
            ".if {t4}\n",
            dsp_q4_half!("ldrd r3, r4, [r11], #8\n"),
            ".endif\n",
            ".else\n",
            dsp_q4_half!("ldm r11!, {{r0, r3, r4}}\n"),
            ".endif\n",
            "asr r0, r0, #8\n",
            ".if {t4}\n",
            "str r0, [r12], #4\n",
            "tst r12, #63\n",
            "beq 8f\n",
            dsp_q4_half!("ldm r11!, {{r0, r3, r4}}\n"),
            ".rept {k8}\n",
            dsp_q4_word!("ldm r11!, {{r3, r4, r5, r8}}\n"),
            ".endr\n",
            "asr r0, r0, #8\n",
            ".endif\n",
        )
    };
}

/// One row (`groups` groups of `GS` weights; `Q4`: packed 4-bit, else int8) against one token,
/// DSP build: what [`super::dot_q8`] / [`super::dot_q4`] return, bit for bit (exact group sums,
/// then the float steps of [`super::combine_groups`] in its order). Returns the result and
/// the next row's weights and scales (`w` + the row, `ws` + `groups`).
///
/// # Safety
/// `groups` ≥ 1; `w` readable for the row's `groups·GS` (q4: `groups·GS/2`) bytes and 4-byte
/// aligned; `x` readable for one token's activations in the layout of `order(Q4)` (4-byte
/// aligned); `ws` and `xs` readable for `groups` f32; `sums_end` the end of a [`GroupSums`]
/// nothing else accesses meanwhile. `GS` a multiple of 4; for q4 with `GS % 8 == 4`, `groups`
/// even.
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
#[inline(always)]
unsafe fn row<const GS: usize, const Q4: bool>(w: *const u8, ws: *const f32, x: *const u8, xs: *const f32, groups: usize, sums_end: *mut i32) -> (f32, *const u8, *const f32) {
    let (y, w_next, ws_next): (u32, *const u8, *const f32);
    // SAFETY: reads the row's weights (LDRD/LDR/LDRH at 4- and 2-byte aligned addresses: w
    // is 4-byte aligned and every step advances it by 8, 4 or 2 in the pattern the layout
    // assumes), one token's activations (LDM/LDRD, 4-byte aligned, likewise), and
    // ws[..groups], xs[..groups] (VLDR at offsets 4k in rounds of 16 groups); writes only the
    // GroupSums buffer (at most 16 words before sums_end, from n words before it up to it)
    // and the registers named below (flags included); r2, r11, r12 and lr come back as they
    // went in. The caller's contract covers all of these.
    macro_rules! call {
        ($group:expr) => {
            unsafe {
                core::arch::asm!(
                    row_frame!($group),
                    k8 = const GS / 8,
                    t4 = const (GS % 8) / 4,
                    inout("r10") w => w_next,
                    inout("r1") ws => ws_next,
                    in("r2") xs,
                    in("r11") x,
                    in("r12") sums_end,
                    in("lr") groups,
                    out("r0") y,
                    out("r3") _, out("r4") _, out("r5") _, out("r8") _, out("r9") _,
                    out("s0") _, out("s1") _, out("s2") _,
                    out("s8") _, out("s9") _, out("s10") _, out("s11") _, out("s13") _, out("s14") _,
                    out("s16") _, out("s17") _, out("s18") _, out("s19") _, out("s20") _, out("s21") _, out("s22") _, out("s23") _,
                    out("s24") _, out("s25") _, out("s26") _, out("s27") _, out("s28") _, out("s29") _, out("s30") _, out("s31") _,
                    options(nostack),
                )
            }
        };
    }
    if Q4 {
        call!(dsp_q4_group!());
    } else {
        call!(dsp_q8_group!());
    }
    (f32::from_bits(y), w_next, ws_next)
}

/// One q8 group of `k16`·16 + `tail` weights (`VLDRB` + `VMLADAV.S8`): whole vectors, then the
/// tail predicated by P0 (set by the kernel's `VCTP.8 tail`), all into r0. The weights at r5
/// (the widening `VLDRB.U16` of the q4 kernel takes r0-r7 only as its base), the activations
/// at r11.
#[cfg(feature = "arm-helium")]
macro_rules! mve_q8_group {
    () => {
        concat!(
            ".if {k16}\n",
            "vldrb.s8 q0, [r5], #16\n",
            "vldrb.s8 q1, [r11], #16\n",
            "vmladav.s8 r0, q0, q1\n",
            ".rept {k16} - 1\n",
            "vldrb.s8 q0, [r5], #16\n",
            "vldrb.s8 q1, [r11], #16\n",
            "vmladava.s8 r0, q0, q1\n",
            ".endr\n",
            ".endif\n",
            ".if {tail}\n",
            "vpsttt\n",
            "vldrbt.s8 q0, [r5], #{tail}\n",
            "vldrbt.s8 q1, [r11], #{tail}\n",
            ".if {k16}\n",
            "vmladavat.s8 r0, q0, q1\n",
            ".else\n",
            "vmladavt.s8 r0, q0, q1\n",
            ".endif\n",
            ".endif\n",
        )
    };
}

/// 16 q4 weights as signed bytes in q0, from 8 bytes at r5 (as [`dot_q4_group`]: `VLDRB.U16`
/// puts one byte b = hi·16 + lo in each 16-bit lane, `VSLI` and `VBIC` make it the two bytes
/// lo, hi, and `VSUB` takes the 8 off each, r4 = 8). `$p` predicates the load (the tail).
#[cfg(feature = "arm-helium")]
macro_rules! mve_q4_unpack {
    ($ld:literal) => {
        concat!($ld, "vsli.16 q0, q0, #4\n", "vbic.i16 q0, #0xf0\n", "vsub.i8 q0, q0, r4\n")
    };
}

/// One q4 group of `k16`·16 + `tail` weights: as [`mve_q8_group`], the weights unpacked by
/// [`mve_q4_unpack`].
#[cfg(feature = "arm-helium")]
macro_rules! mve_q4_group {
    () => {
        concat!(
            ".if {k16}\n",
            mve_q4_unpack!("vldrb.u16 q0, [r5], #8\n"),
            "vldrb.s8 q1, [r11], #16\n",
            "vmladav.s8 r0, q0, q1\n",
            ".rept {k16} - 1\n",
            mve_q4_unpack!("vldrb.u16 q0, [r5], #8\n"),
            "vldrb.s8 q1, [r11], #16\n",
            "vmladava.s8 r0, q0, q1\n",
            ".endr\n",
            ".endif\n",
            ".if {tail}\n",
            mve_q4_unpack!("vpst\nvldrbt.u16 q0, [r5], #{tail} / 2\n"),
            "vpstt\n",
            "vldrbt.s8 q1, [r11], #{tail}\n",
            ".if {k16}\n",
            "vmladavat.s8 r0, q0, q1\n",
            ".else\n",
            "vmladavt.s8 r0, q0, q1\n",
            ".endif\n",
            ".endif\n",
        )
    };
}

/// One row (`groups` groups of `GS` weights; `Q4`: packed 4-bit, else int8) against one token,
/// `VMLADAV.S8`: what [`super::dot_q8`] / [`super::dot_q4`] return, bit for bit. The float side
/// is scalar, as on the M4: Helium's vector float instructions flush denormals to zero (they
/// use the "standard FPSCR value"), the scalar FPU and the desktop do not. Returns the result
/// and the next row's weights and scales.
///
/// # Safety
/// `groups` ≥ 1; `w` readable for the row's `groups·GS` (q4: `groups·GS/2`) bytes; `x`
/// readable for `groups·GS` bytes; `ws` and `xs` readable for `groups` f32; `sums_end` the end
/// of a [`GroupSums`] nothing else accesses meanwhile. `GS` even.
#[cfg(feature = "arm-helium")]
#[inline(always)]
unsafe fn row<const GS: usize, const Q4: bool>(w: *const u8, ws: *const f32, x: *const u8, xs: *const f32, groups: usize, sums_end: *mut i32) -> (f32, *const u8, *const f32) {
    let (y, w_next, ws_next): (u32, *const u8, *const f32);
    // SAFETY: reads the row's weights and one token's activations (VLDRB: whole vectors, then
    // the tail's lanes only: the others are predicated off by P0 = VCTP.8 tail, which for the
    // q4 weights' 16-bit lanes enables the first tail/2, and a predicated-off lane is not
    // read), and ws[..groups], xs[..groups]; writes only the GroupSums buffer (as the DSP
    // kernel), the registers named below and the flags; r2, r11, r12 and lr come back as they
    // went in. P0 is saved first and restored at the end (the compiler knows nothing of VPR).
    macro_rules! call {
        ($group:expr) => {
            unsafe {
                core::arch::asm!(
                    ".if {tail}\n",
                    "vmrs r3, p0\n",
                    "movs r0, #{tail}\n",
                    "vctp.8 r0\n",
                    ".endif\n",
                    ".if {q4}\n",
                    "movs r4, #8\n",
                    ".endif\n",
                    row_frame!($group),
                    ".if {tail}\n",
                    "vmsr p0, r3\n",
                    ".endif\n",
                    k16 = const GS / 16,
                    tail = const GS % 16,
                    q4 = const Q4 as u32,
                    inout("r5") w => w_next,
                    inout("r1") ws => ws_next,
                    in("r2") xs,
                    in("r11") x,
                    in("r12") sums_end,
                    in("lr") groups,
                    out("r0") y,
                    out("r3") _, out("r4") _, out("r9") _,
                    out("d0") _, out("d1") _, out("d2") _, out("d3") _,
                    out("s8") _, out("s9") _, out("s10") _, out("s11") _, out("s13") _, out("s14") _,
                    out("s16") _, out("s17") _, out("s18") _, out("s19") _, out("s20") _, out("s21") _, out("s22") _, out("s23") _,
                    out("s24") _, out("s25") _, out("s26") _, out("s27") _, out("s28") _, out("s29") _, out("s30") _, out("s31") _,
                    options(nostack),
                )
            }
        };
    }
    if Q4 {
        call!(mve_q4_group!());
    } else {
        call!(mve_q8_group!());
    }
    (f32::from_bits(y), w_next, ws_next)
}
