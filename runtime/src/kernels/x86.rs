//! Run-time dispatch to AVX2 / AVX-512 builds of the same portable code (desktop only, with
//! the `std` feature). No FMA is enabled and the code is identical, so every lane performs the
//! same operations in the same order: results are bit-identical to the portable build (and to
//! a Cortex-M), only faster.

extern crate std;
use core::arch::x86_64::*;
use core::mem::MaybeUninit;

use half::f16;

mod amx;
pub mod cpu;

use super::{attention_impl, linear_impl, quant_job, reduce, wide16_len, Attend, Dots, KvElem, Matrix, MatrixData, Outputs, QuantJob, QuantOrder, LANES};
use crate::kv_cache::{HeadRows, KvHead};

/// Whether the CPU has AVX-512F/BW and no override (`GPT2_MCU_NO_AVX512`, `GPT2_MCU_KERNELS=avx2`
/// or `portable`) turns it off. Which operations then run on it is [`cpu::chosen`]'s table.
pub(super) fn has_avx512f() -> bool {
    cpu::chosen().allows(cpu::Build::Avx512)
}

/// The build that runs `linear` with `w` over `tokens` tokens (decode when 1): the table's.
pub(super) fn linear_build(w: &Matrix<'_>, tokens: usize) -> cpu::Build {
    let c = &cpu::chosen().choice;
    let d = match w.data {
        MatrixData::F32(_) => 0,
        MatrixData::F16(_) => 1,
        MatrixData::Q8 { .. } => 2,
        MatrixData::Q4 { .. } => 3,
    };
    let per = if tokens <= 1 { &c.decode } else { &c.prefill };
    per.get(d).copied().unwrap_or(cpu::Build::Portable)
}

/// The build of attention, softmax and the elementwise activations: the table's.
pub(super) fn other_build() -> cpu::Build {
    cpu::chosen().choice.other
}

/// Proof that the CPU has AVX2 and F16C: made only by [`Avx2::detect`].
pub(super) struct Avx2(());

impl Avx2 {
    pub(super) fn detect() -> Option<Self> {
        // every AVX2 CPU has F16C (Intel since Ivy Bridge, AMD since Piledriver); checked anyway
        cpu::chosen().allows(cpu::Build::Avx2).then_some(Self(()))
    }

    pub(super) fn linear(&self, out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], acc: bool, scratch: &mut [f32]) {
        // SAFETY: an Avx2 exists only when the CPU has AVX2.
        unsafe { linear_avx2(self, out, x, w, bias, acc, scratch) }
    }

    /// [`super::math::gelu_tanh_slice`] (elementwise, so the same bits at any width).
    pub(super) fn gelu_tanh_slice(&self, x: &mut [f32]) {
        // SAFETY: as above.
        unsafe { gelu_tanh_slice_avx2(x) }
    }

    /// [`super::softmax`] (elementwise exp, the portable 16-lane sum).
    pub(super) fn softmax(&self, x: &mut [f32]) {
        // SAFETY: as above.
        unsafe { softmax_avx2(x) }
    }

    /// [`super::attention`] with AVX2 f32 key dots (see [`Attend for Avx2`](Avx2)).
    pub(super) fn attention(&self, out: &mut [f32], q: &[f32], kv: &KvHead<'_>, scale: f32, scores: &mut [f32]) {
        // SAFETY: as above.
        unsafe { attention_avx2(self, out, q, kv, scale, scores) }
    }
}

#[target_feature(enable = "avx2,f16c")]
fn attention_avx2(d: &Avx2, out: &mut [f32], q: &[f32], kv: &KvHead<'_>, scale: f32, scores: &mut [f32]) {
    attention_impl(d, out, q, kv, scale, scores)
}

/// Proof that the CPU has AVX-512F and AVX-512BW: made only by [`Avx512::detect`].
pub(super) struct Avx512(());

impl Avx512 {
    pub(super) fn detect() -> Option<Self> {
        has_avx512f().then_some(Self(()))
    }

    pub(super) fn linear(&self, out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], acc: bool, scratch: &mut [f32]) {
        // SAFETY: an Avx512 exists only when the CPU has AVX-512F/BW.
        unsafe { linear_avx512(self, out, x, w, bias, acc, scratch) }
    }

    /// [`super::attention`] with AVX-512 loops (see [`Attend for Avx512`](Avx512)).
    pub(super) fn attention(&self, out: &mut [f32], q: &[f32], kv: &KvHead<'_>, scale: f32, scores: &mut [f32]) {
        // SAFETY: as above.
        unsafe { attention_avx512(self, out, q, kv, scale, scores) }
    }

    /// [`super::math::gelu_tanh_slice`] (elementwise, so the same bits at any width).
    pub(super) fn gelu_tanh_slice(&self, x: &mut [f32]) {
        // SAFETY: as above.
        unsafe { gelu_tanh_slice_avx512(x) }
    }

    /// [`super::softmax`] (elementwise exp, the portable 16-lane sum).
    pub(super) fn softmax(&self, x: &mut [f32]) {
        // SAFETY: as above.
        unsafe { softmax_avx512(x) }
    }
}

#[target_feature(enable = "avx512f,avx512bw")]
fn attention_avx512(d: &Avx512, out: &mut [f32], q: &[f32], kv: &KvHead<'_>, scale: f32, scores: &mut [f32]) {
    attention_impl(d, out, q, kv, scale, scores)
}

// The elementwise math (`kernels/math.rs`) and softmax: the portable code, inlined into builds
// that may use wider registers. Only basic IEEE operations, no FMA: the same bits.
#[target_feature(enable = "avx512f")]
fn gelu_tanh_slice_avx512(x: &mut [f32]) {
    super::math::gelu_tanh_slice_portable(x)
}

#[target_feature(enable = "avx512f")]
fn softmax_avx512(x: &mut [f32]) {
    super::softmax_portable(x)
}

#[target_feature(enable = "avx2,f16c")]
fn gelu_tanh_slice_avx2(x: &mut [f32]) {
    super::math::gelu_tanh_slice_portable(x)
}

#[target_feature(enable = "avx2,f16c")]
fn softmax_avx2(x: &mut [f32]) {
    super::softmax_portable(x)
}

#[target_feature(enable = "avx2,f16c")]
fn linear_avx2(d: &Avx2, out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], acc: bool, scratch: &mut [f32]) {
    if linear_quant_avx2(out, x, w, bias, acc, scratch) || dense_prefill_avx2(out, x, w, bias, acc) || dense_decode_avx2(out, x, w, bias, acc) {
        return;
    }
    linear_impl(d, out, x, w, bias, acc, scratch)
}

#[target_feature(enable = "avx512f,avx512bw")]
fn linear_avx512(d: &Avx512, out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], acc: bool, scratch: &mut [f32]) {
    if f16_prefill_widened(d, out, x, w, bias, acc, scratch) {
        return;
    }
    // q8/q4 shapes the VNNI kernel does not take (groups other than 32, rows not a multiple of
    // 64, such as the shipped model's 112-wide rows in groups of 28): the AVX2 quant kernels,
    // whose whole-row loops beat the generic path's one call per group (AVX-512F implies AVX2
    // and F16C, so this function may call them)
    if linear_quant_avx2(out, x, w, bias, acc, scratch) {
        return;
    }
    linear_impl(d, out, x, w, bias, acc, scratch)
}

/// Tokens from which f16 prefill widens its weights first.
const F16_WIDEN_MIN_TOKENS: usize = 8;

/// f16 prefill (≥ 8 tokens): widens a block of weight rows to f32 in `scratch` once, then runs
/// the f32 tiles over every token. The 4 × 4 f16 tiles converted each weight vector again for
/// every 4 tokens, a conversion that takes the same two ports as the multiplies and adds; now
/// it is paid once per batch. Widening is exact and the f32 tiles do the f16 tiles' products
/// and sums, so the bits are the same. Returns false, having written nothing, for other
/// dtypes, fewer tokens or a scratch of fewer than 4 rows (then the f16 tiles run).
#[target_feature(enable = "avx512f,avx512bw")]
fn f16_prefill_widened(d: &Avx512, out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], acc: bool, scratch: &mut [f32]) -> bool {
    let (MatrixData::F16(data), rows, cols) = (w.data, w.rows, w.cols) else { return false };
    if rows == 0 || cols == 0 {
        return false;
    }
    let tokens = (x.len() / cols).min(out.len() / rows);
    // a block of rows: as many as the scratch holds, at most 256 KiB of f32 (stays in L2)
    let block_rows = (scratch.len() / cols).min(256 * 1024 / (4 * cols)).min(rows);
    let (Some(data), Some(x)) = (data.get(..rows * cols), x.get(..tokens * cols)) else { return false };
    if tokens < F16_WIDEN_MIN_TOKENS || block_rows < 4 {
        return false;
    }
    for (b, src) in data.chunks(block_rows * cols).enumerate() {
        let n = src.len() / cols;
        let Some(wide) = scratch.get_mut(..src.len()) else { return false };
        let (dst16, dst_rest) = wide.as_chunks_mut::<LANES>();
        let (src16, src_rest) = src.as_chunks::<LANES>();
        for (dc, sc) in dst16.iter_mut().zip(src16) {
            // SAFETY: sc holds 16 f16 and dc 16 f32 (AVX-512F: this function's feature).
            unsafe { _mm512_storeu_ps(dc.as_mut_ptr(), f16::load16(sc.as_ptr())) };
        }
        dst_rest.iter_mut().zip(src_rest).for_each(|(dv, sv)| *dv = sv.to_f32());
        let dense = super::Dense { data: &*wide, rows: n, cols, tokens, block4: true };
        let row0 = b * block_rows;
        let mut store = |t: usize, o: usize, y: f32| super::store_out(out, rows, bias, acc, t, row0 + o, y);
        dense.run(x, &mut store, |w, x| d.f32(w, x), |w, x| d.f32_4rows(w, x), |w, x| d.f32_4x4(w, x));
    }
    true
}

// SAFETY (every method): an Avx2 exists only when the CPU has AVX2 and F16C.
impl Dots for Avx2 {
    // every f32/f16 call takes dense_prefill_avx2 or dense_decode_avx2 (this is for the q8/q4
    // shapes the AVX2 kernel declines, the portable loop with these dots)
    const BLOCK4: bool = false;
    #[inline(always)]
    fn f32(&self, w: &[f32], x: &[f32]) -> f32 {
        unsafe { dot_avx2(w, x) }
    }
    #[inline(always)]
    fn f16(&self, w: &[f16], x: &[f32]) -> f32 {
        unsafe { dot_avx2(w, x) }
    }
    #[inline(always)]
    fn i8(&self, a: &[i8], b: &[i8]) -> i32 {
        super::dot_i8(a, b)
    }
}

// SAFETY (every method): an Avx512 exists only when the CPU has AVX-512F/BW.
impl Dots for Avx512 {
    const BLOCK4: bool = true;
    #[inline(always)]
    fn f32(&self, w: &[f32], x: &[f32]) -> f32 {
        unsafe { dot_avx512(w, x) }
    }
    #[inline(always)]
    fn f16(&self, w: &[f16], x: &[f32]) -> f32 {
        unsafe { dot_avx512(w, x) }
    }
    #[inline(always)]
    fn i8(&self, a: &[i8], b: &[i8]) -> i32 {
        unsafe { dot_i8_avx512(a, b) }
    }
    #[inline(always)]
    fn f32_4rows(&self, w: [&[f32]; 4], x: &[f32]) -> [f32; 4] {
        unsafe { dot4_rows_avx512(w, x) }
    }
    #[inline(always)]
    fn f16_4rows(&self, w: [&[f16]; 4], x: &[f32]) -> [f32; 4] {
        unsafe { dot4_rows_avx512(w, x) }
    }
    #[inline(always)]
    fn f32_4x4(&self, w: [&[f32]; 4], x: [&[f32]; 4]) -> [[f32; 4]; 4] {
        unsafe { dot4x4_avx512(w, x) }
    }
    #[inline(always)]
    fn f16_4x4(&self, w: [&[f16]; 4], x: [&[f32]; 4]) -> [[f32; 4]; 4] {
        unsafe { dot4x4_avx512(w, x) }
    }
}

/// An element the AVX-512 kernels read (weights, KV cache): f32 as is, f16 and i8 widened
/// (exactly, so the products are the portable ones).
trait Weight: KvElem {
    /// 16 elements as f32.
    ///
    /// # Safety
    /// `p` must be readable for 16 elements and the CPU must have AVX-512F.
    unsafe fn load16(p: *const Self) -> __m512;
    /// 8 elements as f32 (the AVX2 kernels).
    ///
    /// # Safety
    /// `p` must be readable for 8 elements and the CPU must have AVX2 and F16C.
    unsafe fn load8(p: *const Self) -> __m256;
    /// The first `n < 8` of 8 elements as f32, the other lanes 0.0; reads only those `n`.
    ///
    /// # Safety
    /// `p` must be readable for `n` elements and the CPU must have AVX2 and F16C.
    #[inline(always)]
    unsafe fn load_part8(p: *const Self, n: usize) -> __m256 {
        let mut v = [0.0f32; 8];
        for (i, v) in v.iter_mut().enumerate().take(n) {
            // SAFETY: i < n.
            *v = unsafe { *p.add(i) }.widen();
        }
        // SAFETY: v is [f32; 8] (AVX: the caller's contract).
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    }
}

impl Weight for f32 {
    #[inline(always)]
    unsafe fn load16(p: *const Self) -> __m512 {
        // SAFETY: the caller guarantees 64 readable bytes and AVX-512F.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> __m256 {
        // SAFETY: the caller guarantees 32 readable bytes and AVX2.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load_part8(p: *const Self, n: usize) -> __m256 {
        // SAFETY: the masked load reads the first n floats only (the caller's range; AVX).
        unsafe { _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))) }
    }
}

impl Weight for f16 {
    #[inline(always)]
    unsafe fn load16(p: *const Self) -> __m512 {
        // SAFETY: the caller guarantees 32 readable bytes and AVX-512F.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> __m256 {
        // SAFETY: the caller guarantees 16 readable bytes and F16C.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn load_part8(p: *const Self, n: usize) -> __m256 {
        // SAFETY: the masked load reads the pairs below n / 2 only, the scalar read element
        // n - 1 (the caller's range); AVX2 and F16C (the caller's contract).
        unsafe {
            // the first n / 2 pairs by a masked dword load, an odd last one by itself
            let pairs = _mm_cmpgt_epi32(_mm_set1_epi32((n / 2) as i32), _mm_setr_epi32(0, 1, 2, 3));
            let mut v = _mm_maskload_epi32(p.cast(), pairs);
            if n % 2 == 1 {
                let last = i32::from(p.add(n - 1).cast::<u16>().read_unaligned());
                // the half at n - 1 = 2 · (n / 2): the low half of dword n / 2
                let lane = _mm_cmpeq_epi32(_mm_set1_epi32((n / 2) as i32), _mm_setr_epi32(0, 1, 2, 3));
                v = _mm_or_si128(v, _mm_and_si128(lane, _mm_set1_epi32(last)));
            }
            _mm256_cvtph_ps(v)
        }
    }
}

impl Weight for i8 {
    #[inline(always)]
    unsafe fn load16(p: *const Self) -> __m512 {
        // SAFETY: the caller guarantees 16 readable bytes and AVX-512F.
        unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast()))) }
    }
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> __m256 {
        // SAFETY: the caller guarantees 8 readable bytes and AVX2.
        unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.cast()))) }
    }
}

/// Finishes like the portable kernel: the remainder is added lane by lane, then the same
/// fixed reduction tree.
#[inline(always)]
fn finish<W: Weight>(mut lanes: [f32; LANES], rw: &[W], rx: &[f32]) -> f32 {
    for ((s, &w), &x) in lanes.iter_mut().zip(rw).zip(rx) {
        *s += w.widen() * x;
    }
    reduce(lanes)
}

/// Spills a vector of 16 lane sums and finishes it.
#[inline(always)]
fn finish_vec<W: Weight>(acc: __m512, rw: &[W], rx: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    // SAFETY: lanes is [f32; 16]: 64 writable bytes (AVX-512F: only called from its kernels).
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    finish(lanes, rw, rx)
}

/// [`super::dot_f32`] / [`super::dot_f16`] with one 16-lane AVX-512 register (lane i sums
/// elements i, i+16, …, exactly as the portable code does; mul then add, no FMA).
#[target_feature(enable = "avx512f")]
fn dot_avx512<W: Weight>(w: &[W], x: &[f32]) -> f32 {
    let n = w.len().min(x.len());
    let (cw, rw) = w.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let (cx, rx) = x.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let mut acc = _mm512_setzero_ps();
    for (wc, xc) in cw.iter().zip(cx) {
        // SAFETY: wc and xc hold 16 elements each.
        let (vw, vx) = unsafe { (W::load16(wc.as_ptr()), _mm512_loadu_ps(xc.as_ptr())) };
        acc = _mm512_add_ps(acc, _mm512_mul_ps(vw, vx));
    }
    finish_vec(acc, rw, rx)
}

/// Sixteen [`dot_avx512`]s, four weight rows × four tokens (`[row][token]`): each weight and
/// activation load feeds four products (prefill). Each result is bit-identical to the single dot.
#[target_feature(enable = "avx512f")]
fn dot4x4_avx512<W: Weight>(ws: [&[W]; 4], xs: [&[f32]; 4]) -> [[f32; 4]; 4] {
    let n = ws.iter().map(|r| r.len()).chain(xs.iter().map(|r| r.len())).min().unwrap_or(0);
    let chunks = n / LANES;
    let wp = ws.map(|r| r.as_ptr());
    let xp = xs.map(|r| r.as_ptr());
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    for i in 0..chunks {
        // SAFETY: i < n / 16 and every row holds at least n elements, so elements
        // 16i..16i+16 of each are readable.
        let vx = xp.map(|p| unsafe { _mm512_loadu_ps(p.add(LANES * i)) });
        for (a, p) in acc.iter_mut().zip(wp) {
            // SAFETY: as above.
            let vw = unsafe { W::load16(p.add(LANES * i)) };
            for (a, &vx) in a.iter_mut().zip(&vx) {
                *a = _mm512_add_ps(*a, _mm512_mul_ps(vw, vx));
            }
        }
    }
    let mut out = [[0.0f32; 4]; 4];
    for ((o, a), w) in out.iter_mut().zip(acc).zip(ws) {
        let rw = w.get(chunks * LANES..n).unwrap_or(&[]);
        for ((o, a), x) in o.iter_mut().zip(a).zip(xs) {
            *o = finish_vec(a, rw, x.get(chunks * LANES..n).unwrap_or(&[]));
        }
    }
    out
}

/// Four [`dot_avx512`]s of four weight rows against one token: four accumulator chains in
/// flight (decode). Each result is bit-identical to the single dot.
#[target_feature(enable = "avx512f")]
fn dot4_rows_avx512<W: Weight>(ws: [&[W]; 4], x: &[f32]) -> [f32; 4] {
    let n = ws.iter().fold(x.len(), |n, r| n.min(r.len()));
    let wc = ws.map(|r| r.get(..n).unwrap_or(&[]).as_chunks::<LANES>());
    let (xc, rx) = x.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let mut acc = [_mm512_setzero_ps(); 4];
    for (i, xc) in xc.iter().enumerate() {
        // SAFETY: xc is [f32; 16].
        let vx = unsafe { _mm512_loadu_ps(xc.as_ptr()) };
        for (a, (w, _)) in acc.iter_mut().zip(&wc) {
            if let Some(w) = w.get(i) {
                // decode streams the weights once: ask for them ahead (see PREFETCH_BYTES)
                _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().cast::<u8>().wrapping_add(PREFETCH_BYTES).cast());
                // SAFETY: w holds 16 weights.
                let vw = unsafe { W::load16(w.as_ptr()) };
                *a = _mm512_add_ps(*a, _mm512_mul_ps(vw, vx));
            }
        }
    }
    let mut out = [0.0f32; 4];
    for ((o, a), (_, rw)) in out.iter_mut().zip(acc).zip(&wc) {
        *o = finish_vec(a, rw, rx);
    }
    out
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

/// [`super::dot_f32`] / [`super::dot_f16`] with two 8-lane AVX registers (lanes 0–7 and
/// 8–15): the chunks of 16, then the last `n % 16` products in the lanes below it (read by masked
/// loads; the other lanes add 0 · 0 = +0.0, which leaves them as they were: a lane that starts at
/// +0.0 and adds products is never -0.0), then the tree of `reduce` in vectors.
#[target_feature(enable = "avx2,f16c")]
fn dot_avx2<W: Weight>(a: &[W], b: &[f32]) -> f32 {
    dot_ahead_avx2::<W, false>(a, b)
}

/// [`dot_avx2`]; AHEAD: each chunk of `a` also asks for the bytes [`DECODE_AHEAD`] past it
/// (decode on the CPUs [`decode_prefetch`] picks). A prefetch changes no arithmetic.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn dot_ahead_avx2<W: Weight, const AHEAD: bool>(a: &[W], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (ca, ra) = a.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let (cb, rb) = b.get(..n).unwrap_or(&[]).as_chunks::<LANES>();
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for (x, y) in ca.iter().zip(cb) {
        if AHEAD {
            _mm_prefetch::<_MM_HINT_T0>(x.as_ptr().cast::<u8>().wrapping_add(DECODE_AHEAD).cast());
        }
        // SAFETY: x and y hold 16 elements; the loads read elements 0–7 and 8–15.
        unsafe {
            lo = _mm256_add_ps(lo, _mm256_mul_ps(W::load8(x.as_ptr()), _mm256_loadu_ps(y.as_ptr())));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(W::load8(x.as_ptr().add(8)), _mm256_loadu_ps(y.as_ptr().add(8))));
        }
    }
    let rem = ra.len().min(rb.len());
    if rem > 0 {
        let (pa, pb) = (ra.as_ptr(), rb.as_ptr());
        // SAFETY: ra and rb hold rem elements; the loads read those only.
        unsafe {
            lo = _mm256_add_ps(lo, _mm256_mul_ps(load_upto8(pa, rem), load_upto8(pb, rem)));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(load_upto8(pa.wrapping_add(8), rem.saturating_sub(8)), load_upto8(pb.wrapping_add(8), rem.saturating_sub(8))));
        }
    }
    reduce_avx2(lo, hi)
}

/// f32 / f16 decode (one token) on AVX2: one weight row after the other, each a [`dot_avx2`],
/// the rows taken from one or more places in the matrix in turn ([`for_fronts`]: f16 four on
/// AMD).
/// Decode streams every weight once, and on Zen 3 (2 MiB pages) one sequential stream reads at
/// twice the rate of four rows read side by side (measured: 30 vs 17.5 GB/s for 3 KiB rows,
/// thread CPU time): the hardware prefetcher follows streams close together badly, and streams
/// far apart well. Two accumulator chains per row are enough to keep up with memory. Whether
/// each chunk also asks for the bytes 2 KiB ahead depends on the CPU and the dtype
/// ([`decode_prefetch`]).
/// Returns false, having written nothing, for other dtypes or batches.
#[target_feature(enable = "avx2,f16c")]
fn dense_decode_avx2(out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], acc: bool) -> bool {
    let (rows, cols) = (w.rows, w.cols);
    if rows == 0 || cols == 0 || x.len() / cols != 1 || out.len() < rows {
        return false;
    }
    let x = x.get(..cols).unwrap_or(&[]);
    let mut out = Outputs { out, rows, bias, accumulate: acc };
    match w.data {
        MatrixData::F32(data) => decode_rows_avx2(data, cols, x, &mut out, decode_fronts(true)),
        MatrixData::F16(data) => decode_rows_avx2(data, cols, x, &mut out, decode_fronts(false)),
        MatrixData::Q8 { .. } | MatrixData::Q4 { .. } => return false,
    }
    true
}

/// [`dense_decode_avx2`]'s row loop: `out.rows` rows of `cols` weights against `x`, each a
/// [`dot_ahead_avx2`] with the prefetch where [`decode_prefetch`] wants it, from `fronts`
/// places at once ([`for_fronts`]).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn decode_rows_avx2<W: Weight>(data: &[W], cols: usize, x: &[f32], out: &mut Outputs<'_>, fronts: usize) {
    let rows = out.rows.min(data.len() / cols.max(1));
    let ahead = decode_prefetch(core::mem::size_of::<W>() == 4);
    for_fronts(fronts, rows, rows * cols * core::mem::size_of::<W>(), |o| {
        let r = data.get(o * cols..(o + 1) * cols).unwrap_or(&[]);
        let y = if ahead { dot_ahead_avx2::<W, true>(r, x) } else { dot_ahead_avx2::<W, false>(r, x) };
        out.one(0, o, y);
    });
}

/// Visits rows 0..`rows` (`bytes` in all) from `fronts` places in the matrix at once: the rows
/// split into that many contiguous parts (fewer when a part would be under [`FRONT_MIN_BYTES`]),
/// and one row of each part in turn. Each row is computed as it would be alone, so the order
/// changes no bits. Why: one Zen 3 core reads memory faster from several places far apart, a
/// row (0.5-3 KiB) of each in turn, than from one, and much slower from places close together
/// read a few bytes of each in turn, as rows side by side are (`cargo run --release -p
/// kernel-benches --bin read-streams`: one place 23.8-24.6 GB/s, three 28.4-29.9; two places
/// 768 B apart, 32 B of each in turn, 7.6-7.9; BENCHMARKS.md run 20). f16 decode gains most
/// (GPT-2 124M, one thread: 70-77 -> 86-97 tok/s from four places).
#[inline(always)]
fn for_fronts(fronts: usize, rows: usize, bytes: usize, mut f: impl FnMut(usize)) {
    let k = fronts.min(bytes / FRONT_MIN_BYTES).clamp(1, rows.max(1));
    let part = rows.div_ceil(k);
    for i in 0..part {
        for front in 0..k {
            let o = front * part + i;
            if o < rows {
                f(o);
            }
        }
    }
}

