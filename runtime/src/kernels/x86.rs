//! Run-time dispatch to AVX2 / AVX-512 builds of the same portable code (desktop only, with
//! the `std` feature). No FMA is enabled and the code is identical, so every lane performs the
//! same operations in the same order: results are bit-identical to the portable build (and to
//! a Cortex-M), only faster.

extern crate std;
use core::arch::x86_64::*;

use half::f16;

use super::{linear_impl, reduce, Matrix, LANES};

pub(super) fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
}

pub(super) fn has_avx512f() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw")
}

#[target_feature(enable = "avx2")]
pub(super) fn linear_avx2(out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], acc: bool, scratch: &mut [f32]) {
    linear_impl::<true>(out, x, w, bias, acc, scratch, |a, b| dot_f32_avx2(a, b), |w, x| dot4_pairs_avx2([w; 4], x), |a, b| dot4_pairs_avx2(a, b), super::dot_f16, super::dot_i8)
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn linear_avx512(out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], acc: bool, scratch: &mut [f32]) {
    linear_impl::<true>(out, x, w, bias, acc, scratch, |a, b| dot_f32_avx512(a, b), |w, x| dot4_tokens_avx512(w, x), |a, b| dot4_pairs_avx512(a, b), |w, x| dot_f16_avx512(w, x), |a, b| dot_i8_avx512(a, b))
}

/// Finishes like the portable kernel: the remainder is added lane by lane, then the same
/// fixed reduction tree.
#[inline(always)]
fn finish(mut lanes: [f32; LANES], ra: &[f32], rb: &[f32]) -> f32 {
    for ((s, &x), &y) in lanes.iter_mut().zip(ra).zip(rb) {
        *s += x * y;
    }
    reduce(lanes)
}

/// [`super::dot_f32`] with one 16-lane AVX-512 register (lane i sums elements i, i+16, …,
/// exactly as the portable code does; mul then add, no FMA).
#[target_feature(enable = "avx512f")]
fn dot_f32_avx512(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (ca, ra) = a.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let (cb, rb) = b.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let mut acc = _mm512_setzero_ps();
    for (x, y) in ca.iter().zip(cb) {
        // SAFETY: x and y are [f32; 16]: 64 readable bytes each (unaligned loads).
        let (vx, vy) = unsafe { (_mm512_loadu_ps(x.as_ptr()), _mm512_loadu_ps(y.as_ptr())) };
        acc = _mm512_add_ps(acc, _mm512_mul_ps(vx, vy));
    }
    let mut lanes = [0.0f32; LANES];
    // SAFETY: lanes is [f32; 16]: 64 writable bytes.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    finish(lanes, ra, rb)
}

/// Four [`dot_f32_avx512`]s of one weight row against four tokens, sharing each weight load.
#[target_feature(enable = "avx512f")]
fn dot4_tokens_avx512(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    let n = x.iter().fold(w.len(), |n, r| n.min(r.len()));
    let (cw, rw) = w.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let xs = x.map(|r| r.get(..n).unwrap_or(&[]).as_chunks::<LANES>());
    let mut acc = [_mm512_setzero_ps(); 4];
    for (i, wc) in cw.iter().enumerate() {
        // SAFETY: wc is [f32; 16].
        let vw = unsafe { _mm512_loadu_ps(wc.as_ptr()) };
        for (a, (c, _)) in acc.iter_mut().zip(&xs) {
            if let Some(xc) = c.get(i) {
                // SAFETY: xc is [f32; 16].
                let vx = unsafe { _mm512_loadu_ps(xc.as_ptr()) };
                *a = _mm512_add_ps(*a, _mm512_mul_ps(vw, vx));
            }
        }
    }
    let mut out = [0.0f32; 4];
    for ((o, a), (_, r)) in out.iter_mut().zip(acc).zip(&xs) {
        let mut lanes = [0.0f32; LANES];
        // SAFETY: lanes is [f32; 16].
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), a) };
        *o = finish(lanes, rw, r);
    }
    out
}

