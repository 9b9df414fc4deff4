//! `exp` and GELU-tanh for whole slices, in IEEE-754 basic operations only.
//!
//! **Why not `libm`:** `libm::expf` / `libm::tanhf` are correct to ~1 ulp and the same Rust on
//! every target, but they branch on the input and call one element at a time, so a compiler
//! cannot vectorise them: scalar `tanhf` was 13–16 % of the desktop's prefill. The functions
//! here are straight-line code (no branches, no tables, no calls) that the compiler turns into
//! SIMD loops over a slice — SSE2/AVX2/AVX-512 on the desktop, Helium on the Cortex-M55 (there
//! GELU's division stays one `vdiv.f32` per lane: MVE has no vector divide) — or into
//! branch-free FPU code on the Cortex-M4F.
//!
//! **Same bits everywhere:** only `+ − × ÷`, comparisons, `min`/`max`-style selects and f32↔bit
//! conversions, each correctly rounded by IEEE-754 in round-to-nearest-even, in one fixed
//! order. No fused multiply-add (Rust never contracts `a * b + c`; the SIMD builds issue a
//! separate multiply and add), so every target — portable x86-64, the AVX2/AVX-512 builds
//! ([`gelu_tanh_slice`] and [`super::softmax`] dispatch to them at run time), Cortex-M4F, Cortex-M55 —
//! returns the same bits for the same input.
//!
//! **Method, `exp(x)`** (Cody–Waite reduction, as in Cephes and SLEEF):
//! 1. clamp x to [−104, 89] (a NaN passes through, and the result is NaN);
//! 2. n = round(x·log₂e), by adding and subtracting 1.5·2²³ (the rounding of the addition does
//!    the round-to-nearest; n is then read from the low mantissa bits);
//! 3. r = (x − n·ln2_hi) − n·ln2_lo with ln2_hi = 355/512 (9 bits, so n·ln2_hi and the
//!    subtraction are exact), |r| ≲ ln2/2;
//! 4. e^r = 1 + (r + r²·q(r)), q a degree-5 polynomial in Horner form (minimax, SLEEF's);
//! 5. e^x = e^r · 2^⌊n/2⌋ · 2^(n−⌊n/2⌋): two exact power-of-two factors built from bits, so that
//!    results near `f32::MAX` (n = 128) and subnormal results (n < −126) need no special case —
//!    the last multiply rounds once to the subnormal, or overflows to +∞.
//!
//! **Method, GELU-tanh:** 0.5·x·(1 + tanh u) = x·σ(2u) = x / (1 + e^(−2u)) with
//! u = √(2/π)·(x + 0.044715·x³): the same function as PyTorch's `gelu(approximate="tanh")`,
//! written so that it needs only [`exp`] and one division. It is also better conditioned than
//! the textbook form: for x ≪ 0, 1 + tanh u cancels to 0 in f32, whereas e^(−2u) stays
//! accurate, so the small negative outputs keep their relative accuracy.
//!
//! **Accuracy**, against an f64 reference (the `math` unit tests sweep every 97th f32 in
//! [−104, 0], every 1009th bit pattern overall and the edge cases, and assert the bounds; the
//! ignored `exp_exhaustive` test runs all 2³² inputs):
//! - `exp`: < 1 ulp over every f32 (measured max 0.966 ulp, all 2³² inputs; 99.6 % of them
//!   are correctly rounded), and never more than 1 ulp from `libm::expf`. exp(±0) = 1,
//!   exp(−∞) = +0, exp(+∞) = +∞, exp(NaN) = NaN; it underflows to +0 below
//!   ≈ −103.97 (through the subnormals) and overflows to +∞ above ≈ 88.72, like `libm::expf`.
//! - `gelu_tanh`: absolute error ≤ 1.2e-7·max(1, |x|) (asserted: 2.4e-7), the same as the
//!   `libm::tanhf` formula it replaced (1.1e-7) and ~1000× below the 1e-4 the PyTorch parity
//!   tests allow on logits. Relative: ≤ 1.9 ulp for x > 0; for x < 0 it grows with |u| since
//!   e^(−2u) magnifies the f32 rounding of u: ≤ 22 ulp down to x = −4, where the `tanhf`
//!   formula's cancellation cost up to 8148 ulp. gelu(±0) = ±0, gelu(+∞) = +∞,
//!   gelu(−∞) = NaN and gelu(NaN) = NaN, as the textbook form gives; gelu(x) = −0 once
//!   e^(−2u) overflows (x < −10.06).

