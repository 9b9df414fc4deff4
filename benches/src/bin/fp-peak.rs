//! The most 8-lane f32 multiply-accumulates a second one core can do from registers, as the
//! determinism rule has them (a rounded multiply, then a rounded add: two instructions) and as
//! FMA does them (one), on AVX2. The ratio is what a kernel under the rule can reach at best
//! against one allowed to fuse (llama.cpp's), on this CPU: Zen 3/4 have two multiply and two
//! add pipes, so both come to 16 a cycle; Intel's Golden Cove (Sapphire Rapids, Alder Lake's
//! P-cores) multiplies on two ports and adds on two, one of them shared, so mul + add gets
//! three ports where FMA gets two full ones.
//!
//! ```sh
//! cargo run --release -p kernel-benches --bin fp-peak
//! ```
//!
//! Twelve independent chains (enough to cover either instruction's latency), each iteration 12
//! multiply-accumulates of 8 lanes; best of 5 runs of 10^8 iterations. Then the same for the
//! AVX2 prefill tile's own instructions (6 rows × 2 tokens, its loads from L1 included), both
//! ways: the ceiling that tile's loop can reach on this CPU. Last, the tile with each weight
//! load folded into its two multiplies (`vmulps ymm, ymm, [mem]`: 26 instructions instead of
//! 32, but 14 loads instead of 8): whether fewer instructions at more loads would pay (on Zen 3,
//! two 256-bit loads a cycle, it does not).

#[cfg(target_arch = "x86_64")]
fn main() {
    if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
        println!("fp-peak: this CPU has no AVX2/FMA");
        return;
    }
    let iters = 100_000_000u64; // at least 1
    let best = |f: unsafe fn(u64)| {
        (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                // SAFETY: AVX2 and FMA checked above.
                unsafe { f(iters) };
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    };
    let macs = (iters * 12 * 8) as f64;
    let (mul_add, fma) = (best(mul_add_chains), best(fma_chains));
    println!("multiply then add (the determinism rule): {:5.1} G MAC/s", macs / mul_add / 1e9);
    println!("fused multiply-add (FMA):                 {:5.1} G MAC/s", macs / fma / 1e9);
    println!("multiply then add at {:.2} of FMA's rate", fma / mul_add);
    let (tile, tile_fma) = (best(mul_add_tile), best(fma_tile));
    println!("the AVX2 prefill tile's instructions (6 rows x 2 tokens: 8 loads from L1, 12 multiplies, 12 adds):");
    println!("  multiply then add: {:5.1} G MAC/s ({:.0}% of the register-only rate)", macs / tile / 1e9, 100.0 * mul_add / tile);
    println!("  the same with FMA: {:5.1} G MAC/s ({:.0}% of FMA's register-only rate)", macs / tile_fma / 1e9, 100.0 * fma / tile_fma);
    let folded = best(mul_add_tile_folded);
    println!("  weights folded into the multiplies (14 loads): {:5.1} G MAC/s", macs / folded / 1e9);
}

