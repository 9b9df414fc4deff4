//! The integer kernels on the board: a boot-time self-check and a mat-vec micro-benchmark.
//!
//! `runtime::kernels::dot_i8` and `dot_q4_group` run inline assembly on Cortex-M when the
//! runtime's `arm-dsp` or `arm-helium` feature is on (this crate forwards both), code that
//! `cargo test` on a desktop cannot execute. [`self_check`] therefore runs them here, at boot,
//! against naive references written in this file, and the firmware exits 1 on any difference.
//! Integer sums are exact, so the contract is equality, not a tolerance. It covers:
//! - lengths 0, 1, 3, 4, 7, 8, 15, 16, 31, 32, 33, 64, 100, 768 (every step and tail of the
//!   kernels, the model's groups of 28 and 32, a long row);
//! - values: pseudo-random over the whole i8 / u8 range, and runs of the extremes (-128, 127,
//!   and for q4 the nibbles 0 and 15, i.e. -8 and 7);
//! - starts at every offset modulo 4 (the aligned fast paths and the portable fallback) and
//!   inputs of different lengths (processed up to the shorter, as the portable code does).
//!
//! The activations' int8 quantizer (`quantize_group_q8`, in integer steps on these builds) is
//! checked too, against [`quantize_naive`]: ties, ±127, NaN, infinities, denormals, huge
//! values ([`quant_value`]).
//!
//! `linear` on q8 and q4 weights runs in assembly on these builds: rows of 4 to 16 groups
//! of 28 or 32 in the quad kernels (`runtime/src/kernels/arm/quads.rs`), the other shapes
//! whole rows at a time (the group dots, their float combination and the lane tree;
//! `runtime/src/kernels/arm.rs`), with other group sizes and shapes falling back to the
//! portable row loop and the kernels above. [`linear_check`] runs `linear` first on every row
//! length the quad kernels take (4 to 16 groups of 28 and of 32, q8 and q4: 1 to 4 quads and
//! tails of 0 to 3 groups), then on random shapes (groups the row kernels take and groups they leave to
//! the fallback, 1 to 40 groups a row so rows of more than 16 groups too, 1 to 3 tokens, with
//! and without bias and accumulation, misaligned weights) and requires its output bit for bit
//! equal to a naive reference: the activations quantized by [`quantize_naive`], then per row
//! `dot_q8_ref`, or for q4 [`dot_q4_naive`]'s group sums through `combine_groups` (the float
//! order every build follows).
//!
//! [`time_linear`] measures one `runtime::kernels::linear` call on a model matrix in isolation
//! (the decode-per-token figure also pays attention, LayerNorm and sampling), and the group
//! kernels above on the same matrix.

use runtime::kernels::{combine_groups, dot_i8, dot_q4_group, dot_q8_ref, linear, quant_scratch_len, quantize_group_q8};
use runtime::model::{Matrix, MatrixData};

/// The integer-dot implementation this build runs (from the runtime features forwarded here).
pub const KERNELS: &str = if cfg!(feature = "arm-helium") {
    "arm-helium (VMLADAVA.S8)"
} else if cfg!(feature = "arm-dsp") {
    "arm-dsp (SXTB16/SMLAD)"
} else {
    "portable Rust"
};

/// The lengths every kernel is checked on.
const LENGTHS: [usize; 14] = [0, 1, 3, 4, 7, 8, 15, 16, 31, 32, 33, 64, 100, 768];

/// Start offsets (first input, second input): aligned, each one misaligned, both misaligned the
/// same way, both differently.
const OFFSETS: [(usize, usize); 6] = [(0, 0), (1, 0), (0, 2), (2, 2), (3, 1), (2, 0)];

/// Room for the longest case (768 + 5) at the largest offset (3), and for the benchmark's
/// activations (up to 784 columns).
const BUF: usize = 784;