/// e^x (see the module documentation for the method and its error). Branch-free so that loops
/// over slices vectorise ([`super::softmax`] runs it over the attention scores).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2_E: f32 = core::f32::consts::LOG2_E;
    // ln 2 = LN2_HI + LN2_LO; LN2_HI = 355/512 has 9 significant bits, so n·LN2_HI is exact
    // for |n| < 2^15 and x − n·LN2_HI is exact (Sterbenz) when |r| ≤ ln2/2.
    const LN2_HI: f32 = 355.0 / 512.0;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5·2^23 rounds to an integer (ulp 1 in [2^23, 2^24)), kept in the low mantissa.
    const ROUND: f32 = 12_582_912.0;
    // Below −104, e^x < 2^−150 rounds to 0; above 89 it is +∞. Both bounds keep n in
    // [−150, 129], so both power-of-two factors below are normal numbers.
    const LO: f32 = -104.0;
    const HI: f32 = 89.0;
    // Minimax coefficients of (e^r − 1 − r)/r² on [−ln2/2, ln2/2] (SLEEF's `expf`).
    const Q5: f32 = 1.985_276_2e-4;
    const Q4: f32 = 1.393_043_6e-3;
    const Q3: f32 = 8.333_361e-3;
    const Q2: f32 = 4.166_648_5e-2;
    const Q1: f32 = 0.166_666_67;
    const Q0: f32 = 0.5;

    // clamp (compare-and-select: a NaN fails both compares and stays NaN through the
    // arithmetic; its n is garbage, hence the wrapping integer ops)
    let x = if x < LO { LO } else { x };
    let x = if x > HI { HI } else { x };
    let t = x * LOG2_E + ROUND;
    let nf = t - ROUND;
    let n = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = (x - nf * LN2_HI) - nf * LN2_LO;
    let q = ((((Q5 * r + Q4) * r + Q3) * r + Q2) * r + Q1) * r + Q0;
    let er = 1.0 + (r + r * r * q);
    let n1 = n >> 1;
    er * pow2(n1) * pow2(n.wrapping_sub(n1))
}

/// 2^n for n in [−126, 127], built from its bits.
#[inline(always)]
fn pow2(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) << 23) as u32)
}

/// GELU, tanh approximation (HF `gelu_new`, PyTorch `gelu(approximate="tanh")`):
/// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), computed as x / (1 + e^(−2u)) (see the module
/// documentation). Use [`gelu_tanh_slice`] for a whole slice.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    // −2·√(2/π): exactly twice the f32 √(2/π), so z = −2·fl(√(2/π)·(x + 0.044715·x³)).
    const MINUS_2_SQRT_2_OVER_PI: f32 = -1.595_769_2;
    let z = MINUS_2_SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    x / (1.0 + exp(z))
}

/// `x[i] = gelu_tanh(x[i])` for every element ([`gelu_tanh`]; on x86-64 with AVX2/AVX-512 in
/// their builds of the same code, bit-identical).
pub fn gelu_tanh_slice(x: &mut [f32]) {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        use super::x86::{cpu::Build, other_build, Avx2, Avx512};
        match (other_build(), Avx512::detect(), Avx2::detect()) {
            (Build::Avx512, Some(d), _) => return d.gelu_tanh_slice(x),
            (Build::Avx512 | Build::Avx2, _, Some(d)) => return d.gelu_tanh_slice(x),
            _ => {}
        }
    }
    gelu_tanh_slice_portable(x);
}

