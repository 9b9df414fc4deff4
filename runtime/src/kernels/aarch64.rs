//! 64-bit Arm (aarch64) builds, desktop/server only (the `std` feature): q8 / q4 [`linear`]
//! with the dot-product instruction `SDOT` (Armv8.2 `dotprod`: Cortex-A55/A76 and later,
//! Neoverse, Apple M), chosen at run time. Everything else on aarch64 is the portable code,
//! which the compiler vectorises to NEON (baseline on aarch64).
//!
//! The aarch64 counterpart of `linear_quant_vnni` (`kernels/x86.rs`), with the same division of
//! the work:
//! - **integer side:** `SDOT` multiplies 16 signed bytes by 16 signed bytes and adds each run
//!   of four products into one of 4 i32 lanes. A group of 32 is two `SDOT`s into one vector
//!   (4 partial sums); pairwise adds (`ADDP`) fold four groups' vectors into one vector of 4
//!   exact group sums. q8 weights and activations are both signed, so no offset. q4 weights
//!   are the stored nibbles (`q + 8`, unsigned, < 16, so also valid signed bytes): low nibbles
//!   against the even-position activations and high nibbles against the odd ones, which
//!   `LD2` splits from the natural order as it loads them; the offset comes off per group with
//!   the activation sums `quantize_rows` keeps: `Σ (w + 8)·x − 8·Σ x = Σ w·x`, exactly.
//! - **float side:** `combine_groups` lane for lane. Its 16 lanes are four 4-lane vectors;
//!   groups `g0..g0+4` with `g0 % 16 = 4j` go to vector j as `isum as f32 · (ws · xs)` then an
//!   add (`FMUL`, `FMUL`, `FADD`: never fused), then the tree of `reduce` (lanes i + 8, i + 4,
//!   i + 2, i + 1). The integer sums are exact and the float operations and their order are
//!   the portable ones, so the bits are too.
//!
//! Loops: tiles of rows × tokens, rows outside. Decode (one token) takes [`DECODE_ROWS`] = 4
//! weight rows at a time, so each load of the token's values feeds four rows; prefill takes
//! tiles of [`PREFILL_ROWS`] × [`PREFILL_TOKENS`] = 2 × 2, so each loaded block of weights
//! serves two tokens (as x86's `row_tokens::<4>` serves four) and each token's values two rows.
//! These shapes executed the fewest instructions under qemu (`scripts/aarch64-count.sh`;
//! 2 × 2 decode rows and 1 × 4, 3 × 2 and 4 × 1 prefill tiles executed 3–15% more): each
//! row × token keeps the 4 lane vectors of `combine_groups` in registers, and wider tiles
//! spill. A row is walked 16 groups at a time (four blocks of 4
//! groups, one per lane vector); the last `gpr % 4` groups take a separate, out-of-line block.
//! Weights are read in place; activations are quantized into the caller's scratch
//! ([`QuantOrder::Natural`]); no heap, and every bound is checked before the loops, which then
//! read through raw pointers.
//!
//! `SDOT` is written as inline assembly: its Rust intrinsic (`vdotq_s32`) is not stable yet.
//! `GPT2_MCU_NO_SDOT=1` in the environment turns the path off (to compare it with the portable
//! one, e.g. `scripts/aarch64-count.sh`).
//!
//! [`linear`]: super::linear

extern crate std;

use core::arch::aarch64::*;
use core::arch::asm;

use super::{quant_job, Matrix, Outputs, QuantJob, QuantOrder};

/// The group size the SDOT kernels handle (the converter's default); other groups take the
/// portable path.
const GROUP: usize = 32;
/// Groups per block: one vector of group sums, one of `combine_groups`' four lane vectors.
const BLOCK: usize = 4;
/// Weight rows that share each load of a token's values in decode (one token).
const DECODE_ROWS: usize = 4;
/// Rows of a prefill tile: each token's values loaded once for this many rows.
const PREFILL_ROWS: usize = 2;
/// Tokens of a prefill tile (and the fewest tokens that take the prefill tiles): each block
/// of weights loaded once for this many tokens.
const PREFILL_TOKENS: usize = 2;