/// The first case where a kernel and its reference differ.
#[derive(Debug, Clone, Copy)]
pub struct Mismatch {
    /// `dot_i8`, `dot_q4_group` or `quantize_group_q8`.
    pub kernel: &'static str,
    /// Lengths of the two inputs (`quantize_group_q8`: of the group, and the index of the
    /// first differing value, the length when the scales differ).
    pub lens: (usize, usize),
    /// Byte offsets of the two inputs from a 4-byte boundary.
    pub offsets: (usize, usize),
    /// The value pattern (see `fill`).
    pub pattern: u32,
    /// What the kernel returned.
    pub got: i32,
    /// What the reference computes.
    pub want: i32,
}

impl core::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} differs from its reference: lengths {} and {}, offsets {} and {}, pattern {}: kernel {}, reference {}",
            self.kernel, self.lens.0, self.lens.1, self.offsets.0, self.offsets.1, self.pattern, self.got, self.want
        )
    }
}

/// 4-byte aligned scratch, so that the offsets above are offsets from a word boundary.
#[repr(C, align(4))]
struct Buf([u8; BUF]);

/// Naive `Σ a[i]·b[i]` over the shorter length (i32, wrapping like a release build).
fn dot_i8_naive(a: &[i8], b: &[i8]) -> i32 {
    let mut s = 0i32;
    for i in 0..a.len().min(b.len()) {
        s = s.wrapping_add(i32::from(a[i]) * i32::from(b[i]));
    }
    s
}

/// Naive q4 dot: weight i is nibble i of `w` (low nibble first) minus 8, against `x[i]`, over
/// the whole pairs both have.
fn dot_q4_naive(w: &[u8], x: &[i8]) -> i32 {
    let n = (2 * w.len()).min(x.len() & !1);
    let mut s = 0i32;
    for i in 0..n {
        let nibble = if i % 2 == 0 { w[i / 2] & 0x0F } else { w[i / 2] >> 4 };
        s = s.wrapping_add((i32::from(nibble) - 8) * i32::from(x[i]));
    }
    s
}

/// xorshift32.
fn next(state: &mut u32) -> u32 {
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    *state
}

/// Fills `buf` with pattern `p`: 0 pseudo-random bytes, 1 all 0x80 (-128 / nibbles 0 and 8),
/// 2 all 0x7F (127), 3 all 0xFF (-1 / nibbles 15), 4 a pseudo-random mix of 0x80, 0x7F, 0x81,
/// 0x00, 0xFF, 0x0F, 0xF0.
fn fill(buf: &mut [u8], p: u32, seed: u32) {
    let mut s = seed.wrapping_mul(0x9E37_79B9) | 1;
    for b in buf.iter_mut() {
        let r = next(&mut s);
        *b = match p {
            0 => r as u8,
            1 => 0x80,
            2 => 0x7F,
            3 => 0xFF,
            _ => [0x80, 0x7F, 0x81, 0x00, 0xFF, 0x0F, 0xF0][(r >> 8) as usize % 7],
        };
    }
}

fn as_u8(b: &[i8]) -> &[u8] {
    // SAFETY: as in `as_i8`.
    unsafe { core::slice::from_raw_parts(b.as_ptr().cast::<u8>(), b.len()) }
}

fn as_i8(b: &[u8]) -> &[i8] {
    // SAFETY: i8 and u8 have the same size and alignment and every bit pattern is valid.
    unsafe { core::slice::from_raw_parts(b.as_ptr().cast::<i8>(), b.len()) }
}

