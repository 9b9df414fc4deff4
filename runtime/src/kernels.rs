//! Kernels: the arithmetic of the forward pass, one function per PyTorch op.
//!
//! Shape legend: C = n_embd, H = n_head, D = C / H (head_dim), I = n_inner, V = vocab_size,
//! T = tokens in the batch, S = positions attended to. Activations are row-major `[T, C]`;
//! weight matrices are row-major `[out, in]` (see [`crate::blob`]).
//!
//! Every kernel here is total: slices of unexpected length are processed up to the shortest
//! length, never indexed out of bounds. A naive `_ref` twin sits beside each optimised kernel
//! and the tests pit one against the other.

use half::f16;

use crate::model::{Matrix, MatrixData};

/// Lanes of independent accumulators in [`dot_f32`]: wide enough for the compiler to keep
/// several SIMD registers busy (SSE/AVX on a desktop) and cheap on a scalar FPU.
const LANES: usize = 16;

/// Dot product of two f32 vectors with [`LANES`] independent partial sums (then a fixed
/// pairwise reduction), so the compiler can vectorise it. The summation order is fixed, so
/// the result is identical on every target.
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let ca = a.chunks_exact(LANES);
    let cb = b.chunks_exact(LANES);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for ((s, &x), &y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    for ((s, &x), &y) in acc.iter_mut().zip(ra).zip(rb) {
        *s += x * y;
    }
    reduce(acc)
}

/// Dot product of f16 weights with f32 activations (weights widened to f32 in the loop).
#[inline]
pub fn dot_f16(w: &[f16], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let cw = w.chunks_exact(LANES);
    let cx = x.chunks_exact(LANES);
    let (rw, rx) = (cw.remainder(), cx.remainder());
    for (w, x) in cw.zip(cx) {
        for ((s, &w), &x) in acc.iter_mut().zip(w).zip(x) {
            *s += w.to_f32() * x;
        }
    }
    for ((s, &w), &x) in acc.iter_mut().zip(rw).zip(rx) {
        *s += w.to_f32() * x;
    }
    reduce(acc)
}

#[inline]
fn reduce(acc: [f32; LANES]) -> f32 {
    // Fixed pairwise tree: 16 -> 8 -> 4 -> 2 -> 1.
    let mut a = acc;
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        let (lo, hi) = a.split_at_mut(n);
        for (l, h) in lo.iter_mut().zip(hi.iter()) {
            *l += *h;
        }
    }
    a.first().copied().unwrap_or(0.0)
}

/// Naive dot product (sequential sum): the reference for [`dot_f32`].
pub fn dot_f32_ref(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `out[t, o] (+)= W[o, :] · x[t, :] + bias[o]` for every token t — PyTorch `F.linear`
/// (HF `Conv1D` after the converter's transpose). `x` is `[T, in]`, `out` is `[T, out]`.
/// With `accumulate` the result is added to `out` (the residual connection fused in).
///
/// Loops over weight rows outside and tokens inside, so each weight row is read from memory
/// once per batch of T tokens (prefill reuses it T times; decode has T = 1).
pub fn linear(out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], accumulate: bool) {
    let (rows, cols) = (w.rows, w.cols);
    if rows == 0 || cols == 0 {
        return;
    }
    let tokens = (x.len() / cols).min(out.len() / rows);
    for o in 0..rows {
        let b = bias.get(o).copied().unwrap_or(0.0);
        let row = o * cols..(o + 1) * cols;
        match w.data {
            MatrixData::F32(data) => {
                let wrow = data.get(row).unwrap_or(&[]);
                for t in 0..tokens {
                    let xt = x.get(t * cols..(t + 1) * cols).unwrap_or(&[]);
                    let y = dot_f32(wrow, xt) + b;
                    if let Some(dst) = out.get_mut(t * rows + o) {
                        *dst = if accumulate { *dst + y } else { y };
                    }
                }
            }
            MatrixData::F16(data) => {
                let wrow = data.get(row).unwrap_or(&[]);
                for t in 0..tokens {
                    let xt = x.get(t * cols..(t + 1) * cols).unwrap_or(&[]);
                    let y = dot_f16(wrow, xt) + b;
                    if let Some(dst) = out.get_mut(t * rows + o) {
                        *dst = if accumulate { *dst + y } else { y };
                    }
                }
            }
        }
    }
}

