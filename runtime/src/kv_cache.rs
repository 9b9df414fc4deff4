//! The KV cache: keys and values of every position processed so far, for every layer, in a
//! caller-provided buffer of fixed capacity, stored as f32, f16 or int8.
//!
//! Layout, in rows of C values: row `(layer·2 + kv)·capacity + pos`, kv 0 = key, 1 = value; head
//! h is the D-wide slice `h·D..(h+1)·D` of a row. int8 rows carry one f32 scale per head
//! (`(n_layer, 2, capacity, H)`, after all the values). Bytes: 2 · n_layer · capacity · C ·
//! (4 | 2 | 1) plus, for int8, 2 · n_layer · capacity · H · 4. Prefill and decode append to the
//! same cache; it never wraps: a full cache is reported as [`Error::ContextFull`] by the session
//! before anything is written.

use half::f16;

use crate::error::Error;
use crate::kernels::{axpy, dot_f16, dot_f32, quantize_group_q8};

/// Storage type of cached keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvDType {
    /// 4 bytes per value, exact.
    #[default]
    F32,
    /// 2 bytes per value.
    F16,
    /// 1 byte per value plus an f32 scale per head per position.
    I8,
}

impl KvDType {
    /// Lowercase name (`f32`, `f16`, `int8`).
    pub const fn name(self) -> &'static str {
        match self {
            KvDType::F32 => "f32",
            KvDType::F16 => "f16",
            KvDType::I8 => "int8",
        }
    }
}

/// One (layer, head)'s cached keys or values over positions `0..len`, as stored: position s is
/// the `width` (= D) elements at `s · stride` of `data` (rows are `n_embd` wide; for the int8
/// scales, width 1 and stride H). Made only by [`KvCache::head`], which keeps the invariant the
/// kernels rely on: every row lies inside `data`.
#[derive(Debug, Clone, Copy)]
pub struct HeadRows<'a, T> {
    /// Exactly `(len - 1) · stride + width` elements (empty when `len` is 0).
    data: &'a [T],
    stride: usize,
    width: usize,
    len: usize,
}

impl<'a, T> HeadRows<'a, T> {
    /// Rows `0..len` of `width` elements, `stride` apart, starting at `all[start]`; no rows
    /// when they do not all fit in `all` or `stride < width`.
    fn new(all: &'a [T], start: usize, stride: usize, width: usize, len: usize) -> Self {
        match rows_range(all.len(), start, stride, width, len).and_then(|r| all.get(r)) {
            Some(data) => Self { data, stride, width, len },
            None => Self { data: &[], stride: stride.max(width).max(1), width, len: 0 },
        }
    }

    /// Positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no positions.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements per position (D; 1 for scales).
    pub fn width(&self) -> usize {
        self.width
    }

    /// Elements from one position's row to the next.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Row `s` (empty when `s ≥ len`).
    #[inline(always)]
    pub fn row(&self, s: usize) -> &'a [T] {
        let row = if s < self.len { self.data.get(s * self.stride..) } else { None };
        row.and_then(|r| r.get(..self.width)).unwrap_or(&[])
    }

    /// The rows in position order.
    #[inline(always)]
    pub fn rows(&self) -> impl Iterator<Item = &'a [T]> + 'a {
        let width = self.width;
        // `data` ends with the last row: exactly `len` chunks
        self.data.chunks(self.stride).map(move |r| r.get(..width).unwrap_or(r))
    }

    /// The rows from position `s` on, in order.
    #[inline(always)]
    pub fn rows_from(&self, s: usize) -> impl Iterator<Item = &'a [T]> + 'a {
        let width = self.width;
        self.data.chunks(self.stride).skip(s).take(self.len.saturating_sub(s)).map(move |r| r.get(..width).unwrap_or(r))
    }

    /// The storage from row 0 on: row s is `s · stride .. s · stride + width` of it, inside it
    /// for every `s < len` (SIMD kernels read rows through a pointer to it).
    pub fn data(&self) -> &'a [T] {
        self.data
    }
}