/// Whether the CPU has `SDOT` (and `GPT2_MCU_NO_SDOT` does not turn it off): asked once.
pub(super) fn has_sdot() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        !cfg!(miri) && std::env::var_os("GPT2_MCU_NO_SDOT").is_none_or(|v| v == "0") && std::arch::is_aarch64_feature_detected!("dotprod")
    })
}

/// q8 / q4 `linear` (group 32, `cols % 32 == 0`) with `SDOT`. Returns false, having written
/// nothing, when the matrix is another dtype or shape, or the scratch or matrix data are short;
/// the caller then runs the portable path.
#[target_feature(enable = "dotprod")]
pub(super) fn linear_quant_sdot(out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], accumulate: bool, scratch: &mut [f32]) -> bool {
    let Some(QuantJob { q4, data, scales, rows, cols, tokens, gpr, q, xs, sums, .. }) = quant_job(x, out.len(), w, GROUP, |_| GROUP, |_| QuantOrder::Natural, scratch) else {
        return false;
    };
    let (q, xs, sums) = (q.as_ptr(), xs.as_ptr(), sums.as_ptr());
    let mut out = Outputs { out, rows, bias, accumulate };
    // SAFETY: rows·row_bytes bytes of weights, rows·gpr scales, and the activations of
    // `tokens` tokens (checked above).
    unsafe {
        if q4 {
            Operands::<true> { w: data.as_ptr(), ws: scales.as_ptr(), cols, gpr, q, xs, sums }.run(rows, tokens, &mut out);
        } else {
            Operands::<false> { w: data.as_ptr(), ws: scales.as_ptr(), cols, gpr, q, xs, sums }.run(rows, tokens, &mut out);
        }
    }
    true
}

/// The SDOT kernel's epilogue.
impl Outputs<'_> {
    /// Stores the results of rows `o..o+R` × tokens `t0..t0+T` (`ys[row][token]`) as
    /// [`Outputs::one`] does (`y + bias`, then added to the output with `accumulate`), each token's
    /// R outputs (contiguous) checked once.
    #[inline(always)]
    fn put<const R: usize, const T: usize>(&mut self, o: usize, t0: usize, ys: &[[f32; T]; R]) {
        let (rows, bias, accumulate) = (self.rows, self.bias, self.accumulate);
        for t in 0..T {
            let col = ys.iter().map(|y| y.get(t).copied().unwrap_or(0.0));
            let at = (t0 + t) * rows + o;
            if let Some(dst) = self.out.get_mut(at..at + R) {
                for (r, (d, y)) in dst.iter_mut().zip(col).enumerate() {
                    let y = y + bias.get(o + r).copied().unwrap_or(0.0);
                    *d = if accumulate { *d + y } else { y };
                }
            } else {
                for (r, y) in col.enumerate() {
                    self.one(t0 + t, o + r, y);
                }
            }
        }
    }
}

/// The operands of a [`linear_quant_sdot`] call: weights in q8 (`Q4` false: `cols` bytes a
/// row) or q4 (`cols/2` bytes of packed nibbles a row) and their scales, and the quantized
/// activations.
struct Operands<const Q4: bool> {
    /// Weights `[rows, row_bytes]`.
    w: *const u8,
    /// Weight scales `[rows, gpr]`.
    ws: *const f32,
    cols: usize,
    /// Groups per row.
    gpr: usize,
    /// int8 values `[T, cols]`, natural order.
    q: *const i8,
    /// Scales `[T, gpr]`.
    xs: *const f32,
    /// Sums of the int8 values `[T, gpr]` (read for q4 only).
    sums: *const i32,
}

impl<const Q4: bool> Operands<Q4> {
    /// Bytes of one weight row.
    const fn row_bytes(&self) -> usize {
        if Q4 { self.cols / 2 } else { self.cols }
    }