/// Naive reference for [`linear`] (f32 weights only, sequential sums).
pub fn linear_ref(out: &mut [f32], x: &[f32], w: &[f32], rows: usize, cols: usize, bias: &[f32], accumulate: bool) {
    for (xt, ot) in x.chunks_exact(cols).zip(out.chunks_exact_mut(rows)) {
        for (o, dst) in ot.iter_mut().enumerate() {
            let wrow = w.get(o * cols..(o + 1) * cols).unwrap_or(&[]);
            let y = dot_f32_ref(wrow, xt) + bias.get(o).copied().unwrap_or(0.0);
            *dst = if accumulate { *dst + y } else { y };
        }
    }
}

/// `out = (x - mean) / sqrt(var + eps) * weight + bias` over each row of `x` (`[T, C]`) —
/// PyTorch `nn.LayerNorm` (population variance, eps inside the square root).
pub fn layer_norm(out: &mut [f32], x: &[f32], weight: &[f32], bias: &[f32], eps: f32) {
    let c = weight.len();
    if c == 0 {
        return;
    }
    for (xr, or) in x.chunks_exact(c).zip(out.chunks_exact_mut(c)) {
        let mean = xr.iter().sum::<f32>() / c as f32;
        let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / c as f32;
        let rstd = 1.0 / libm::sqrtf(var + eps);
        for (((o, &v), &w), &b) in or.iter_mut().zip(xr).zip(weight).zip(bias) {
            *o = (v - mean) * rstd * w + b;
        }
    }
}

/// GELU, tanh approximation (HF `gelu_new`, `gelu_pytorch_tanh`):
/// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + libm::tanhf(SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)))
}

/// GELU, exact (HF `gelu`, PyTorch `F.gelu`): 0.5·x·(1 + erf(x/√2)).
#[inline]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * core::f32::consts::FRAC_1_SQRT_2))
}

/// Applies the model's MLP nonlinearity in place.
pub fn activate(x: &mut [f32], act: crate::config::Activation) {
    use crate::config::Activation::*;
    match act {
        GeluTanh => x.iter_mut().for_each(|v| *v = gelu_tanh(*v)),
        GeluErf => x.iter_mut().for_each(|v| *v = gelu_erf(*v)),
        Relu => x.iter_mut().for_each(|v| *v = v.max(0.0)),
    }
}

/// Softmax in place (max-subtracted for stability) — PyTorch `softmax(dim=-1)`.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = libm::expf(*v - max);
        sum += *v;
    }
    if sum > 0.0 {
        let inv = 1.0 / sum;
        x.iter_mut().for_each(|v| *v *= inv);
    }
}