impl<T: Copy> HeadRows<'_, T> {
    /// The first element of each row (the int8 scales: one per position).
    #[inline(always)]
    pub fn firsts(&self) -> impl Iterator<Item = T> + '_ {
        self.rows().map(|r| r.first().copied()).map_while(|v| v)
    }
}

/// Where rows `0..len` of `width` elements, `stride` apart from `start`, lie in a buffer of `n`
/// elements; None when they do not fit or `stride < width` (one copy for every element type).
#[inline(never)]
fn rows_range(n: usize, start: usize, stride: usize, width: usize, len: usize) -> Option<core::ops::Range<usize>> {
    if stride < width || stride == 0 {
        return None;
    }
    let span = match len {
        0 => 0,
        l => (l - 1).checked_mul(stride)?.checked_add(width)?,
    };
    let end = start.checked_add(span)?;
    (end <= n).then_some(start..end)
}

/// Keys and values of one (layer, head) over positions `0..len` (see [`KvCache::head`]), as
/// stored; [`crate::kernels::attention`] reads them.
#[derive(Debug, Clone, Copy)]
pub enum KvHead<'a> {
    /// f32 keys and values.
    F32 {
        /// Keys, D per position.
        keys: HeadRows<'a, f32>,
        /// Values, D per position.
        values: HeadRows<'a, f32>,
    },
    /// f16 keys and values.
    F16 {
        /// Keys, D per position.
        keys: HeadRows<'a, f16>,
        /// Values, D per position.
        values: HeadRows<'a, f16>,
    },
    /// int8 keys and values, each position's D values times its scale.
    I8 {
        /// Keys, D per position.
        keys: HeadRows<'a, i8>,
        /// One scale per position (width 1).
        key_scales: HeadRows<'a, f32>,
        /// Values, D per position.
        values: HeadRows<'a, i8>,
        /// One scale per position (width 1).
        value_scales: HeadRows<'a, f32>,
    },
}

impl KvHead<'_> {
    /// Positions (the same for keys, values and scales).
    pub fn len(&self) -> usize {
        match self {
            KvHead::F32 { keys, values } => keys.len().min(values.len()),
            KvHead::F16 { keys, values } => keys.len().min(values.len()),
            KvHead::I8 { keys, key_scales, values, value_scales } => {
                keys.len().min(values.len()).min(key_scales.len()).min(value_scales.len())
            }
        }
    }

    /// True when there are no positions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Keys and values of the positions seen so far (see the module docs for the layout).
#[derive(Debug)]
pub struct KvCache<'m> {
    data: &'m mut [f32], // raw storage, viewed as f32 / f16 / i8 + f32 scales
    dtype: KvDType,
    n_layer: usize,
    capacity: usize,
    n_embd: usize,
    n_head: usize,
    len: usize, // positions filled
}

impl<'m> KvCache<'m> {
    /// f32 elements (4-byte slots) of storage needed.
    pub const fn required_len(dtype: KvDType, n_layer: usize, capacity: usize, n_embd: usize, n_head: usize) -> usize {
        // Saturating: on 32-bit targets a valid config can ask for more than usize::MAX values
        // (1024 layers · n_ctx 65536 · n_embd 64 = 2^33), which wrapped to a small size (release)
        // or panicked (debug). No buffer holds usize::MAX, so `new` reports KvCacheTooSmall.
        // (Regression test: tests/tests/malformed_inputs.rs, kv_cache_size_saturates_...)
        let rows = 2usize.saturating_mul(n_layer).saturating_mul(capacity);
        let values = rows.saturating_mul(n_embd);
        match dtype {
            KvDType::F32 => values,
            KvDType::F16 => values.div_ceil(2),
            KvDType::I8 => values.div_ceil(4).saturating_add(rows.saturating_mul(n_head)),
        }
    }

    /// Wraps `data` (at least [`KvCache::required_len`] elements; extra is left unused).
    pub fn new(
        data: &'m mut [f32],
        dtype: KvDType,
        n_layer: usize,
        capacity: usize,
        n_embd: usize,
        n_head: usize,
    ) -> Result<Self, Error> {
        let needed = Self::required_len(dtype, n_layer, capacity, n_embd, n_head);
        let available = data.len();
        let data = data.get_mut(..needed).ok_or(Error::KvCacheTooSmall { needed, available })?;
        Ok(Self { data, dtype, n_layer, capacity, n_embd, n_head: n_head.max(1), len: 0 })
    }