    /// All `rows` weight rows against all `tokens` tokens; the results go to `out`.
    ///
    /// # Safety
    /// `w` must hold `rows · row_bytes` bytes, `ws` `rows · gpr` scales, and the activations
    /// `tokens` tokens.
    #[target_feature(enable = "dotprod")]
    unsafe fn run(&self, rows: usize, tokens: usize, out: &mut Outputs<'_>) {
        // SAFETY: as above.
        unsafe {
            if tokens < PREFILL_TOKENS {
                self.sweep::<DECODE_ROWS, 1>(rows, tokens, out);
            } else {
                self.sweep::<PREFILL_ROWS, PREFILL_TOKENS>(rows, tokens, out);
            }
        }
    }

    /// Every row against every token in tiles of R rows × T tokens (rows outside, so a tile's
    /// weights stay in the cache while the tokens pass), then the rows and tokens left over.
    ///
    /// # Safety
    /// As [`Operands::run`].
    #[inline]
    #[target_feature(enable = "dotprod")]
    unsafe fn sweep<const R: usize, const T: usize>(&self, rows: usize, tokens: usize, out: &mut Outputs<'_>) {
        let (full_rows, full_tokens) = (rows - rows % R, tokens - tokens % T);
        // SAFETY (every `tile`): its rows are < rows and its tokens < tokens.
        for o in (0..full_rows).step_by(R) {
            for t0 in (0..full_tokens).step_by(T) {
                out.put(o, t0, &unsafe { self.tile::<R, T>(o, t0) });
            }
            for t in full_tokens..tokens {
                out.put(o, t, &unsafe { self.tile::<R, 1>(o, t) });
            }
        }
        for o in full_rows..rows {
            for t0 in (0..full_tokens).step_by(T) {
                out.put(o, t0, &unsafe { self.tile::<1, T>(o, t0) });
            }
            for t in full_tokens..tokens {
                out.put(o, t, &unsafe { self.tile::<1, 1>(o, t) });
            }
        }
    }

    /// Weight rows `o..o+R` against tokens `t0..t0+T`: `[row][token]`, each result the portable
    /// `dot_q8` / `dot_q4` bit for bit.
    /// Blocks of 4 groups; each block's weights are loaded once for the T tokens and each
    /// token's activations once for the R rows.
    ///
    /// # Safety
    /// Rows `o..o+R` must exist in `w` and `ws`, and tokens `t0..t0+T` in `q`, `xs` and
    /// `sums`.
    #[inline]
    #[target_feature(enable = "dotprod")]
    unsafe fn tile<const R: usize, const T: usize>(&self, o: usize, t0: usize) -> [[f32; T]; R] {
        // the 16 lanes of combine_groups: vector j holds lanes 4j..4j+4, which take the groups
        // g with g % 16 in 4j..4j+4
        let zero = [[vdupq_n_f32(0.0); T]; R];
        let (mut l0, mut l1, mut l2, mut l3) = (zero, zero, zero, zero);
        let gpr = self.gpr;
        // whole blocks: 16 groups a pass, the last pass skipping the blocks past the row (one
        // copy of each block's code, so that the compiler keeps the lane vectors in registers)
        let whole = gpr - gpr % BLOCK;
        let mut g = 0;
        while g < whole {
            // SAFETY (every `block` call): groups g..g+4 ≤ whole ≤ gpr are inside each row and
            // each token's activations (the caller's contract).
            unsafe {
                add_terms(&mut l0, self.terms::<R, T, BLOCK>(o, t0, g));
                if g + BLOCK < whole {
                    add_terms(&mut l1, self.terms::<R, T, BLOCK>(o, t0, g + BLOCK));
                }
                if g + 2 * BLOCK < whole {
                    add_terms(&mut l2, self.terms::<R, T, BLOCK>(o, t0, g + 2 * BLOCK));
                }
                if g + 3 * BLOCK < whole {
                    add_terms(&mut l3, self.terms::<R, T, BLOCK>(o, t0, g + 3 * BLOCK));
                }
            }
            g += 4 * BLOCK;
        }
        let g = whole;
        if g < gpr {
            // the last n < 4 groups: their terms into the next lane vector's first n lanes (the
            // others unchanged)
            let n = gpr - g;
            // SAFETY: as above, groups g..gpr.
            let terms = unsafe { self.partial_terms(o, t0, g, n) };
            let index = vsetq_lane_u32::<3>(3, vsetq_lane_u32::<2>(2, vsetq_lane_u32::<1>(1, vdupq_n_u32(0))));
            let keep = vcltq_u32(index, vdupq_n_u32(n as u32));
            // (chosen by value: a reference would keep the lane vectors in memory)
            let add_first = |lanes: [[float32x4_t; T]; R]| {
                let mut sum = lanes;
                add_terms(&mut sum, terms);
                let mut out = lanes;
                for (o, s) in out.iter_mut().zip(sum) {
                    for (o, s) in o.iter_mut().zip(s) {
                        *o = vbslq_f32(keep, s, *o);
                    }
                }
                out
            };
            match g / BLOCK % 4 {
                0 => l0 = add_first(l0),
                1 => l1 = add_first(l1),
                2 => l2 = add_first(l2),
                _ => l3 = add_first(l3),
            }
        }
        let mut ys = [[0.0f32; T]; R];
        for ((((ys, l0), l1), l2), l3) in ys.iter_mut().zip(l0).zip(l1).zip(l2).zip(l3) {
            for ((((y, a0), a1), a2), a3) in ys.iter_mut().zip(l0).zip(l1).zip(l2).zip(l3) {
                *y = reduce16([a0, a1, a2, a3]);
            }
        }
        ys
    }