/// The smallest part of a matrix [`for_fronts`] gives a place of its own: each place is a stream
/// the prefetcher has to pick up, so tiny matrices stay whole, while every GPT-2 f16 matrix (the
/// smallest, 768 × 768, is 1.2 MB) is cut in four.
const FRONT_MIN_BYTES: usize = 64 << 10;

/// From how many places at once AVX2 decode reads an f32 (`f32_rows`) or f16 matrix
/// ([`for_fronts`]): the CPU table's `dense_fronts` (AMD: f32 1, f16 4; Intel 1), which
/// `GPT2_MCU_DECODE_FRONTS` overrides (`cpu::decode_overrides`).
pub(super) fn decode_fronts(f32_rows: bool) -> usize {
    let [f32, f16] = cpu::chosen().choice.dense_fronts;
    usize::from(if f32_rows { f32 } else { f16 })
}

/// How far ahead of its reads AVX2 decode asks for the f32/f16/q8 weights, where it does
/// ([`decode_prefetch`]). On Sapphire Rapids (AVX2 path, GPT-2 124M, `host bench --prompt-len
/// 1 -n 64`): f32 1-4 KiB all stream at the probe's rate, f16 is best at 1-2 KiB (4 KiB: 8%
/// slower), q8 at 1-2 KiB (4 KiB: 9% slower, 8 KiB as prefill asks: 20%). q4 keeps its 8 KiB
/// ([`PREFETCH_BYTES`]; 2-4 KiB were slower here too).
const DECODE_AHEAD: usize = 2048;

/// Whether AVX2 decode asks for its weights [`DECODE_AHEAD`] bytes ahead with software
/// prefetches: `f32_rows` for f32 rows, else for f16 rows and q8 blocks. The memory systems
/// disagree, and per dtype (`host bench --prompt-len 1 -n 64`, GPT-2 124M, three interleaved
/// rounds each, BENCHMARKS.md):
/// - Intel's Golden Cove (a Sapphire Rapids on its AVX2 path, the P-core of the AVX2-only
///   Alder/Raptor Lake desktops) wants it for all three: f32 23.9 -> 33.1 tok/s, f16 48.9 ->
///   58, q8 89.5 -> 111.
/// - AMD's Zen 3 (EPYC, family 25 model 1) wants it for f16 and q8 (46-48 -> 49-54 tok/s,
///   72-83 -> 93-100) and not for f32 rows, which its hardware prefetcher streams faster alone
///   (26-31 -> 22-23 with it).
///
/// So: f32 rows on Intel only, f16 and q8 everywhere: the CPU table's `decode_prefetch`, which
/// `GPT2_MCU_DECODE_PREFETCH=1` or `=0` sets all either way (`cpu::decode_overrides`, to
/// measure both on one CPU).
pub(super) fn decode_prefetch(f32_rows: bool) -> bool {
    let [f32, narrow] = cpu::chosen().choice.decode_prefetch;
    if f32_rows { f32 } else { narrow }
}

// ---- f32 / f16 prefill with AVX2 -------------------------------------------------------------
//
// Each output is [`super::dot_f32`] (f16: [`super::dot_f16`]): lane i of 16 adds the products
// of elements i, i + 16, … in order, then the fixed tree, whose first step adds lane i + 8 to
// lane i. Until that step, lanes 0–7 (the "low half": elements 16j..16j+8) and lanes 8–15 (the
// high half) are two independent 8-lane dot products, so a tile runs one half over its k-block
// and then the other: an output takes one register in each pass instead of two. AVX2 has 16
// vector registers, so a tile holds 6 weight rows × 2 tokens: 12 accumulators, two activation
// vectors, the weight vector and the product. Per 8 columns that is 8 loads, 12 multiplies and
// 12 adds: 32 micro-ops per 96 multiply-adds, where 3 × 2 tiles over both halves at once took
// 34 (10 loads); and each pair of activation rows read from L2 serves 6 weight rows instead of
// 3, half the L2 traffic per multiply-add (Zen 3's four FP pipes need it at 2 × 32 bytes per
// 3 cycles with 3-row tiles, near what its L2 delivers).
//
// Loop order: a block of up to 64 tokens' activations sits in L2; for each group of 6 weight
// rows and each k-block, the rows' k-block is packed into an aligned buffer in L1 (f32 copied,
// f16 widened, exactly, so the tiles are the f32 ones; see `DenseJob::pack`) while the block's
// tokens pass over it in pairs. Rows wider than 768 columns are cut into k-blocks of whole 16-column chunks; each
// output's two halves go to `buf` between k-blocks and go on where they stopped, so every lane
// adds the same products in the same order as in one pass.

/// Weight rows × tokens of an AVX2 prefill tile.
const TILE_ROWS: usize = 6;
const TILE_TOKENS: usize = 2;
/// 16-column chunks per k-block (768 columns: six f32 rows take 18 KiB of L1, two tokens 6).
const K_CHUNKS: usize = 48;
/// Tokens per block of activations (at most 256 KiB of them, so they stay in L2).
const BLOCK_TOKENS: usize = 64;

/// A full tile's lane sums between k-blocks, as [`half_sums_avx2`] keeps them: `[half][row][token]`
/// (half 0: lanes 0–7, half 1: lanes 8–15), so that a tile reads and writes its own in place.
type Carry = [[[__m256; TILE_TOKENS]; TILE_ROWS]; 2];

/// f32 values a chunk of 16 columns of a group of rows takes in the packed weights a tile
/// reads ([`DenseJob::pack`]): the rows' lanes 0–7, one row after the other, then their lanes
/// 8–15.
const PACKED_CHUNK: usize = TILE_ROWS * LANES;

/// One half's 8-lane sums of R weight rows × T tokens `[row][token]`, written to `sums`, carried
/// on from `carried` (from zeros where it is null) over `chunks` chunks of 16 columns: for each
/// chunk i in order, lane j adds `w_r[16i + j] · x_t[16i + j]` (a multiply, then an add:
/// [`dot_avx2`]'s products in its order). `w` points at the half's first row in the packed
/// weights (row r's 8 values of chunk i at `w + r · 8 + i · PACKED_CHUNK`), `x[t]` at the half's
/// first lane (0 or 8) of the token's first chunk.
///
/// Out of line: inlined into the tile, LLVM's register allocation of the 16 vector registers
/// the loop needs (12 sums, 2 tokens' values, a weight, a product) came out differently from
/// one version of the tile to the next, once with sums spilled to the stack inside the loop
/// (30 → 23 G MAC/s); alone, the loop is the same every time, and a call per 48 chunks costs
/// nothing.
///
/// # Safety
/// `sums` must be writable and `carried` null or readable (they may be the same place), `w`
/// readable for `PACKED_CHUNK · (chunks - 1) + 8 · R` floats and every `x[t]` for
/// `16 · chunks - 8`; AVX2.
#[inline(never)]
#[target_feature(enable = "avx2")]
unsafe fn half_sums_avx2<const R: usize, const T: usize>(sums: *mut [[__m256; T]; R], carried: *const [[__m256; T]; R], w: *const f32, x: [*const f32; T], chunks: usize) {
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    if !carried.is_null() {
        // SAFETY: the caller's contract (carried is readable); read before sums is written (they
        // may be the same place).
        acc = unsafe { carried.read() };
    }
    let (mut w, mut x) = (w, x);
    let mut step = |w: *const f32, x: &[*const f32; T]| {
        // SAFETY: chunk i's values: inside the caller's ranges.
        let xv = x.map(|p| unsafe { _mm256_loadu_ps(p) });
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let wv = unsafe { _mm256_loadu_ps(w.add(8 * r)) };
            for (a, &xv) in a.iter_mut().zip(&xv) {
                *a = _mm256_add_ps(*a, _mm256_mul_ps(wv, xv));
            }
        }
    };
    // two chunks an iteration (the loop's own instructions take dispatch slots), the pointers
    // stepped (no index arithmetic in the loop)
    for _ in 0..chunks / 2 {
        step(w, &x);
        // SAFETY: the next chunk is inside the caller's ranges (wrapping_add past the last one).
        step(w.wrapping_add(PACKED_CHUNK), &x.map(|p| p.wrapping_add(LANES)));
        w = w.wrapping_add(2 * PACKED_CHUNK);
        x = x.map(|p| p.wrapping_add(2 * LANES));
    }
    if chunks % 2 == 1 {
        step(w, &x);
    }
    // SAFETY: the caller's contract (sums is writable).
    unsafe { sums.write(acc) };
}

/// Steps 2–4 of [`super::reduce`]'s tree (lanes i + i+4, i + i+2, i + i+1) for eight sums side
/// by side: `a8[p]` holds step 1 (lane i + lane i+8) of sum p, and lane p of the result is the
/// sum (each lane adds what [`reduce_avx2`] adds, in its order: the same bits).
#[inline]
#[target_feature(enable = "avx2")]
fn trees8_avx2(a8: &[__m256; 8]) -> __m256 {
    // step 2 (i + i+4): sums p, p+1 in the two 128-bit halves
    let mut a4 = [_mm256_setzero_ps(); 4];
    for (a, &[x, y]) in a4.iter_mut().zip(a8.as_chunks::<2>().0) {
        *a = _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(x, y), _mm256_permute2f128_ps::<0x31>(x, y));
    }
    // step 3 (i + i+2): per half, [x0+x2, x1+x3] of one sum, then of another
    let mut a2 = [_mm256_setzero_ps(); 2];
    for (a, &[x, y]) in a2.iter_mut().zip(a4.as_chunks::<2>().0) {
        *a = _mm256_add_ps(_mm256_shuffle_ps::<0x44>(x, y), _mm256_shuffle_ps::<0xEE>(x, y));
    }
    // step 4 (i + i+1): element j of half h holds sum (h + 2·(j % 2) + 4·(j / 2))
    let a1 = _mm256_add_ps(_mm256_shuffle_ps::<0x88>(a2[0], a2[1]), _mm256_shuffle_ps::<0xDD>(a2[0], a2[1]));
    _mm256_permutevar8x32_ps(a1, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// [`super::reduce`] of the 16 lanes in `lo` (0–7) and `hi` (8–15): lanes i + i+8, then
/// i + i+4, i + i+2, i + i+1 (the same tree, the same bits).
#[inline]
#[target_feature(enable = "avx2")]
fn reduce_avx2(lo: __m256, hi: __m256) -> f32 {
    let a8 = _mm256_add_ps(lo, hi);
    let a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps::<1>(a8));
    let a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    let a1 = _mm_add_ss(a2, _mm_shuffle_ps::<1>(a2, a2));
    _mm_cvtss_f32(a1)
}

/// [`reduce_avx2`] of 8 rows at once: `v[r]` is row r's `lo + hi` (that first step done by the
/// caller). Each row's lanes take the same additions in the same order (lane i plus lane i+4,
/// then plus i+2, then plus i+1), across the rows' vectors instead of within one: 8 rows' sums in 16 vector
/// operations instead of about 56, and no chain of dependent shuffles per row. A decoded token's
/// rows of 9 groups (stories15M's 288 columns) spent a third of their time in `reduce_avx2`.
#[inline]
#[target_feature(enable = "avx2")]
fn reduce8_avx2(v: &[__m256; 8]) -> [f32; 8] {
    // rows r, r+1: [row r's lanes 0-3 + 4-7 | row r+1's]
    let half = |a: __m256, b: __m256| _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b));
    let (x01, x23, x45, x67) = (half(v[0], v[1]), half(v[2], v[3]), half(v[4], v[5]), half(v[6], v[7]));
    // [r lane 0+2, r lane 1+3, r+2 lane 0+2, r+2 lane 1+3 | the same for r+1, r+3]
    let pairs = |a: __m256, b: __m256| _mm256_add_ps(_mm256_shuffle_ps::<0x44>(a, b), _mm256_shuffle_ps::<0xEE>(a, b));
    let (y0, y4) = (pairs(x01, x23), pairs(x45, x67));
    // [rows 0, 2, 4, 6 | 1, 3, 5, 7]: (lane 0+2) + (lane 1+3)
    let z = _mm256_add_ps(_mm256_shuffle_ps::<0x88>(y0, y4), _mm256_shuffle_ps::<0xDD>(y0, y4));
    let mut lanes = [0.0f32; 8];
    // SAFETY: lanes holds 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), z) };
    [lanes[0], lanes[4], lanes[1], lanes[5], lanes[2], lanes[6], lanes[3], lanes[7]]
}

/// All ones in lane `lane` (< 8), zeros elsewhere: a term broadcast and masked with it is the
/// term there and +0.0 in the other lanes (built in registers: a vector stored lane by lane and
/// loaded whole stalls on store forwarding).
#[inline]
#[target_feature(enable = "avx2")]
fn lane_mask(lane: usize) -> __m256 {
    _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_set1_epi32(lane as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)))
}

/// The float terms of group g for 8 rows, lane r = row r: from `isum` (lane r: row r's exact
/// integer group sum), `cvt(sum) · (scale · sx)`, each row's scale gathered from `wsc` at
/// `rows[r] · gpr + g`.
///
/// # Safety
/// `wsc` must hold the scales of `rows` (g < gpr); AVX2 (called from the AVX2 kernels, into
/// which it is always inlined: no `#[target_feature]`, which would forbid that).
#[inline(always)]
unsafe fn tail8_terms(isum: __m256i, wsc: *const f32, rows: [usize; 8], gpr: usize, g: usize, sx: f32) -> __m256 {
    // SAFETY: the caller's contract: AVX2, and every gathered index is a row's scale of group g.
    unsafe {
        let at = rows.map(|r| (r * gpr + g) as i32);
        let sw = _mm256_i32gather_ps::<4>(wsc, _mm256_loadu_si256(at.as_ptr().cast()));
        _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sw, _mm256_set1_ps(sx)))
    }
}

/// Decode's end of 8 whole rows at once, with their tail groups added in the transposed
/// accumulators: `lo[r]` / `hi[r]` are row r's block accumulators (lanes 0-7 / 8-15 of its
/// 16-lane sums), `tails` the float terms of its groups `full..gpr` (lane r = row r, from
/// [`tail8_terms`]). Lane r of the result is row r's sum: each lane does what the portable
/// kernel does to that row, in the same order (a tail term added to lane g % 16 of its 16
/// lanes, then [`reduce8_avx2`]'s lanes i + i+8, i + i+4, i + i+2, i + i+1), so the same bits;
/// the transposes move values without arithmetic. In place of 8 broadcasts, masks and adds a
/// tail group and row, one add per tail group for the 8 rows.
#[inline]
#[target_feature(enable = "avx2")]
fn rows8_end(lo: [__m256; 8], hi: Option<[__m256; 8]>, tails: impl Iterator<Item = (usize, __m256)>) -> __m256 {
    let t = |v: [__m256; 8]| transpose8x32(v.map(|x| _mm256_castps_si256(x))).map(|x| _mm256_castsi256_ps(x));
    // l[j], h[j]: lane r holds row r's lane j (h: +0.0 where the rows have no odd blocks)
    let mut l = t(lo);
    let mut h = hi.map_or([_mm256_setzero_ps(); 8], t);
    for (g, term) in tails {
        let acc = if (g / AVX2_BLOCK) % 2 == 1 { &mut h } else { &mut l };
        if let Some(a) = acc.get_mut(g % AVX2_BLOCK) {
            *a = _mm256_add_ps(*a, term);
        }
    }
    let [v0, v1, v2, v3, v4, v5, v6, v7] = core::array::from_fn(|j| match (l.get(j), h.get(j)) {
        (Some(&a), Some(&b)) => _mm256_add_ps(a, b),
        _ => _mm256_setzero_ps(),
    });
    let (w0, w1, w2, w3) = (_mm256_add_ps(v0, v4), _mm256_add_ps(v1, v5), _mm256_add_ps(v2, v6), _mm256_add_ps(v3, v7));
    _mm256_add_ps(_mm256_add_ps(w0, w2), _mm256_add_ps(w1, w3))
}

/// Up to 8 decoded rows' `lo + hi`, waiting for [`reduce8_avx2`].
struct Pending8 {
    v: [__m256; 8],
    /// The first row's index and how many are held.
    first: usize,
    n: usize,
}

impl Pending8 {
    #[inline]
    #[target_feature(enable = "avx2")]
    fn new() -> Self {
        Self { v: [_mm256_setzero_ps(); 8], first: 0, n: 0 }
    }

    /// Holds row o's sums (rows come in order); at 8 rows, reduces and stores them.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn push(&mut self, o: usize, lo: __m256, hi: __m256, t: usize, store: &mut impl FnMut(usize, usize, f32)) {
        if self.n == 0 {
            self.first = o;
        }
        if let Some(v) = self.v.get_mut(self.n) {
            *v = _mm256_add_ps(lo, hi);
        }
        self.n += 1;
        if self.n == 8 {
            self.flush(t, store);
        }
    }

    /// Reduces and stores the rows held (the unused lanes' rows are zeros, not stored).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn flush(&mut self, t: usize, store: &mut impl FnMut(usize, usize, f32)) {
        if self.n == 0 {
            return;
        }
        for v in self.v.iter_mut().skip(self.n) {
            *v = _mm256_setzero_ps();
        }
        let y = reduce8_avx2(&self.v);
        for (r, &y) in y.iter().enumerate().take(self.n) {
            store(t, self.first + r, y);
        }
        self.n = 0;
    }
}

/// The AVX2 prefill tiles' stores.
impl Outputs<'_> {
    /// Outputs (t, o..o+n) from lanes 0..n of `y` (n ≤ 8), in vectors: lane for lane what
    /// [`Outputs::one`] does (y + bias, then out + that), the same bits. Falls back to `one` where
    /// the rows, the outputs or the bias do not hold all n.
    ///
    /// The bias and the outputs are read with masked loads, but the n lanes are stored as 4 + 2 +
    /// 1 (no masked store: on Zen 3 `vmaskmovps` to memory is microcoded and cost this kernel 4%
    /// of its time), and the fallback is out of line so that this is small enough to inline into
    /// the tile. Always inlined (which `#[target_feature]` does not allow, hence no attribute and
    /// the unsafe): LLVM left it a call, 2-4% of the time.
    ///
    /// # Safety
    /// AVX2 (the intrinsics inline into the AVX2 caller).
    #[inline(always)]
    unsafe fn lanes(&mut self, t: usize, o: usize, n: usize, y: __m256) {
        let at = t * self.rows + o;
        let bias_ok = self.bias.is_empty() || self.bias.len() >= o + n;
        if n > 8 || o + n > self.rows || at + n > self.out.len() || !bias_ok {
            // SAFETY: AVX2 (the caller's contract).
            unsafe { self.lanes_one_by_one(t, o, n, y) };
            return;
        }
        // SAFETY: AVX2 (the caller's contract); out[at..at+n] and, with a bias, bias[o..o+n] exist
        // (checked); the masked loads read lanes below n only, and the stores write lanes below n
        // only.
        unsafe {
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            let b = if self.bias.is_empty() { _mm256_setzero_ps() } else { _mm256_maskload_ps(self.bias.as_ptr().add(o), mask) };
            let mut p = self.out.as_mut_ptr().add(at);
            let mut v = _mm256_add_ps(y, b);
            if self.accumulate {
                v = _mm256_add_ps(_mm256_maskload_ps(p, mask), v);
            }
            if n == 8 {
                _mm256_storeu_ps(p, v);
                return;
            }
            // n < 8 as 4 + 2 + 1
            let (mut part, mut left) = (_mm256_castps256_ps128(v), n);
            if left >= 4 {
                _mm_storeu_ps(p, part);
                (part, p, left) = (_mm256_extractf128_ps::<1>(v), p.add(4), left - 4);
            }
            if left >= 2 {
                _mm_store_sd(p.cast(), _mm_castps_pd(part));
                (part, p, left) = (_mm_movehl_ps(part, part), p.add(2), left - 2);
            }
            if left == 1 {
                _mm_store_ss(p, part);
            }
        }
    }

    /// [`Self::lanes`]' fallback: each of the n lanes through [`Outputs::one`].
    #[cold]
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    fn lanes_one_by_one(&mut self, t: usize, o: usize, n: usize, y: __m256) {
        let mut v = [0.0f32; 8];
        // SAFETY: v is [f32; 8].
        unsafe { _mm256_storeu_ps(v.as_mut_ptr(), y) };
        for (j, &y) in v.iter().enumerate().take(n) {
            self.one(t, o + j, y);
        }
    }
}

/// One f32/f16 prefill call: weights `[rows, cols]`, activations `[tokens, cols]`.
struct DenseJob<'a, W> {
    w: &'a [W],
    x: &'a [f32],
    cols: usize,
}

/// Where a tile's k-block sits: chunks `c0..c1` of `chunks`, and whether it is the first or last.
#[derive(Clone, Copy)]
struct KBlock {
    c0: usize,
    c1: usize,
    first: bool,
    last: bool,
}

/// f32 values of the packed k-block of a group of rows the tiles read ([`DenseJob::pack`]).
const PACKED_LEN: usize = K_CHUNKS * PACKED_CHUNK;

/// The packed k-block, in vectors: aligned to 32 bytes, so that no load of 8 values crosses a
/// cache line (an `[f32; N]` on the stack may sit at any multiple of 4, and half of its loads
/// would then be split).
type Packed = [__m256; PACKED_LEN / 8];