/// SiLU, x·σ(x), as x / (1 + e^(−x)) with [`exp`]: only basic operations, so the same bits on
/// every target, and loops over slices vectorise. Within 1 ulp of PyTorch's `x * sigmoid(x)`
/// (a division where PyTorch multiplies by a reciprocal). silu(x) = −0 once e^(−x) overflows
/// (x < −88.7), silu(+∞) = +∞, silu(−∞) = NaN (as PyTorch's), silu(NaN) = NaN.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// [`silu`] over a slice, in place.
pub fn silu_slice(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = silu(*v));
}

/// The loop of [`gelu_tanh_slice`], inlined into each target-feature build.
#[inline(always)]
pub(super) fn gelu_tanh_slice_portable(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = gelu_tanh(*v));
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    /// Distance of `y` from the exact value `exact` in units of the f32 ulp at `exact`
    /// (2^−149 for subnormals). Infinite results count as exact only if `exact` overflows f32.
    /// (Powers of two from bits, not `log2`/`powi`: Miri perturbs those.)
    fn ulps(y: f32, exact: f64) -> f64 {
        let pow2 = |e: i32| f64::from_bits(((e + 1023) as u64) << 52);
        let (y, ax) = (y as f64, exact.abs());
        if ax > f32::MAX as f64 || y.is_infinite() {
            // exact rounds to ∞ iff it is ≥ MAX + ulp/2, else to MAX
            let want = if ax >= f32::MAX as f64 + pow2(103) { f64::INFINITY } else { f32::MAX as f64 };
            return if y.abs() == want { 0.0 } else { f64::INFINITY };
        }
        let binade = ((ax.to_bits() >> 52) as i32 - 1023).max(-126);
        (y - exact).abs() / pow2(binade - 23)
    }

    /// Bits, with every NaN as one value: IEEE-754 and Rust leave a NaN result's sign and
    /// payload open, so only "is NaN" is the same on every target.
    pub(in crate::kernels) fn bits_nan_as_one(v: f32) -> u32 {
        if v.is_nan() {
            u32::MAX
        } else {
            v.to_bits()
        }
    }

    /// Every `step`-th f32 bit pattern in `lo..=hi` (as bit patterns of one sign); under Miri
    /// (scripts/miri.sh) every 10000·`step`-th, so that the tests still run every path.
    pub(in crate::kernels) fn sweep(lo: u32, hi: u32, step: usize) -> impl Iterator<Item = f32> {
        let step = if cfg!(miri) { step * 10_000 } else { step };
        (lo..=hi).step_by(step).map(f32::from_bits)
    }

    /// The edge cases every test adds to its sweep.
    fn edges() -> Vec<f32> {
        let mut v = std::vec![
            0.0, -0.0, 1.0, -1.0, f32::MIN_POSITIVE, -f32::MIN_POSITIVE, 1e-45, -1e-45, 1e-40, -1e-40,
            f32::MAX, f32::MIN, f32::INFINITY, f32::NEG_INFINITY, 88.72, 88.7228, 88.722_84, -87.33,
            -87.34, -103.9, -103.97, -103.98, -104.0, -104.1, -150.0, 89.0, 100.0, 1e-8, -1e-8,
        ];
        // around every place where n changes, and the clamp bounds
        for k in -151..=129 {
            let x = k as f32 * core::f32::consts::LN_2 * 0.5;
            v.extend([x, f32::from_bits(x.to_bits() + 1), f32::from_bits(x.to_bits().saturating_sub(1))]);
        }
        v
    }

    fn exp_inputs() -> Vec<f32> {
        // every 97th f32 in [−104, 0] (the softmax range), every 1009th bit pattern overall
        let neg = sweep(0x8000_0000, (-104.0f32).to_bits(), 97);
        let all = sweep(0, u32::MAX, 1009);
        neg.chain(all).chain(edges()).filter(|x| !x.is_nan()).collect()
    }

    /// Errors of [`exp`] over `xs`: max ulps from the exact value (and where), max ulps from
    /// `libm::expf` (and where), and the share of results that are correctly rounded.
    struct ExpErrors {
        exact: (f64, f32),
        libm: (f64, f32),
        correctly_rounded: f64,
    }

    fn exp_errors(xs: impl Iterator<Item = f32>) -> ExpErrors {
        let mut r = ExpErrors { exact: (0.0, 0.0), libm: (0.0, 0.0), correctly_rounded: 0.0 };
        let (mut n, mut good) = (0u64, 0u64);
        for x in xs {
            let (y, exact) = (exp(x), (x as f64).exp());
            let e = ulps(y, exact);
            if e > r.exact.0 {
                r.exact = (e, x);
            }
            let l = libm::expf(x);
            let d = if l == y { 0.0 } else { ulps(y, l as f64) };
            if d > r.libm.0 {
                r.libm = (d, x);
            }
            n += 1;
            good += u64::from(y == exact as f32);
        }
        r.correctly_rounded = good as f64 / n.max(1) as f64;
        r
    }

    fn report(what: &str, r: &ExpErrors) {
        let ExpErrors { exact: (e, at), libm: (l, at_l), correctly_rounded } = r;
        std::println!(
            "exp, {what}: max {e:.3} ulp from exact (at {at:e}), {l:.3} ulp from libm::expf (at {at_l:e}), {:.2} % correctly rounded",
            100.0 * correctly_rounded
        );
    }

    #[test]
    fn exp_is_within_one_ulp() {
        let r = exp_errors(exp_inputs().into_iter());
        report("sweep", &r);
        let ((e, at), (l, at_l)) = (r.exact, r.libm);
        assert!(e < 1.0, "exp: {e} ulp at {at:e} ({:e} vs {:e})", exp(at), (at as f64).exp());
        assert!(l <= 1.0, "exp vs libm: {l} ulp at {at_l:e}");
        assert!(r.correctly_rounded > 0.9, "{}", r.correctly_rounded);
    }

    #[test]
    fn exp_special_values() {
        assert_eq!(exp(0.0).to_bits(), 1.0f32.to_bits());
        assert_eq!(exp(-0.0).to_bits(), 1.0f32.to_bits());
        assert_eq!(exp(f32::NEG_INFINITY).to_bits(), 0);
        assert_eq!(exp(-104.0).to_bits(), 0);
        assert_eq!(exp(f32::MIN).to_bits(), 0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::MAX), f32::INFINITY);
        assert_eq!(exp(88.8), f32::INFINITY);
        assert!(exp(88.72).is_finite());
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(-f32::NAN).is_nan());
        assert_eq!(exp(1.0), core::f32::consts::E);
        // subnormal results: the smallest nonzero ones, as libm gives them
        for x in [-87.5f32, -90.0, -100.0, -103.0, -103.9] {
            assert_eq!(exp(x).to_bits(), libm::expf(x).to_bits(), "exp({x})");
        }
    }

    /// Exhaustive check over every f32 (several minutes on one core): `cargo test -p runtime
    /// --release --lib exp_exhaustive -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn exp_exhaustive() {
        let r = exp_errors((0..=u32::MAX).map(f32::from_bits).filter(|x| !x.is_nan()));
        report("all f32", &r);
        assert!(r.exact.0 < 1.0 && r.libm.0 <= 1.0);
    }

    /// GELU-tanh in f64 from the f32 input.
    fn gelu_exact(x: f32) -> f64 {
        let x = x as f64;
        let u = (2.0 / core::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        x / (1.0 + (-2.0 * u).exp())
    }

    /// The formula this module replaced: 0.5·x·(1 + tanhf(u)).
    fn gelu_libm(x: f32) -> f32 {
        0.5 * x * (1.0 + libm::tanhf(0.797_884_6 * (x + 0.044_715 * x * x * x)))
    }

    #[test]
    fn gelu_tanh_absolute_error_is_tiny() {
        // every 97th f32 of either sign up to |x| = 20, every 1009th bit pattern overall
        let small = sweep(0, 20.0f32.to_bits(), 97).flat_map(|x| [x, -x]);
        let all = sweep(0, u32::MAX, 1009);
        let (mut worst, mut at, mut worst_libm, mut at_libm) = (0.0f64, 0.0f32, 0.0f64, 0.0f32);
        // relative error in ulps, for x > 0 and for −4 ≤ x < 0 (where |GELU| ≥ 1.3e-4), new and old
        let mut ulp = [[0.0f64; 2]; 2];
        for x in small.chain(all).chain(edges()).filter(|x| x.is_finite()) {
            let exact = gelu_exact(x);
            if x >= -4.0 && x != 0.0 {
                let u = &mut ulp[usize::from(x < 0.0)];
                u[0] = u[0].max(ulps(gelu_tanh(x), exact));
                u[1] = u[1].max(ulps(gelu_libm(x), exact));
            }
            let scale = (x.abs() as f64).max(1.0);
            let e = (gelu_tanh(x) as f64 - exact).abs() / scale;
            if e > worst {
                (worst, at) = (e, x);
            }
            let old = gelu_libm(x);
            let l = if old.is_nan() { 0.0 } else { (old as f64 - exact).abs() / scale };
            if l > worst_libm {
                (worst_libm, at_libm) = (l, x);
            }
        }
        std::println!("gelu_tanh: max |error|/max(1,|x|) {worst:.3e} (at {at:e}); libm tanhf formula {worst_libm:.3e} (at {at_libm:e})");
        let [[pos, pos_libm], [neg, neg_libm]] = ulp;
        std::println!("gelu_tanh: max {pos:.2} ulp for x > 0 ({pos_libm:.2} with libm tanhf), {neg:.2} ulp for -4 ≤ x < 0 ({neg_libm:.2} with libm tanhf)");
        assert!(worst <= 2.4e-7, "gelu_tanh: {worst:e} at {at:e}");
        assert!(pos <= 3.0 && neg <= 32.0, "gelu_tanh: {pos} ulp for x > 0, {neg} for x < 0");
    }

    #[test]
    fn gelu_tanh_special_values() {
        assert_eq!(gelu_tanh(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(gelu_tanh(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(gelu_tanh(f32::INFINITY), f32::INFINITY);
        assert!(gelu_tanh(f32::NEG_INFINITY).is_nan());
        assert!(gelu_tanh(f32::NAN).is_nan());
        assert_eq!(gelu_tanh(f32::MAX), f32::MAX);
        assert_eq!(gelu_tanh(f32::MIN).to_bits(), (-0.0f32).to_bits());
        assert_eq!(gelu_tanh(-20.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(gelu_tanh(20.0), 20.0);
        // tiny inputs: x/2, exactly
        for x in [1e-30f32, -1e-30, 1e-40, f32::MIN_POSITIVE] {
            assert_eq!(gelu_tanh(x), x * 0.5, "{x:e}");
        }
    }

    /// The slice function (dispatched to AVX2/AVX-512 on a desktop that has them) must equal the
    /// scalar function bit for bit, at every length (vector body and remainder).
    #[test]
    fn slice_is_bit_identical_to_scalar() {
        let mut xs: Vec<f32> = sweep(0, u32::MAX, 4099).chain(edges()).collect();
        xs.extend([f32::NAN, -f32::NAN]);
        for len in [0usize, 1, 7, 15, 16, 17, 33, 100, xs.len()] {
            let x = &xs[xs.len() - len..];
            let mut g = x.to_vec();
            gelu_tanh_slice(&mut g);
            for (&x, g) in x.iter().zip(g) {
                assert_eq!(bits_nan_as_one(g), bits_nan_as_one(gelu_tanh(x)), "gelu_tanh({x:e})");
            }
        }
    }
}