    /// [`Operands::terms`] for the last `n` (1–3) groups of rows whose length is not a multiple of
    /// 4 groups (out of line: rare, and GPT-2's shapes never have it).
    ///
    /// # Safety
    /// As [`Operands::terms`], with `g + n ≤ gpr`.
    #[inline(never)]
    #[target_feature(enable = "dotprod")]
    unsafe fn partial_terms<const R: usize, const T: usize>(&self, o: usize, t0: usize, g: usize, n: usize) -> [[float32x4_t; T]; R] {
        // SAFETY: groups g..g+n, n as given (the caller's contract).
        unsafe {
            match n {
                1 => self.terms::<R, T, 1>(o, t0, g),
                2 => self.terms::<R, T, 2>(o, t0, g),
                _ => self.terms::<R, T, 3>(o, t0, g),
            }
        }
    }

    /// The terms of `combine_groups` for groups `g..g+N` (`N ≤ 4`) of `R` rows against `T`
    /// tokens, one vector per row × token: lane k = `isum(g + k) as f32 · (ws[g + k] ·
    /// xs[g + k])` (k < N; 0 beyond).
    ///
    /// # Safety
    /// As [`Operands::tile`], with `g + N ≤ gpr`.
    #[inline]
    #[target_feature(enable = "dotprod")]
    unsafe fn terms<const R: usize, const T: usize, const N: usize>(&self, o: usize, t0: usize, g: usize) -> [[float32x4_t; T]; R] {
        let Self { w, ws, cols, gpr, q, xs, sums } = *self;
        let row_bytes = self.row_bytes();
        let (w, ws): ([*const u8; R], [*const f32; R]) = (core::array::from_fn(|r| w.wrapping_add((o + r) * row_bytes)), core::array::from_fn(|r| ws.wrapping_add((o + r) * gpr)));
        // SAFETY (the raw reads of this block): groups g..g+N are inside each row and each
        // token's activations (the caller's contract); each read below stays in group g + k,
        // k < N.
        let x: [*const i8; T] = core::array::from_fn(|t| q.wrapping_add((t0 + t) * cols + g * GROUP));
        // integer side: per row × token, each group's two SDOTs give 4 partial sums; ADDP folds
        // groups 0 and 1, 2 and 3 ([a0+a1, a2+a3, b0+b1, b2+b3]), then the two pairs (lane k =
        // group g + k). Groups past N are zeros. Written out group by group, so that every
        // vector stays in a register.
        let none = [[vdupq_n_s32(0); T]; R];
        // SAFETY (each `dots`): group g + k, k < N, as above.
        let d0 = unsafe { self.dots(w, x, g, 0) };
        let d1 = if N > 1 { unsafe { self.dots(w, x, g, 1) } } else { none };
        let p01 = pairwise(d0, d1);
        let d2 = if N > 2 { unsafe { self.dots(w, x, g, 2) } } else { none };
        let d3 = if N > 3 { unsafe { self.dots(w, x, g, 3) } } else { none };
        let p23 = pairwise(d2, d3);
        // lane k = the sum of group g + k (k < N; 0 beyond)
        let isum = pairwise(p01, p23);
        // the float side, as combine_groups: isum as f32 · (ws · xs)
        let sx: [float32x4_t; T] = core::array::from_fn(|t| unsafe { load4_f32::<N>(xs.add((t0 + t) * gpr + g)) });
        // q4: Σ (w + 8)·x − 8·Σ x
        let offset: [int32x4_t; T] = core::array::from_fn(|t| if Q4 { vshlq_n_s32::<3>(unsafe { load4_i32::<N>(sums.add((t0 + t) * gpr + g)) }) } else { vdupq_n_s32(0) });
        let mut terms = [[vdupq_n_f32(0.0); T]; R];
        for ((terms, isum), &wsr) in terms.iter_mut().zip(&isum).zip(&ws) {
            let sw = unsafe { load4_f32::<N>(wsr.add(g)) };
            for (((term, &s), &sx), &off) in terms.iter_mut().zip(isum).zip(&sx).zip(&offset) {
                let s = if Q4 { vsubq_s32(s, off) } else { s };
                *term = vmulq_f32(vcvtq_f32_s32(s), vmulq_f32(sw, sx));
            }
        }
        terms
    }