impl<W: Weight> DenseJob<'_, W> {
    /// Rows `o..o+R` (their k-block packed in `packed`) × tokens `t..t+T` over one k-block: each half's
    /// accumulators come from `buf` (entries `tb..tb+T`, row r of the tile at `[r]`) unless it
    /// is the first k-block, and go back there unless it is the last, where each output is
    /// finished as [`dot_avx2`] finishes it and stored.
    ///
    /// # Safety
    /// Rows `o..o+R` and tokens `t..t+T` must be in `w` and `x`, `packed` must hold the rows'
    /// chunks `kb.c0..kb.c1` ([`Self::pack`]), `tb + T ≤ BLOCK_TOKENS`, `R ≤ TILE_ROWS`,
    /// `kb.c1 ≤ cols / 16`; AVX2 and F16C.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn tile<const R: usize, const T: usize>(&self, packed: &Packed, o: usize, t: usize, tb: usize, kb: KBlock, buf: &mut [Carry; BLOCK_TOKENS / TILE_TOKENS], out: &mut Outputs<'_>) {
        let Self { w, x, cols } = *self;
        let zero = _mm256_setzero_ps();
        // SAFETY: tokens t..t+T exist and chunks c0..c1 are inside them (the caller's contract).
        let xp: [*const f32; T] = core::array::from_fn(|k| unsafe { x.as_ptr().add((t + k) * cols + LANES * kb.c0) });
        // Where each half's sums start and go. A full tile reads and writes its carried sums in
        // `buf` in place (same layout); an edge tile gathers and scatters them. The sums are made
        // in registers by `half_sums_avx2` (zeros in the first k-block) and written once: zeroing
        // an array first was a memset call per tile, 3-10% of the time.
        let slot: *mut Carry = buf.get_mut(tb / TILE_TOKENS).map_or(core::ptr::null_mut(), |c| c as *mut Carry);
        let direct = R == TILE_ROWS && T == TILE_TOKENS && !slot.is_null();
        let mut halves = [MaybeUninit::<[[__m256; T]; R]>::uninit(); 2];
        for (h, sums) in halves.iter_mut().enumerate() {
            // (R, T) = (TILE_ROWS, TILE_TOKENS) when direct: the same type as Carry's halves
            let own = slot.cast::<[[__m256; T]; R]>().wrapping_add(h);
            let mut gathered = MaybeUninit::<[[__m256; T]; R]>::uninit();
            let carried: *const [[__m256; T]; R] = if kb.first {
                core::ptr::null()
            } else if direct {
                own
            } else {
                // SAFETY: slot is null or points into buf.
                let c = unsafe { slot.as_ref() };
                gathered.write(core::array::from_fn(|r| core::array::from_fn(|k| c.and_then(|c| c.get(h)).and_then(|c| c.get(r)).and_then(|c| c.get(k)).copied().unwrap_or(zero))));
                gathered.as_ptr()
            };
            let dst = if direct && !kb.last { own } else { sums.as_mut_ptr() };
            // SAFETY: the caller's contract (packed and the tokens hold chunks c0..c1); carried is
            // null or readable, dst writable (own: half h of buf's entry, when direct).
            unsafe { half_sums_avx2::<R, T>(dst, carried, packed.as_ptr().cast::<f32>().add(8 * TILE_ROWS * h), xp.map(|p| p.add(8 * h)), kb.c1 - kb.c0) };
        }
        if !kb.last {
            if !direct {
                // SAFETY: half_sums_avx2 wrote both; slot is null or points into buf.
                if let (Some(c), [lo, hi]) = (unsafe { slot.as_mut() }, &halves) {
                    let (lo, hi) = unsafe { (lo.assume_init_ref(), hi.assume_init_ref()) };
                    for (h, sums) in [lo, hi].into_iter().enumerate() {
                        for (r, row) in sums.iter().enumerate() {
                            for (k, &v) in row.iter().enumerate() {
                                if let Some(d) = c.get_mut(h).and_then(|c| c.get_mut(r)).and_then(|c| c.get_mut(k)) {
                                    *d = v;
                                }
                            }
                        }
                    }
                }
            }
            return;
        }
        // (by reference: arrays of vectors moved by value are copied through memcpy)
        let [lo, hi] = &halves;
        // SAFETY: half_sums_avx2 wrote both (the last k-block's sums go to `halves`).
        let (lo, hi) = unsafe { (lo.assume_init_ref(), hi.assume_init_ref()) };
        if LANES * kb.c1 == cols && R > 1 {
            // each token's R outputs finished side by side (their trees in one pass, the
            // epilogue in vectors: one reduction and one store each cost as much as a chunk)
            for k in 0..T {
                let a8: [__m256; 8] = core::array::from_fn(|r| match (lo.get(r).and_then(|l| l.get(k)), hi.get(r).and_then(|h| h.get(k))) {
                    (Some(&l), Some(&h)) => _mm256_add_ps(l, h),
                    _ => _mm256_setzero_ps(),
                });
                // SAFETY: AVX2 (this function's).
                unsafe { out.lanes(t + k, o, R, trees8_avx2(&a8)) };
            }
            return;
        }
        for (r, (lo, hi)) in lo.iter().zip(hi).enumerate() {
            for (k, (&lo, &hi)) in lo.iter().zip(hi).enumerate() {
                let (o, t) = (o + r, t + k);
                let done = LANES * kb.c1;
                let y = if done == cols {
                    reduce_avx2(lo, hi)
                } else {
                    finish(lanes_avx2(lo, hi), w.get(o * cols + done..(o + 1) * cols).unwrap_or(&[]), x.get(t * cols + done..(t + 1) * cols).unwrap_or(&[]))
                };
                out.one(t, o, y);
            }
        }
    }

    /// Packs the k-block `kb` of rows `o..o+nr` as the tiles read it, f16 widened (exactly):
    /// chunk i's lanes 0–7 of each row, one row after the other, then its lanes 8–15, at
    /// `PACKED_CHUNK · i`. The tiles then read each half of a chunk from one run of bytes at
    /// fixed offsets from one pointer, and the group sits in L1 while the tokens pass over it.
    ///
    /// # Safety
    /// Rows `o..o+nr` must be in `w`, `nr ≤ TILE_ROWS`, `kb.c1 - kb.c0 ≤ K_CHUNKS` and
    /// `kb.c1 ≤ cols / 16`; AVX2 and F16C.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn pack(&self, o: usize, nr: usize, kb: KBlock, packed: &mut Packed) {
        let Self { w, cols, .. } = *self;
        // SAFETY: row o's chunk c0 is inside w (the caller's contract).
        let src = unsafe { w.as_ptr().add(o * cols + LANES * kb.c0) };
        for i in 0..(kb.c1 - kb.c0).min(K_CHUNKS) {
            for r in 0..nr.min(TILE_ROWS) {
                for h in 0..2 {
                    // SAFETY: row r's chunk c0 + i is inside w; PACKED_CHUNK · i + 8 · (TILE_ROWS
                    // · h + r) + 8 ≤ PACKED_LEN.
                    unsafe { _mm256_storeu_ps(packed.as_mut_ptr().cast::<f32>().add(PACKED_CHUNK * i + 8 * (TILE_ROWS * h + r)), W::load8(src.add(r * cols + LANES * i + 8 * h))) };
                }
            }
        }
    }

    /// Every output of `rows` rows × `tokens` tokens (see the section's comment for the order).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn run(&self, rows: usize, tokens: usize, out: &mut Outputs<'_>) {
        let cols = self.cols;
        if self.w.len() < rows * cols || self.x.len() < tokens * cols {
            return;
        }
        let chunks = cols / LANES;
        let nk = chunks.div_ceil(K_CHUNKS).max(1);
        let kc = chunks.div_ceil(nk); // chunks per k-block, balanced
        let block_tokens = (256 * 1024 / (4 * kc.max(1) * LANES)).clamp(TILE_TOKENS, BLOCK_TOKENS) / TILE_TOKENS * TILE_TOKENS;
        let full_rows = rows / TILE_ROWS * TILE_ROWS;
        let row_bytes = cols * core::mem::size_of::<W>();
        let mut buf: [Carry; BLOCK_TOKENS / TILE_TOKENS] = [[[[_mm256_setzero_ps(); TILE_TOKENS]; TILE_ROWS]; 2]; BLOCK_TOKENS / TILE_TOKENS];
        let mut packed: Packed = [_mm256_setzero_ps(); PACKED_LEN / 8];
        for t0 in (0..tokens).step_by(block_tokens) {
            let t1 = (t0 + block_tokens).min(tokens);
            let token_tiles = (t1 - t0).div_ceil(TILE_TOKENS);
            for o in (0..full_rows).step_by(TILE_ROWS).chain(full_rows..rows) {
                let nr = if o < full_rows { TILE_ROWS } else { 1 };
                for k in 0..nk {
                    let kb = KBlock { c0: k * kc, c1: ((k + 1) * kc).min(chunks), first: k == 0, last: k + 1 == nk };
                    // SAFETY: rows o..o+nr ≤ rows, kb.c1 - kb.c0 ≤ kc ≤ K_CHUNKS, kb.c1 ≤ chunks.
                    unsafe { self.pack(o, nr, kb, &mut packed) };
                    // the weights after this k-block of these rows (the next k-block, else the
                    // next rows' first), asked for over this block's token tiles so that they
                    // come from memory once, ahead of use
                    let (next_row, next_c0, next_c1) = if kb.last { (o + nr, 0, kc.min(chunks)) } else { (o, kb.c1, ((k + 2) * kc).min(chunks)) };
                    let next = self.w.as_ptr().cast::<u8>().wrapping_add(next_row * row_bytes + next_c0 * LANES * core::mem::size_of::<W>());
                    let seg = (next_c1 - next_c0) * LANES * core::mem::size_of::<W>(); // bytes of each row
                    // in address order, one row's segment after the other (one stream at a
                    // time: the memory system follows it better than several side by side)
                    let per_row = seg.div_ceil(64).max(1);
                    let lines = (per_row * TILE_ROWS).div_ceil(token_tiles);
                    // the next line to ask for: row r, line `line` of its segment (a cursor, not
                    // a division per line)
                    let (mut r, mut line) = (0, 0);
                    for t in (t0..t1).step_by(TILE_TOKENS) {
                        for _ in 0..lines {
                            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(r * row_bytes + 64 * line).cast());
                            line += 1;
                            if line == per_row {
                                (r, line) = (r + 1, 0);
                            }
                        }
                        let tb = t - t0;
                        // SAFETY: o + nr ≤ rows, t + (1 or 2) ≤ t1 ≤ tokens, tb + 2 ≤
                        // BLOCK_TOKENS, packed holds chunks c0..c1 ≤ cols / 16 of rows o..o+nr.
                        unsafe {
                            match (nr == TILE_ROWS, t + TILE_TOKENS <= t1) {
                                (true, true) => self.tile::<TILE_ROWS, TILE_TOKENS>(&packed, o, t, tb, kb, &mut buf, out),
                                (true, false) => self.tile::<TILE_ROWS, 1>(&packed, o, t, tb, kb, &mut buf, out),
                                (false, true) => self.tile::<1, TILE_TOKENS>(&packed, o, t, tb, kb, &mut buf, out),
                                (false, false) => self.tile::<1, 1>(&packed, o, t, tb, kb, &mut buf, out),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// f32 / f16 prefill (≥ 2 tokens) on AVX2 tiles (see the section's comment). f16 weights are
/// widened a k-block of a group of rows at a time into a buffer in L1 (`vcvtph2ps`, exact, so
/// the products are the f32 ones), once per block of tokens. Returns false, having written
/// nothing, for other dtypes or one token (decode's row loop).
#[target_feature(enable = "avx2,f16c")]
fn dense_prefill_avx2(out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], acc: bool) -> bool {
    let (rows, cols) = (w.rows, w.cols);
    if rows == 0 || cols == 0 {
        return false;
    }
    let tokens = (x.len() / cols).min(out.len() / rows);
    if tokens < TILE_TOKENS {
        return false;
    }
    let mut out = Outputs { out, rows, bias, accumulate: acc };
    match w.data {
        MatrixData::F32(data) => DenseJob { w: data, x, cols }.run(rows, tokens, &mut out),
        MatrixData::F16(data) => DenseJob { w: data, x, cols }.run(rows, tokens, &mut out),
        MatrixData::Q8 { .. } | MatrixData::Q4 { .. } => return false,
    }
    true
}

/// The AVX2 kernels' two 8-lane registers (lanes 0–7, 8–15) as the portable 16 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn lanes_avx2(lo: __m256, hi: __m256) -> [f32; LANES] {
    let mut lanes = [0.0f32; LANES];
    // SAFETY: lanes is [f32; 16]: two 8-float stores.
    unsafe {
        _mm256_storeu_ps(lanes.as_mut_ptr(), lo);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi);
    }
    lanes
}

// ---- attention (f32 / f16 / int8 KV cache) ---------------------------------------------------
//
// [`super::attention`]'s loops with the order of operations it documents: the scores take
// sixteen positions at a time (f32/f16: one vector of lane sums per position, then the sixteen
// reduction trees run side by side; int8: one position per lane, each lane summing its
// position's products in order), the values keep up to 64 output elements in registers while
// they walk the positions.

/// AVX2: the f32/f16 key dots on two 8-lane registers ([`dot_avx2`], the portable lanes and
/// tree) and the f16 value mix widened 8 at a time by F16C; the rest is the portable code
/// compiled for AVX2.
impl Attend for Avx2 {
    #[inline(always)]
    fn softmax(&self, x: &mut [f32]) {
        super::softmax_portable(x) // built for AVX2 here: what `softmax` dispatches to
    }
    #[inline(always)]
    fn scores_f32(&self, q: &[f32], keys: &HeadRows<'_, f32>, scale: f32, scores: &mut [f32]) {
        // SAFETY: an Avx2 exists only when the CPU has AVX2 and F16C.
        unsafe { scores_avx2(q, keys, scale, scores) }
    }
    #[inline(always)]
    fn scores_f16(&self, q: &[f32], keys: &HeadRows<'_, f16>, scale: f32, scores: &mut [f32]) {
        // SAFETY: as above.
        unsafe { scores_avx2(q, keys, scale, scores) }
    }
    #[inline(always)]
    fn mix_f32(&self, out: &mut [f32], weights: &[f32], values: &HeadRows<'_, f32>) {
        // SAFETY: as above.
        unsafe { mix_avx2(out, weights, values) }
    }
    #[inline(always)]
    fn mix_f16(&self, out: &mut [f32], weights: &[f32], values: &HeadRows<'_, f16>) {
        // SAFETY: as above.
        unsafe { mix_avx2(out, weights, values) }
    }
}

/// Up to 8 elements at `p` as f32 (`n` of them; the lanes from `n` on are 0.0), reading only
/// those `n`.
///
/// # Safety
/// `p` must be readable for `n ≤ 8` elements; AVX2 and F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn load_upto8<W: Weight>(p: *const W, n: usize) -> __m256 {
    // SAFETY: the caller's contract.
    unsafe { if n >= 8 { W::load8(p) } else { W::load_part8(p, n) } }
}

/// A query of D elements for the AVX2 key dots: its chunks of 16, and the last `D % 16`
/// elements padded with zeros.
struct QueryAvx2<'a> {
    chunks: &'a [[f32; LANES]],
    tail: [__m256; 2],
    rem: usize,
}

impl QueryAvx2<'_> {
    /// The 16 lane sums [`super::dot_f32`] / [`super::dot_f16`] build for `row · q` before their
    /// tree (lanes 0–7, 8–15): each chunk's products in order, then the tail's in lanes below
    /// `rem`; the lanes from `rem` on add 0 · 0 = +0.0, which leaves them as they were (a lane
    /// that starts at +0.0 and adds products is never -0.0).
    ///
    /// # Safety
    /// `row` must be readable for `16 · chunks.len() + rem` elements; AVX2 and F16C.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn lane_sums<W: Weight>(&self, row: *const W) -> [__m256; 2] {
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (c, qc) in self.chunks.iter().enumerate() {
            // SAFETY: elements 16c..16c+16 are in the caller's range; qc is [f32; 16].
            unsafe {
                let p = row.add(LANES * c);
                lo = _mm256_add_ps(lo, _mm256_mul_ps(W::load8(p), _mm256_loadu_ps(qc.as_ptr())));
                hi = _mm256_add_ps(hi, _mm256_mul_ps(W::load8(p.add(8)), _mm256_loadu_ps(qc.as_ptr().add(8))));
            }
        }
        if self.rem > 0 {
            let p = row.wrapping_add(LANES * self.chunks.len());
            // SAFETY: elements 16 · chunks.len() + j, j < rem, are in the caller's range.
            let (k0, k1) = unsafe { (load_upto8(p, self.rem), load_upto8(p.wrapping_add(8), self.rem.saturating_sub(8))) };
            lo = _mm256_add_ps(lo, _mm256_mul_ps(k0, self.tail[0]));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(k1, self.tail[1]));
        }
        [lo, hi]
    }
}

/// `scores[s] = dot(q, keys[s]) · scale` with the lane sums and reduction tree of
/// [`super::dot_f32`] (f32) / [`super::dot_f16`] (f16), bit for bit: eight positions' trees side
/// by side (step k of `reduce` for the eight at once), the rest one by one.
#[target_feature(enable = "avx2,f16c")]
fn scores_avx2<W: Weight>(q: &[f32], keys: &HeadRows<'_, W>, scale: f32, scores: &mut [f32]) {
    let d = keys.width().min(q.len());
    let n = keys.len().min(scores.len());
    let (chunks, tail) = q.get(..d).unwrap_or(&[]).as_chunks::<LANES>();
    let mut padded = [0.0f32; LANES];
    padded.iter_mut().zip(tail).for_each(|(p, &t)| *p = t);
    // SAFETY: padded is [f32; 16].
    let query = QueryAvx2 { chunks, tail: unsafe { [_mm256_loadu_ps(padded.as_ptr()), _mm256_loadu_ps(padded.as_ptr().add(8))] }, rem: tail.len() };
    let (base, stride) = (keys.data().as_ptr(), keys.stride());
    // SAFETY (every `lane_sums(row(s))` below): s < n ≤ keys.len(), so row s (width ≥ d elements
    // at s · stride) lies inside keys.data() (the HeadRows invariant).
    let row = |s: usize| base.wrapping_add(s * stride);
    let scale8 = _mm256_set1_ps(scale);
    let (blocks, rest) = scores.get_mut(..n).unwrap_or(&mut []).as_chunks_mut::<8>();
    for (b, out) in blocks.iter_mut().enumerate() {
        let s0 = 8 * b;
        // ask for the next block's rows (see `prefetch_row`)
        for s in s0 + 8..s0 + 16 {
            prefetch_row(row(s), d);
        }
        // step 1 (lane i + lane i+8) of each position: a8[p], then the other steps side by side
        let a8: [__m256; 8] = core::array::from_fn(|p| {
            let [lo, hi] = unsafe { query.lane_sums(row(s0 + p)) };
            _mm256_add_ps(lo, hi)
        });
        let sums = trees8_avx2(&a8);
        // SAFETY: out is [f32; 8].
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(sums, scale8)) };
    }
    let done = blocks.len() * 8;
    for (s, x) in rest.iter_mut().enumerate() {
        // SAFETY: see above (done + s < n).
        let [lo, hi] = unsafe { query.lane_sums(row(done + s)) };
        *x = reduce_avx2(lo, hi) * scale;
    }
}

/// `out_i = Σ_s weights[s] · values[s]_i` in order of s, from 0: blocks of up to 64 elements
/// whose sums stay in eight registers across all positions (the last vector of a head that is
/// not a multiple of 8 wide is read in part).
#[target_feature(enable = "avx2,f16c")]
fn mix_avx2<W: Weight>(out: &mut [f32], weights: &[f32], values: &HeadRows<'_, W>) {
    out.iter_mut().for_each(|o| *o = 0.0);
    let d = values.width().min(out.len());
    let n = weights.len().min(values.len());
    let weights = weights.get(..n).unwrap_or(&[]);
    let (base, stride) = (values.data().as_ptr(), values.stride());
    for (b, o) in out.get_mut(..d).unwrap_or(&mut []).chunks_mut(64).enumerate() {
        // SAFETY: elements 64b..64b + o.len() ≤ d ≤ width of rows s < n ≤ values.len() lie inside
        // values.data() (the HeadRows invariant).
        unsafe {
            let col = base.wrapping_add(64 * b);
            match o.len().div_ceil(8) {
                8 => mix_block_avx2::<W, 8>(o, weights, col, stride),
                7 => mix_block_avx2::<W, 7>(o, weights, col, stride),
                6 => mix_block_avx2::<W, 6>(o, weights, col, stride),
                5 => mix_block_avx2::<W, 5>(o, weights, col, stride),
                4 => mix_block_avx2::<W, 4>(o, weights, col, stride),
                3 => mix_block_avx2::<W, 3>(o, weights, col, stride),
                2 => mix_block_avx2::<W, 2>(o, weights, col, stride),
                _ => mix_block_avx2::<W, 1>(o, weights, col, stride),
            }
        }
    }
}

/// `out` (8(N-1) < len ≤ 8N elements) = `Σ_s weights[s]` · the elements at `col + s · stride`,
/// in order of s.
///
/// # Safety
/// For every s < weights.len(), `col + s · stride` must be readable for `out.len()` elements;
/// AVX2 and F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn mix_block_avx2<W: Weight, const N: usize>(out: &mut [f32], weights: &[f32], col: *const W, stride: usize) {
    let len = out.len().min(8 * N);
    let last = len - 8 * (N - 1); // elements of the last vector, 1..=8
    let mut acc = [_mm256_setzero_ps(); N];
    for (s, &w) in weights.iter().enumerate() {
        let (w, row) = (_mm256_set1_ps(w), col.wrapping_add(s * stride));
        prefetch_row(row.wrapping_add(KV_AHEAD * stride), len);
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: the elements read are below len in row s (the caller's contract).
            let v = unsafe { if k + 1 < N { W::load8(row.add(8 * k)) } else { load_upto8(row.add(8 * k), last) } };
            *a = _mm256_add_ps(*a, _mm256_mul_ps(w, v));
        }
    }
    let mut all = [0.0f32; 64];
    for (k, a) in acc.iter().enumerate() {
        if let Some(dst) = all.get_mut(8 * k..8 * k + 8) {
            // SAFETY: dst holds 8 floats.
            unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), *a) };
        }
    }
    out.iter_mut().zip(all).for_each(|(o, a)| *o = a);
}

impl Attend for Avx512 {
    #[inline(always)]
    fn softmax(&self, x: &mut [f32]) {
        super::softmax_portable(x) // built for AVX-512 here: what `softmax` dispatches to
    }
    #[inline(always)]
    fn scores_f32(&self, q: &[f32], keys: &HeadRows<'_, f32>, scale: f32, scores: &mut [f32]) {
        // SAFETY: an Avx512 exists only when the CPU has AVX-512F/BW.
        unsafe { scores_avx512(q, keys, scale, scores) }
    }
    #[inline(always)]
    fn scores_f16(&self, q: &[f32], keys: &HeadRows<'_, f16>, scale: f32, scores: &mut [f32]) {
        // SAFETY: as above.
        unsafe { scores_avx512(q, keys, scale, scores) }
    }
    #[inline(always)]
    fn scores_i8(&self, q: &[f32], keys: &HeadRows<'_, i8>, key_scales: &HeadRows<'_, f32>, scale: f32, scores: &mut [f32]) {
        // SAFETY: as above.
        unsafe { scores_i8_avx512(q, keys, key_scales, scale, scores) }
    }
    #[inline(always)]
    fn mix_f32(&self, out: &mut [f32], weights: &[f32], values: &HeadRows<'_, f32>) {
        // SAFETY: as above.
        unsafe { mix_avx512(out, weights, values) }
    }
    #[inline(always)]
    fn mix_f16(&self, out: &mut [f32], weights: &[f32], values: &HeadRows<'_, f16>) {
        // SAFETY: as above.
        unsafe { mix_avx512(out, weights, values) }
    }
    #[inline(always)]
    fn mix_i8(&self, out: &mut [f32], weights: &[f32], values: &HeadRows<'_, i8>) {
        // SAFETY: as above.
        unsafe { mix_avx512(out, weights, values) }
    }
}

/// One query against f32/f16 key rows: `q` split into full vectors and a zero-padded tail.
struct Query<'a> {
    chunks: &'a [[f32; LANES]],
    tail: __m512,
    /// Lanes of the tail (`D % 16`).
    rem: usize,
}

impl Query<'_> {
    /// The 16 lane sums [`super::dot_f32`] / [`super::dot_f16`] build for `q · row` before
    /// their reduction tree: lane i adds the products of elements i, i + 16, … in order, then
    /// (lanes below `rem` only) its tail product.
    ///
    /// # Safety
    /// `row` must be readable for `16 · chunks.len() + rem` elements.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn lane_sums<W: Weight>(&self, row: *const W) -> __m512 {
        let mut acc = _mm512_setzero_ps();
        for (c, qc) in self.chunks.iter().enumerate() {
            // SAFETY: element 16c + 15 < 16 · chunks.len() (the caller's range); qc is [f32; 16].
            let (vk, vq) = unsafe { (W::load16(row.add(LANES * c)), _mm512_loadu_ps(qc.as_ptr())) };
            acc = _mm512_add_ps(acc, _mm512_mul_ps(vq, vk));
        }
        if self.rem > 0 {
            let mut k = [0.0f32; LANES];
            for (j, k) in k.iter_mut().enumerate().take(self.rem) {
                // SAFETY: element 16 · chunks.len() + j, j < rem, is in the caller's range.
                *k = unsafe { *row.add(LANES * self.chunks.len() + j) }.widen();
            }
            // SAFETY: k is [f32; 16].
            let vk = unsafe { _mm512_loadu_ps(k.as_ptr()) };
            let mask = ((1u32 << self.rem) - 1) as __mmask16;
            acc = _mm512_mask_add_ps(acc, mask, acc, _mm512_mul_ps(self.tail, vk));
        }
        acc
    }
}

/// `scores[s] = dot(q, keys[s]) · scale` with the lane sums and reduction tree of
/// [`super::dot_f32`] (f32) / [`super::dot_f16`] (f16), bit for bit.
#[target_feature(enable = "avx512f")]
fn scores_avx512<W: Weight>(q: &[f32], keys: &HeadRows<'_, W>, scale: f32, scores: &mut [f32]) {
    let d = keys.width().min(q.len());
    let n = keys.len().min(scores.len());
    let (chunks, tail) = q.get(..d).unwrap_or(&[]).as_chunks::<LANES>();
    let mut padded = [0.0f32; LANES];
    padded.iter_mut().zip(tail).for_each(|(p, &t)| *p = t);
    // SAFETY: padded is [f32; 16].
    let query = Query { chunks, tail: unsafe { _mm512_loadu_ps(padded.as_ptr()) }, rem: tail.len() };
    let (base, stride) = (keys.data().as_ptr(), keys.stride());
    // SAFETY (every `lane_sums(row(s))` below): s < n ≤ keys.len(), so row s (width ≥ d
    // elements at s · stride) lies inside keys.data() (the HeadRows invariant).
    let row = |s: usize| base.wrapping_add(s * stride);
    let scale16 = _mm512_set1_ps(scale);
    let (blocks, rest) = scores.get_mut(..n).unwrap_or(&mut []).as_chunks_mut::<LANES>();
    for (b, out) in blocks.iter_mut().enumerate() {
        let s0 = b * LANES;
        // ask for the next block's rows (see `prefetch_row`)
        for s in s0 + LANES..s0 + 2 * LANES {
            prefetch_row(row(s), d);
        }
        // the trees of positions s0..s0+16 side by side: after step k, each vector holds
        // 2^k positions' partial sums (see `tree_*`)
        let mut halves = [_mm512_setzero_ps(); 8];
        for (m, h) in halves.iter_mut().enumerate() {
            // SAFETY: see above (s0 + 2m + 1 < n).
            let (a, b) = unsafe { (query.lane_sums(row(s0 + 2 * m)), query.lane_sums(row(s0 + 2 * m + 1))) };
            *h = tree_8(a, b);
        }
        let [h0, h1, h2, h3, h4, h5, h6, h7] = halves;
        let (q0, q1, q2, q3) = (tree_4(h0, h1), tree_4(h2, h3), tree_4(h4, h5), tree_4(h6, h7));
        let sums = tree_1(tree_2(q0, q1), tree_2(q2, q3));
        let sums = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), sums);
        // SAFETY: out is [f32; 16].
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), _mm512_mul_ps(sums, scale16)) };
    }
    let done = blocks.len() * LANES;
    for (s, x) in rest.iter_mut().enumerate() {
        // SAFETY: see above (done + s < n).
        *x = reduce512(unsafe { query.lane_sums(row(done + s)) }) * scale;
    }
}

// The reduction tree of `reduce` (lane i += lane i + 8, then + 4, + 2, + 1) on sixteen vectors
// of lane sums at once. IEEE addition is commutative, so each sum is the portable one.

/// Step 1 for positions a and b: lanes 0–7 = `a[i] + a[i + 8]`, lanes 8–15 = `b[i] + b[i + 8]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn tree_8(a: __m512, b: __m512) -> __m512 {
    _mm512_add_ps(_mm512_shuffle_f32x4::<0x44>(a, b), _mm512_shuffle_f32x4::<0xEE>(a, b))
}

/// Step 2 for the four positions of `a` (two) and `b` (two): 128-bit lane k holds position k's
/// four sums `x[i] + x[i + 4]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn tree_4(a: __m512, b: __m512) -> __m512 {
    _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(a, b), _mm512_shuffle_f32x4::<0xDD>(a, b))
}

/// Step 3: in each 128-bit lane, [x0 + x2, x1 + x3] of `a`'s position, then of `b`'s.
#[inline]
#[target_feature(enable = "avx512f")]
fn tree_2(a: __m512, b: __m512) -> __m512 {
    _mm512_add_ps(_mm512_shuffle_ps::<0x44>(a, b), _mm512_shuffle_ps::<0xEE>(a, b))
}