/// Runs every case; returns how many comparisons were made, or the first mismatch. Not inlined,
/// so its buffers (1.6 KiB) are not part of the caller's stack frame during generation.
#[inline(never)]
pub fn self_check() -> Result<usize, Mismatch> {
    let (mut a, mut b) = (Buf([0; BUF]), Buf([0; BUF]));
    let mut cases = 0;
    for pattern in 0..5u32 {
        // Patterns pair with a different pattern on the other side (-128 · 127, -128 · -128, ...).
        let other = [0, 1, 1, 2, 4][pattern as usize];
        fill(&mut a.0, pattern, 1 + pattern);
        fill(&mut b.0, other, 101 + pattern);
        for &n in &LENGTHS {
            for &(oa, ob) in &OFFSETS {
                // q8: equal lengths, then the second input longer, then shorter.
                for (la, lb) in [(n, n), (n, n + 5), (n + 3, n.saturating_sub(1))] {
                    let (x, y) = (as_i8(&a.0[oa..oa + la]), as_i8(&b.0[ob..ob + lb]));
                    let (got, want) = (dot_i8(x, y), dot_i8_naive(x, y));
                    cases += 1;
                    if got != want {
                        return Err(Mismatch { kernel: "dot_i8", lens: (la, lb), offsets: (oa, ob), pattern, got, want });
                    }
                }
                // q4: n activations against n/2 weight bytes, one byte more, and fewer.
                for (lw, lx) in [(n / 2, n), (n.div_ceil(2) + 1, n), (n / 4, n)] {
                    let (w, x) = (&a.0[oa..oa + lw], as_i8(&b.0[ob..ob + lx]));
                    let (got, want) = (dot_q4_group(w, x), dot_q4_naive(w, x));
                    cases += 1;
                    if got != want {
                        return Err(Mismatch { kernel: "dot_q4_group", lens: (lw, lx), offsets: (oa, ob), pattern, got, want });
                    }
                }
            }
        }
    }
    cases += quantize_check()?;
    Ok(cases)
}

/// Values for [`quantize_check`]'s pattern `p`, element `i` of a group of `n`, `r` random: the
/// quantizer's corners. With the group maximum 127·2^e the scale is 2^e and every value is
/// quantized exactly, so halves are exact ties (p 1, 2); a maximum of 127 makes integers and
/// halves of ±127, ±126.5, ±0.5 and the floats next to them (p 3); zeros of both signs (p 4);
/// a NaN or an infinity among ordinary values (p 5, 6; NaN is skipped by the maximum, an
/// infinite maximum gives the scale inf and the values NaN or 0); denormal values, whose
/// scale is denormal and its inverse infinite (p 7); huge ones (p 8); random (p 0).
fn quant_value(p: u32, i: usize, n: usize, r: u32) -> f32 {
    let u = (r >> 8) as f32 / (1 << 24) as f32; // [0, 1)
    let sign = if r & 1 == 1 { -1.0 } else { 1.0 };
    let corners = [127.0, -127.0, 126.5, -126.5, 0.5, -0.5, 1.5, -1.5, 0.499_999_97, -0.499_999_97, 126.499_99, 2.5];
    match p {
        0 => (u * 4.0 - 2.0) * if r % 16 == 0 { 1000.0 } else { 1.0 },
        // ties at scale 1/8 and 4: k/2 for k in -254..=254, the first value the maximum
        1 | 2 => {
            let e = if p == 1 { 0.125 } else { 4.0 };
            let k = if i == 0 { 254 } else { (r % 509) as i32 - 254 };
            k as f32 * 0.5 * e
        }
        3 => {
            if i == 0 {
                127.0
            } else {
                corners[(r as usize >> 4) % corners.len()]
            }
        }
        4 => {
            if r % 3 == 0 {
                -0.0
            } else if r % 3 == 1 {
                0.0
            } else {
                sign * u
            }
        }
        5 => {
            if i == n / 2 {
                f32::NAN
            } else {
                sign * u
            }
        }
        6 => {
            if i == n / 3 {
                sign * f32::INFINITY
            } else {
                sign * u * 3.0
            }
        }
        7 => sign * u * 1e-39,
        _ => sign * u * 3e38,
    }
}