    /// Group `g + k` of `R` rows against `T` tokens: per row × token the 4 lanes of partial
    /// sums of its two SDOTs (`[row][token]`). Each row's weights are loaded once for the T
    /// tokens, each token's values once for the R rows.
    ///
    /// # Safety
    /// Group g + k must be inside each row (`w[r]`) and each token's values (`x[t]`, which
    /// point at group g).
    #[inline]
    #[target_feature(enable = "dotprod")]
    unsafe fn dots<const R: usize, const T: usize>(&self, w: [*const u8; R], x: [*const i8; T], g: usize, k: usize) -> [[int32x4_t; T]; R] {
        // SAFETY (the reads below): group g + k's 32 weights of each row and 32 values of each
        // token, inside (the caller's contract).
        // each row's 32 weights, as two vectors of 16 signed bytes
        let wv: [[int8x16_t; 2]; R] = w.map(|w| unsafe {
            if Q4 {
                // 16 packed bytes: low nibbles are the even positions, high the odd ones
                let p = vld1q_u8(w.add((g + k) * GROUP / 2));
                [vreinterpretq_s8_u8(vandq_u8(p, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8::<4>(p))]
            } else {
                let p = w.add((g + k) * GROUP).cast::<i8>();
                [vld1q_s8(p), vld1q_s8(p.add(16))]
            }
        });
        // each token's 32 values, split as the weights are (q4: LD2 splits the even and odd
        // positions)
        let xv: [[int8x16_t; 2]; T] = x.map(|x| unsafe {
            let p = x.add(k * GROUP);
            if Q4 {
                let v = vld2q_s8(p);
                [v.0, v.1]
            } else {
                [vld1q_s8(p), vld1q_s8(p.add(16))]
            }
        });
        wv.map(|[w0, w1]| xv.map(|[x0, x1]| sdot(sdot(vdupq_n_s32(0), w0, x0), w1, x1)))
    }
}

/// `lanes += terms` for each row × token (`FADD`: the `+=` of `combine_groups`' lanes).
#[inline]
#[target_feature(enable = "neon")]
fn add_terms<const R: usize, const T: usize>(lanes: &mut [[float32x4_t; T]; R], terms: [[float32x4_t; T]; R]) {
    for (l, t) in lanes.iter_mut().zip(terms) {
        for (l, t) in l.iter_mut().zip(t) {
            *l = vaddq_f32(*l, t);
        }
    }
}

/// `ADDP` of each row × token: `[a0+a1, a2+a3, b0+b1, b2+b3]`.
#[inline]
#[target_feature(enable = "neon")]
fn pairwise<const R: usize, const T: usize>(a: [[int32x4_t; T]; R], b: [[int32x4_t; T]; R]) -> [[int32x4_t; T]; R] {
    let mut out = a;
    for (o, b) in out.iter_mut().zip(b) {
        for (o, b) in o.iter_mut().zip(b) {
            *o = vpaddq_s32(*o, b);
        }
    }
    out
}

/// `acc + Σ` of the four products of bytes 4i..4i+4 of `a` and `b`, into lane i (`SDOT`).
#[inline]
#[target_feature(enable = "dotprod")]
fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: SDOT reads two vector registers and updates a third; no memory, no flags. The CPU
    // has it (this function's target feature, which the callers' run-time check guarantees).
    unsafe { asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) a, b = in(vreg) b, options(pure, nomem, nostack, preserves_flags)) };
    acc
}