/// Step 4: in each 128-bit lane k, the totals x0 + x1 of four positions; element 4k + j holds
/// position k + 4j of the sixteen (the caller permutes them into order).
#[inline]
#[target_feature(enable = "avx512f")]
fn tree_1(a: __m512, b: __m512) -> __m512 {
    _mm512_add_ps(_mm512_shuffle_ps::<0x88>(a, b), _mm512_shuffle_ps::<0xDD>(a, b))
}

/// int8 keys: `scores[s] = (Σ_i q_i · k_s,i) · key_scale_s · scale`, the sum sequential in i
/// from -0.0 like the portable `Iterator::sum`. Sixteen positions per vector, one per lane, so
/// each lane's additions are the portable ones in the portable order; two such blocks at a time
/// (32 positions), so that two chains of dependent additions are in flight.
#[target_feature(enable = "avx512f")]
fn scores_i8_avx512(q: &[f32], keys: &HeadRows<'_, i8>, key_scales: &HeadRows<'_, f32>, scale: f32, scores: &mut [f32]) {
    let d = keys.width().min(q.len());
    let n = keys.len().min(key_scales.len()).min(scores.len());
    let (q, scores) = (q.get(..d).unwrap_or(&[]), scores.get_mut(..n).unwrap_or(&mut []));
    // the gather offsets p · stride (p < 16) must fit an i32; otherwise (no real model) portable
    let Some(stride32) = i32::try_from(keys.stride()).ok().filter(|&s| s <= i32::MAX / LANES as i32) else {
        return super::Portable.scores_i8(q, keys, key_scales, scale, scores);
    };
    let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let offsets = _mm512_mullo_epi32(lane, _mm512_set1_epi32(stride32));
    let rows = I8Rows { base: keys.data().as_ptr(), stride: keys.stride(), q, offsets };
    let mut ks = key_scales.firsts();
    let mut finish = |acc: __m512, out: &mut [f32; LANES]| {
        let mut scales = [0.0f32; LANES];
        scales.iter_mut().zip(ks.by_ref()).for_each(|(s, k)| *s = k);
        // SAFETY: scales and out are [f32; 16] (AVX-512F: this function's feature).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), _mm512_mul_ps(_mm512_mul_ps(acc, _mm512_loadu_ps(scales.as_ptr())), _mm512_set1_ps(scale))) };
    };
    let (blocks, rest) = scores.as_chunks_mut::<LANES>();
    let pairs = blocks.as_chunks_mut::<2>();
    for (b, [o0, o1]) in pairs.0.iter_mut().enumerate() {
        // SAFETY: positions 32b..32b + 32 ≤ n (HeadRows invariant: their rows are inside).
        let [a0, a1] = unsafe { rows.sums::<2>(32 * b) };
        finish(a0, o0);
        finish(a1, o1);
    }
    let done = pairs.0.len() * 2 * LANES;
    if let Some(o) = pairs.1.first_mut() {
        // SAFETY: positions done..done + 16 ≤ n.
        let [a] = unsafe { rows.sums::<1>(done) };
        finish(a, o);
    }
    // the last n % 16 positions one by one, as the portable code does
    let done = n - rest.len();
    for ((x, k), s) in rest.iter_mut().zip(keys.rows_from(done)).zip(ks) {
        let dot: f32 = q.iter().zip(k).map(|(&a, &b)| a * b as f32).sum();
        *x = dot * s * scale;
    }
}

/// int8 key rows and the query of a [`scores_i8_avx512`] call.
struct I8Rows<'a> {
    /// Row 0 (`HeadRows::data`).
    base: *const i8,
    stride: usize,
    /// D elements.
    q: &'a [f32],
    /// `p · stride` in lane p.
    offsets: __m512i,
}

impl I8Rows<'_> {
    /// The unscaled sums `Σ_i q_i · k_s,i` (in order of i, from -0.0) of positions
    /// `s0 + 16b + p` in lane p of vector b: elements four at a time by gathering four bytes of
    /// each of the sixteen rows, then the last `D % 4` one by one.
    ///
    /// # Safety
    /// Positions `s0..s0 + 16B` must have their rows (D elements) inside the keys.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn sums<const B: usize>(&self, s0: usize) -> [__m512; B] {
        let Self { base, stride, q, offsets } = *self;
        let rows: [*const i8; B] = core::array::from_fn(|b| base.wrapping_add((s0 + LANES * b) * stride));
        let mut acc = [_mm512_set1_ps(-0.0); B];
        let (quads, tail) = q.as_chunks::<4>();
        for (c, q4) in quads.iter().enumerate() {
            for (a, &r) in acc.iter_mut().zip(&rows) {
                // SAFETY: bytes 4c..4c + 4 ≤ D of the sixteen rows at r + p · stride (the
                // caller's contract); a gather reads unaligned dwords.
                let g = unsafe { _mm512_i32gather_epi32::<1>(offsets, r.wrapping_add(4 * c).cast()) };
                // byte j of each lane, sign-extended: shifted to the top, then arithmetically down
                let k = [
                    _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(g)),
                    _mm512_srai_epi32::<24>(_mm512_slli_epi32::<16>(g)),
                    _mm512_srai_epi32::<24>(_mm512_slli_epi32::<8>(g)),
                    _mm512_srai_epi32::<24>(g),
                ];
                for (k, &qi) in k.into_iter().zip(q4) {
                    *a = _mm512_add_ps(*a, _mm512_mul_ps(_mm512_set1_ps(qi), _mm512_cvtepi32_ps(k)));
                }
            }
        }
        for (j, &qi) in tail.iter().enumerate() {
            for (a, &r) in acc.iter_mut().zip(&rows) {
                let mut col = [0.0f32; LANES];
                for (p, c) in col.iter_mut().enumerate() {
                    // SAFETY: element 4 · quads.len() + j < D of row p (the caller's contract).
                    *c = f32::from(unsafe { *r.wrapping_add(p * stride + 4 * quads.len() + j) });
                }
                // SAFETY: col is [f32; 16].
                *a = _mm512_add_ps(*a, _mm512_mul_ps(_mm512_set1_ps(qi), unsafe { _mm512_loadu_ps(col.as_ptr()) }));
            }
        }
        acc
    }
}

/// `out_i = Σ_s weights[s] · values[s]_i` in order of s, from 0: blocks of up to 64 elements
/// whose sums stay in four registers across all positions, then the last `D % 16` elements.
#[target_feature(enable = "avx512f")]
fn mix_avx512<W: Weight>(out: &mut [f32], weights: &[f32], values: &HeadRows<'_, W>) {
    out.iter_mut().for_each(|o| *o = 0.0);
    let d = values.width().min(out.len());
    let n = weights.len().min(values.len());
    let weights = weights.get(..n).unwrap_or(&[]);
    let (chunks, tail) = out.get_mut(..d).unwrap_or(&mut []).as_chunks_mut::<LANES>();
    let (base, stride) = (values.data().as_ptr(), values.stride());
    let done = chunks.len() / 4 * 4;
    let mut quads = chunks.chunks_exact_mut(4);
    for (b, o) in quads.by_ref().enumerate() {
        // SAFETY: elements 64b..64b+64 ≤ d ≤ width of rows s < n ≤ values.len() lie inside
        // values.data() (the HeadRows invariant).
        unsafe { mix_block::<W, 4>(o, weights, base.wrapping_add(4 * LANES * b), stride) };
    }
    for (c, o) in quads.into_remainder().iter_mut().enumerate() {
        // SAFETY: as above, elements 16(done + c)..+16 ≤ d.
        unsafe { mix_block::<W, 1>(core::slice::from_mut(o), weights, base.wrapping_add(LANES * (done + c)), stride) };
    }
    let done = d - tail.len();
    for (&w, row) in weights.iter().zip(values.rows()) {
        for (o, &v) in tail.iter_mut().zip(row.get(done..).unwrap_or(&[])) {
            *o += w * v.widen();
        }
    }
}

/// How many positions ahead the value mix asks for its rows (see [`prefetch_row`]).
const KV_AHEAD: usize = 8;

/// Asks for the `n` elements at `row` in L1. A head's rows in the KV cache are contiguous
/// (stride D), but each run is only `len · D` elements and a decode step walks 2 · n_head of
/// them per layer: asking ahead still beats waiting for the hardware prefetcher to ramp up on
/// each (GPT-2 q8, prompt 768, AVX2: decode 81-85 -> 86-90 tok/s with an f16 cache, 71-73 ->
/// 75-76 with f32). A prefetch never faults: past the cache's end it does nothing.
#[inline]
#[target_feature(enable = "sse")]
fn prefetch_row<W>(row: *const W, n: usize) {
    let (p, bytes) = (row.cast::<u8>(), n * core::mem::size_of::<W>());
    for off in (0..bytes).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast());
    }
    // the last line, when the row does not start on a line
    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(bytes.saturating_sub(1)).cast());
}

/// `out` (N vectors) = `Σ_s weights[s]` · the 16N elements at `col + s · stride`, in order of s.
///
/// # Safety
/// For every s < weights.len(), `col + s · stride` must be readable for 16N elements.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn mix_block<W: Weight, const N: usize>(out: &mut [[f32; LANES]], weights: &[f32], col: *const W, stride: usize) {
    let mut acc = [_mm512_setzero_ps(); N];
    for (s, &w) in weights.iter().enumerate() {
        let (w, row) = (_mm512_set1_ps(w), col.wrapping_add(s * stride));
        prefetch_row(row.wrapping_add(KV_AHEAD * stride), LANES * N);
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: elements 16k..16k+16 < 16N of row s (the caller's contract).
            *a = _mm512_add_ps(*a, _mm512_mul_ps(w, unsafe { W::load16(row.add(LANES * k)) }));
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: o is [f32; 16].
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::tests::{quant_linear_matches_portable, quant_linear_matches_portable_in_groups};

    #[test]
    fn simd_f16_and_i8_dots_equal_portable() {
        if !has_avx512f() {
            return;
        }
        for n in [0usize, 5, 16, 31, 32, 33, 100, 768] {
            let w: std::vec::Vec<f16> = (0..n).map(|i| f16::from_f32(((i * 37 % 101) as f32 - 50.0) / 17.0)).collect();
            let xs: std::vec::Vec<std::vec::Vec<f32>> =
                (0..4).map(|k| (0..n).map(|i| ((i * 53 + k * 7) % 97) as f32 / 13.0 - 3.0).collect()).collect();
            let want: std::vec::Vec<u32> = xs.iter().map(|x| super::super::dot_f16(&w, x).to_bits()).collect();
            let refs = [&xs[0][..], &xs[1][..], &xs[2][..], &xs[3][..]];
            // SAFETY: AVX-512F/BW present (checked).
            let (one, [tok4, ..]) = unsafe { (dot_avx512(&w, &xs[0]), dot4x4_avx512([&w[..]; 4], refs)) };
            assert_eq!(one.to_bits(), want[0], "f16 n={n}");
            assert_eq!(tok4.map(f32::to_bits).to_vec(), want, "f16 4 tokens n={n}");
            // four rows (rotations of w) against one token
            let rows: std::vec::Vec<std::vec::Vec<f16>> = (0..4).map(|k| w.iter().cycle().skip(k).take(n).copied().collect()).collect();
            // SAFETY: as above.
            let rows4 = unsafe { dot4_rows_avx512([&rows[0][..], &rows[1][..], &rows[2][..], &rows[3][..]], &xs[0]) };
            let want_rows: std::vec::Vec<u32> = rows.iter().map(|r| super::super::dot_f16(r, &xs[0]).to_bits()).collect();
            assert_eq!(rows4.map(f32::to_bits).to_vec(), want_rows, "f16 4 rows n={n}");
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
            if Avx2::detect().is_some() {
                // SAFETY: AVX2 and F16C are present (checked).
                let one = unsafe { dot_avx2(&w, &xs[0]) };
                assert_eq!(one.to_bits(), want[0], "avx2 n={n}");
                let wh: std::vec::Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
                // SAFETY: as above.
                let one = unsafe { dot_avx2(&wh, &xs[0]) };
                assert_eq!(one.to_bits(), super::super::dot_f16(&wh, &xs[0]).to_bits(), "avx2 f16 n={n}");
            }
            if has_avx512f() {
                // SAFETY: AVX-512F is present (checked).
                let (one, [tok4, ..], rows4) = unsafe { (dot_avx512(&w, &xs[0]), dot4x4_avx512([&w[..]; 4], refs), dot4_rows_avx512(refs, &w)) };
                assert_eq!(one.to_bits(), want[0], "avx512 n={n}");
                assert_eq!(tok4.map(f32::to_bits).to_vec(), want, "avx512 4 tokens n={n}");
                let want_rows: std::vec::Vec<u32> = xs.iter().map(|x| super::super::dot_f32(x, &w).to_bits()).collect();
                assert_eq!(rows4.map(f32::to_bits).to_vec(), want_rows, "avx512 4 rows n={n}");
                let ws: std::vec::Vec<std::vec::Vec<f32>> = (0..4).map(|k| w.iter().map(|v| v * (k as f32 + 0.5)).collect()).collect();
                // SAFETY: as above.
                let tile = unsafe { dot4x4_avx512([&ws[0][..], &ws[1][..], &ws[2][..], &ws[3][..]], refs) };
                for (r, row) in ws.iter().enumerate() {
                    for (t, x) in xs.iter().enumerate() {
                        assert_eq!(tile[r][t].to_bits(), super::super::dot_f32(row, x).to_bits(), "avx512 4x4 n={n} row {r} token {t}");
                    }
                }
            }
        }
    }

    /// The AVX-512 dense `linear` (four-rows decode, 4×4 tiles in row blocks for prefill) and
    /// the AVX2 one (one row after the other in decode; for prefill 6 × 2 tiles over packed
    /// groups of rows, one half of the lanes after the other, f16 widened as it is packed)
    /// must give the portable bits for f32 and f16, with row and token counts that leave
    /// remainders and more than one row block, and widths with and without a remainder of 16.
    #[test]
    fn avx2_output_lanes_store_as_one_by_one() {
        // the tiles call `lanes` with n = 6 (TILE_ROWS); its 4 + 2 + 1 (+ 1) stores for every n
        if Avx2::detect().is_none() {
            return;
        }
        let rows = 11;
        let bias: std::vec::Vec<f32> = (0..rows).map(|i| i as f32 * 0.75 - 2.0).collect();
        let y = [1.5f32, -0.0, 3.25, -4.0, 0.125, 7.0, -9.5, 2.0];
        for n in 0..=8 {
            for o in [0, rows - n] {
                for (b, acc) in [(&bias[..], true), (&bias[..], false), (&[][..], true), (&[][..], false), (&bias[..o + n], true)] {
                    let (mut fast, mut slow) = (std::vec![0.5f32; 2 * rows], std::vec![0.5f32; 2 * rows]);
                    let mut f = Outputs { out: &mut fast, rows, bias: b, accumulate: acc };
                    // SAFETY: AVX2 (detected); y is [f32; 8].
                    unsafe { f.lanes(1, o, n, _mm256_loadu_ps(y.as_ptr())) };
                    let mut s = Outputs { out: &mut slow, rows, bias: b, accumulate: acc };
                    for (j, &y) in y.iter().enumerate().take(n) {
                        s.one(1, o + j, y);
                    }
                    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<std::vec::Vec<_>>();
                    assert_eq!(bits(&fast), bits(&slow), "n {n} o {o} bias {} accumulate {acc}", b.len());
                }
            }
        }
    }

    #[test]
    fn simd_dense_linear_is_bit_identical_to_portable() {
        let (avx512, avx2) = (Avx512::detect(), Avx2::detect());
        for &(rows, cols) in &[(1usize, 16usize), (7, 33), (9, 64), (170, 768), (6, 3072), (5, 1000), (4, 8), (4, 1100), (13, 1608)] {
            let w: std::vec::Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
            let wh: std::vec::Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
            let bias: std::vec::Vec<f32> = (0..rows).map(|i| i as f32 * 0.25 - 1.0).collect();
            // 8 and more tokens with scratch: AVX-512 f16 widens blocks of rows first (blocks
            // of 4 to 64 rows, the last one partial; 6 × 3072 with 4 rows of scratch: blocks of
            // 4 + 2; AVX2 ignores the scratch); AVX2 cuts rows wider than 768 into k-blocks
            // (3072: 4, 1100: 2 with a remainder of 12, 1608: 34 + 34 + 32 chunks with a
            // remainder of 8), rows into groups of 6 and a rest (13: 6 + 6 + 1, 170: 28 groups
            // + 2) and 67 tokens into blocks of 64 + 3
            for (tokens, scratch_rows) in [(1usize, 0usize), (2, 0), (2, 3), (3, 0), (4, 0), (5, 0), (9, 0), (9, 64), (13, 4), (8, 7), (8, 3), (7, 2), (67, 5)] {
                let x: std::vec::Vec<f32> = (0..tokens * cols).map(|i| ((i * 53) % 97) as f32 / 13.0 - 3.0).collect();
                let mats = [Matrix { rows, cols, data: MatrixData::F32(&w) }, Matrix { rows, cols, data: MatrixData::F16(&wh) }];
                // with bias and accumulate, and (the AVX2 tiles' vector epilogue has its own
                // paths for them) without either, every other case
                let plain = (tokens + rows) % 2 == 1;
                let (bias, acc): (&[f32], bool) = if plain { (&[], false) } else { (&bias, true) };
                for m in &mats {
                    let mut slow = std::vec![0.5f32; tokens * rows];
                    linear_impl(&super::super::Portable, &mut slow, &x, m, bias, acc, &mut []);
                    let s: std::vec::Vec<u32> = slow.iter().map(|v| v.to_bits()).collect();
                    let what = std::format!("rows {rows} cols {cols} tokens {tokens} scratch rows {scratch_rows} f16 {} bias and accumulate {}", matches!(m.data, MatrixData::F16(_)), !plain);
                    if let Some(d) = &avx512 {
                        let mut fast = std::vec![0.5f32; tokens * rows];
                        let mut scratch = std::vec![f32::NAN; scratch_rows * cols];
                        d.linear(&mut fast, &x, m, bias, acc, &mut scratch);
                        let f: std::vec::Vec<u32> = fast.iter().map(|v| v.to_bits()).collect();
                        assert_eq!(f, s, "AVX-512: {what}");
                    }
                    if let Some(d) = &avx2 {
                        let mut fast = std::vec![0.5f32; tokens * rows];
                        let mut scratch = std::vec![f32::NAN; scratch_rows * cols];
                        d.linear(&mut fast, &x, m, bias, acc, &mut scratch);
                        let f: std::vec::Vec<u32> = fast.iter().map(|v| v.to_bits()).collect();
                        assert_eq!(f, s, "AVX2: {what}");
                    }
                }
            }
        }
    }

    /// f32/f16 decode from several places of the matrix at once ([`for_fronts`]) gives the
    /// portable kernel's bits for every count of places, with bias and accumulate, on matrices
    /// large enough to be cut (parts of at least 64 KiB) and not (the rows not dividing evenly).
    #[test]
    fn avx2_decode_from_several_places_is_bit_identical_to_portable() {
        if Avx2::detect().is_none() {
            return;
        }
        for &(rows, cols) in &[(301usize, 768usize), (1031, 100), (7, 64), (129, 1000)] {
            let w: std::vec::Vec<f32> = (0..rows * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
            let wh: std::vec::Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
            let bias: std::vec::Vec<f32> = (0..rows).map(|i| i as f32 * 0.25 - 1.0).collect();
            let x: std::vec::Vec<f32> = (0..cols).map(|i| ((i * 53) % 97) as f32 / 13.0 - 3.0).collect();
            for m in [Matrix { rows, cols, data: MatrixData::F32(&w) }, Matrix { rows, cols, data: MatrixData::F16(&wh) }] {
                let mut slow = std::vec![0.5f32; rows];
                linear_impl(&super::super::Portable, &mut slow, &x, &m, &bias, true, &mut []);
                for fronts in 1..=6 {
                    let mut fast = std::vec![0.5f32; rows];
                    let mut out = Outputs { out: &mut fast, rows, bias: &bias, accumulate: true };
                    // SAFETY: the CPU has AVX2 and F16C (checked above).
                    unsafe {
                        match m.data {
                            MatrixData::F32(d) => decode_rows_avx2(d, cols, &x, &mut out, fronts),
                            MatrixData::F16(d) => decode_rows_avx2(d, cols, &x, &mut out, fronts),
                            _ => unreachable!(),
                        }
                    }
                    let (f, s): (std::vec::Vec<u32>, std::vec::Vec<u32>) = (fast.iter().map(|v| v.to_bits()).collect(), slow.iter().map(|v| v.to_bits()).collect());
                    assert_eq!(f, s, "rows {rows} cols {cols} f16 {} fronts {fronts}", matches!(m.data, MatrixData::F16(_)));
                }
            }
        }
    }

    /// [`for_fronts`] visits every row once, from at most `fronts` parts of at least
    /// [`FRONT_MIN_BYTES`] each.
    #[test]
    fn fronts_visit_every_row_once() {
        for rows in 0..40usize {
            for fronts in 1..=9 {
                for bytes in [0, FRONT_MIN_BYTES, 3 * FRONT_MIN_BYTES, 100 * FRONT_MIN_BYTES] {
                    let mut seen = std::vec![0u32; rows];
                    let mut order = std::vec::Vec::new();
                    for_fronts(fronts, rows, bytes, |o| {
                        seen[o] += 1;
                        order.push(o);
                    });
                    assert!(seen.iter().all(|&n| n == 1), "rows {rows} fronts {fronts} bytes {bytes}: {seen:?}");
                    // k places: the first k visits are the parts' first rows, a part apart
                    let k = fronts.min(bytes / FRONT_MIN_BYTES).clamp(1, rows.max(1));
                    let part = rows.div_ceil(k);
                    let firsts: std::vec::Vec<usize> = (0..k).map(|f| f * part).filter(|&o| o < rows).collect();
                    assert_eq!(order.get(..firsts.len()), Some(&firsts[..]), "rows {rows} fronts {fronts} bytes {bytes}: {order:?}");
                }
            }
        }
        // whole orders, written out: four places (parts of 3), three (parts under 64 KiB
        // merged), one (a part would be under 64 KiB, or no places asked), two rows for four
        let visits = |fronts, rows, bytes| {
            let mut v = std::vec::Vec::new();
            for_fronts(fronts, rows, bytes, |o| v.push(o));
            v
        };
        assert_eq!(visits(4, 10, 100 * FRONT_MIN_BYTES), [0, 3, 6, 9, 1, 4, 7, 2, 5, 8]);
        assert_eq!(visits(4, 10, 3 * FRONT_MIN_BYTES), [0, 4, 8, 1, 5, 9, 2, 6, 3, 7]);
        assert_eq!(visits(4, 10, FRONT_MIN_BYTES), (0..10).collect::<std::vec::Vec<_>>());
        assert_eq!(visits(0, 5, 100 * FRONT_MIN_BYTES), (0..5).collect::<std::vec::Vec<_>>());
        assert_eq!(visits(4, 2, 100 * FRONT_MIN_BYTES), [0, 1]);
    }

    /// The AMX tile path (prefill, ≥ 8 tokens, blocks of 16 rows) must give the portable
    /// kernel's bits: full and partial token tiles, rows beyond the last block of 16 (done by
    /// VNNI), q8 and q4, rows wider than one block of 16 groups, bias and accumulate.
    #[test]
    fn amx_linear_is_bit_identical_to_portable() {
        if !amx::available() {
            std::eprintln!("no AMX here: test skipped");
            return;
        }
        quant_linear_matches_portable(11, &[(16, 128), (40, 256), (33, 768), (48, 640), (17, 3072), (32, 1152)], &[8, 16, 21, 37], vnni_takes, vnni);
    }

    /// GELU-tanh and softmax (`kernels/math.rs`'s exp) in their AVX2 and AVX-512 builds must give
    /// the portable code's bits: a sweep of f32 bit patterns (all magnitudes, ±0, subnormals,
    /// ±∞, NaN) and score rows of every length up to 1100 (vector bodies and remainders, exp
    /// underflowing to subnormals and 0).
    #[test]
    fn simd_math_is_bit_identical_to_portable() {
        use std::vec::Vec;
        let bits = |v: &[f32]| v.iter().copied().map(super::super::math::tests::bits_nan_as_one).collect::<Vec<u32>>();
        let (avx2, avx512) = (Avx2::detect(), Avx512::detect());
        let mut x: Vec<f32> = super::super::math::tests::sweep(0, u32::MAX, 65_521).collect();
        x.extend([0.0, -0.0, 1e-45, -1e-45, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX, f32::MIN]);
        let n = if cfg!(miri) { 200 } else { 20_000 };
        x.extend((0..n).map(|i| (i as f32 / n as f32 - 0.5) * 20.0)); // the range GELU sees
        let mut want = x.clone();
        super::super::math::gelu_tanh_slice_portable(&mut want);
        if let Some(d) = &avx2 {
            let mut got = x.clone();
            d.gelu_tanh_slice(&mut got);
            assert_eq!(bits(&got), bits(&want), "gelu_tanh avx2");
        }
        if let Some(d) = &avx512 {
            let mut got = x.clone();
            d.gelu_tanh_slice(&mut got);
            assert_eq!(bits(&got), bits(&want), "gelu_tanh avx512");
        }
        let mut seed = 11u32;
        let mut rnd = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32
        };
        let long: &[usize] = if cfg!(miri) { &[63, 64, 65] } else { &[63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 1023, 1024, 1100] };
        for len in (0..=40).chain(long.iter().copied()) {
            // scores spread over 0..30 and over 0..300 (exps down to subnormal and zero)
            for spread in [30.0f32, 300.0] {
                let mut row: Vec<f32> = (0..len).map(|_| (rnd() - 0.9) * spread).collect();
                if let Some(v) = row.get_mut(len / 2) {
                    *v = f32::NEG_INFINITY;
                }
                let mut want = row.clone();
                super::super::softmax_portable(&mut want);
                if let Some(d) = &avx2 {
                    let mut got = row.clone();
                    d.softmax(&mut got);
                    assert_eq!(bits(&got), bits(&want), "softmax avx2 len {len} spread {spread}");
                }
                if let Some(d) = &avx512 {
                    let mut got = row.clone();
                    d.softmax(&mut got);
                    assert_eq!(bits(&got), bits(&want), "softmax avx512 len {len} spread {spread}");
                }
            }
        }
    }

    /// The VNNI q8/q4 `linear` must give the portable kernel's bits for every shape it
    /// accepts: full and partial blocks of 16 groups, 1 to 9 tokens (token tiles and tails),
    /// extreme values, bias and accumulate.
    #[test]
    fn vnni_linear_is_bit_identical_to_portable() {
        if !has_avx512vnni() {
            return;
        }
        // rows in pairs and alone; last blocks of 16 (3072), 12 (896, 448 q8), 8 (768, 256), 6
        // (192 q8), 4 (640, 128) groups
        quant_linear_matches_portable(7, &[(3, 128), (5, 256), (7, 768), (2, 3072), (4, 640), (1, 1024), (2, 96), (4, 896), (6, 448), (2, 192)], &[1, 2, 3, 4, 5, 6, 7, 8, 9], vnni_takes, vnni);
    }

    /// The AVX2 q8/q4 `linear` must give the portable kernel's bits for every shape it takes
    /// (rows of whole blocks of 8 groups; 1 to 3 tokens in blocks of 8, more in lane tiles; more
    /// rows than one block of 256 KiB of weights; extreme values, bias, accumulate) and decline
    /// the others without writing.
    #[test]
    fn avx2_quant_linear_is_bit_identical_to_portable() {
        if Avx2::detect().is_none() {
            return;
        }
        // q8: any rows of groups of 32 whose padded int16 activations fit the scratch a session
        // gives (a row of one group does not); q4: any rows of groups of 32 (rows of whole
        // blocks of 8 groups in block_q4 below 4 tokens, others in the lane tiles)
        let room = |cols: usize, group: usize| super::super::wide16_scratch_len(cols, group) <= super::super::quant_scratch_len(cols, crate::model::MIN_GROUP);
        let takes = |q4: bool, cols: usize| if q4 { cols.is_multiple_of(32) } else { room(cols, 32) };
        // SAFETY: AVX2 and F16C are present (checked).
        let avx2 = |out: &mut [f32], x: &[f32], m: &Matrix<'_>, bias: &[f32], acc: bool, scratch: &mut [f32]| unsafe { linear_quant_avx2(out, x, m, bias, acc, scratch) };
        quant_linear_matches_portable(11, &[(3, 256), (5, 768), (2, 3072), (4, 128), (3, 512), (1, 640), (2, 96), (2, 224), (20, 288), (7, 288), (5, 352), (4, 416), (3, 64), (9, 352), (16, 416), (17, 608), (8, 800), (9, 256), (16, 512)], &[1, 2, 3, 4, 5, 8, 9, 17], takes, avx2);
        // rows of one group: q8 decode reads int8 activations in natural order and takes them,
        // where 2 or more tokens (padded int16 activations) do not fit the session's scratch
        quant_linear_matches_portable(14, &[(3, 32), (9, 32), (17, 64)], &[1], |_, _| true, avx2);
        quant_linear_matches_portable(14, &[(3, 32)], &[2, 3], takes, avx2);
        // q8 rows of 768 bytes: blocks of 341 rows (q4: 682)
        quant_linear_matches_portable(12, &[(700, 768)], &[1, 10], takes, avx2);
        // lane tiles (16 rows × 4 tokens, from 4 tokens on), the last rows' tile part empty (1,
        // 2, 3, 5, 12 rows of 16), the last 1-3 tokens in tiles of their own: rows of fewer than 16
        // groups (accumulators left at +0.0), an odd number of groups (q8: the last paired with
        // zeros in Wide16), k-blocks (96 groups: 6 of 16), blocks of tokens (3072 columns: 40)
        quant_linear_matches_portable(15, &[(16, 256), (33, 800), (18, 3072), (48, 96), (17, 32), (32, 768), (12, 512), (24, 256), (35, 256)], &[4, 5, 6, 7, 8, 9, 11, 17, 70], takes, avx2);
        // q8 with other groups (the shipped model's 28; 4..=32, a multiple of 4: masked loads,
        // groups padded in the activations, blocks of 1 to 8 groups); q4 declines them. Rows of
        // 4 groups of 16 or more (112, 80, 64 columns) take plain loads for the pairs with a row
        // after them and masked ones for a last pair (6 and 4 rows) or none (5 rows)
        for (group, shapes) in [(28usize, &[(5usize, 112usize), (6, 112), (3, 28), (2, 252), (4, 448)][..]), (4, &[(3, 36)][..]), (20, &[(3, 100), (2, 360), (4, 80)][..]), (16, &[(3, 48), (2, 256), (4, 64)][..])] {
            let q8_only = |q4: bool, cols: usize| !q4 && room(cols, group);
            quant_linear_matches_portable_in_groups(13, group, shapes, &[1, 2, 9], q8_only, avx2);
            // and with the room the padded layout needs, which such groups take where a caller
            // gives it
            let roomy = |out: &mut [f32], x: &[f32], m: &Matrix<'_>, bias: &[f32], acc: bool, _: &mut [f32]| {
                let mut scratch = std::vec![0.0f32; x.len() / m.cols * super::super::wide16_scratch_len(m.cols, group)];
                avx2(out, x, m, bias, acc, &mut scratch)
            };
            quant_linear_matches_portable_in_groups(14, group, shapes, &[1, 2, 9], |q4, _| !q4, roomy);
        }
    }

    /// The shapes `linear_quant_vnni` takes (group 32): q8 rows of whole 64-byte vectors, q4 rows
    /// of whole 128-value blocks ([`QuantOrder::Q4Pairs`]).
    fn vnni_takes(q4: bool, cols: usize) -> bool {
        cols.is_multiple_of(if q4 { 128 } else { 64 })
    }

    /// `linear_quant_vnni` (which takes AMX for prefill where the CPU has it), for the checker.
    fn vnni(out: &mut [f32], x: &[f32], m: &Matrix<'_>, bias: &[f32], accumulate: bool, scratch: &mut [f32]) -> bool {
        // SAFETY: the callers checked VNNI (AMX implies it).
        unsafe { linear_quant_vnni(out, x, m, bias, accumulate, scratch) }
    }
}