/// Naive int8 quantization of one group, as `runtime::kernels::quantize_group_q8_ref` defines
/// it (s = max |x| / 127, NaNs skipped; q = round half away from zero of x / s, clamped to
/// ±127, NaN 0), one scalar operation at a time: every value passes `black_box`, so the
/// compiler cannot turn the loops into vector float code, which on Helium flushes denormals
/// (and then `quantize_group_q8_ref` itself, vectorised for the M55, would not be the
/// desktop's arithmetic).
fn quantize_naive(x: &[f32], q: &mut [i8]) -> f32 {
    let mut amax = 0.0f32;
    for &v in x {
        let a = core::hint::black_box(v).abs();
        if a > amax {
            amax = a;
        }
    }
    let s = amax / 127.0;
    let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(x) {
        let y = core::hint::black_box(v) * inv;
        *q = if y.is_nan() {
            0
        } else if y >= 127.0 {
            127
        } else if y <= -127.0 {
            -127
        } else {
            // |y| < 127: the truncation and the remainder are exact
            let t = y as i32;
            let f = y - t as f32;
            (t + i32::from(f >= 0.5) - i32::from(f <= -0.5)) as i8
        };
    }
    s
}

/// `quantize_group_q8` (on these builds the Cortex-M form in `runtime/src/kernels/arm.rs`)
/// against [`quantize_naive`] on group lengths 1 to 64 and the patterns of [`quant_value`]:
/// the same scale and values, bit for bit. Returns the cases.
fn quantize_check() -> Result<usize, Mismatch> {
    const LENS: [usize; 8] = [1, 3, 4, 7, 28, 32, 33, 64];
    let mut s = 0x1234_5678u32;
    let mut cases = 0;
    for pattern in 0..9u32 {
        for &n in &LENS {
            for _ in 0..4 {
                let mut x = [0.0f32; 64];
                for (i, v) in x[..n].iter_mut().enumerate() {
                    *v = quant_value(pattern, i, n, next(&mut s));
                }
                let (mut got, mut want) = ([0i8; 64], [0i8; 64]);
                let (sg, sw) = (quantize_group_q8(&x[..n], &mut got[..n]), quantize_naive(&x[..n], &mut want[..n]));
                cases += 1;
                let diff = got[..n].iter().zip(&want[..n]).position(|(g, w)| g != w);
                if sg.to_bits() != sw.to_bits() || diff.is_some() {
                    let (g, w) = diff.map_or((sg.to_bits() as i32, sw.to_bits() as i32), |i| (i32::from(got[i]), i32::from(want[i])));
                    return Err(Mismatch { kernel: "quantize_group_q8", lens: (n, diff.unwrap_or(n)), offsets: (0, 0), pattern, got: g, want: w });
                }
            }
        }
    }
    Ok(cases)
}

/// The first [`linear_check`] case where `linear` and the reference differ.
#[derive(Debug, Clone, Copy)]
pub struct LinearMismatch {
    /// Case number (0-based; the shapes come from a fixed seed).
    pub case: usize,
    /// q4 weights (else q8).
    pub q4: bool,
    /// Weight rows, columns and group size.
    pub shape: (usize, usize, usize),
    /// Tokens in the call.
    pub tokens: usize,
    /// Byte offset of the weights from a 4-byte boundary.
    pub offset: usize,
    /// Token and row of the first differing output.
    pub at: (usize, usize),
    /// Bits of `linear`'s output and of the reference's.
    pub got: u32,
    /// Bits of the reference.
    pub want: u32,
}

impl core::fmt::Display for LinearMismatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (rows, cols, group) = self.shape;
        write!(
            f,
            "linear differs from its reference: case {}, {rows}x{cols} {} in groups of {group}, {} tokens, weights at offset {}: token {} row {}: {:#010x} vs {:#010x}",
            self.case,
            if self.q4 { "q4" } else { "q8" },
            self.tokens,
            self.offset,
            self.at.0,
            self.at.1,
            self.got,
            self.want
        )
    }
}

/// Group sizes for [`linear_check`]: the ones the row kernels take (28, 32 and, q8 only, 172)
/// often, and others that go to the fallback.
const CHECK_GROUPS: [usize; 13] = [28, 32, 28, 32, 28, 32, 172, 8, 12, 16, 24, 36, 10];