/// Four f32 from `p`, of which only the first `N` are read (the rest are 0).
///
/// # Safety
/// `p` must be readable for `min(N, 4)` elements.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn load4_f32<const N: usize>(p: *const f32) -> float32x4_t {
    if N >= 4 {
        // SAFETY: 4 readable elements (the caller's contract).
        return unsafe { vld1q_f32(p) };
    }
    let mut v = [0.0f32; 4];
    for (i, d) in v.iter_mut().enumerate().take(N) {
        // SAFETY: i < N, readable.
        *d = unsafe { *p.add(i) };
    }
    // SAFETY: v is [f32; 4].
    unsafe { vld1q_f32(v.as_ptr()) }
}

/// Four i32 from `p`, of which only the first `N` are read (the rest are 0).
///
/// # Safety
/// `p` must be readable for `min(N, 4)` elements.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn load4_i32<const N: usize>(p: *const i32) -> int32x4_t {
    if N >= 4 {
        // SAFETY: 4 readable elements (the caller's contract).
        return unsafe { vld1q_s32(p) };
    }
    let mut v = [0i32; 4];
    for (i, d) in v.iter_mut().enumerate().take(N) {
        // SAFETY: i < N, readable.
        *d = unsafe { *p.add(i) };
    }
    // SAFETY: v is [i32; 4].
    unsafe { vld1q_s32(v.as_ptr()) }
}