// ---- q8 / q4 with AVX-512 VNNI ---------------------------------------------------------------
//
// `vpdpbusd` multiplies 64 unsigned bytes by 64 signed bytes and adds each run of four products
// into one of 16 i32 lanes. Weights are made unsigned (q8: `w ^ 0x80` = w + 128; q4: the stored
// nibble is already q + 8) and the offset is taken back per group with the activation sums that
// `quantize_rows` keeps: Σ (w + K)·x = Σ w·x + K·Σ x. The i32 lanes of 16 groups are folded
// into one vector of 16 exact group sums, which then goes through the float math of
// `combine_groups` lane for lane (mul, mul, add; no FMA): the result is bit-identical to the
// portable kernel. Group size 32 only (the converter's default); other groups take the
// portable path.

/// How far ahead of the weight reads decode prefetches, in bytes. Decode streams every weight
/// once; the hardware prefetcher alone left q4 decode at 112 tok/s on GPT-2 124M, a software
/// prefetch 2–8 KiB ahead took it to 156–172 (BENCHMARKS.md).
const PREFETCH_BYTES: usize = 8192;

/// The group size the VNNI kernels handle.
const VNNI_GROUP: usize = 32;
/// Tokens that share each loaded block of weights in prefill.
const TOKEN_TILE: usize = 4;

pub(super) fn has_avx512vnni() -> bool {
    has_avx512f() && std::is_x86_feature_detected!("avx512vnni")
}

/// q8 / q4 `linear` (group 32) with AVX-512 VNNI. Returns false, having written nothing, when
/// the matrix is another dtype or shape, or the scratch is short; the caller then runs the
/// portable path.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) fn linear_quant_vnni(out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], accumulate: bool, scratch: &mut [f32]) -> bool {
    let order = |q4| if q4 { QuantOrder::Q4Pairs } else { QuantOrder::Natural };
    let multiple = |q4| if q4 { 128 } else { 64 };
    let Some(QuantJob { q4, data, scales, rows, cols, tokens, gpr, q, xs, sums, .. }) = quant_job(x, out.len(), w, VNNI_GROUP, multiple, order, scratch) else {
        return false;
    };
    let row_bytes = if q4 { cols / 2 } else { cols };
    // prefill on AMX tiles where the CPU has them (16 rows × 16 tokens per tile product)
    let tiles = tokens >= amx::MIN_TOKENS && cols <= amx::MAX_COLS && amx::available();
    if tiles {
        let wt = amx::Weights { q4, data, scales, rows, cols };
        // SAFETY: AMX is available; weights and activations were checked above.
        unsafe { amx::linear(out, &wt, q, xs, tokens, bias, accumulate) };
        return true;
    }
    let rq = RowQuant { q4, cols, gpr, q: q.as_ptr(), xs: xs.as_ptr(), sums: sums.as_ptr() };
    // SAFETY (the row pointers below): row o < rows has `row_bytes` bytes and `gpr` scales
    // (checked above).
    let row = |o: usize| unsafe { (data.as_ptr().add(o * row_bytes), scales.as_ptr().add(o * gpr)) };
    let tiled = tokens / TOKEN_TILE * TOKEN_TILE;
    let mut o = 0;
    while o < rows {
        // two rows at a time where there are two, for the tokens after the last tile of 4
        let pair = o + 1 < rows;
        for r in o..if pair { o + 2 } else { o + 1 } {
            let (wrow, wsc) = row(r);
            for t0 in (0..tiled).step_by(TOKEN_TILE) {
                // SAFETY: tokens t0..t0+4 < tokens have their activations in q/xs/sums (checked).
                let ys = unsafe { rq.row_tokens::<TOKEN_TILE>(wrow, wsc, t0) };
                for (k, y) in ys.into_iter().enumerate() {
                    super::store_out(out, rows, bias, accumulate, t0 + k, r, y);
                }
            }
        }
        for t in tiled..tokens {
            if pair {
                // SAFETY: rows o, o+1 exist; token t < tokens, as above.
                let [a, b] = unsafe { if q4 { rq.rows2_token::<true>(row(o), row(o + 1), t) } else { rq.rows2_token::<false>(row(o), row(o + 1), t) } };
                super::store_out(out, rows, bias, accumulate, t, o, a);
                super::store_out(out, rows, bias, accumulate, t, o + 1, b);
            } else {
                let (wrow, wsc) = row(o);
                // SAFETY: as above, token t < tokens.
                let [y] = unsafe { rq.row_tokens::<1>(wrow, wsc, t) };
                super::store_out(out, rows, bias, accumulate, t, o, y);
            }
        }
        o += if pair { 2 } else { 1 };
    }
    true
}

/// The quantized activations of a [`linear_quant_vnni`] call.
struct RowQuant {
    q4: bool,
    cols: usize,
    gpr: usize,
    /// int8 values `[T, cols]` (q4: in [`QuantOrder::Q4Pairs`] order).
    q: *const i8,
    /// Scales `[T, gpr]`.
    xs: *const f32,
    /// Sums of the int8 values `[T, gpr]`.
    sums: *const i32,
}

impl RowQuant {
    /// One weight row (`wrow`, scales `wsc`) against tokens t0..t0+NT: each block of 16 groups'
    /// weights is loaded once and used for the NT tokens (accumulators stay in registers).
    ///
    /// # Safety
    /// `wrow`/`wsc` must hold one row (`cols` or `cols/2` bytes, `gpr` scales) and tokens
    /// t0..t0+NT must exist in `q`, `xs`, `sums`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn row_tokens<const NT: usize>(&self, wrow: *const u8, wsc: *const f32, t0: usize) -> [f32; NT] {
        let Self { q4, cols, gpr, q, xs, sums } = *self;
        let shift = _mm512_set1_epi32(if q4 { 3 } else { 7 }); // offset K = 8 (q4) or 128 (q8)
        let mut acc = [_mm512_setzero_ps(); NT];
        // one block of ng ≤ 16 groups from group g0; called with a constant 16 for the full
        // blocks, so that their chunk loops unroll without a test per chunk
        let mut block = |g0: usize, ng: usize| {
            let mask: __mmask16 = ((1u32 << ng) - 1) as u16;
            // SAFETY (the raw reads of this block): groups g0..g0+ng are inside the row and
            // inside each token's activations (the caller's contract).
            let sw = unsafe { _mm512_maskz_loadu_ps(mask, wsc.add(g0)) };
            let wblk = unsafe { wrow.add(if q4 { g0 * 16 } else { g0 * 32 }) };
            // Ask for the weights PREFETCH_BYTES ahead (rows are contiguous, so this runs into
            // the next rows): the hardware prefetcher alone leaves decode waiting on loads. A
            // prefetch never faults, so running past the matrix is harmless. Into L2 (T1), not
            // L1: measured in alternating pairs, q4 decode 95-134 -> 123-140 tok/s and q8
            // 66-72 -> 68-74 (the f32/f16 kernels keep T0, which measured better for them).
            for line in 0..if q4 { 4 } else { 8 } {
                _mm_prefetch::<_MM_HINT_T1>(wblk.wrapping_add(PREFETCH_BYTES + 64 * line).cast());
            }
            let wv = if q4 { unsafe { load_q4_block(wblk, ng / 4) } } else { unsafe { load_q8_block(wblk, ng / 2) } };
            for (k, a) in acc.iter_mut().enumerate() {
                let t = t0 + k;
                let xt = unsafe { q.add(t * cols + g0 * 32) };
                let isum = if q4 { unsafe { sums_q4(&wv, xt, ng / 4) } } else { unsafe { sums_q8(&wv, xt, ng / 2) } };
                let xsum = unsafe { _mm512_maskz_loadu_epi32(mask, sums.add(t * gpr + g0)) };
                let isum = _mm512_sub_epi32(isum, _mm512_sllv_epi32(xsum, shift));
                let sx = unsafe { _mm512_maskz_loadu_ps(mask, xs.add(t * gpr + g0)) };
                let term = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sw, sx));
                *a = _mm512_mask_add_ps(*a, mask, *a, term);
            }
        };
        let full = gpr / 16 * 16;
        for g0 in (0..full).step_by(16) {
            block(g0, 16);
        }
        if full < gpr {
            block(full, gpr - full);
        }
        acc.map(|a| reduce512(a))
    }

    /// Two weight rows `a`, `b` (pointers as in [`Self::row_tokens`]) against token t: for
    /// each row, what `row_tokens::<1>` gives, bit for bit, with less work. When the last block
    /// of a row is at most half full (768 columns = 16 + 8 groups: every GPT-2 matrix but
    /// `mlp.c_proj`), the two rows' tails go through one block: row a's groups in lanes 0..8,
    /// row b's in lanes 8..16. Each lane does the same integer and float operations as it does
    /// alone, and one 256-bit swap moves row b's terms to lanes 0..8 of its own accumulator.
    ///
    /// # Safety
    /// As [`Self::row_tokens`], for both rows and token t.
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn rows2_token<const Q4: bool>(&self, a: (*const u8, *const f32), b: (*const u8, *const f32), t: usize) -> [f32; 2] {
        let Self { cols, gpr, q, xs, sums, .. } = *self;
        let q4 = Q4;
        let shift = _mm512_set1_epi32(if q4 { 3 } else { 7 }); // offset K = 8 (q4) or 128 (q8)
        // weight bytes per group; groups per 64-byte chunk of weights
        let (gbytes, per_chunk) = if q4 { (16, 4) } else { (32, 2) };
        // SAFETY (every raw read below): groups 0..gpr of token t and of both rows exist (the
        // caller's contract), and each read stays inside them.
        let xt = unsafe { q.add(t * cols) };
        let (xsum_t, sx_t) = unsafe { (sums.add(t * gpr), xs.add(t * gpr)) };
        // the float term of 16 integer group sums: (isum - K·Σx) as f32 · (sw · sx)
        let term = |isum: __m512i, xsum: __m512i, sw: __m512, sx: __m512| {
            let isum = _mm512_sub_epi32(isum, _mm512_sllv_epi32(xsum, shift));
            _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sw, sx))
        };
        // row (wrow, wsc) from group g0 for ng ≤ 16 groups, as one block of row_tokens
        let block = |(wrow, wsc): (*const u8, *const f32), acc: &mut __m512, g0: usize, ng: usize| {
            let mask: __mmask16 = ((1u32 << ng) - 1) as u16;
            let wblk = unsafe { wrow.add(g0 * gbytes) };
            for line in 0..if q4 { 4 } else { 8 } {
                _mm_prefetch::<_MM_HINT_T1>(wblk.wrapping_add(PREFETCH_BYTES + 64 * line).cast());
            }
            let n = ng / per_chunk;
            let x = unsafe { xt.add(g0 * 32) };
            let isum = if q4 { unsafe { sums_q4(&load_q4_block(wblk, n), x, n) } } else { unsafe { sums_q8(&load_q8_block(wblk, n), x, n) } };
            let (xsum, sw, sx) = unsafe {
                (_mm512_maskz_loadu_epi32(mask, xsum_t.add(g0)), _mm512_maskz_loadu_ps(mask, wsc.add(g0)), _mm512_maskz_loadu_ps(mask, sx_t.add(g0)))
            };
            *acc = _mm512_mask_add_ps(*acc, mask, *acc, term(isum, xsum, sw, sx));
        };
        let mut acc = [_mm512_setzero_ps(); 2];
        let full = gpr / 16 * 16;
        for g0 in (0..full).step_by(16) {
            for (row, acc) in [a, b].into_iter().zip(&mut acc) {
                block(row, acc, g0, 16);
            }
        }
        let ng = gpr - full;
        if ng > 8 {
            for (row, acc) in [a, b].into_iter().zip(&mut acc) {
                block(row, acc, full, ng);
            }
        } else if ng > 0 {
            // Both tails in one block: row a's chunks in the first half, row b's in the second.
            // A row has n of the half's chunks; the loads of the others are masked off (zero
            // weights and activations, no memory touched), so their sums are 0.
            let n = ng / per_chunk;
            let x = unsafe { xt.add(full * 32) };
            let isum = if q4 {
                let (low, mut s) = (_mm512_set1_epi8(0x0F), [_mm512_setzero_si512(); 4]);
                for ((wrow, _), sk) in [a, b].into_iter().zip(s.as_chunks_mut::<2>().0) {
                    for (c, sc) in sk.iter_mut().enumerate() {
                        let m: __mmask64 = if c < n { !0 } else { 0 };
                        let (w, even, odd) = unsafe {
                            (
                                _mm512_maskz_loadu_epi8(m, wrow.add(full * gbytes).wrapping_add(64 * c).cast()),
                                _mm512_maskz_loadu_epi8(m, x.wrapping_add(128 * c)),
                                _mm512_maskz_loadu_epi8(m, x.wrapping_add(128 * c + 64)),
                            )
                        };
                        let (lo, hi) = (_mm512_and_si512(w, low), _mm512_and_si512(_mm512_srli_epi16::<4>(w), low));
                        *sc = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, even), hi, odd);
                    }
                }
                fold4(s[0], s[1], s[2], s[3])
            } else {
                let (bias, mut d) = (_mm512_set1_epi8(-128), [_mm512_setzero_si512(); 8]);
                for ((wrow, _), dk) in [a, b].into_iter().zip(d.as_chunks_mut::<4>().0) {
                    for (c, dc) in dk.iter_mut().enumerate() {
                        let m: __mmask64 = if c < n { !0 } else { 0 };
                        let (w, xv) = unsafe {
                            (_mm512_maskz_loadu_epi8(m, wrow.add(full * gbytes).wrapping_add(64 * c).cast()), _mm512_maskz_loadu_epi8(m, x.wrapping_add(64 * c)))
                        };
                        *dc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(w, bias), xv);
                    }
                }
                fold8(d)
            };
            // lanes 0..8 and 8..16 both take the activations' groups full..full+ng
            let mask: __mmask16 = ((1u32 << ng) - 1) as u16;
            let (xsum, sx) = unsafe { (_mm512_maskz_loadu_epi32(mask, xsum_t.add(full)), _mm512_maskz_loadu_ps(mask, sx_t.add(full))) };
            let (xsum, sx) = (_mm512_shuffle_i32x4::<0x44>(xsum, xsum), _mm512_shuffle_f32x4::<0x44>(sx, sx));
            let sw = unsafe { _mm512_shuffle_f32x4::<0x44>(_mm512_maskz_loadu_ps(mask, a.1.add(full)), _mm512_maskz_loadu_ps(mask, b.1.add(full))) };
            let tm = term(isum, xsum, sw, sx);
            acc[0] = _mm512_mask_add_ps(acc[0], mask, acc[0], tm);
            acc[1] = _mm512_mask_add_ps(acc[1], mask, acc[1], _mm512_shuffle_f32x4::<0x4E>(tm, tm));
        }
        acc.map(|a| reduce512(a))
    }
}

/// Up to 8 chunks of 64 q8 weights (16 groups), made unsigned (`w ^ 0x80` = w + 128).
///
/// # Safety
/// `w` must be readable for `n · 64` bytes, `n ≤ 8`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn load_q8_block(w: *const u8, n: usize) -> [__m512i; 8] {
    let bias = _mm512_set1_epi8(-128);
    let mut v = [_mm512_setzero_si512(); 8];
    for (c, v) in v.iter_mut().enumerate().take(n) {
        // SAFETY: c < n, so bytes 64c..64c+64 are inside the caller's range.
        *v = _mm512_xor_si512(unsafe { _mm512_loadu_si512(w.add(64 * c).cast()) }, bias);
    }
    v
}

/// Up to 4 chunks of 64 packed q4 bytes (16 groups), split into low nibbles (v[2c]) and high
/// nibbles (v[2c + 1]), each the stored `q + 8` (unsigned).
///
/// # Safety
/// `w` must be readable for `n · 64` bytes, `n ≤ 4`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn load_q4_block(w: *const u8, n: usize) -> [__m512i; 8] {
    let low = _mm512_set1_epi8(0x0F);
    let mut v = [_mm512_setzero_si512(); 8];
    for (c, [lo, hi]) in v.as_chunks_mut::<2>().0.iter_mut().enumerate().take(n) {
        // SAFETY: c < n, so bytes 64c..64c+64 are inside the caller's range.
        let p = unsafe { _mm512_loadu_si512(w.add(64 * c).cast()) };
        *lo = _mm512_and_si512(p, low);
        *hi = _mm512_and_si512(_mm512_srli_epi16::<4>(p), low);
    }
    v
}

/// The 16 group sums Σ (w + 128)·x of a q8 block: chunk c holds groups 2c (lanes 0–7) and
/// 2c + 1 (lanes 8–15).
///
/// # Safety
/// `x` must be readable for `n · 64` bytes, `n ≤ 8`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn sums_q8(w: &[__m512i; 8], x: *const i8, n: usize) -> __m512i {
    let mut d = [_mm512_setzero_si512(); 8];
    for (c, (d, &w)) in d.iter_mut().zip(w).enumerate().take(n) {
        // SAFETY: c < n, inside the caller's range.
        *d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, unsafe { _mm512_loadu_si512(x.add(64 * c).cast()) });
    }
    fold8(d)
}

/// Folds the `vpdpbusd` results of 8 q8 chunks (chunk c: groups 2c in lanes 0–7, 2c + 1 in
/// lanes 8–15) into one vector of 16 group sums, lane g = group g.
#[inline]
#[target_feature(enable = "avx512f")]
fn fold8(d: [__m512i; 8]) -> __m512i {
    // pairs of chunks -> 128-bit lane k of s[p] holds four partial sums of group 4p + k
    let pair = |a: __m512i, b: __m512i| _mm512_add_epi32(_mm512_shuffle_i32x4::<0x88>(a, b), _mm512_shuffle_i32x4::<0xDD>(a, b));
    fold4(pair(d[0], d[1]), pair(d[2], d[3]), pair(d[4], d[5]), pair(d[6], d[7]))
}

/// The 16 group sums Σ (nibble)·x of a q4 block, activations in the order of
/// [`QuantOrder::Q4Pairs`]: chunk c (groups 4c..4c+4) has 64 even-position values, then 64
/// odd-position ones; 128-bit lane k of the result of chunk c holds group 4c + k.
///
/// # Safety
/// `x` must be readable for `n · 128` bytes, `n ≤ 4`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn sums_q4(w: &[__m512i; 8], x: *const i8, n: usize) -> __m512i {
    let mut s = [_mm512_setzero_si512(); 4];
    for (c, (s, [lo, hi])) in s.iter_mut().zip(w.as_chunks::<2>().0).enumerate().take(n) {
        // SAFETY: c < n ≤ 4, so bytes 128c..128c+128 are inside the caller's range.
        let (even, odd) = unsafe { (_mm512_loadu_si512(x.add(128 * c).cast()), _mm512_loadu_si512(x.add(128 * c + 64).cast())) };
        *s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), *lo, even), *hi, odd);
    }
    fold4(s[0], s[1], s[2], s[3])
}