/// Groups per row the q8 quad kernels take (`runtime/src/kernels/arm/quads.rs`).
const QUAD_GROUPS: core::ops::RangeInclusive<usize> = 4..=16;

/// [`linear_check`]'s sweep: every row length of [`QUAD_GROUPS`] in groups of 28 and of 32,
/// q8 and q4.
const SWEEP: usize = 4 * (16 - 4 + 1);

/// Random `linear` calls on q8 matrices against the naive reference (see the module notes),
/// in `work` (the KV cache, before the session takes it: about 50 KB are used; cases that do
/// not fit are skipped, and the buffer is zeroed again at the end). Returns the number of
/// outputs compared, or the first mismatch. Not inlined (its stack frame is small either way).
#[inline(never)]
pub fn linear_check(work: &mut [f32]) -> Result<usize, LinearMismatch> {
    const CASES: usize = 120;
    let mut s = 0x2545_F491u32;
    let mut compared = 0;
    for case in 0..SWEEP + CASES {
        // first the sweep: q8 and q4 in groups of 28 and 32 at every row length the quad
        // kernels take (4 to 16 groups: 1 to 4 quads, tails of 0 to 3 groups; q4 rows of an
        // odd number of 28-groups go to the portable loop), 1 to 9 rows, 1 or 2 tokens; then
        // random shapes
        let (group, gpr, q4) = if case < SWEEP {
            ([28, 32][case % 2], QUAD_GROUPS.start() + case / 4, case % 4 >= 2)
        } else {
            let group = CHECK_GROUPS[next(&mut s) as usize % CHECK_GROUPS.len()];
            // 1..=40 groups a row, at most 1024 columns
            (group, 1 + next(&mut s) as usize % 40.min(1024 / group), false)
        };
        let cols = gpr * group;
        // 1..=20 rows, 1..=3 tokens (sweep: 1..=9, 1..=2)
        let rows = 1 + next(&mut s) as usize % if case < SWEEP { 9 } else { 20 };
        let tokens = 1 + next(&mut s) as usize % if case < SWEEP { 2 } else { 3 };
        let q4 = if case < SWEEP { q4 } else { next(&mut s) % 2 == 1 };
        let row_bytes = if q4 { cols / 2 } else { cols };
        // every 8th case the weights start 1-3 bytes past a word (the fallback takes those)
        let offset = if case % 8 == 7 { 1 + next(&mut s) as usize % 3 } else { 0 };
        let bias_len = [rows, 0, rows / 2][next(&mut s) as usize % 3];
        let accumulate = next(&mut s) % 2 == 1;

        // Carve the buffers out of `work`.
        let w_slots = (offset + rows * row_bytes).div_ceil(4);
        let lens = [w_slots, rows * gpr, tokens * cols, bias_len, tokens * rows, tokens * rows, tokens * quant_scratch_len(cols, group), (tokens * cols).div_ceil(4), tokens * gpr];
        if lens.iter().sum::<usize>() > work.len() {
            continue;
        }
        let (w_buf, rest) = work.split_at_mut(w_slots);
        let (ws, rest) = rest.split_at_mut(rows * gpr);
        let (x, rest) = rest.split_at_mut(tokens * cols);
        let (bias, rest) = rest.split_at_mut(bias_len);
        let (got, rest) = rest.split_at_mut(tokens * rows);
        let (want, rest) = rest.split_at_mut(tokens * rows);
        let (scratch, rest) = rest.split_at_mut(tokens * quant_scratch_len(cols, group));
        let (xq_buf, rest) = rest.split_at_mut((tokens * cols).div_ceil(4));
        let xs = &mut rest[..tokens * gpr];
        let w = &mut f32s_as_i8(w_buf)[offset..offset + rows * row_bytes];

        // Weights over the whole i8 range (-128 included) or of every nibble, with runs of
        // extremes in some cases; scales mostly ordinary, some zero, negative, tiny
        // (denormal products) or huge.
        let extremes = case % 5 == 4;
        for v in w.iter_mut() {
            let r = next(&mut s);
            *v = if extremes { [-128, 127, -127, 0, 0x0F, -16][(r >> 8) as usize % 6] } else { r as i8 };
        }
        for v in ws.iter_mut() {
            *v = random_scale(&mut s);
        }
        for (i, v) in x.iter_mut().enumerate() {
            // every 7th group of activations all zero (scale 0)
            *v = if (i / group) % 7 == 3 { 0.0 } else { random_value(&mut s) };
        }
        for v in bias.iter_mut().chain(got.iter_mut()) {
            *v = random_value(&mut s);
        }
        want.copy_from_slice(got);

        // The reference: quantize each token's groups (naively), then per row the naive dot product,
        // + bias (0.0 past its end), added to the output with `accumulate`.
        let xq = &mut f32s_as_i8(xq_buf)[..tokens * cols];
        for ((xg, qg), sx) in x.chunks_exact(group).zip(xq.chunks_exact_mut(group)).zip(xs.iter_mut()) {
            *sx = quantize_naive(xg, qg);
        }
        for t in 0..tokens {
            let (xqt, xst) = (&xq[t * cols..(t + 1) * cols], &xs[t * gpr..(t + 1) * gpr]);
            for o in 0..rows {
                let (wrow, wsrow) = (&w[o * row_bytes..(o + 1) * row_bytes], &ws[o * gpr..(o + 1) * gpr]);
                let y = if q4 {
                    // (not dot_q4_ref: it unpacks into a 4 KiB stack buffer, which would set
                    // the firmware's stack high-water mark)
                    let sums = as_u8(wrow).chunks_exact(group / 2).zip(xqt.chunks_exact(group)).map(|(wg, xg)| dot_q4_naive(wg, xg));
                    combine_groups(sums, wsrow, xst)
                } else {
                    dot_q8_ref(wrow, wsrow, xqt, xst, group)
                };
                let y = y + bias.get(o).copied().unwrap_or(0.0);
                let dst = &mut want[t * rows + o];
                *dst = if accumulate { *dst + y } else { y };
            }
        }

        let data = if q4 { MatrixData::Q4 { packed: as_u8(w), scales: ws, group } } else { MatrixData::Q8 { values: w, scales: ws, group } };
        let m = Matrix { rows, cols, data };
        linear(got, x, &m, bias, accumulate, scratch);
        let first_difference = got.iter().zip(want.iter()).position(|(g, r)| g.to_bits() != r.to_bits());
        if let Some(i) = first_difference {
            let (g, r) = (got[i].to_bits(), want[i].to_bits());
            work.fill(0.0);
            return Err(LinearMismatch { case, q4, shape: (rows, cols, group), tokens, offset, at: (i / rows, i % rows), got: g, want: r });
        }
        compared += got.len();
    }
    work.fill(0.0);
    Ok(compared)
}

