//! Cortex-M builds of the two exact integer kernels of the quantized mat-vec: [`super::dot_i8`]
//! (an int8 weight group against int8 activations) and [`super::dot_q4_group`] (packed 4-bit
//! weights against int8 activations), in inline assembly.
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
//! stops; nothing is decided at run time). Off Arm the features do nothing.
//!
//! Both compute the same i32 as the portable code: integer sums are exact, and where an i32
//! could overflow both wrap (two's complement, `SMLAD` and `VMLADAVA` accumulate modulo 2^32 as
//! release-build Rust does). So every build gives the same bits, host and board alike. Lengths
//! are handled as in the portable code: up to the shorter input, tails included. The functions
//! return `Option` so that a kernel may decline an input (the portable code then runs), but
//! these take everything: inputs not aligned as LDRD needs (never the model's groups) go to a
//! small out-of-line loop here, which keeps the portable kernel and its sixteen accumulators
//! out of the hot loop's register allocation.
//!
//! `cargo test` cannot run them, so the firmware checks them at boot against naive references
//! (`boards/firmware-common/src/kernels.rs`, `self_check`: lengths 0 to 768, extreme values,
//! every alignment) and exits 1 on a difference; `boards/qemu-check.sh` then requires the
//! firmware's generated tokens to equal the host's.
//!
//! Cost, in executed instructions (what QEMU's `-icount` counts):
//! - `arm-dsp`, q8: per 4 weights, 4 `SXTB16` (two for the weights, two for the activations)
//!   + 2 `SMLAD`, plus one `LDRD` per 8 bytes of each input: 1.75 per multiply-accumulate, and
//!   2 loop instructions per 16; a group of 28 takes 57 instructions, one of 32 takes 65. The
//!   floor with int8 activations is 1.5 (the six ALU instructions per 4). Activations stored
//!   once per `linear` call as int16 pairs in `SXTB16` order would take the two activation
//!   `SXTB16`s out of every row, for a floor of 1.0 (2 `SXTB16` + 2 `SMLAD` per 4 weights);
//!   that changes how `linear` quantizes, so it is not done here.
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
