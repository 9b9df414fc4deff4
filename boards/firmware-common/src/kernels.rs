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
//! [`time_linear`] measures one `runtime::kernels::linear` call on a model matrix in isolation
//! (the decode-per-token figure also pays attention, LayerNorm and sampling).

use runtime::kernels::{dot_i8, dot_q4_group, linear, quant_scratch_len};
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
    /// `dot_i8` or `dot_q4_group`.
    pub kernel: &'static str,
    /// Lengths of the two inputs.
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
    Ok(cases)
}

/// Ticks of one `linear` call and of its integer group dots alone.
#[derive(Debug, Clone, Copy)]
pub struct LinearTiming {
    /// Multiply-accumulates per call (rows · cols).
    pub macs: usize,
    /// One `linear` call: quantizing the activations, the group dots, their float scaling,
    /// bias and store.
    pub linear_ticks: u64,
    /// The same matrix's group dots alone (`dot_i8` / `dot_q4_group` in a plain loop over rows
    /// and groups), for q8/q4 matrices.
    pub dots_ticks: Option<u64>,
}

/// One `linear` call (decode: one token) of matrix `w` with bias, timed with `now` over a few
/// repeats, then its group dots alone; `None` when the matrix does not fit the fixed buffers
/// here (`cols` ≤ 512, `rows` ≤ 1024: the default model's 448 x 112 does). Not inlined, and
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
    let mut scratch = [0.0f32; 512 / 4 + 2 * 512 / 8]; // quant_scratch_len(512, 8)
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

    // The group dots alone, against activations quantized as linear does (the values do not
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