/// Folds four vectors whose 128-bit lane k holds four partial sums of group 4j + k (vector j)
/// into one vector of 16 total group sums, lane g = group g.
#[inline]
#[target_feature(enable = "avx512f")]
fn fold4(s0: __m512i, s1: __m512i, s2: __m512i, s3: __m512i) -> __m512i {
    // lane k: [g_k, g_k, g_{4+k}, g_{4+k}]
    let r0 = _mm512_add_epi32(_mm512_unpacklo_epi64(s0, s1), _mm512_unpackhi_epi64(s0, s1));
    let r1 = _mm512_add_epi32(_mm512_unpacklo_epi64(s2, s3), _mm512_unpackhi_epi64(s2, s3));
    // lane k: [g_k, g_{4+k}, g_{8+k}, g_{12+k}], i.e. element 4k + j holds group k + 4j
    let (f0, f1) = (_mm512_castsi512_ps(r0), _mm512_castsi512_ps(r1));
    let t = _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps::<0x88>(f0, f1)), _mm512_castps_si512(_mm512_shuffle_ps::<0xDD>(f0, f1)));
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_epi32(order, t)
}

/// [`super::reduce`] on a vector: lanes i + i+8, then i + i+4, i + i+2, i + i+1 (same tree,
/// same bits).
#[inline]
#[target_feature(enable = "avx512f")]
fn reduce512(v: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(v);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    let a8 = _mm256_add_ps(lo, hi);
    let a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps::<1>(a8));
    let a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
    let a1 = _mm_add_ss(a2, _mm_shuffle_ps::<1>(a2, a2));
    _mm_cvtss_f32(a1)
}

// ---- q8 / q4 with AVX2 ------------------------------------------------------------------------
//
// For CPUs with AVX2 and no AVX-512 VNNI. The group sums are exact i32, as everywhere:
// - q8 decode in groups of 32 ([`Avx2Quant::decode_eights`]): `vpmaddubsw` of |w| and x with
//   w's sign ([`dot32_q8`]), one vector per group, 8 groups folded by [`sum8`].
// - q8 otherwise (2-3 tokens, or other groups): two groups' weights at a time are widened to
//   int16 times 256 by `vpunpcklbw`/`vpunpckhbw` with zero (each 128-bit half from one group),
//   the activations were widened to int16 in the same order once per call
//   ([`QuantOrder::Wide16`]), and `vpmaddwd` multiplies them in pairs: every sum is exact
//   (|256 · w · x| · 32 < 2³¹) and a multiple of 256, and one arithmetic shift takes the 256 off.
// - q4: the nibbles (stored q + 8, 0..15) meet the activations in `vpmaddubsw`, whose i16 pair
//   sums stay below 2 · 15 · 127 (no saturation; two of them added, below 2¹⁵), then `vpmaddwd`
//   by ones, and the + 8 is taken off with the activation sums.
// In the last two, one vector holds the partial sums of two groups (lanes 0–3 and 4–7); four
// of them fold with unpacks and adds (`vphaddd` is three micro-ops on one port) and a permute
// into one vector of eight group sums per block of 8 groups. Every block's sums then take
// `combine_groups`' float steps lane for lane (group g into lane g mod 16: lanes 0–7 and 8–15
// in two registers), then the same tree.
//
// This is decode's kernel, and prefill's for fewer than 4 tokens or groups other than 32 (the
// rest goes to the lane tiles below). Prefill keeps a block of rows (≤ 256 KiB of weights) in
// L2 and the activations of a block of 8 tokens in L1; each row's weights are loaded and widened
// once per block of tokens. q4: rows of groups of 32, whole blocks of 8 in `block_q4` and a
// last 1-7 groups one by one (`group_q4`: stories15M's 288 columns are 8 + 1 groups).
//
// Decode (one token, q4 and q8 in groups of 32) goes 8 rows at a time (`decode_eights`): the
// whole blocks of two rows at a time, two blocks side by side (`row_pair_blocks`), the last
// 1-7 groups of the 8 rows at once, and the 8 sums reduced together (`rows8_end`).

/// Groups per AVX2 block.
const AVX2_BLOCK: usize = 8;
/// Tokens per block of activations in q8/q4 prefill (q8: int16, 1.5 KiB a token at 768 columns).
const QUANT_TOKENS: usize = 8;

/// Lanes 0–3 `a0+a2, b0+b2, a1+a3, b1+b3` (and so in lanes 4–7): one step of folding the partial
/// sums of two groups, a and b, into one vector.
#[inline]
#[target_feature(enable = "avx2")]
fn fold32(a: __m256i, b: __m256i) -> __m256i {
    _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b))
}

/// Lanes 0–3 `a0+a2, a1+a3, b0+b2, b1+b3` (and so in lanes 4–7): the next step, after [`fold32`].
#[inline]
#[target_feature(enable = "avx2")]
fn fold64(a: __m256i, b: __m256i) -> __m256i {
    _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b))
}

/// q4's int16 partial sums of a block (`s[c]`: lanes 0–7 group 2c, 8–15 group 2c + 1, each
/// |·| ≤ 7680) folded twice in int16 (|·| ≤ 30720, exact), pairs of lanes kept together, so that
/// one `vpmaddwd` by ones then widens each group's last two lanes into its dword: the integer
/// sums [`fold32`]/[`fold64`] give after a madd per vector, with one madd instead of four. The
/// dwords come out as groups 0, 2, 4, 6 | 1, 3, 5, 7.
#[inline]
#[target_feature(enable = "avx2")]
fn fold16(s0: __m256i, s1: __m256i, s2: __m256i, s3: __m256i) -> __m256i {
    let f01 = _mm256_add_epi16(_mm256_unpacklo_epi32(s0, s1), _mm256_unpackhi_epi32(s0, s1));
    let f23 = _mm256_add_epi16(_mm256_unpacklo_epi32(s2, s3), _mm256_unpackhi_epi32(s2, s3));
    _mm256_add_epi16(_mm256_unpacklo_epi64(f01, f23), _mm256_unpackhi_epi64(f01, f23))
}

/// A q4 block's 128 bytes at `w` (8 groups of 32) as four vectors of two groups' nibbles:
/// `[low, high]` = the even elements, the odd ones (stored q + 8, 0..15).
///
/// # Safety
/// 128 bytes at `w` must be readable; AVX2 (always inlined into the AVX2 kernels).
#[inline(always)]
unsafe fn q4_nibbles(w: *const u8) -> [[__m256i; 2]; 4] {
    // SAFETY: the caller's contract.
    unsafe {
        // (a loop, not `array::from_fn`: its closure would not inherit the caller's AVX2 and
        // would be called out of line)
        let low = _mm256_set1_epi8(0x0F);
        let mut n = [[_mm256_setzero_si256(); 2]; 4];
        for (c, n) in n.iter_mut().enumerate() {
            let p = _mm256_loadu_si256(w.add(32 * c).cast());
            *n = [_mm256_and_si256(p, low), _mm256_and_si256(_mm256_srli_epi16::<4>(p), low)];
        }
        n
    }
}

/// The exact products of 32 q8 weights at `w` with 32 int8 activations at `x`, as 8 int32
/// partial sums: `vpmaddubsw` of |w| (unsigned, 0..=128) and x with w's sign (`vpsignb`: x · sgn
/// w, 0 where w is 0), then `vpmaddwd` by ones. 32 multiply-adds in `vpmaddubsw` where
/// `vpmaddwd` on widened weights does 16 (Zen 3, 512 × 768 in L2: 24.0 -> 27 G MAC/s). Exact: a
/// pair's sum is at most 2 · 128 · 127 = 32512 < 2¹⁵ because the activations are quantized to
/// ±127 ([`super::quantize_group_q8`]); a weight of -128 is 128 · -x, also exact.
///
/// # Safety
/// 32 bytes at `w` and at `x` must be readable; AVX2 (always inlined into the AVX2 kernels: no
/// `#[target_feature]`, which would forbid that).
#[inline(always)]
unsafe fn dot32_q8(w: *const u8, x: *const i8) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe {
        let (w, x) = (_mm256_loadu_si256(w.cast()), _mm256_loadu_si256(x.cast()));
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1))
    }
}

/// Lane j = the sum of `v[j]`'s 8 lanes (integer, exact): [`fold32`] and [`fold64`] leave
/// `[v0..v3's lanes 0-3 | v0..v3's lanes 4-7]` and the same for v4..v7, and one add of their
/// 128-bit halves finishes. (Blends in place of the unpacks, to spare the shuffle ports, were no
/// faster on Zen 3.)
#[inline]
#[target_feature(enable = "avx2")]
fn sum8(v: [__m256i; 8]) -> __m256i {
    let [v0, v1, v2, v3, v4, v5, v6, v7] = v;
    let (a, b) = (fold64(fold32(v0, v1), fold32(v2, v3)), fold64(fold32(v4, v5), fold32(v6, v7)));
    _mm256_add_epi32(_mm256_permute2x128_si256::<0x20>(a, b), _mm256_permute2x128_si256::<0x31>(a, b))
}

/// q8 / q4 `linear` (q8: groups of 4..=32; q4: groups of 32) with AVX2. Returns false, having
/// written nothing, for other dtypes and shapes or a short scratch.
#[target_feature(enable = "avx2,f16c")]
fn linear_quant_avx2(out: &mut [f32], x: &[f32], w: &Matrix<'_>, bias: &[f32], accumulate: bool, scratch: &mut [f32]) -> bool {
    // q8: groups of 4..=32 values, a multiple of 4 (masked dword loads for groups below 32);
    // q4: groups of 32, rows of whole blocks of 8 groups
    let group = match w.data {
        MatrixData::Q8 { group, .. } if group % 4 == 0 && (4..=32).contains(&group) => group,
        _ => VNNI_GROUP,
    };
    // prefill of 4 tokens or more in groups of 32: the lane tiles (see the section after
    // `Avx2Quant`), which read q4 activations in their natural order
    // tokens in this call (quant_job computes the same, after the activations' order is chosen)
    let batch = if w.cols > 0 && w.rows > 0 { (x.len() / w.cols).min(out.len() / w.rows) } else { 0 };
    let lanes = group == VNNI_GROUP && batch >= LANE_TOKENS;
    // decode of q8 in groups of 32 ([`Avx2Quant::decode_eights`]) reads int8 activations in
    // their natural order
    let q8_decode = group == VNNI_GROUP && batch == 1;
    let order = |q4| match (q4, lanes) {
        (true, true) => QuantOrder::Natural,
        (true, false) => QuantOrder::Q4Pairs,
        (false, _) if q8_decode => QuantOrder::Natural,
        (false, _) => QuantOrder::Wide16,
    };
    let multiple = |_| group;
    let Some(QuantJob { q4, data, scales, rows, cols, tokens, gpr, q, xs, sums, wide }) = quant_job(x, out.len(), w, group, multiple, order, scratch) else {
        return false;
    };
    let row_bytes = if q4 { cols / 2 } else { cols };
    let full = group == VNNI_GROUP && gpr % AVX2_BLOCK == 0;
    let ahead = decode_prefetch(false);
    let a = Avx2Quant { cols, gpr, group, x_stride: wide16_len(cols, group), q: q.as_ptr(), wide: wide.as_ptr(), xs: xs.as_ptr(), sums: sums.as_ptr(), ahead };
    let mut outs = Outputs { out, rows, bias, accumulate };
    if lanes {
        // every row and token in lane tiles: 4 tokens a tile, then the last 1-3 tokens
        let whole = tokens / LANE_TOKENS * LANE_TOKENS;
        // SAFETY: quant_job checked the rows' data and scales and the tokens' activations (in
        // the order the lane tiles read: Wide16 for q8, Natural for q4).
        unsafe {
            lane_tiles::<LANE_TOKENS>(&a, q4, data, scales, 0..whole, &mut outs);
            match tokens - whole {
                1 => lane_tiles::<1>(&a, q4, data, scales, whole..tokens, &mut outs),
                2 => lane_tiles::<2>(&a, q4, data, scales, whole..tokens, &mut outs),
                3 => lane_tiles::<3>(&a, q4, data, scales, whole..tokens, &mut outs),
                _ => {}
            }
        }
        return true;
    }
    if q8_decode && !q4 {
        // SAFETY: quant_job checked the rows' data and scales and token 0's natural-order
        // activations.
        unsafe { a.decode_eights::<false>(data.as_ptr(), scales.as_ptr(), 0..rows, 0, &mut outs) };
        return true;
    }
    let block_rows = (256 * 1024 / row_bytes).max(1);
    for r0 in (0..rows).step_by(block_rows) {
        let r1 = (r0 + block_rows).min(rows);
        for t0 in (0..tokens).step_by(QUANT_TOKENS) {
            let nt = (tokens - t0).min(QUANT_TOKENS);
            // SAFETY: rows r0..r1 ≤ rows have `row_bytes` bytes and `gpr` scales each, and tokens
            // t0..t0+nt ≤ tokens their activations (all checked by quant_job).
            unsafe {
                if q4 {
                    match nt {
                        1 => a.rows_q4::<1>(data.as_ptr(), scales.as_ptr(), r0..r1, t0, nt, &mut outs),
                        _ => a.rows_q4::<QUANT_TOKENS>(data.as_ptr(), scales.as_ptr(), r0..r1, t0, nt, &mut outs),
                    }
                } else if gpr <= 4 {
                    // rows of at most 4 groups: two rows a block; with 4 groups of 16 or more,
                    // plain loads (not masked ones) for every pair with a row after it (a
                    // group's 32-byte read stays inside the matrix)
                    let pairs_end = r0 + (r1 - r0) / 2 * 2;
                    let plain_end = if gpr == 4 && group >= 16 { (r0 + rows.saturating_sub(2).saturating_sub(r0).div_ceil(2) * 2).min(pairs_end) } else { r0 };
                    let (wp, sp) = (data.as_ptr(), scales.as_ptr());
                    match nt {
                        1 => {
                            a.rows2_q8::<1, true>(wp, sp, r0..plain_end, t0, nt, &mut outs);
                            a.rows2_q8::<1, false>(wp, sp, plain_end..pairs_end, t0, nt, &mut outs);
                        }
                        _ => {
                            a.rows2_q8::<QUANT_TOKENS, true>(wp, sp, r0..plain_end, t0, nt, &mut outs);
                            a.rows2_q8::<QUANT_TOKENS, false>(wp, sp, plain_end..pairs_end, t0, nt, &mut outs);
                        }
                    }
                    if pairs_end < r1 {
                        match nt {
                            1 => a.rows_q8::<false, 1>(data.as_ptr(), scales.as_ptr(), pairs_end..r1, t0, nt, &mut outs),
                            _ => a.rows_q8::<false, QUANT_TOKENS>(data.as_ptr(), scales.as_ptr(), pairs_end..r1, t0, nt, &mut outs),
                        }
                    }
                } else {
                    match (full, nt) {
                        (true, 1) => a.rows_q8::<true, 1>(data.as_ptr(), scales.as_ptr(), r0..r1, t0, nt, &mut outs),
                        (true, _) => a.rows_q8::<true, QUANT_TOKENS>(data.as_ptr(), scales.as_ptr(), r0..r1, t0, nt, &mut outs),
                        (false, 1) => a.rows_q8::<false, 1>(data.as_ptr(), scales.as_ptr(), r0..r1, t0, nt, &mut outs),
                        (false, _) => a.rows_q8::<false, QUANT_TOKENS>(data.as_ptr(), scales.as_ptr(), r0..r1, t0, nt, &mut outs),
                    }
                }
            }
        }
    }
    true
}

/// The quantized activations of a [`linear_quant_avx2`] call.
struct Avx2Quant {
    cols: usize,
    gpr: usize,
    group: usize,
    /// Halves of `wide` per token ([`wide16_len`]).
    x_stride: usize,
    /// q4: int8 values `[T, cols]` in [`QuantOrder::Q4Pairs`] order.
    q: *const i8,
    /// q8: int16 values in [`QuantOrder::Wide16`] order, `x_stride` a token.
    wide: *const i16,
    /// Scales `[T, gpr]`.
    xs: *const f32,
    /// Sums of the int8 values `[T, gpr]`.
    sums: *const i32,
    /// q8 decode asks for the weights ahead too ([`decode_prefetch`]; prefill always does).
    ahead: bool,
}

/// The first `n` of 4 dword lanes set (a `vpmaskmovd` mask).
#[inline]
#[target_feature(enable = "avx2")]
fn mask4(n: usize) -> __m128i {
    _mm_cmpgt_epi32(_mm_set1_epi32(n as i32), _mm_setr_epi32(0, 1, 2, 3))
}

/// The first `n` of 8 dword lanes set.
#[inline]
#[target_feature(enable = "avx2")]
fn mask8(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
}

/// Two q8 groups at `p` and `p + group` as int16 times 256 in the [`QuantOrder::Wide16`] order
/// of a pair: `[x 0–15 | y 0–15]` and `[x 16–31 | y 16–31]`, each widened in two; `mx`, `my`:
/// each group's dword masks of its bytes 0–15 and 16–31 (masked lanes are not read, and 0).
/// PLAIN: the masks are ignored and each group's 32 bytes from its start are read whole; the
/// bytes past a group (the next group's, or the next row's) then meet the zeros its
/// activations are padded with in [`QuantOrder::Wide16`], so they add exactly 0 to the integer
/// sums, and the result is the masked one's.
///
/// # Safety
/// The bytes the masks keep (PLAIN: `p..p + group + 32`) must be readable; AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn widen_pair<const PLAIN: bool>(p: *const u8, group: usize, mx: [__m128i; 2], my: [__m128i; 2]) -> [__m256i; 4] {
    let zero = _mm256_setzero_si256();
    let q = p.wrapping_add(group);
    // SAFETY: the caller's contract.
    let load = |p: *const u8, m: __m128i| unsafe { if PLAIN { _mm_loadu_si128(p.cast()) } else { _mm_maskload_epi32(p.cast(), m) } };
    let (lo, hi) = (
        _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(load(p, mx[0])), load(q, my[0])),
        _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(load(p.wrapping_add(16), mx[1])), load(q.wrapping_add(16), my[1])),
    );
    [_mm256_unpacklo_epi8(zero, lo), _mm256_unpackhi_epi8(zero, lo), _mm256_unpacklo_epi8(zero, hi), _mm256_unpackhi_epi8(zero, hi)]
}

/// The partial sums of a pair of groups (lanes 0–3: the first, 4–7: the second; times 256): its
/// widened weights `w` against the pair's 64 int16 activations at `x`.
///
/// # Safety
/// `x` must be readable for 64 halves; AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn pair_sums(w: &[__m256i; 4], x: *const i16) -> __m256i {
    let [w0, w1, w2, w3] = *w;
    // SAFETY: the caller's contract.
    let [x0, x1, x2, x3] = unsafe { [0, 16, 32, 48].map(|k| _mm256_loadu_si256(x.add(k).cast())) };
    let (a, b) = (_mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1)), _mm256_add_epi32(_mm256_madd_epi16(w2, x2), _mm256_madd_epi16(w3, x3)));
    _mm256_add_epi32(a, b)
}

