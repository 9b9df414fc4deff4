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

/// A copy of `v` whose first element sits on a 64-byte boundary, as the blob's tensors and the
/// desktop's arena do (a plain `Vec` from malloc starts 16 bytes past one). With the data 16
/// bytes off, half of the 32-byte loads of an AVX2 kernel cross a cache line, which slowed the
/// f32 prefill tiles by a fifth here (Sapphire Rapids, AVX2 path) and made a kernel change look
/// that much faster than it was in the forward pass (BENCHMARKS.md).
pub struct Aligned<T> {
    buf: Vec<T>,
    start: usize,
    len: usize,
}

impl<T: Copy + Default> Aligned<T> {
    pub fn new(v: &[T]) -> Self {
        let size = std::mem::size_of::<T>().max(1);
        let mut buf = vec![T::default(); v.len() + 64 / size];
        let start = (64 - buf.as_ptr() as usize % 64) % 64 / size;
        buf[start..start + v.len()].copy_from_slice(v);
        Self { buf, start, len: v.len() }
    }
}

impl<T> std::ops::Deref for Aligned<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl<T> std::ops::DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.buf[self.start..self.start + self.len]
    }
}