    /// Storage dtype.
    pub fn dtype(&self) -> KvDType {
        self.dtype
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

    fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// Row number of (layer, kv, pos), or None when out of range.
    fn row(&self, layer: usize, kv: usize, pos: usize) -> Option<usize> {
        (layer < self.n_layer && pos < self.capacity).then_some((layer * 2 + kv) * self.capacity + pos)
    }

    /// Split of int8 storage: (values, scales).
    fn i8_parts(&self) -> (&[i8], &[f32]) {
        let values = 2 * self.n_layer * self.capacity * self.n_embd;
        let (v, s) = self.data.split_at(values.div_ceil(4).min(self.data.len()));
        (bytemuck::cast_slice::<f32, i8>(v), s)
    }

    /// Keys and values of `head` in `layer` over positions `0..len` (clamped to the capacity;
    /// no positions when `layer` or `head` is out of range): strided views of the storage, so
    /// [`crate::kernels::attention`] walks the positions without a lookup per position.
    pub fn head(&self, layer: usize, head: usize, len: usize) -> KvHead<'_> {
        let (c, d, h, cap) = (self.n_embd, self.head_dim(), self.n_head, self.capacity);
        // out of range: no positions (and offsets of layer 0, head 0, which cannot overflow)
        let (layer, head, len) = if layer < self.n_layer && head < h { (layer, head, len.min(cap)) } else { (0, 0, 0) };
        // first row of (layer, kv): (layer·2 + kv)·capacity (in range when len > 0, as layer is)
        let row0 = |kv: usize| (layer * 2 + kv) * cap;
        let at = |kv: usize| row0(kv) * c + head * d;
        match self.dtype {
            KvDType::F32 => KvHead::F32 {
                keys: HeadRows::new(self.data, at(0), c, d, len),
                values: HeadRows::new(self.data, at(1), c, d, len),
            },
            KvDType::F16 => {
                let all = bytemuck::cast_slice::<f32, f16>(self.data);
                KvHead::F16 { keys: HeadRows::new(all, at(0), c, d, len), values: HeadRows::new(all, at(1), c, d, len) }
            }
            KvDType::I8 => {
                let (v, s) = self.i8_parts();
                KvHead::I8 {
                    keys: HeadRows::new(v, at(0), c, d, len),
                    key_scales: HeadRows::new(s, row0(0) * h + head, h, 1, len),
                    values: HeadRows::new(v, at(1), c, d, len),
                    value_scales: HeadRows::new(s, row0(1) * h + head, h, 1, len),
                }
            }
        }
    }

    /// Stores the key and value rows (C each) of `layer` at `pos` (ignored if out of range).
    pub fn store(&mut self, layer: usize, pos: usize, key: &[f32], value: &[f32]) {
        let (c, d, h) = (self.n_embd, self.head_dim(), self.n_head);
        for (kv, src) in [(0, key), (1, value)] {
            let Some(row) = self.row(layer, kv, pos) else { return };
            let r = row * c..(row + 1) * c;
            match self.dtype {
                KvDType::F32 => {
                    if let Some(dst) = self.data.get_mut(r) {
                        dst.iter_mut().zip(src).for_each(|(d, s)| *d = *s);
                    }
                }
                KvDType::F16 => {
                    let all: &mut [f16] = bytemuck::cast_slice_mut(self.data);
                    if let Some(dst) = all.get_mut(r) {
                        dst.iter_mut().zip(src).for_each(|(d, s)| *d = f16::from_f32(*s));
                    }
                }
                KvDType::I8 => {
                    let values = 2 * self.n_layer * self.capacity * c;
                    let (v, s) = self.data.split_at_mut(values.div_ceil(4).min(self.data.len()));
                    let v: &mut [i8] = bytemuck::cast_slice_mut(v);
                    let (Some(dst), Some(scales)) = (v.get_mut(r), s.get_mut(row * h..(row + 1) * h)) else { return };
                    for ((q, x), scale) in dst.chunks_exact_mut(d).zip(src.chunks_exact(d)).zip(scales) {
                        *scale = quantize_group_q8(x, q);
                    }
                }
            }
        }
    }