/// An `unsafe fn NAME(iters)` running the loop body `BODY` `iters` times: ymm0–11 are the
/// accumulators, from +0.0; ymm12 = ymm13 = 1.0001 on entry (normal numbers throughout, no
/// assists), ymm14/15 free. `{p}` points at 320 bytes of 1.0001 aligned to 64 (in L1): the
/// register-only bodies leave it alone, the tile bodies load from it as the AVX2 prefill tile
/// (`half_sums_avx2` in runtime/src/kernels/x86.rs) loads its tokens' values (at 0 and 32) and
/// its rows' weights (at 64 + 32 r).
#[cfg(target_arch = "x86_64")]
macro_rules! chains {
    ($(#[$doc:meta])* $name:ident, $features:literal, $($body:literal,)*) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        unsafe fn $name(iters: u64) {
            #[repr(align(64))]
            struct Buf([f32; 80]);
            let buf = Buf([1.0001; 80]);
            // SAFETY: reads inside buf only.
            unsafe {
                core::arch::asm!(
                    "vxorps ymm0, ymm0, ymm0", "vxorps ymm1, ymm1, ymm1", "vxorps ymm2, ymm2, ymm2", "vxorps ymm3, ymm3, ymm3", "vxorps ymm4, ymm4, ymm4", "vxorps ymm5, ymm5, ymm5", "vxorps ymm6, ymm6, ymm6", "vxorps ymm7, ymm7, ymm7", "vxorps ymm8, ymm8, ymm8", "vxorps ymm9, ymm9, ymm9", "vxorps ymm10, ymm10, ymm10", "vxorps ymm11, ymm11, ymm11",
                    "vmovups ymm12, [{p}]", "vmovups ymm13, [{p}]",
                    "2:",
                    $($body,)*
                    "dec {n}",
                    "jnz 2b",
                    n = inout(reg) iters => _,
                    p = in(reg) buf.0.as_ptr(),
                    out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _, out("ymm4") _, out("ymm5") _,
                    out("ymm6") _, out("ymm7") _, out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
                    out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
                    options(readonly, nostack),
                );
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
chains!(
    /// `acc_i = acc_i + a · b`, the product through ymm14/15.
    mul_add_chains, "avx2",
    "vmulps ymm14, ymm12, ymm13", "vaddps ymm0, ymm0, ymm14",
    "vmulps ymm15, ymm12, ymm13", "vaddps ymm1, ymm1, ymm15",
    "vmulps ymm14, ymm12, ymm13", "vaddps ymm2, ymm2, ymm14",
    "vmulps ymm15, ymm12, ymm13", "vaddps ymm3, ymm3, ymm15",
    "vmulps ymm14, ymm12, ymm13", "vaddps ymm4, ymm4, ymm14",
    "vmulps ymm15, ymm12, ymm13", "vaddps ymm5, ymm5, ymm15",
    "vmulps ymm14, ymm12, ymm13", "vaddps ymm6, ymm6, ymm14",
    "vmulps ymm15, ymm12, ymm13", "vaddps ymm7, ymm7, ymm15",
    "vmulps ymm14, ymm12, ymm13", "vaddps ymm8, ymm8, ymm14",
    "vmulps ymm15, ymm12, ymm13", "vaddps ymm9, ymm9, ymm15",
    "vmulps ymm14, ymm12, ymm13", "vaddps ymm10, ymm10, ymm14",
    "vmulps ymm15, ymm12, ymm13", "vaddps ymm11, ymm11, ymm15",
);

#[cfg(target_arch = "x86_64")]
chains!(
    /// `acc_i = fma(a, b, acc_i)`.
    fma_chains, "avx2,fma",
    "vfmadd231ps ymm0, ymm12, ymm13",
    "vfmadd231ps ymm1, ymm12, ymm13",
    "vfmadd231ps ymm2, ymm12, ymm13",
    "vfmadd231ps ymm3, ymm12, ymm13",
    "vfmadd231ps ymm4, ymm12, ymm13",
    "vfmadd231ps ymm5, ymm12, ymm13",
    "vfmadd231ps ymm6, ymm12, ymm13",
    "vfmadd231ps ymm7, ymm12, ymm13",
    "vfmadd231ps ymm8, ymm12, ymm13",
    "vfmadd231ps ymm9, ymm12, ymm13",
    "vfmadd231ps ymm10, ymm12, ymm13",
    "vfmadd231ps ymm11, ymm12, ymm13",
);

#[cfg(target_arch = "x86_64")]
chains!(
    /// The tile as the kernel runs it: two tokens' values loaded, then per row its weights
    /// loaded, multiplied by each token's (the product through ymm15, then in place) and added.
    mul_add_tile, "avx2",
    "vmovups ymm12, [{p}]", "vmovups ymm13, [{p} + 32]",
    "vmovups ymm14, [{p} + 64]", "vmulps ymm15, ymm14, ymm12", "vaddps ymm0, ymm0, ymm15", "vmulps ymm14, ymm14, ymm13", "vaddps ymm1, ymm1, ymm14",
    "vmovups ymm14, [{p} + 96]", "vmulps ymm15, ymm14, ymm12", "vaddps ymm2, ymm2, ymm15", "vmulps ymm14, ymm14, ymm13", "vaddps ymm3, ymm3, ymm14",
    "vmovups ymm14, [{p} + 128]", "vmulps ymm15, ymm14, ymm12", "vaddps ymm4, ymm4, ymm15", "vmulps ymm14, ymm14, ymm13", "vaddps ymm5, ymm5, ymm14",
    "vmovups ymm14, [{p} + 160]", "vmulps ymm15, ymm14, ymm12", "vaddps ymm6, ymm6, ymm15", "vmulps ymm14, ymm14, ymm13", "vaddps ymm7, ymm7, ymm14",
    "vmovups ymm14, [{p} + 192]", "vmulps ymm15, ymm14, ymm12", "vaddps ymm8, ymm8, ymm15", "vmulps ymm14, ymm14, ymm13", "vaddps ymm9, ymm9, ymm14",
    "vmovups ymm14, [{p} + 224]", "vmulps ymm15, ymm14, ymm12", "vaddps ymm10, ymm10, ymm15", "vmulps ymm14, ymm14, ymm13", "vaddps ymm11, ymm11, ymm14",
);

#[cfg(target_arch = "x86_64")]
chains!(
    /// The same tile with FMA (what a kernel free to fuse would run).
    fma_tile, "avx2,fma",
    "vmovups ymm12, [{p}]", "vmovups ymm13, [{p} + 32]",
    "vmovups ymm14, [{p} + 64]", "vfmadd231ps ymm0, ymm14, ymm12", "vfmadd231ps ymm1, ymm14, ymm13",
    "vmovups ymm14, [{p} + 96]", "vfmadd231ps ymm2, ymm14, ymm12", "vfmadd231ps ymm3, ymm14, ymm13",
    "vmovups ymm14, [{p} + 128]", "vfmadd231ps ymm4, ymm14, ymm12", "vfmadd231ps ymm5, ymm14, ymm13",
    "vmovups ymm14, [{p} + 160]", "vfmadd231ps ymm6, ymm14, ymm12", "vfmadd231ps ymm7, ymm14, ymm13",
    "vmovups ymm14, [{p} + 192]", "vfmadd231ps ymm8, ymm14, ymm12", "vfmadd231ps ymm9, ymm14, ymm13",
    "vmovups ymm14, [{p} + 224]", "vfmadd231ps ymm10, ymm14, ymm12", "vfmadd231ps ymm11, ymm14, ymm13",
);

#[cfg(target_arch = "x86_64")]
chains!(
    /// The tile with each weight load folded into its multiplies (loaded once per token).
    mul_add_tile_folded, "avx2",
    "vmovups ymm12, [{p}]", "vmovups ymm13, [{p} + 32]",
    "vmulps ymm14, ymm12, [{p} + 64]", "vaddps ymm0, ymm0, ymm14", "vmulps ymm15, ymm13, [{p} + 64]", "vaddps ymm1, ymm1, ymm15",
    "vmulps ymm14, ymm12, [{p} + 96]", "vaddps ymm2, ymm2, ymm14", "vmulps ymm15, ymm13, [{p} + 96]", "vaddps ymm3, ymm3, ymm15",
    "vmulps ymm14, ymm12, [{p} + 128]", "vaddps ymm4, ymm4, ymm14", "vmulps ymm15, ymm13, [{p} + 128]", "vaddps ymm5, ymm5, ymm15",
    "vmulps ymm14, ymm12, [{p} + 160]", "vaddps ymm6, ymm6, ymm14", "vmulps ymm15, ymm13, [{p} + 160]", "vaddps ymm7, ymm7, ymm15",
    "vmulps ymm14, ymm12, [{p} + 192]", "vaddps ymm8, ymm8, ymm14", "vmulps ymm15, ymm13, [{p} + 192]", "vaddps ymm9, ymm9, ymm15",
    "vmulps ymm14, ymm12, [{p} + 224]", "vaddps ymm10, ymm10, ymm14", "vmulps ymm15, ymm13, [{p} + 224]", "vaddps ymm11, ymm11, ymm15",
);

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("fp-peak: x86-64 only");
}