/// `super::reduce` on 16 lanes held as four vectors (lanes 0–3, 4–7, 8–11, 12–15): lane i +=
/// lane i + 8, then i + 4, i + 2, i + 1 (same tree, same bits).
#[inline]
#[target_feature(enable = "neon")]
fn reduce16([a0, a1, a2, a3]: [float32x4_t; 4]) -> f32 {
    let a8 = [vaddq_f32(a0, a2), vaddq_f32(a1, a3)]; // lanes 0–7
    let a4 = vaddq_f32(a8[0], a8[1]); // lanes 0–3
    let a2 = vadd_f32(vget_low_f32(a4), vget_high_f32(a4)); // lanes 0–1
    vpadds_f32(a2) // lane 0 + lane 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::tests::quant_linear_matches_portable;
    use crate::kernels::{linear_impl, quant_scratch_len, quantize_group_q8, MatrixData, Portable};

    /// `linear_quant_sdot` must give the portable kernel's bits for every shape it accepts:
    /// rows in and beyond the decode's tiles of 4, rows of 1 to 96 groups (full 16-group passes,
    /// partial blocks of 1–3 groups), 1 to 9 tokens (prefill tiles of 4 and the tokens left),
    /// q8 and q4, bias, with and without accumulate. Under `scripts/aarch64-check.sh`
    /// (`GPT2_MCU_EXPECT_SDOT=1`) the CPU must have SDOT, so the test cannot pass by skipping.
    #[test]
    fn sdot_linear_is_bit_identical_to_portable() {
        let expect = std::env::var_os("GPT2_MCU_EXPECT_SDOT").is_some_and(|v| v != "0");
        std::eprintln!("aarch64 dotprod: {} (GPT2_MCU_EXPECT_SDOT {expect})", has_sdot());
        assert!(has_sdot() || !expect, "GPT2_MCU_EXPECT_SDOT is set but the CPU has no SDOT");
        if !has_sdot() {
            return;
        }
        let shapes = [(1, 32), (3, 64), (4, 96), (5, 128), (7, 160), (3, 320), (9, 448), (13, 512), (6, 544), (11, 768), (2, 3072)];
        quant_linear_matches_portable(
            3,
            &shapes,
            &[1, 2, 3, 4, 5, 6, 7, 8, 9],
            |_, cols| cols % GROUP == 0,
            // SAFETY: the CPU has SDOT (checked above).
            |out, x, m, bias, acc, scratch| unsafe { linear_quant_sdot(out, x, m, bias, acc, scratch) },
        );
    }

    /// What the kernel does not take it leaves to the portable path, untouched: another group
    /// size, a short scratch, a short matrix.
    #[test]
    fn sdot_linear_declines_without_writing() {
        if !has_sdot() {
            return;
        }
        let (rows, cols) = (5usize, 128usize);
        let w: std::vec::Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
        let x: std::vec::Vec<f32> = (0..2 * cols).map(|i| ((i * 53) % 97) as f32 / 13.0 - 3.0).collect();
        let mut q8 = std::vec![0i8; rows * cols];
        let s16: std::vec::Vec<f32> = w.chunks(16).zip(q8.chunks_mut(16)).map(|(a, q)| quantize_group_q8(a, q)).collect();
        let m16 = Matrix { rows, cols, data: MatrixData::Q8 { values: &q8, scales: &s16, group: 16 } };
        let m32 = Matrix { rows, cols, data: MatrixData::Q8 { values: &q8, scales: &s16, group: 32 } };
        let short = Matrix { rows, cols, data: MatrixData::Q8 { values: &q8[..rows * cols - 1], scales: &s16, group: 32 } };
        let cases = [(&m16, 2 * quant_scratch_len(cols, 32)), (&m32, 2 * quant_scratch_len(cols, 32) - 1), (&short, 2 * quant_scratch_len(cols, 32))];
        for (i, (m, scratch_len)) in cases.into_iter().enumerate() {
            let mut out = std::vec![0.5f32; 2 * rows];
            let mut scratch = std::vec![0.0f32; scratch_len];
            // SAFETY: the CPU has SDOT (checked above).
            assert!(!unsafe { linear_quant_sdot(&mut out, &x, m, &[], false, &mut scratch) }, "case {i}");
            assert!(out.iter().all(|&v| v == 0.5), "case {i}");
        }
        // and the dispatcher then gives the portable result
        let mut got = std::vec![0.5f32; 2 * rows];
        let mut want = got.clone();
        let mut scratch = std::vec![0.0f32; 2 * quant_scratch_len(cols, 8)];
        super::super::linear(&mut got, &x, &m16, &[], true, &mut scratch);
        linear_impl(&Portable, &mut want, &x, &m16, &[], true, &mut scratch);
        assert_eq!(got.iter().map(|v| v.to_bits()).collect::<std::vec::Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<std::vec::Vec<_>>());
    }
}