    /// `q · key[layer, pos, head]` (q is D wide); 0 when out of range. One position at a time:
    /// with [`KvCache::add_value`], the naive reference for [`crate::kernels::attention`]
    /// (which reads [`KvCache::head`] and must give the same bits).
    #[inline]
    pub fn score(&self, layer: usize, pos: usize, head: usize, q: &[f32]) -> f32 {
        let (c, d) = (self.n_embd, self.head_dim());
        let Some(row) = self.row(layer, 0, pos) else { return 0.0 };
        let r = row * c + head * d..row * c + (head + 1) * d;
        match self.dtype {
            KvDType::F32 => dot_f32(q, self.data.get(r).unwrap_or(&[])),
            KvDType::F16 => dot_f16(bytemuck::cast_slice::<f32, f16>(self.data).get(r).unwrap_or(&[]), q),
            KvDType::I8 => {
                let (v, s) = self.i8_parts();
                let k = v.get(r).unwrap_or(&[]);
                let dot: f32 = q.iter().zip(k).map(|(&a, &b)| a * b as f32).sum();
                dot * s.get(row * self.n_head + head).copied().unwrap_or(0.0)
            }
        }
    }

    /// `out += p · value[layer, pos, head]` (out is D wide); see [`KvCache::score`].
    #[inline]
    pub fn add_value(&self, layer: usize, pos: usize, head: usize, p: f32, out: &mut [f32]) {
        let (c, d) = (self.n_embd, self.head_dim());
        let Some(row) = self.row(layer, 1, pos) else { return };
        let r = row * c + head * d..row * c + (head + 1) * d;
        match self.dtype {
            KvDType::F32 => axpy(out, p, self.data.get(r).unwrap_or(&[])),
            KvDType::F16 => {
                let v = bytemuck::cast_slice::<f32, f16>(self.data).get(r).unwrap_or(&[]);
                out.iter_mut().zip(v).for_each(|(o, v)| *o += p * v.to_f32());
            }
            KvDType::I8 => {
                let (v, s) = self.i8_parts();
                let ps = p * s.get(row * self.n_head + head).copied().unwrap_or(0.0);
                out.iter_mut().zip(v.get(r).unwrap_or(&[])).for_each(|(o, &v)| *o += ps * v as f32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::attention_ref;

    #[test]
    fn too_small_buffer_is_reported_with_numbers() {
        let mut buf = [0.0f32; 35];
        let err = KvCache::new(&mut buf, KvDType::F32, 1, 6, 3, 1).err();
        assert_eq!(err, Some(Error::KvCacheTooSmall { needed: 36, available: 35 }));
        // int8: 36 values -> 9 slots, plus 12 scales
        assert_eq!(KvCache::required_len(KvDType::I8, 1, 6, 3, 1), 9 + 12);
        assert_eq!(KvCache::required_len(KvDType::F16, 1, 6, 3, 1), 18);
    }

    /// The tutorial: decoding the third token from a cache that holds the first two gives the
    /// same attention output z as attending over all three at once, for every storage dtype.
    #[test]
    fn tutorial_decode_from_cache() {
        let h: [[f32; 3]; 3] = [[0.2, 1.0, 0.1], [0.9, 0.1, 0.4], [0.6, 0.4, 0.9]];
        for dtype in [KvDType::F32, KvDType::F16, KvDType::I8] {
            let mut buf = [0.0f32; 40];
            let mut cache = KvCache::new(&mut buf, dtype, 1, 3, 3, 1).unwrap();
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
            let scale = 1.0 / libm::sqrtf(3.0);
            attention_ref(&mut z, 3, scale, &mut scores, |s| c.score(0, s, 0, &h[2]), |s, p, o| c.add_value(0, s, 0, p, o));
            // to 0.01, as the tutorial states (it mixes with weights rounded to two places)
            for (got, want) in z.iter().zip([0.59, 0.47, 0.52]) {
                assert!((got - want).abs() < 0.01, "{dtype:?}: z {got} vs {want}");
            }
        }
    }
}