impl Avx2Quant {
    /// q8 rows `rows` (of `wrows`/`wsc`, the matrix's bytes and scales) against tokens
    /// t0..t0+nt (nt ≤ NT; NT = 1 for decode keeps everything in registers): per block of 8 groups, the row's weights are loaded and widened once
    /// and used for the nt tokens. FULL: groups of 32 and whole blocks (plain loads); else any
    /// group of 4..=32 values, a multiple of 4: a group's bytes are read with masked dword loads
    /// (nothing past it is touched), and the groups missing from the last block are zero in the
    /// weights, the activations' padding and the scales, so their lanes add +0.0 (a lane that
    /// starts at +0.0 and adds products never holds -0.0, so that changes nothing).
    ///
    /// # Safety
    /// The rows must exist (`cols` bytes, `gpr` scales each) and tokens t0..t0+nt must exist in
    /// `wide` (`x_stride` halves each) and `xs`; FULL only with groups of 32 and `gpr` a multiple
    /// of 8; AVX2.
    #[inline(never)]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn rows_q8<const FULL: bool, const NT: usize>(&self, wrows: *const u8, wsc: *const f32, rows: core::ops::Range<usize>, t0: usize, nt: usize, outs: &mut Outputs<'_>) {
        let Self { cols, gpr, group, .. } = *self;
        let nt = nt.min(NT);
        // masked loads (groups below 32; the last, partial block): the dword masks of each
        // group's bytes 0–15 and 16–31, all clear for the groups a block does not have, so the
        // loads take no branch and touch only a row's own bytes
        let masks_for = |ng: usize| -> [[__m128i; 2]; AVX2_BLOCK] {
            core::array::from_fn(|g| {
                let n = if g < ng { group } else { 0 };
                [mask4(n.min(16) / 4), mask4(n.saturating_sub(16) / 4)]
            })
        };
        let full = gpr / AVX2_BLOCK * AVX2_BLOCK;
        let (full_masks, last_masks) = (masks_for(AVX2_BLOCK), masks_for(gpr - full));
        let plain = FULL || group == VNNI_GROUP;
        // decode: the sums of 8 rows at a time reduced together ([`reduce8_avx2`])
        let store = &mut |t: usize, o: usize, y: f32| outs.one(t, o, y);
        let mut pending = Pending8::new();
        for o in rows {
            // SAFETY: the caller's contract (row o, tokens t0..t0+nt).
            let (wrow, wsc) = unsafe { (wrows.add(o * cols), wsc.add(o * gpr)) };
            let (mut lo, mut hi) = ([_mm256_setzero_ps(); NT], [_mm256_setzero_ps(); NT]);
            // blocks in pairs: group g goes to lane g % 16 (each call names its accumulator, so
            // that they stay in registers: chosen at run time they went through the stack, 10%
            // of a 288-column decode's time in one store)
            let masks = if plain { None } else { Some(&full_masks) };
            for g0 in (0..full).step_by(2 * AVX2_BLOCK) {
                // SAFETY: the caller's contract (groups g0..g0+8 of the row and the tokens).
                unsafe { self.block_q8::<NT>(wrow, wsc, g0, AVX2_BLOCK, masks, t0, nt, &mut lo) };
                if g0 + AVX2_BLOCK < full {
                    // SAFETY: as above, the next 8 groups.
                    unsafe { self.block_q8::<NT>(wrow, wsc, g0 + AVX2_BLOCK, AVX2_BLOCK, masks, t0, nt, &mut hi) };
                }
            }
            if !FULL && full < gpr {
                // SAFETY: as above, groups full..gpr.
                unsafe {
                    if (full / AVX2_BLOCK).is_multiple_of(2) {
                        self.block_q8::<NT>(wrow, wsc, full, gpr - full, Some(&last_masks), t0, nt, &mut lo);
                    } else {
                        self.block_q8::<NT>(wrow, wsc, full, gpr - full, Some(&last_masks), t0, nt, &mut hi);
                    }
                }
            }
            if NT == 1 {
                pending.push(o, lo[0], hi[0], t0, store);
                continue;
            }
            for (t, (lo, hi)) in lo.into_iter().zip(hi).enumerate().take(nt) {
                store(t0 + t, o, reduce_avx2(lo, hi));
            }
        }
        pending.flush(t0, store);
    }

    /// One block of `ng ≤ 8` groups from group g0 of a q8 row (`wrow`, scales `wsc`) against
    /// tokens t0..t0+nt, its terms added to `acc` (per token, lanes 0–7 or 8–15 of its sums).
    /// `masks`: None for whole groups of 32 (plain loads), else each group's dword masks (see
    /// [`Self::rows_q8`]).
    ///
    /// # Safety
    /// Groups g0..g0+ng of the row and of tokens t0..t0+nt must exist; with None, ng = 8 and
    /// groups of 32; AVX2.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn block_q8<const NT: usize>(&self, wrow: *const u8, wsc: *const f32, g0: usize, ng: usize, masks: Option<&[[__m128i; 2]; AVX2_BLOCK]>, t0: usize, nt: usize, acc: &mut [__m256; NT]) {
        let Self { gpr, group, x_stride, wide, xs, ahead, .. } = *self;
        // SAFETY (every raw read): the caller's contract; masked loads touch only the lanes they
        // keep.
        unsafe {
            let zero = _mm256_setzero_si256();
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            let wblk = wrow.wrapping_add(group * g0);
            // prefill (several tokens a block) asks for the next weights ahead; decode where
            // decode_prefetch says, DECODE_AHEAD ahead: on Zen 3 a prefetch 8 KiB ahead lost to
            // the hardware prefetcher alone (GPT-2 124M q8: 84-90 vs 91-96 tok/s without), one
            // 2 KiB ahead wins (72-83 -> 93-100); q4 (half the bytes per weight, so less time
            // per line) keeps its own at 8 KiB (block_q4)
            if NT > 1 || ahead {
                let d = if NT > 1 { PREFETCH_BYTES } else { DECODE_AHEAD };
                for line in 0..4 {
                    _mm_prefetch::<_MM_HINT_T0>(wblk.wrapping_add(d + 64 * line).cast());
                }
            }
            let fmask = mask8(ng);
            let sw = if masks.is_none() { _mm256_loadu_ps(wsc.add(g0)) } else { _mm256_maskload_ps(wsc.add(g0), fmask) };
            let load = |p: *const u8, g: usize, second: bool| match masks {
                None => _mm_loadu_si128(p.cast()),
                Some(m) => _mm_maskload_epi32(p.cast(), m.get(g).map_or(_mm_setzero_si128(), |m| if second { m[1] } else { m[0] })),
            };
            // per token: the first half block's groups 0–3, folded once (see below)
            let mut first = [zero; NT];
            for half in 0..2 {
                // pairs of groups whose activations exist (the last block may have fewer)
                let pairs = ng.saturating_sub(4 * half).div_ceil(2).min(2);
                if pairs == 0 {
                    // no groups in this half: its sums are zero
                    for (t, (acc, first)) in acc.iter_mut().zip(&first).enumerate().take(nt) {
                        let t = t0 + t;
                        let isum = _mm256_srai_epi32::<8>(_mm256_permutevar8x32_epi32(fold64(*first, zero), order));
                        let sx = _mm256_maskload_ps(xs.add(t * gpr + g0), fmask);
                        *acc = _mm256_add_ps(*acc, _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sw, sx)));
                    }
                    break;
                }
                // groups a = 2c, b = 2c+1 (c = 2·half, 2·half+1): [a 0–15 | b 0–15] and
                // [a 16–31 | b 16–31], each widened in two
                let w: [[__m256i; 4]; 2] = core::array::from_fn(|c| {
                    let a = 4 * half + 2 * c;
                    let (pa, pb) = (wblk.wrapping_add(group * a), wblk.wrapping_add(group * (a + 1)));
                    let lo = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(load(pa, a, false)), load(pb, a + 1, false));
                    let hi = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(load(pa.wrapping_add(16), a, true)), load(pb.wrapping_add(16), a + 1, true));
                    [_mm256_unpacklo_epi8(zero, lo), _mm256_unpackhi_epi8(zero, lo), _mm256_unpacklo_epi8(zero, hi), _mm256_unpackhi_epi8(zero, hi)]
                });
                for (t, (acc, first)) in acc.iter_mut().zip(&mut first).enumerate().take(nt) {
                    let t = t0 + t;
                    let xt = wide.wrapping_add(t * x_stride + 32 * g0 + 128 * half);
                    // s[c]: lanes 0–3 partial sums of group 2c, 4–7 of group 2c+1 (times 256)
                    let mut s = [zero; 2];
                    for (c, (s, w)) in s.iter_mut().zip(&w).enumerate().take(pairs) {
                        let mut m = [zero; 4];
                        for (k, (m, &w)) in m.iter_mut().zip(w).enumerate() {
                            *m = _mm256_madd_epi16(w, _mm256_loadu_si256(xt.add(64 * c + 16 * k).cast()));
                        }
                        *s = _mm256_add_epi32(_mm256_add_epi32(m[0], m[1]), _mm256_add_epi32(m[2], m[3]));
                    }
                    let f = fold32(s[0], s[1]);
                    if half == 0 {
                        *first = f;
                        continue;
                    }
                    // groups 0, 2, 4, 6 | 1, 3, 5, 7, then in order
                    let isum = _mm256_srai_epi32::<8>(_mm256_permutevar8x32_epi32(fold64(*first, f), order));
                    let sx = if masks.is_none() { _mm256_loadu_ps(xs.add(t * gpr + g0)) } else { _mm256_maskload_ps(xs.add(t * gpr + g0), fmask) };
                    *acc = _mm256_add_ps(*acc, _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sw, sx)));
                }
            }
        }
    }

    /// [`Self::rows_q8`] for rows of at most 4 groups (the shipped model's 112 columns in groups
    /// of 28), two rows a block: row a's groups in lanes 0–3, row b's in 4–7, so that the weight
    /// loads, folds and float steps of a full block serve two rows. Each lane does what it does
    /// alone. A row's sums stay in lanes 0–3 (its lanes 4–15 are +0.0 throughout), so the tree of
    /// `reduce` comes to `(l0 + l2) + (l1 + l3)`: its other additions add +0.0 to a lane that is
    /// never -0.0, which changes nothing; both rows take it at once in their 128-bit halves.
    ///
    /// PLAIN: the weights are read with plain loads, 32 bytes from each group's start
    /// ([`widen_pair`]), which reads up to 32 - group bytes past the second row.
    ///
    /// # Safety
    /// As [`Self::rows_q8`], with `gpr ≤ 4` and an even number of rows; PLAIN only with `gpr ==
    /// 4`, a group of at least 16 and a row after each pair's second.
    #[inline(never)]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn rows2_q8<const NT: usize, const PLAIN: bool>(&self, wrows: *const u8, wsc: *const f32, rows: core::ops::Range<usize>, t0: usize, nt: usize, outs: &mut Outputs<'_>) {
        let Self { cols, gpr, group, x_stride, wide, xs, .. } = *self;
        let nt = nt.min(NT);
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        // the dword masks of each group's bytes 0–15 and 16–31 (all clear for the groups a row
        // does not have): the loads below take no branch and touch only a row's own bytes
        let mask = |g: usize| {
            let n = if g < gpr { group } else { 0 };
            [mask4(n.min(16) / 4), mask4(n.saturating_sub(16) / 4)]
        };
        let (m0, m1, m2, m3) = (mask(0), mask(1), mask(2), mask(3));
        let mg = mask4(gpr);
        let two_pairs = gpr > 2;
        // SAFETY (every raw read below): the caller's contract; masked loads touch only the
        // lanes they keep, which lie inside the rows' groups and scales; pair 1 of a token's
        // activations exists when gpr > 2.
        for o in (0..rows.len() / 2).map(|p| rows.start + 2 * p) {
            let (wa, wb) = (wrows.wrapping_add(o * cols), wrows.wrapping_add((o + 1) * cols));
            let sw = unsafe { _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(_mm_maskload_epi32(wsc.add(o * gpr).cast(), mg)), _mm_maskload_epi32(wsc.add((o + 1) * gpr).cast(), mg)) };
            let sw = _mm256_castsi256_ps(sw);
            // pairs (a0, a1), (a2, a3), (b0, b1), (b2, b3)
            let (a01, a23) = unsafe { (widen_pair::<PLAIN>(wa, group, m0, m1), widen_pair::<PLAIN>(wa.wrapping_add(2 * group), group, m2, m3)) };
            let (b01, b23) = unsafe { (widen_pair::<PLAIN>(wb, group, m0, m1), widen_pair::<PLAIN>(wb.wrapping_add(2 * group), group, m2, m3)) };
            let mut acc = [_mm256_setzero_ps(); NT];
            for (t, acc) in acc.iter_mut().enumerate().take(nt) {
                let t = t0 + t;
                let xt = wide.wrapping_add(t * x_stride);
                let (s0, s2) = unsafe { (pair_sums(&a01, xt), pair_sums(&b01, xt)) };
                let (s1, s3) = if two_pairs { unsafe { (pair_sums(&a23, xt.wrapping_add(64)), pair_sums(&b23, xt.wrapping_add(64))) } } else { (_mm256_setzero_si256(), _mm256_setzero_si256()) };
                // [a0 a2 b0 b2 | a1 a3 b1 b3], then a0..a3 b0..b3
                let isum = _mm256_srai_epi32::<8>(_mm256_permutevar8x32_epi32(fold64(fold32(s0, s1), fold32(s2, s3)), order));
                let sx = unsafe { _mm_castsi128_ps(_mm_maskload_epi32(xs.add(t * gpr).cast(), mg)) };
                let sx = _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(sx), sx);
                *acc = _mm256_add_ps(*acc, _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sw, sx)));
            }
            for (t, &r) in acc.iter().enumerate().take(nt) {
                // per 128-bit half: (l0 + l2) + (l1 + l3)
                let r2 = _mm256_add_ps(r, _mm256_shuffle_ps::<0x4E>(r, r));
                let r1 = _mm256_add_ps(r2, _mm256_shuffle_ps::<0xB1>(r2, r2));
                outs.one(t0 + t, o, _mm256_cvtss_f32(r1));
                outs.one(t0 + t, o + 1, _mm_cvtss_f32(_mm256_extractf128_ps::<1>(r1)));
            }
        }
    }

    /// The whole blocks (`nb` of 8 groups) of two rows a and b (rows at `w`, scales at `sc`)
    /// against token t, as `[[lo, hi] of a, [lo, hi] of b]`: block k of a row added to lo for
    /// even k and hi for odd, in order, from +0.0, as one block after the other would. The
    /// blocks go two at a time through [`Self::block_pair_terms`], in memory order: a's in
    /// pairs, then, when nb is odd, a's last with b's first, then b's in pairs. On Zen 3 two
    /// blocks side by side in the program run faster than one after the other (q4, `linear-ab
    /// … 1 … q4 q4`, in L2/L3: 768 × 3072 39.5-40 -> 45.7-46, 1024 × 768 35.2-36.6 -> 40.3-40.6
    /// G MAC/s; pairing only within rows, which leaves a 3-block row one block alone, gained
    /// nothing at 768 columns; q8, bound by its fold, runs as fast either way).
    ///
    /// # Safety
    /// Both rows' nb blocks and token t must exist; AVX2.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn row_pair_blocks<const Q4: bool>(&self, w: [*const u8; 2], sc: [*const f32; 2], nb: usize, t: usize) -> [[__m256; 2]; 2] {
        let block_bytes = if Q4 { 16 * AVX2_BLOCK } else { 32 * AVX2_BLOCK };
        let ([wa, wb], [sa, sb]) = (w, sc);
        // blocks k0 and k1 of rows at (w0, s0) and (w1, s1)
        // SAFETY (every call): blocks below nb of both rows (the caller's contract).
        let pair = |(w0, s0, k0): (*const u8, *const f32, usize), (w1, s1, k1): (*const u8, *const f32, usize)| unsafe {
            let at = |w: *const u8, s: *const f32, k: usize| (w.add(block_bytes * k), s.add(AVX2_BLOCK * k), AVX2_BLOCK * k);
            let ((w0, s0, g0), (w1, s1, g1)) = (at(w0, s0, k0), at(w1, s1, k1));
            self.block_pair_terms::<Q4>([w0, w1], [s0, s1], [g0, g1], t)
        };
        let (mut la, mut ha, mut lb, mut hb) = (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
        let mut k = 0;
        while k + 1 < nb {
            let [v0, v1] = pair((wa, sa, k), (wa, sa, k + 1));
            (la, ha) = (_mm256_add_ps(la, v0), _mm256_add_ps(ha, v1));
            k += 2;
        }
        let mut k = 0;
        if nb % 2 == 1 {
            // a's last block (k even: lo) with b's first (lo)
            let [v0, v1] = pair((wa, sa, nb - 1), (wb, sb, 0));
            (la, lb) = (_mm256_add_ps(la, v0), _mm256_add_ps(lb, v1));
            k = 1;
        }
        while k + 1 < nb {
            let [v0, v1] = pair((wb, sb, k), (wb, sb, k + 1));
            // block k goes to lo when k is even
            if k % 2 == 0 {
                (lb, hb) = (_mm256_add_ps(lb, v0), _mm256_add_ps(hb, v1));
            } else {
                (hb, lb) = (_mm256_add_ps(hb, v0), _mm256_add_ps(lb, v1));
            }
            k += 2;
        }
        [[la, ha], [lb, hb]]
    }

    /// The float terms of two blocks of 8 groups (each anywhere: weights `w`, scales `sc`, first
    /// group `g`) against token t, both blocks' work side by side. q4 as [`Self::block_q4`]
    /// computes them; q8 in groups of 32 against natural-order int8 activations: each group's
    /// exact sum ([`dot32_q8`]), a block's 8 folded into one vector in group order ([`sum8`]),
    /// then the float step lane for lane.
    ///
    /// # Safety
    /// Both blocks and groups g..g+8 of token t must exist; AVX2.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn block_pair_terms<const Q4: bool>(&self, w: [*const u8; 2], sc: [*const f32; 2], g: [usize; 2], t: usize) -> [__m256; 2] {
        let Self { cols, gpr, q, xs, ahead, .. } = *self;
        let ([w0, w1], [sc0, sc1], [g0, g1]) = (w, sc, g);
        // SAFETY (every raw read): the caller's contract.
        unsafe {
            let isum: [__m256i; 2] = if Q4 {
                // q4: PREFETCH_BYTES ahead, always (see block_q4)
                for w in w {
                    for line in 0..2 {
                        _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(PREFETCH_BYTES + 64 * line).cast());
                    }
                }
                // both blocks' nibbles first, then both blocks' sums
                let (na, nb) = (q4_nibbles(w0), q4_nibbles(w1));
                [self.q4_block_isum(na, t, g0), self.q4_block_isum(nb, t, g1)]
            } else {
                // q8: where decode_prefetch says, DECODE_AHEAD ahead: on Zen 3 one 8 KiB ahead
                // lost to the hardware prefetcher alone (GPT-2 124M q8: 84-90 vs 91-96 tok/s
                // without), one 2 KiB ahead won (72-83 -> 93-100)
                if ahead {
                    for w in w {
                        for line in 0..4 {
                            _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add(DECODE_AHEAD + 64 * line).cast());
                        }
                    }
                }
                let dots = |w: *const u8, g: usize| -> [__m256i; 8] { core::array::from_fn(|c| dot32_q8(w.add(32 * c), q.add(t * cols + 32 * (g + c)))) };
                let (va, vb) = (dots(w0, g0), dots(w1, g1));
                [sum8(va), sum8(vb)]
            };
            let [ia, ib] = isum;
            [(ia, sc0, g0), (ib, sc1, g1)].map(|(isum, sc, g)| {
                let (sw, sx) = (_mm256_loadu_ps(sc), _mm256_loadu_ps(xs.add(t * gpr + g)));
                _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sw, sx))
            })
        }
    }

    /// Group g's exact integer sums of `n ≤ 8` q8 rows from row o against token t's
    /// natural-order activations, lane r = row o + r (rows past n read row o again): each row's
    /// [`dot32_q8`], the 8 folded by [`sum8`].
    ///
    /// # Safety
    /// Rows o..o+n (n ≥ 1) and group g of them and of token t must exist; AVX2.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn tail8_q8s_isum(&self, wrows: *const u8, o: usize, n: usize, g: usize, t: usize) -> __m256i {
        let Self { cols, q, .. } = *self;
        let row = |r: usize| o + if r < n { r } else { 0 };
        // SAFETY (every raw read): the caller's contract; rows past n read row o.
        unsafe {
            let x = q.add(t * cols + 32 * g);
            let v: [__m256i; 8] = core::array::from_fn(|r| dot32_q8(wrows.add(row(r) * cols + 32 * g), x));
            sum8(v)
        }
    }

    /// q4 rows against tokens t0..t0+nt, as [`Self::rows_q8`].
    ///
    /// # Safety
    /// As [`Self::rows_q8`] (rows of `cols / 2` bytes; tokens in `q`, `xs` and `sums`).
    #[inline(never)]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn rows_q4<const NT: usize>(&self, wrows: *const u8, wsc: *const f32, rows: core::ops::Range<usize>, t0: usize, nt: usize, outs: &mut Outputs<'_>) {
        let Self { cols, gpr, .. } = *self;
        let nt = nt.min(NT);
        let full = gpr / AVX2_BLOCK * AVX2_BLOCK;
        if NT == 1 && full >= AVX2_BLOCK {
            // decode with whole blocks and possibly a last 1-7 groups (stories15M's 288 columns:
            // 8 + 1), 8 rows at a time ([`Self::decode_eights`]; GPT-2's 768 and 3072 columns
            // also gain, 1-4% in `linear-ab`, one token)
            // SAFETY: the caller's contract (rows `rows`, the token t0).
            unsafe { self.decode_eights::<true>(wrows, wsc, rows, t0, outs) };
            return;
        }
        let store = &mut |t: usize, o: usize, y: f32| outs.one(t, o, y);
        let mut pending = Pending8::new();
        for o in rows {
            // SAFETY: the caller's contract (row o, tokens t0..t0+nt).
            let (wrow, wsc) = unsafe { (wrows.add(o * cols / 2), wsc.add(o * gpr)) };
            let (mut lo, mut hi) = ([_mm256_setzero_ps(); NT], [_mm256_setzero_ps(); NT]);
            // blocks in pairs: group g goes to lane g % 16
            for g0 in (0..full).step_by(2 * AVX2_BLOCK) {
                // SAFETY: as above, groups g0..g0+8 (and the next 8 when there are any).
                unsafe { self.block_q4::<NT>(wrow, wsc, g0, t0, nt, &mut lo) };
                if g0 + AVX2_BLOCK < full {
                    // SAFETY: as above.
                    unsafe { self.block_q4::<NT>(wrow, wsc, g0 + AVX2_BLOCK, t0, nt, &mut hi) };
                }
            }
            // the last 1-7 groups, one at a time
            for g in full..gpr {
                // SAFETY: as above, group g < gpr.
                unsafe {
                    if (g / AVX2_BLOCK).is_multiple_of(2) {
                        self.group_q4::<NT>(wrow, wsc, g, t0, nt, &mut lo);
                    } else {
                        self.group_q4::<NT>(wrow, wsc, g, t0, nt, &mut hi);
                    }
                }
            }
            if NT == 1 {
                pending.push(o, lo[0], hi[0], t0, store);
                continue;
            }
            for (t, (lo, hi)) in lo.into_iter().zip(hi).enumerate().take(nt) {
                store(t0 + t, o, reduce_avx2(lo, hi));
            }
        }
        pending.flush(t0, store);
    }

    /// Group g's exact integer sums of `n ≤ 8` q4 rows from row o against token t (less 8 · Σx),
    /// lane r = row o + r (rows past n read row o again): two rows' 16 bytes a vector, their
    /// nibbles against the group's activations in both halves (`vpmaddubsw`), widened and summed
    /// (three `vphaddd` for the 8 rows, which leave rows 0, 2, 4, 6 | 1, 3, 5, 7, then one
    /// permute), each lane what [`Self::group_q4`] computes.
    ///
    /// # Safety
    /// Rows o..o+n (n ≥ 1) and group g of them and of token t must exist; AVX2.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn tail8_q4_isum(&self, wrows: *const u8, o: usize, n: usize, g: usize, t: usize) -> __m256i {
        let Self { cols, gpr, sums, .. } = *self;
        let row = |r: usize| o + if r < n { r } else { 0 };
        // SAFETY (every raw read): the caller's contract; rows past n read row o.
        unsafe {
            let (even, odd) = self.q4_group_x(g, t);
            let (even, odd) = (_mm256_broadcastsi128_si256(even), _mm256_broadcastsi128_si256(odd));
            let (low, ones) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi16(1));
            // rows 2k and 2k+1: four int32 partial sums each
            let m: [__m256i; 4] = core::array::from_fn(|k| {
                let (a, b) = (wrows.add(row(2 * k) * cols / 2 + 16 * g), wrows.add(row(2 * k + 1) * cols / 2 + 16 * g));
                let p = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(_mm_loadu_si128(a.cast())), _mm_loadu_si128(b.cast()));
                let (we, wo) = (_mm256_and_si256(p, low), _mm256_and_si256(_mm256_srli_epi16::<4>(p), low));
                _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(we, even), _mm256_maddubs_epi16(wo, odd)), ones)
            });
            // rows 0, 2, 4, 6 | 1, 3, 5, 7
            let isum = _mm256_hadd_epi32(_mm256_hadd_epi32(m[0], m[1]), _mm256_hadd_epi32(m[2], m[3]));
            let isum = _mm256_permutevar8x32_epi32(isum, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_sub_epi32(isum, _mm256_set1_epi32(8i32.wrapping_mul(*sums.add(t * gpr + g))))
        }
    }

    /// Decode of rows `rows` against token t, 8 at a time ([`Self::rows8_decode`]), each eight's
    /// sums stored together. Q4: q4 rows, else q8 in groups of 32.
    ///
    /// # Safety
    /// Rows `rows` and token t must exist; AVX2.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn decode_eights<const Q4: bool>(&self, wrows: *const u8, wsc: *const f32, rows: core::ops::Range<usize>, t: usize, outs: &mut Outputs<'_>) {
        // one place at a time, unlike f32/f16 ([`for_fronts`]): these kernels prefetch by blocks,
        // and on Zen 3 two places lost (`linear-ab 50257 768 1 20 q8 q8`: 18.7-20.9 -> 13.8-17.6
        // G MAC/s; q4 35.7-39.4 -> 35.6-37.1)
        let mut o = rows.start;
        while o < rows.end {
            let n = (rows.end - o).min(8);
            // SAFETY: rows o..o+n ≤ rows.end and the token t exist (the caller's contract).
            let z = unsafe { self.rows8_decode::<Q4>(wrows, wsc, o, n, t) };
            // SAFETY: AVX2 (this function's).
            unsafe { outs.lanes(t, o, n, z) };
            o += n;
        }
    }

    /// Decode of the `n ≤ 8` rows o..o+n against token t (lanes past n compute row o again and
    /// are not the caller's): their whole blocks two rows at a time ([`Self::row_pair_blocks`]),
    /// then each last group (stories15M's 288 columns: 8 + 1; all groups of rows shorter than a
    /// block) for the 8 rows at once ([`Self::tail8_q4_isum`] / [`Self::tail8_q8s_isum`]; alone,
    /// one group cost a row about half a block), and the sums of all 8 in [`rows8_end`]. Lane r
    /// of the result is row o + r. Q4 is a constant, so each dtype gets its own straight code (a
    /// closure-driven version of this loop ran 4% slower).
    ///
    /// # Safety
    /// Rows o..o+n (n ≥ 1) and token t must exist; q8 in groups of 32 with natural-order
    /// activations; AVX2.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn rows8_decode<const Q4: bool>(&self, wrows: *const u8, wsc: *const f32, o: usize, n: usize, t: usize) -> __m256 {
        let Self { cols, gpr, xs, .. } = *self;
        let row_bytes = if Q4 { cols / 2 } else { cols };
        let full = gpr / AVX2_BLOCK * AVX2_BLOCK;
        let rows: [usize; 8] = core::array::from_fn(|r| o + if r < n { r } else { 0 });
        let (mut lo, mut hi) = ([[_mm256_setzero_ps(); 2]; 4], [[_mm256_setzero_ps(); 2]; 4]);
        for ((lo, hi), &[a, b]) in lo.iter_mut().zip(hi.iter_mut()).zip(rows.as_chunks::<2>().0) {
            // SAFETY: the caller's contract (rows a and b, the token t).
            let [[la, ha], [lb, hb]] = unsafe {
                let (w, sc) = ([wrows.add(a * row_bytes), wrows.add(b * row_bytes)], [wsc.add(a * gpr), wsc.add(b * gpr)]);
                self.row_pair_blocks::<Q4>(w, sc, full / AVX2_BLOCK, t)
            };
            (*lo, *hi) = ([la, lb], [ha, hb]);
        }
        let flat = |[[r0, r1], [r2, r3], [r4, r5], [r6, r7]]: [[__m256; 2]; 4]| [r0, r1, r2, r3, r4, r5, r6, r7];
        let (lo, hi) = (flat(lo), flat(hi));
        let hi = (full > AVX2_BLOCK).then_some(hi);
        // the float terms of tail group g, lane r = row o + r
        let tail = |g: usize| {
            // SAFETY: rows o..o+n and group g < gpr of them and of token t exist (the caller's
            // contract).
            unsafe {
                let isum = if Q4 { self.tail8_q4_isum(wrows, o, n, g, t) } else { self.tail8_q8s_isum(wrows, o, n, g, t) };
                (g, tail8_terms(isum, wsc, rows, gpr, g, *xs.add(t * gpr + g)))
            }
        };
        rows8_end(lo, hi, (full..gpr).map(tail))
    }

    /// Group g's int8 activations of token t for the q4 kernels: its 16 even-position values,
    /// then its 16 odd ones. [`QuantOrder::Q4Pairs`] stores them so where the group lies in one
    /// of the token's whole blocks of 128 values; in the token's last, partial block they are in
    /// natural order, and a byte shuffle splits them.
    ///
    /// # Safety
    /// Group g of token t must exist; SSSE3 (called from the AVX2 kernels, into which it is
    /// always inlined: no `#[target_feature]`, which would forbid that).
    #[inline(always)]
    unsafe fn q4_group_x(&self, g: usize, t: usize) -> (__m128i, __m128i) {
        let Self { cols, q, .. } = *self;
        // SAFETY (every raw read): the caller's contract.
        unsafe {
            if (g / 4 + 1) * 128 <= cols {
                let base = q.add(t * cols + 128 * (g / 4) + 16 * (g % 4));
                (_mm_loadu_si128(base.cast()), _mm_loadu_si128(base.add(64).cast()))
            } else {
                // within 16 bytes: the 8 even positions, then the 8 odd ones
                let split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
                let base = q.add(t * cols + 32 * g);
                let (a, b) = (_mm_shuffle_epi8(_mm_loadu_si128(base.cast()), split), _mm_shuffle_epi8(_mm_loadu_si128(base.add(16).cast()), split));
                (_mm_unpacklo_epi64(a, b), _mm_unpackhi_epi64(a, b))
            }
        }
    }

    /// Group g of a q4 row against tokens t0..t0+nt, its term added to lane g % 8 of `acc`
    /// (+0.0 to the other lanes, which changes none: an accumulator lane is never -0.0): the
    /// integer sum of its 32 products, less 8 · Σx, then [`Self::block_q4`]'s float step. Its
    /// activations are in [`QuantOrder::Q4Pairs`] order when the group lies in one of the token's
    /// whole blocks of 128 values, else in natural order (the token's last, partial block),
    /// where a byte shuffle splits them into even and odd positions.
    ///
    /// # Safety
    /// Group g of the row and of tokens t0..t0+nt must exist; AVX2.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn group_q4<const NT: usize>(&self, wrow: *const u8, wsc: *const f32, g: usize, t0: usize, nt: usize, acc: &mut [__m256; NT]) {
        let Self { gpr, xs, sums, .. } = *self;
        // SAFETY (every raw read): the caller's contract.
        unsafe {
            let low = _mm_set1_epi8(0x0F);
            let p = _mm_loadu_si128(wrow.add(16 * g).cast());
            // even elements' weights (low nibbles), odd elements' (high)
            let (we, wo) = (_mm_and_si128(p, low), _mm_and_si128(_mm_srli_epi16::<4>(p), low));
            let sw = *wsc.add(g);
            let lane = lane_mask(g % AVX2_BLOCK);
            for (t, acc) in acc.iter_mut().enumerate().take(nt) {
                let t = t0 + t;
                let (even, odd) = self.q4_group_x(g, t);
                // int16 pairs (|·| ≤ 2 · 15 · 128), two added (exact), widened to four int32
                let s16 = _mm_add_epi16(_mm_maddubs_epi16(we, even), _mm_maddubs_epi16(wo, odd));
                let s32 = _mm_madd_epi16(s16, _mm_set1_epi16(1));
                let s2 = _mm_add_epi32(s32, _mm_unpackhi_epi64(s32, s32));
                let isum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2))).wrapping_sub(8i32.wrapping_mul(*sums.add(t * gpr + g)));
                let term = isum as f32 * (sw * *xs.add(t * gpr + g));
                *acc = _mm256_add_ps(*acc, _mm256_and_ps(_mm256_set1_ps(term), lane));
            }
        }
    }

    /// One block of 8 groups from group g0 of a q4 row against tokens t0..t0+nt, its terms added
    /// to `acc`.
    ///
    /// # Safety
    /// Groups g0..g0+8 of the row and of tokens t0..t0+nt must exist; AVX2.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn block_q4<const NT: usize>(&self, wrow: *const u8, wsc: *const f32, g0: usize, t0: usize, nt: usize, acc: &mut [__m256; NT]) {
        let Self { gpr, xs, .. } = *self;
        // SAFETY (every raw read): the caller's contract.
        unsafe {
            let wblk = wrow.add(16 * g0);
            // decode streams the weights once: ask for them PREFETCH_BYTES ahead, into L1 (Zen 3:
            // 31-32 -> 34 G MAC/s for q4 against T1)
            for line in 0..2 {
                _mm_prefetch::<_MM_HINT_T0>(wblk.wrapping_add(PREFETCH_BYTES + 64 * line).cast());
            }
            let w = q4_nibbles(wblk);
            let sw = _mm256_loadu_ps(wsc.add(g0));
            for (t, acc) in acc.iter_mut().enumerate().take(nt) {
                let isum = self.q4_block_isum(w, t0 + t, g0);
                *acc = _mm256_add_ps(*acc, _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sw, _mm256_loadu_ps(xs.add((t0 + t) * gpr + g0)))));
            }
        }
    }

    /// The 8 exact group sums (less 8 · Σx, in group order) of a q4 block whose nibbles are `w`
    /// ([`q4_nibbles`]), groups g0..g0+8 of token t. Q4Pairs: in each 128 values, groups
    /// 4j..4j+4's even elements (16 each), then their odd ones; groups 2c, 2c+1 sit at 32(c % 2)
    /// of block c / 2. s[c]: int16 lanes 0–7 partial sums of group 2c, 8–15 of group 2c+1, each
    /// of four products (|·| ≤ 4 · 15 · 128 = 7680), folded by [`fold16`].
    ///
    /// # Safety
    /// Groups g0..g0+8 of token t must exist; AVX2 (always inlined into the AVX2 kernels).
    #[inline(always)]
    unsafe fn q4_block_isum(&self, w: [[__m256i; 2]; 4], t: usize, g0: usize) -> __m256i {
        let Self { cols, gpr, q, sums, .. } = *self;
        // SAFETY (every raw read): the caller's contract.
        unsafe {
            let xt = q.add(t * cols + 32 * g0);
            let mut s = [_mm256_setzero_si256(); 4];
            for ((s, [lo, hi]), at) in s.iter_mut().zip(w).zip([0, 32, 128, 160]) {
                let base = xt.add(at);
                *s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(base.cast())), _mm256_maddubs_epi16(hi, _mm256_loadu_si256(base.add(64).cast())));
            }
            // groups 0, 2, 4, 6 | 1, 3, 5, 7, then in order
            let [s0, s1, s2, s3] = s;
            let isum = _mm256_permutevar8x32_epi32(_mm256_madd_epi16(fold16(s0, s1, s2, s3), _mm256_set1_epi16(1)), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            // take off the + 8 of the stored nibbles, 8 · Σx per group
            _mm256_sub_epi32(isum, _mm256_slli_epi32::<3>(_mm256_loadu_si256(sums.add(t * gpr + g0).cast())))
        }
    }
}