/// Causal attention of one query head over the cached keys and values of positions
/// `0..S` (S = the query's position + 1, so the mask is implicit):
/// `out = softmax(q·Kᵀ · scale) · V` — HF `GPT2Attention._attn`.
///
/// `k_rows(s)` / `v_rows(s)` return the D-wide slice of head h at position s; `scores` is
/// scratch of at least S floats.
pub fn attend_head<'k>(
    out: &mut [f32],
    q: &[f32],
    keys: impl Fn(usize) -> &'k [f32],
    values: impl Fn(usize) -> &'k [f32],
    positions: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let scores = scores.get_mut(..positions).unwrap_or(&mut []);
    for (s, score) in scores.iter_mut().enumerate() {
        *score = dot_f32(q, keys(s)) * scale;
    }
    softmax(scores);
    out.iter_mut().for_each(|o| *o = 0.0);
    for (s, &p) in scores.iter().enumerate() {
        for (o, &v) in out.iter_mut().zip(values(s)) {
            *o += p * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    fn close(a: f32, b: f32, tol: f32) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn dot_matches_reference() {
        for n in [0usize, 1, 7, 16, 17, 33, 768, 1001] {
            let a: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 13.0).collect();
            let (fast, slow) = (dot_f32(&a, &b), dot_f32_ref(&a, &b));
            assert!(close(fast, slow, 1e-4 * (1.0 + slow.abs())), "n={n}: {fast} vs {slow}");
            let w16: Vec<f16> = a.iter().map(|&v| f16::from_f32(v)).collect();
            let w16f: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
            let (h, r) = (dot_f16(&w16, &b), dot_f32_ref(&w16f, &b));
            assert!(close(h, r, 1e-4 * (1.0 + r.abs())), "f16 n={n}: {h} vs {r}");
        }
    }

    #[test]
    fn linear_matches_reference() {
        let (rows, cols, t) = (13, 37, 3);
        let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 29 % 83) as f32 - 41.0) / 40.0).collect();
        let x: Vec<f32> = (0..t * cols).map(|i| ((i * 31 % 67) as f32 - 33.0) / 30.0).collect();
        let b: Vec<f32> = (0..rows).map(|i| i as f32 * 0.1).collect();
        let m = Matrix { rows, cols, data: MatrixData::F32(&w) };
        for acc in [false, true] {
            let mut fast = std::vec![0.5f32; t * rows];
            let mut slow = fast.clone();
            linear(&mut fast, &x, &m, &b, acc);
            linear_ref(&mut slow, &x, &w, rows, cols, &b, acc);
            for (f, s) in fast.iter().zip(&slow) {
                assert!(close(*f, *s, 1e-5), "{f} vs {s}");
            }
        }
    }

    // ---- The tutorial's worked example (V = 6, d = 3) ------------------------------------

    const W_E: [[f32; 3]; 6] = [
        [0.2, 0.9, 0.1],
        [0.8, 0.1, 0.3],
        [0.4, 0.3, 0.9],
        [0.5, 0.5, 0.2],
        [0.1, 0.7, 0.6],
        [0.9, 0.2, 0.4],
    ];
    const P: [[f32; 3]; 3] = [[0.0, 0.1, 0.0], [0.1, 0.0, 0.1], [0.2, 0.1, 0.0]];

    fn h0() -> [[f32; 3]; 3] {
        let mut h = [[0.0; 3]; 3];
        for (t, tok) in [0usize, 1, 2].iter().enumerate() {
            for d in 0..3 {
                h[t][d] = W_E[*tok][d] + P[t][d];
            }
        }
        h
    }

    #[test]
    fn tutorial_embeddings() {
        let want = [[0.2, 1.0, 0.1], [0.9, 0.1, 0.4], [0.6, 0.4, 0.9]];
        let h = h0();
        for t in 0..3 {
            for d in 0..3 {
                assert!(close(h[t][d], want[t][d], 1e-6), "H0[{t}][{d}] = {}", h[t][d]);
            }
        }
    }

    #[test]
    fn tutorial_attention_last_row() {
        // W_Q = W_K = W_V = I, so q = k = v = H0 rows; one head of width 3.
        let h = h0();
        let scale = 1.0 / libm::sqrtf(3.0);
        let q = h[2];
        let mut scores: Vec<f32> = (0..3).map(|s| dot_f32(&q, &h[s]) * scale).collect();
        for (got, want) in scores.iter().zip([0.35, 0.54, 0.77]) {
            assert!(close(*got, want, 0.005), "scaled score {got} vs {want}");
        }
        softmax(&mut scores);
        for (got, want) in scores.iter().zip([0.27, 0.32, 0.41]) {
            assert!(close(*got, want, 0.005), "attention weight {got} vs {want}");
        }
        let mut z = [0.0f32; 3];
        let mut scratch = [0.0f32; 3];
        attend_head(&mut z, &q, |s| &h[s][..], |s| &h[s][..], 3, scale, &mut scratch);
        for (got, want) in z.iter().zip([0.59, 0.47, 0.52]) {
            assert!(close(*got, want, 0.005), "z {got} vs {want}");
        }
    }

    #[test]
    fn tutorial_layer_norm_and_gelu() {
        let x = [1.34f32, 0.84, 1.67];
        let mean = x.iter().sum::<f32>() / 3.0;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 3.0;
        assert!(close(mean, 1.28, 0.005), "mean {mean}");
        assert!(close(libm::sqrtf(var + 1e-5), 0.34, 0.005), "std {}", libm::sqrtf(var + 1e-5));
        let mut out = [0.0f32; 3];
        layer_norm(&mut out, &x, &[1.0; 3], &[0.0; 3], 1e-5);
        for (o, v) in out.iter().zip(x) {
            assert!(close(*o, (v - mean) / libm::sqrtf(var + 1e-5), 1e-5));
        }
        assert!(close(gelu_tanh(-0.40), -0.14, 0.005), "{}", gelu_tanh(-0.40));
        assert!(close(gelu_tanh(-0.33), -0.12, 0.005), "{}", gelu_tanh(-0.33));
        // exact and tanh forms agree to ~1e-3 in this range
        assert!(close(gelu_erf(-0.40), gelu_tanh(-0.40), 1e-3));
    }
}