/// Four independent [`dot_f32_avx512`]s, `ws[k] · xs[k]`: four accumulator chains in
/// flight (one weight row against four tokens in prefill, four rows against one token in
/// decode). Each result is bit-identical to the single dot.
#[target_feature(enable = "avx512f")]
fn dot4_pairs_avx512(ws: [&[f32]; 4], xs: [&[f32]; 4]) -> [f32; 4] {
    let n = ws.iter().chain(&xs).fold(usize::MAX, |n, r| n.min(r.len()));
    let wc = ws.map(|r| r.get(..n).unwrap_or(&[]).as_chunks::<LANES>());
    let xc = xs.map(|r| r.get(..n).unwrap_or(&[]).as_chunks::<LANES>());
    let chunks = n / LANES;
    let mut acc = [_mm512_setzero_ps(); 4];
    for i in 0..chunks {
        for (a, (w, x)) in acc.iter_mut().zip(wc.iter().zip(&xc)) {
            if let (Some(w), Some(x)) = (w.0.get(i), x.0.get(i)) {
                // SAFETY: w and x are [f32; 16]: 64 readable bytes each.
                let (vw, vx) = unsafe { (_mm512_loadu_ps(w.as_ptr()), _mm512_loadu_ps(x.as_ptr())) };
                *a = _mm512_add_ps(*a, _mm512_mul_ps(vw, vx));
            }
        }
    }
    let mut out = [0.0f32; 4];
    for ((o, a), (w, x)) in out.iter_mut().zip(acc).zip(wc.iter().zip(&xc)) {
        let mut lanes = [0.0f32; LANES];
        // SAFETY: lanes is [f32; 16].
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), a) };
        *o = finish(lanes, w.1, x.1);
    }
    out
}

/// [`super::dot_f16`] with hardware f16 → f32 conversion (exact, so bit-identical).
#[target_feature(enable = "avx512f")]
fn dot_f16_avx512(w: &[f16], x: &[f32]) -> f32 {
    let n = w.len().min(x.len());
    let (cw, rw) = w.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let (cx, rx) = x.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let mut acc = _mm512_setzero_ps();
    for (wc, xc) in cw.iter().zip(cx) {
        // SAFETY: wc is [f16; 16] (32 readable bytes), xc is [f32; 16] (64 bytes).
        let (vw, vx) = unsafe { (_mm512_cvtph_ps(_mm256_loadu_si256(wc.as_ptr().cast())), _mm512_loadu_ps(xc.as_ptr())) };
        acc = _mm512_add_ps(acc, _mm512_mul_ps(vw, vx));
    }
    let mut lanes = [0.0f32; LANES];
    // SAFETY: lanes is [f32; 16].
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    for ((s, w), &x) in lanes.iter_mut().zip(rw).zip(rx) {
        *s += w.to_f32() * x;
    }
    reduce(lanes)
}

/// [`super::dot_i8`]: sign-extend to i16, multiply pairs and add into i32 lanes (exact).
#[target_feature(enable = "avx512f,avx512bw")]
fn dot_i8_avx512(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let (ca, ra) = a.get(..n).unwrap_or(&[]).as_chunks::<32>();
    let (cb, rb) = b.get(..n).unwrap_or(&[]).as_chunks::<32>();
    let mut acc = _mm512_setzero_si512();
    for (x, y) in ca.iter().zip(cb) {
        // SAFETY: x and y are [i8; 32]: 32 readable bytes each.
        let (vx, vy) = unsafe { (_mm256_loadu_si256(x.as_ptr().cast()), _mm256_loadu_si256(y.as_ptr().cast())) };
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_cvtepi8_epi16(vx), _mm512_cvtepi8_epi16(vy)));
    }
    let tail: i32 = ra.iter().zip(rb).map(|(&x, &y)| x as i32 * y as i32).sum();
    _mm512_reduce_add_epi32(acc) + tail
}

