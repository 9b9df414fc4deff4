//! The KV cache: keys and values of every position processed so far, for every layer, in a
//! caller-provided buffer of fixed capacity.
//!
//! Layout: `(n_layer, 2, capacity, C)` f32 — for layer l, `[0]` holds keys and `[1]` values;
//! head h of position s is the D-wide slice `h·D..(h+1)·D` of row s. Prefill and decode append
//! to the same cache; it never wraps: a full cache is reported as [`Error::ContextFull`] by the
//! session before anything is written.

use crate::error::Error;

/// Keys and values of the positions seen so far (see the module docs for the layout).
#[derive(Debug)]
pub struct KvCache<'m> {
    data: &'m mut [f32], // (n_layer, 2, capacity, C)
    n_layer: usize,
    capacity: usize,
    n_embd: usize,
    len: usize, // positions filled (the same for every layer once a token is done)
}

impl<'m> KvCache<'m> {
    /// f32 elements needed for `n_layer` layers of `capacity` positions of width `n_embd`.
    pub const fn required_len(n_layer: usize, capacity: usize, n_embd: usize) -> usize {
        2 * n_layer * capacity * n_embd
    }

    /// Wraps `data` (at least [`KvCache::required_len`] elements; extra is left unused).
    pub fn new(data: &'m mut [f32], n_layer: usize, capacity: usize, n_embd: usize) -> Result<Self, Error> {
        let needed = Self::required_len(n_layer, capacity, n_embd);
        let available = data.len();
        let data = data.get_mut(..needed).ok_or(Error::KvCacheTooSmall { needed, available })?;
        Ok(Self { data, n_layer, capacity, n_embd, len: 0 })
    }

    /// Positions that can be cached.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every cached position (the buffer is reused as is).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Marks positions `..len` as filled (called by the session after a batch is complete).
    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity);
    }

    /// Bytes of the cache buffer in use.
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }

    fn row_range(&self, layer: usize, kv: usize, pos: usize) -> core::ops::Range<usize> {
        let start = ((layer * 2 + kv) * self.capacity + pos) * self.n_embd;
        start..start + self.n_embd
    }

    /// Key row (C) of `layer` at `pos` (empty if out of range).
    pub fn key(&self, layer: usize, pos: usize) -> &[f32] {
        if layer >= self.n_layer || pos >= self.capacity {
            return &[];
        }
        self.data.get(self.row_range(layer, 0, pos)).unwrap_or(&[])
    }

    /// Value row (C) of `layer` at `pos` (empty if out of range).
    pub fn value(&self, layer: usize, pos: usize) -> &[f32] {
        if layer >= self.n_layer || pos >= self.capacity {
            return &[];
        }
        self.data.get(self.row_range(layer, 1, pos)).unwrap_or(&[])
    }

    /// Stores the key and value rows of `layer` at `pos` (ignored if out of range).
    pub fn store(&mut self, layer: usize, pos: usize, key: &[f32], value: &[f32]) {
        if layer >= self.n_layer || pos >= self.capacity {
            return;
        }
        for (kv, src) in [(0, key), (1, value)] {
            let r = self.row_range(layer, kv, pos);
            if let Some(dst) = self.data.get_mut(r) {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = *s;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::attend_head;

    #[test]
    fn too_small_buffer_is_reported_with_numbers() {
        let mut buf = [0.0f32; 35];
        let err = KvCache::new(&mut buf, 1, 6, 3).err();
        assert_eq!(err, Some(Error::KvCacheTooSmall { needed: 36, available: 35 }));
    }

    /// The tutorial: decoding the third token from a cache that holds the first two gives the
    /// same attention output z as attending over all three at once.
    #[test]
    fn tutorial_decode_from_cache() {
        let h: [[f32; 3]; 3] = [[0.2, 1.0, 0.1], [0.9, 0.1, 0.4], [0.6, 0.4, 0.9]];
        let mut buf = [0.0f32; 18];
        let mut cache = KvCache::new(&mut buf, 1, 3, 3).unwrap();
        // "prefill" the first two tokens (W_K = W_V = I)
        cache.store(0, 0, &h[0], &h[0]);
        cache.store(0, 1, &h[1], &h[1]);
        cache.set_len(2);
        // decode the third: append its k/v, attend with its q
        cache.store(0, 2, &h[2], &h[2]);
        cache.set_len(3);
        let mut z = [0.0f32; 3];
        let mut scores = [0.0f32; 3];
        let c = &cache;
        attend_head(&mut z, &h[2], |s| c.key(0, s), |s| c.value(0, s), 3, 1.0 / libm::sqrtf(3.0), &mut scores);
        for (got, want) in z.iter().zip([0.59, 0.47, 0.52]) {
            assert!((got - want).abs() < 0.005, "z {got} vs {want}");
        }
    }
}