/// A weight scale: mostly in (0, 0.02], sometimes 0, negative, tiny (so that products with
/// the activation scale are denormal) or large.
fn random_scale(s: &mut u32) -> f32 {
    let r = next(s);
    let base = (r >> 9) as f32 / (1 << 23) as f32 * 0.02;
    match r % 16 {
        0 => 0.0,
        1 => -base,
        2 => base * 1e-35,
        3 => base * 1e6,
        _ => base,
    }
}

/// An activation, bias or output value in (-2, 2), now and then ±(2..2000).
fn random_value(s: &mut u32) -> f32 {
    let r = next(s);
    let v = (r >> 8) as f32 / (1 << 24) as f32 * 4.0 - 2.0;
    if r % 32 == 0 {
        v * 1000.0
    } else {
        v
    }
}

/// The bytes of an f32 buffer as i8 (the check's int8 buffers live in `work`).
fn f32s_as_i8(b: &mut [f32]) -> &mut [i8] {
    // SAFETY: i8 has no alignment requirement and every bit pattern is valid for both types;
    // the new slice covers exactly the same bytes and takes over the borrow.
    unsafe { core::slice::from_raw_parts_mut(b.as_mut_ptr().cast::<i8>(), b.len() * 4) }
}

/// Ticks of one `linear` call and of the group kernels alone on its matrix.
#[derive(Debug, Clone, Copy)]
pub struct LinearTiming {
    /// Multiply-accumulates per call (rows · cols).
    pub macs: usize,
    /// One `linear` call: quantizing the activations, the group dots, their float scaling,
    /// bias and store (q8/q4 with groups of 28 or 32: the row kernels).
    pub linear_ticks: u64,
    /// The same matrix's integer group dots with the group kernels alone (`dot_i8` /
    /// `dot_q4_group` in a plain loop over rows and groups: what the portable row loop runs
    /// for the shapes the row kernels leave), for q8/q4 matrices.
    pub dots_ticks: Option<u64>,
}