// ---- q8 / q4 prefill with AVX2: rows in lanes -------------------------------------------------
//
// `rows_q8` puts a block of 8 groups of one row in the lanes, so each token's 16 `vpmaddwd`
// products per block are folded (adds and unpacks) into 8 group sums before their float steps:
// about 46 vector operations per 256 multiply-adds, and on Zen 3 the kernel is bound by them
// (it runs this mix at about 2.8 a cycle). From 4 tokens on, lane r of every vector is weight
// row o + r instead: a vector holds a few columns of 8 rows (widened and transposed once per
// block of tokens, `pack_lanes_q8` / `pack_lanes_q4`), and a token's values for those columns
// are broadcast to all lanes (one broadcast load). After a group's columns each lane holds its
// row's exact group sum, with no fold:
// - q8: a pair of columns as int16, `vpmaddwd` + `vpaddd`: 16 + 16 integer operations per 256
//   multiply-adds.
// - q4: 4 columns as bytes (the stored nibbles, q + 8), `vpmaddubsw` + `vpaddw` (int16 sums of
//   a group stay below 8 · 2 · 15 · 127 < 2¹⁵), then one `vpmaddwd` by ones and the + 8 taken
//   off with 8 · Σx: about 18 per 256.
// Then 4 float steps (convert, two multiplies, add) per 256, lane for lane, which are
// `combine_groups`' (group g into accumulator g mod 16, from +0.0, then `reduce`'s tree), each
// lane one row: the same bits as the portable kernel. A tile is 16 rows (two vectors of 8) × 4
// tokens: 8 group sums in registers, the two weight vectors and the broadcast; each of its 16
// float accumulators per row vector and token sits on the stack (a load and a store per group),
// so k-blocks cost nothing. The last rows' tile is packed with zero rows (not stored), the last
// 1–3 tokens take tiles of their own (`lane_tiles`).
//
// Zen 3, `linear-ab` (one thread, 128 tokens, median of 6–8 alternated rounds' best): q8
// 2304 × 768 36.8 → 44.0 G MAC/s, 768 × 3072 32.8 → 37.7; q4 2304 × 768 37.9 → 47.5, 768 ×
// 3072 44.4 → 56.5 (BENCHMARKS.md, run 16).

/// Groups of 8 weight rows a lane tile takes (row 8v + r of the tile in lane r of group v).
const LANE_GROUPS: usize = 2;
/// Weight rows a lane tile takes.
const LANE_ROWS: usize = 8 * LANE_GROUPS;
/// Tokens a lane tile takes.
const LANE_TOKENS: usize = 4;
/// Groups of 32 columns per k-block of a lane tile: the k-block of its rows is packed on the stack
/// (LANE_ROWS × 64 bytes a group) and read from L1.
const LANE_KGROUPS: usize = 16;
/// Tokens per block of activations (their int16 values stay in L2) in the lane tiles. Their
/// float accumulators take 4 KiB of stack a tile of 4 tokens, 64 KiB for the block (with the
/// packed rows, about 81 KiB in all); 128 tokens were no faster (`linear-ab`, 2304 × 768 and
/// 768 × 768, q8 and q4) at twice the stack.
const LANE_BLOCK_TOKENS: usize = 64;

/// Rows in lanes 0–7 of eight vectors of 8 dwords transposed: vector j of the result holds dword
/// j of every input, input r in lane r.
#[inline]
#[target_feature(enable = "avx2")]
fn transpose8x32(v: [__m256i; 8]) -> [__m256i; 8] {
    let [r0, r1, r2, r3, r4, r5, r6, r7] = v;
    // rows 2i, 2i+1 interleaved: [a0 b0 a1 b1 | a4 b4 a5 b5] and [a2 b2 a3 b3 | a6 b6 a7 b7]
    let pair = |a, b| (_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
    let ((t0, t1), (t2, t3), (t4, t5), (t6, t7)) = (pair(r0, r1), pair(r2, r3), pair(r4, r5), pair(r6, r7));
    // rows 4i..4i+4: dword c in lanes 0–3, dword c + 4 in lanes 4–7
    let quad = |a, b| (_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
    let ((u0, u1), (u2, u3), (u4, u5), (u6, u7)) = (quad(t0, t2), quad(t1, t3), quad(t4, t6), quad(t5, t7));
    let lo = |a, b| _mm256_permute2x128_si256::<0x20>(a, b);
    let hi = |a, b| _mm256_permute2x128_si256::<0x31>(a, b);
    [lo(u0, u4), lo(u1, u5), lo(u2, u6), lo(u3, u7), hi(u0, u4), hi(u1, u5), hi(u2, u6), hi(u3, u7)]
}

/// Every output of all rows × tokens `ts` (a multiple of T) of a q8 / q4 `linear` in groups of
/// 32 in lane tiles of 16 rows × T tokens (the last rows' tile packed with zero rows, whose
/// outputs are not stored). Loop order: a block of tokens' activations stays in L2 while for
/// each 16 rows and k-block of groups the rows are packed into L1 and the block's tiles pass
/// over them; a tile's float accumulators go on between k-blocks.
///
/// # Safety
/// `data` and `scales` must hold `outs.rows` rows, `a` the tokens `ts` (q8: Wide16, q4: Natural
/// order); AVX2.
#[target_feature(enable = "avx2,f16c")]
unsafe fn lane_tiles<const T: usize>(a: &Avx2Quant, q4: bool, data: &[u8], scales: &[f32], ts: core::ops::Range<usize>, outs: &mut Outputs<'_>) {
    let Avx2Quant { cols, gpr, .. } = *a;
    let rows = outs.rows;
    let row_bytes = if q4 { cols / 2 } else { cols };
    // (not zeroed: about 81 KiB a call, a memset of 3% of the time; every entry is written
    // before it is read: packed and wsc by the packing, a tile's accumulators at its first
    // k-block)
    let mut packed = [[MaybeUninit::<__m256i>::uninit(); 16 * LANE_KGROUPS]; LANE_GROUPS];
    let mut wsc = [[MaybeUninit::<__m256>::uninit(); LANE_KGROUPS]; LANE_GROUPS];
    let mut slots = [MaybeUninit::<LaneSlots<LANE_GROUPS, T>>::uninit(); LANE_BLOCK_TOKENS / LANE_TOKENS];
    // a block of tokens' activations stays in L2 (≤ 256 KiB of q8's int16 values; q4's bytes take
    // half), at most one tile for each entry of slots
    let block_tokens = (256 * 1024 / (2 * cols)).clamp(T, LANE_BLOCK_TOKENS).min(T * slots.len()) / T * T;
    let nk = gpr.div_ceil(LANE_KGROUPS);
    let kg = gpr.div_ceil(nk); // groups per k-block, balanced
    for t0 in ts.clone().step_by(block_tokens) {
        let t1 = (t0 + block_tokens).min(ts.end);
        for o in (0..rows).step_by(LANE_ROWS) {
            // rows of each group of 8 that exist
            let have: [usize; LANE_GROUPS] = core::array::from_fn(|v| rows.saturating_sub(o + 8 * v).min(8));
            for g0 in (0..gpr).step_by(kg) {
                let g1 = (g0 + kg).min(gpr);
                for (((p, s), v), &n) in packed.iter_mut().zip(&mut wsc).zip(0..).zip(&have) {
                    let rows = o + 8 * v..o + 8 * v + n;
                    // SAFETY: the n rows from o + 8v exist (the caller's contract); p holds 16 · kg
                    // vectors (q4: 8 · kg).
                    unsafe {
                        if q4 {
                            a.pack_lanes_q4(data.as_ptr(), rows.clone(), g0..g1, p.as_mut_ptr().cast());
                        } else {
                            a.pack_lanes_q8(data.as_ptr(), rows.clone(), g0..g1, p.as_mut_ptr().cast());
                        }
                    }
                    // each group's scales of the 8 rows (+0.0 for the rows past the last)
                    for (s, g) in s.iter_mut().zip(g0..g1) {
                        let w: [f32; 8] = core::array::from_fn(|r| if r < n { scales.get((rows.start + r) * gpr + g).copied().unwrap_or(0.0) } else { 0.0 });
                        // SAFETY: w is 8 floats.
                        s.write(unsafe { _mm256_loadu_ps(w.as_ptr()) });
                    }
                }
                // the weights packed next (the next k-block of these rows, else the next rows'
                // first), asked for a few lines a tile, one row after the other, so that the
                // packing does not wait for memory (it took 16% of the time)
                let (next_o, next_g0) = if g1 < gpr { (o, g1) } else { (o + LANE_ROWS, 0) };
                let next = data.as_ptr().wrapping_add(next_o * row_bytes + row_bytes / gpr * next_g0);
                let per_row = (row_bytes / gpr * kg.min(gpr.saturating_sub(next_g0))).div_ceil(64);
                let lines = (per_row * LANE_ROWS).div_ceil((t1 - t0) / T);
                let (mut r, mut line) = (0, 0);
                for (t, slots) in (t0..t1).step_by(T).zip(&mut slots) {
                    for _ in 0..lines {
                        if next_o + r < rows {
                            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(r * row_bytes + 64 * line).cast());
                        }
                        line += 1;
                        if line == per_row {
                            (r, line) = (r + 1, 0);
                        }
                    }
                    let (pp, sp) = (packed.each_ref().map(|p| p.as_ptr().cast()), wsc.each_ref().map(|s| s.as_ptr().cast()));
                    // SAFETY: packed and wsc hold the rows' groups g0..g1; tokens t..t+T exist
                    // (the caller's contract); slots is the tile's own.
                    unsafe {
                        if q4 {
                            a.tile_lanes_q4::<LANE_GROUPS, T>(pp, sp, t, g0..g1, slots.as_mut_ptr());
                        } else {
                            a.tile_lanes_q8::<LANE_GROUPS, T>(pp, sp, t, g0..g1, slots.as_mut_ptr());
                        }
                    }
                    if g1 < gpr {
                        continue;
                    }
                    // SAFETY: the tiles wrote accumulators 0..min(gpr, 16), which are all
                    // lane_outputs reads.
                    for ((y, v), &n) in unsafe { lane_outputs(slots.as_ptr(), gpr) }.into_iter().zip(0..).zip(&have) {
                        if n == 0 {
                            continue;
                        }
                        for (k, y) in y.into_iter().enumerate() {
                            // SAFETY: AVX2 (this function's).
                            unsafe { outs.lanes(t + k, o + 8 * v, n, y) };
                        }
                    }
                }
            }
        }
    }
}

/// A lane tile's float accumulators (`combine_groups`' 16, for each group of 8 rows and token).
type LaneSlots<const RV: usize, const T: usize> = [[[__m256; T]; RV]; LANES];

/// The outputs of a lane tile from its accumulators: [`super::reduce`]'s tree lane for lane
/// (i + i+8, i + i+4, i + i+2, i + i+1), `[v][k]` for row group v and token k. Accumulators
/// `gpr..16` (rows of fewer than 16 groups) are +0.0, as in `combine_groups`, and not read.
///
/// # Safety
/// Accumulators `0..min(gpr, 16)` must have been written ([`Avx2Quant::tile_lanes_q8`]); AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn lane_outputs<const RV: usize, const T: usize>(slots: *const LaneSlots<RV, T>, gpr: usize) -> [[__m256; T]; RV] {
    let slots = slots.cast::<__m256>();
    let mut out = [[_mm256_setzero_ps(); T]; RV];
    for (v, out) in out.iter_mut().enumerate() {
        for (k, out) in out.iter_mut().enumerate() {
            // SAFETY: the caller's contract (i < gpr was written).
            let s = |i: usize| if i < gpr { unsafe { slots.add(RV * T * i + T * v + k).read() } } else { _mm256_setzero_ps() };
            let [a0, a1, a2, a3, a4, a5, a6, a7]: [__m256; 8] = core::array::from_fn(|i| _mm256_add_ps(s(i), s(i + 8)));
            let (b0, b1, b2, b3) = (_mm256_add_ps(a0, a4), _mm256_add_ps(a1, a5), _mm256_add_ps(a2, a6), _mm256_add_ps(a3, a7));
            let (c0, c1) = (_mm256_add_ps(b0, b2), _mm256_add_ps(b1, b3));
            *out = _mm256_add_ps(c0, c1);
        }
    }
    out
}

impl Avx2Quant {
    /// Groups `groups` of rows o..o+n (`rows`, n ≤ 8; zeros for the rest of 8) of a q8 matrix in
    /// groups of 32 (`wrows`) as the lane tiles read them: `packed[16(g - g0) + j]` holds columns
    /// 32g + 2j, 32g + 2j + 1 of the rows as int16 pairs (row r in dword r). (Their scales are
    /// packed by [`lane_tiles`].)
    ///
    /// # Safety
    /// Rows o..o+n must exist (`cols` bytes each), `packed` must be writable for 16 vectors a
    /// group; AVX2.
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    unsafe fn pack_lanes_q8(&self, wrows: *const u8, rows: core::ops::Range<usize>, groups: core::ops::Range<usize>, packed: *mut __m256i) {
        let (o, n) = (rows.start, rows.len());
        let Self { cols, .. } = *self;
        let g0 = groups.start;
        // SAFETY (every raw access): the caller's contract.
        unsafe {
            for g in groups {
                let at = |r: usize| wrows.add((o + r) * cols + 32 * g);
                let widen = |r: usize, k: usize| if r < n { _mm256_cvtepi8_epi16(_mm_loadu_si128(at(r).add(16 * k).cast())) } else { _mm256_setzero_si256() };
                let lo = transpose8x32(core::array::from_fn(|r| widen(r, 0)));
                let hi = transpose8x32(core::array::from_fn(|r| widen(r, 1)));
                let dst = packed.add(16 * (g - g0));
                for (j, (lo, hi)) in lo.into_iter().zip(hi).enumerate() {
                    dst.add(j).write(lo);
                    dst.add(8 + j).write(hi);
                }
            }
        }
    }

    /// Groups `groups` of `RV` vectors of 8 packed rows ([`Self::pack_lanes_q8`], vector v at
    /// `packed[v]`, its scales at `scales[v]`, from group g0 on) against tokens t..t+T, each
    /// group's terms added into the tile's accumulators `slots` ([`Self::lane_terms`]); after the
    /// last group, [`lane_outputs`] gives each output [`super::dot_q8`]'s bits.
    ///
    /// # Safety
    /// Each `packed[v]` and `scales[v]` must hold its rows' groups `groups`, and tokens t..t+T
    /// must exist in `wide` (groups of 32, [`QuantOrder::Wide16`]) and `xs`; `slots` must be
    /// writable (and written for the accumulators a group ≥ 16 adds to); AVX2.
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    unsafe fn tile_lanes_q8<const RV: usize, const T: usize>(&self, packed: [*const __m256i; RV], scales: [*const __m256; RV], t: usize, groups: core::ops::Range<usize>, slots: *mut LaneSlots<RV, T>) {
        let Self { x_stride, wide, .. } = *self;
        let g0 = groups.start;
        for g in groups {
            // SAFETY (every raw access): the caller's contract. In Wide16 order, pair j of group
            // g starts at half 64·(g/2) + 8·(g%2) + 16·(j/4) + 2·(j%4) of the token's values.
            unsafe {
                let mut w = packed.map(|p| p.add(16 * (g - g0)));
                let mut x: [*const i16; T] = core::array::from_fn(|k| wide.add((t + k) * x_stride + 64 * (g / 2) + 8 * (g % 2)));
                // [token][row group]
                let mut isum = [[_mm256_setzero_si256(); RV]; T];
                // four runs of 4 pairs (16 halves apart in the activations)
                for _ in 0..4 {
                    for j in 0..4 {
                        let wv = w.map(|p| _mm256_load_si256(p.add(j)));
                        for (sk, &x) in isum.iter_mut().zip(&x) {
                            // the pair as one dword in every lane (a broadcast load)
                            let xb = _mm256_castps_si256(_mm256_broadcast_ss(&*x.add(2 * j).cast::<f32>()));
                            for (s, &wv) in sk.iter_mut().zip(&wv) {
                                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(wv, xb));
                            }
                        }
                    }
                    w = w.map(|p| p.add(4));
                    x = x.map(|p| p.add(16));
                }
                self.lane_terms(isum, scales.map(|sc| sc.add(g - g0).read()), t, g, slots);
            }
        }
    }

    /// A lane tile's float steps for group g: `isum[k][v]` (token t + k, the rows of vector v)
    /// times the rows' scales `sw[v]` times the token's, added into accumulator g mod 16, which
    /// starts at +0.0 with group g < 16 (written, not read: the caller does not zero them).
    /// Always inlined into the AVX2 tiles (hence no target_feature, and unsafe).
    ///
    /// # Safety
    /// `slots` must be writable (and, for g ≥ 16, accumulator g mod 16 written), token t + k's
    /// scales in `xs`; AVX2.
    #[inline(always)]
    unsafe fn lane_terms<const RV: usize, const T: usize>(&self, isum: [[__m256i; RV]; T], sw: [__m256; RV], t: usize, g: usize, slots: *mut LaneSlots<RV, T>) {
        let Self { gpr, xs, .. } = *self;
        // SAFETY (every raw access): the caller's contract.
        unsafe {
            let slot = slots.cast::<__m256>().add(RV * T * (g % LANES));
            let fresh = g < LANES;
            for (k, sk) in isum.into_iter().enumerate() {
                let sx = _mm256_broadcast_ss(&*xs.add((t + k) * gpr + g));
                for (v, (s, &sw)) in sk.into_iter().zip(&sw).enumerate() {
                    let term = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(sw, sx));
                    let a = slot.add(T * v + k);
                    a.write(_mm256_add_ps(if fresh { _mm256_setzero_ps() } else { a.read() }, term));
                }
            }
        }
    }

    /// [`Self::pack_lanes_q8`] for q4 (`cols / 2` bytes a row): `packed[8(g - g0) + j]` holds
    /// values 32g + 4j..32g + 4j + 4 of the rows as bytes (the stored nibbles, q + 8), row r in
    /// dword r.
    ///
    /// # Safety
    /// As [`Self::pack_lanes_q8`], 8 vectors a group.
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    unsafe fn pack_lanes_q4(&self, wrows: *const u8, rows: core::ops::Range<usize>, groups: core::ops::Range<usize>, packed: *mut __m256i) {
        let (o, n) = (rows.start, rows.len());
        let Self { cols, .. } = *self;
        let g0 = groups.start;
        let low = _mm_set1_epi8(0x0F);
        // SAFETY (every raw access): the caller's contract.
        unsafe {
            for g in groups {
                // a row's 16 bytes as its 32 values in order: low nibble, high nibble, ...
                let values = |r: usize| {
                    if r >= n {
                        return _mm256_setzero_si256();
                    }
                    let b = _mm_loadu_si128(wrows.add((o + r) * (cols / 2) + 16 * g).cast());
                    let (lo, hi) = (_mm_and_si128(b, low), _mm_and_si128(_mm_srli_epi16::<4>(b), low));
                    _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi))
                };
                let dst = packed.add(8 * (g - g0));
                for (j, v) in transpose8x32(core::array::from_fn(values)).into_iter().enumerate() {
                    dst.add(j).write(v);
                }
            }
        }
    }

    /// [`Self::tile_lanes_q8`] for q4: a token's 4 values at a time broadcast to all lanes
    /// against each row's 4 nibbles in `vpmaddubsw` (unsigned nibble × signed value, pairs of
    /// products below 2 · 15 · 127 in magnitude), the 8 of a group added in int16 (below 2¹⁵:
    /// exact), then `vpmaddwd` by ones gives each row's Σ (q + 8)·x in its lane, and 8 · Σx takes
    /// the + 8 off: the exact group sum.
    ///
    /// # Safety
    /// As [`Self::tile_lanes_q8`], with the tokens' values in `q` (natural order) and `sums`.
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    unsafe fn tile_lanes_q4<const RV: usize, const T: usize>(&self, packed: [*const __m256i; RV], scales: [*const __m256; RV], t: usize, groups: core::ops::Range<usize>, slots: *mut LaneSlots<RV, T>) {
        let Self { cols, gpr, group, q, sums, .. } = *self;
        let g0 = groups.start;
        let ones = _mm256_set1_epi16(1);
        for g in groups {
            // SAFETY (every raw access): the caller's contract.
            unsafe {
                let mut w = packed.map(|p| p.add(8 * (g - g0)));
                let mut x: [*const i8; T] = core::array::from_fn(|k| q.add((t + k) * cols + 32 * g));
                // [token][row group], int16
                let mut acc = [[_mm256_setzero_si256(); RV]; T];
                // runs of 2 quads, 4 for a group of 32 (a count LLVM does not see, so it keeps the
                // loop: unrolled, it took the tokens one after the other, with all 16 weight
                // vectors live and spilled: 52 -> 33 G MAC/s)
                for _ in 0..group / 8 {
                    for j in 0..2 {
                        let wv = w.map(|p| _mm256_load_si256(p.add(j)));
                        for (ak, &x) in acc.iter_mut().zip(&x) {
                            // the token's 4 values as one dword in every lane (a broadcast load)
                            let xb = _mm256_castps_si256(_mm256_broadcast_ss(&*x.add(4 * j).cast::<f32>()));
                            for (a, &wv) in ak.iter_mut().zip(&wv) {
                                *a = _mm256_add_epi16(*a, _mm256_maddubs_epi16(wv, xb));
                            }
                        }
                    }
                    w = w.map(|p| p.add(2));
                    x = x.map(|p| p.add(8));
                }
                // each row's Σ (q + 8)·x in its lane, less 8 · Σx of the token's group
                let mut isum = [[_mm256_setzero_si256(); RV]; T];
                for (k, (s, a)) in isum.iter_mut().zip(acc).enumerate() {
                    let offset = _mm256_set1_epi32(8 * *sums.add((t + k) * gpr + g));
                    *s = a.map(|a| _mm256_sub_epi32(_mm256_madd_epi16(a, ones), offset));
                }
                self.lane_terms(isum, scales.map(|sc| sc.add(g - g0).read()), t, g, slots);
            }
        }
    }
}
