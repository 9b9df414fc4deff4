//! What the kernel benchmarks share: `benches/kernels.rs` (criterion) and `linear-ab`.

/// `n` pseudo-random values in [-0.5, 0.5) from `seed` (xorshift; the same on every run).
pub fn pseudo(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}