/// One `linear` call (decode: one token) of matrix `w` with bias, timed with `now` over a few
/// repeats, then the group kernels alone on it; `None` when the matrix does not fit the fixed
/// buffers here (`cols` ≤ 512, `rows` ≤ 1024: the default model's 448 x 112 does). Not inlined, and
/// uses about 8 KiB of stack (inside the real boards' 32 KiB stack budget): call it after the
/// stack high-water mark has been taken.
#[inline(never)]
pub fn time_linear(w: &Matrix<'_>, bias: &[f32], now: impl Fn() -> u64) -> Option<LinearTiming> {
    const REPEAT: u64 = 4;
    let group = match w.data {
        MatrixData::Q8 { group, .. } | MatrixData::Q4 { group, .. } => group,
        MatrixData::F32(_) | MatrixData::F16(_) => 1,
    };
    let mut x = [0.0f32; 512];
    let mut out = [0.0f32; 1024];
    let mut scratch = [0.0f32; quant_scratch_len(512, 8)];
    if w.cols > x.len() || w.rows > out.len() || quant_scratch_len(w.cols, group) > scratch.len() {
        return None;
    }
    let mut s = 12345u32;
    for v in x.iter_mut().take(w.cols) {
        *v = (next(&mut s) % 2001) as f32 / 1000.0 - 1.0;
    }
    let (x, out) = (&x[..w.cols], &mut out[..w.rows]);
    let t = now();
    for _ in 0..REPEAT {
        linear(out, core::hint::black_box(x), w, bias, false, &mut scratch);
    }
    let linear_ticks = (now() - t) / REPEAT;
    core::hint::black_box(out);

    // The group kernels alone, against activations quantized as the portable loop does (the values do not
    // change the count; the alignment does, and it is the same: 4-byte aligned groups).
    let xq_buf = Buf([0; BUF]);
    let xq = as_i8(&xq_buf.0[..w.cols.min(BUF)]);
    let g = group.max(2);
    let mut acc = 0i32;
    let t = now();
    for _ in 0..REPEAT {
        match w.data {
            MatrixData::Q8 { values, .. } => {
                for row in values.chunks_exact(w.cols).take(w.rows) {
                    for (wg, xg) in row.chunks_exact(g).zip(xq.chunks_exact(g)) {
                        acc = acc.wrapping_add(dot_i8(wg, core::hint::black_box(xg)));
                    }
                }
            }
            MatrixData::Q4 { packed, .. } => {
                for row in packed.chunks_exact(w.cols / 2).take(w.rows) {
                    for (wg, xg) in row.chunks_exact(g / 2).zip(xq.chunks_exact(g)) {
                        acc = acc.wrapping_add(dot_q4_group(wg, core::hint::black_box(xg)));
                    }
                }
            }
            MatrixData::F32(_) | MatrixData::F16(_) => {}
        }
    }
    let dots_ticks = (now() - t) / REPEAT;
    core::hint::black_box(acc);
    let quantized = matches!(w.data, MatrixData::Q8 { .. } | MatrixData::Q4 { .. });
    Some(LinearTiming { macs: w.rows * w.cols, linear_ticks, dots_ticks: quantized.then_some(dots_ticks) })
}