/// [`super::dot_f32`] with two 8-lane AVX registers (lanes 0–7 and 8–15).
#[target_feature(enable = "avx2")]
fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (ca, ra) = a.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let (cb, rb) = b.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for (x, y) in ca.iter().zip(cb) {
        // SAFETY: x and y are [f32; 16]; the loads read elements 0–7 and 8–15.
        unsafe {
            lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr()), _mm256_loadu_ps(y.as_ptr())));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(8)), _mm256_loadu_ps(y.as_ptr().add(8))));
        }
    }
    let mut lanes = [0.0f32; LANES];
    // SAFETY: lanes is [f32; 16]: two 8-float stores.
    unsafe {
        _mm256_storeu_ps(lanes.as_mut_ptr(), lo);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi);
    }
    finish(lanes, ra, rb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_f16_and_i8_dots_equal_portable() {
        if !has_avx512f() {
            return;
        }
        for n in [0usize, 5, 16, 31, 32, 33, 100, 768] {
            let w: std::vec::Vec<f16> = (0..n).map(|i| f16::from_f32(((i * 37 % 101) as f32 - 50.0) / 17.0)).collect();
            let x: std::vec::Vec<f32> = (0..n).map(|i| ((i * 53) % 97) as f32 / 13.0 - 3.0).collect();
            // SAFETY: AVX-512F/BW present (checked).
            let h = unsafe { dot_f16_avx512(&w, &x) };
            assert_eq!(h.to_bits(), super::super::dot_f16(&w, &x).to_bits(), "f16 n={n}");
            let a: std::vec::Vec<i8> = (0..n).map(|i| ((i * 37 % 255) as i32 - 127) as i8).collect();
            let b: std::vec::Vec<i8> = (0..n).map(|i| ((i * 91 % 255) as i32 - 127) as i8).collect();
            // SAFETY: as above.
            let d = unsafe { dot_i8_avx512(&a, &b) };
            assert_eq!(d, super::super::dot_i8(&a, &b), "i8 n={n}");
        }
    }

    /// The SIMD builds must be bit-identical to the portable kernels (host == board).
    #[test]
    fn simd_dots_are_bit_identical_to_portable() {
        for n in [0usize, 1, 15, 16, 17, 100, 768, 3072] {
            let w: std::vec::Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
            let xs: std::vec::Vec<std::vec::Vec<f32>> =
                (0..4).map(|k| (0..n).map(|i| ((i * 53 + k * 11) % 97) as f32 / 13.0 - 3.0).collect()).collect();
            let want: std::vec::Vec<u32> = xs.iter().map(|x| super::super::dot_f32(&w, x).to_bits()).collect();
            let refs = [&xs[0][..], &xs[1][..], &xs[2][..], &xs[3][..]];
            if has_avx2() {
                // SAFETY: AVX2 is present (checked).
                let (one, four) = unsafe { (dot_f32_avx2(&w, &xs[0]), dot4_pairs_avx2([&w[..]; 4], refs)) };
                assert_eq!(one.to_bits(), want[0], "avx2 n={n}");
                assert_eq!(four.map(f32::to_bits).to_vec(), want, "avx2 dot4 n={n}");
            }
            if has_avx512f() {
                // SAFETY: AVX-512F is present (checked).
                let (one, four) = unsafe { (dot_f32_avx512(&w, &xs[0]), dot4_pairs_avx512([&w[..]; 4], refs)) };
                // and four rows against one token
                let rows4 = unsafe { dot4_pairs_avx512(refs, [&w[..]; 4]) };
                let tok4 = unsafe { dot4_tokens_avx512(&w, refs) };
                assert_eq!(tok4.map(f32::to_bits).to_vec(), want, "avx512 dot4 tokens n={n}");
                assert_eq!(rows4.map(f32::to_bits).to_vec(), xs.iter().map(|x| super::super::dot_f32(x, &w).to_bits()).collect::<std::vec::Vec<_>>());
                assert_eq!(one.to_bits(), want[0], "avx512 n={n}");
                assert_eq!(four.map(f32::to_bits).to_vec(), want, "avx512 dot4 n={n}");
            }
        }
    }
}

/// Four independent [`dot_f32_avx2`]s, `ws[k] · xs[k]`.
#[target_feature(enable = "avx2")]
fn dot4_pairs_avx2(ws: [&[f32]; 4], xs: [&[f32]; 4]) -> [f32; 4] {
    [dot_f32_avx2(ws[0], xs[0]), dot_f32_avx2(ws[1], xs[1]), dot_f32_avx2(ws[2], xs[2]), dot_f32_avx2(ws[3], xs[3])]
}
