//! The KV cache: keys and values of the positions processed so far, for every layer, in a
//! caller-provided buffer of fixed capacity, stored as f32, f16 or int8.
//!
//! Layer l holds `cap_l` positions: the context capacity for a global layer, `min(capacity, W)`
//! for a local one (GPT-Neo's sliding window of W positions), which is then a ring: position p
//! is stored in slot `p % cap_l`, so after storing position i its slots hold exactly the
//! positions i − W < j ≤ i that position i attends to ([`KvLayout`]).
//!
//! A row is one position's keys (or values) for every key/value head: C_kv = H_kv·D values
//! (C for GPT-2; fewer with grouped-query attention, which is its RAM saving).
//!
//! Layout, head-major: layer l's block starts at value `rows_before(l) · C_kv` (rows_before(l) =
//! Σ_{k<l} 2·cap_k); its keys are `cap_l · C_kv` values, its values the `cap_l · C_kv` after them. In
//! each, head h's keys (or values) for slots 0..cap_l are contiguous: slot s of head h is the D
//! values at `h · cap_l · D + s · D`. So attention, which walks one head over every slot, reads
//! one sequential run of memory instead of D values every C. int8 carries one f32 scale per
//! (slot, head), after all the values, in the same order: block (l, kv) at `(rows_before(l) + kv
//! · cap_l) · H_kv`, head h's slots at `h · cap_l` in it. Bytes: Σ_l 2 · cap_l · C_kv · (4 | 2 | 1)
//! plus, for int8, Σ_l 2 · cap_l · H_kv · 4. Prefill and decode append to the same
//! cache; the session reports a full context as [`Error::ContextFull`] before anything is
//! written (the positions, and so `wpe`'s rows, run out at the capacity whatever the rings hold).

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::config::{Config, LayerMask};
use crate::error::Error;
use crate::kernels::{axpy, dot_f16, dot_f32, quantize_group_q8};

/// Where each layer's rows lie: per layer, `2 · cap_l` rows of C values (keys, then values),
/// `cap_l` = `capacity` for a global layer and `local_capacity` = `min(capacity, W)` for a
/// local one. A `const fn` of the config, so a board sizes its buffer at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    /// Layers.
    pub n_layer: usize,
    /// Positions of the context (what a global layer holds).
    pub capacity: usize,
    /// Positions a local layer holds: `min(capacity, W)`.
    pub local_capacity: usize,
    /// The local layers.
    pub local: LayerMask,
    /// C_kv = H_kv·D: values per row (the keys or values of one position, every key/value
    /// head; C for GPT-2).
    pub kv_dim: usize,
    /// H_kv: key/value heads, and int8 scales per row.
    pub n_kv_head: usize,
}

impl KvLayout {
    /// The layout of `config`'s cache for `capacity` positions.
    pub const fn new(config: &Config, capacity: usize) -> Self {
        let w = config.attn_window as usize;
        KvLayout {
            n_layer: config.n_layer as usize,
            capacity,
            local_capacity: if w < capacity { w } else { capacity },
            local: config.local_layers,
            kv_dim: config.kv_dim(),
            n_kv_head: config.n_kv_head as usize,
        }
    }

    /// Every layer global (GPT-2): `2 · n_layer · capacity` rows of `kv_dim` values.
    pub const fn uniform(n_layer: usize, capacity: usize, kv_dim: usize, n_kv_head: usize) -> Self {
        KvLayout { n_layer, capacity, local_capacity: capacity, local: LayerMask::NONE, kv_dim, n_kv_head }
    }

    /// Positions layer `l` holds (`cap_l`).
    pub const fn layer_capacity(&self, l: usize) -> usize {
        if self.local.contains(l) {
            self.local_capacity
        } else {
            self.capacity
        }
    }

    /// Rows of the layers before `l`: 2 · (globals · capacity + locals · local_capacity),
    /// saturating (see [`KvCache::required_len`]).
    pub const fn rows_before(&self, l: usize) -> usize {
        let l = if l < self.n_layer { l } else { self.n_layer };
        let locals = self.local.count_below(l);
        let globals = l.saturating_sub(locals);
        let positions = globals.saturating_mul(self.capacity).saturating_add(locals.saturating_mul(self.local_capacity));
        positions.saturating_mul(2)
    }

    /// Rows of all layers.
    pub const fn rows(&self) -> usize {
        self.rows_before(self.n_layer)
    }

    /// Bytes layer `l`'s keys and values take as `dtype`: 2 · cap_l · C_kv · (4 | 2 | 1), plus
    /// 2 · cap_l · H_kv · 4 for the int8 scales.
    pub const fn layer_bytes(&self, dtype: KvDType, l: usize) -> usize {
        let rows = self.layer_capacity(l).saturating_mul(2);
        let values = rows.saturating_mul(self.kv_dim);
        match dtype {
            KvDType::F32 => values.saturating_mul(4),
            KvDType::F16 => values.saturating_mul(2),
            KvDType::I8 => values.saturating_add(rows.saturating_mul(self.n_kv_head).saturating_mul(4)),
        }
    }
}

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

/// One (layer, head)'s cached keys or values over slots `0..len`, as stored: slot s is the
/// `width` (= D) elements at `s · stride` of `data` (the cache stores each head's slots
/// contiguously, so stride = D; for the int8 scales, width 1 and stride 1, but the kernels take
/// any stride ≥ width). Slot s holds position s until a local layer's ring wraps. Made only by
/// [`KvCache::head`], which keeps the invariant the kernels rely on: every row lies inside
/// `data`.
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

/// Keys and values of one (layer, head) over its filled slots (see [`KvCache::head`]), as
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
    layout: KvLayout, // rows per layer (rings for local layers)
    len: usize,       // positions processed
}

impl<'m> KvCache<'m> {
    /// f32 elements (4-byte slots) of storage needed.
    pub const fn required_len(dtype: KvDType, layout: &KvLayout) -> usize {
        // Saturating: on 32-bit targets a valid config can ask for more than usize::MAX values
        // (1024 layers · n_ctx 65536 · n_embd 64 = 2^33), which wrapped to a small size (release)
        // or panicked (debug). No buffer holds usize::MAX, so `new` reports KvCacheTooSmall.
        // (Regression test: tests/tests/malformed_inputs.rs, kv_cache_size_saturates_...)
        let rows = layout.rows();
        let values = rows.saturating_mul(layout.kv_dim);
        match dtype {
            KvDType::F32 => values,
            KvDType::F16 => values.div_ceil(2),
            KvDType::I8 => values.div_ceil(4).saturating_add(rows.saturating_mul(layout.n_kv_head)),
        }
    }

    /// Wraps `data` (at least [`KvCache::required_len`] elements; extra is left unused).
    pub fn new(data: &'m mut [f32], dtype: KvDType, layout: KvLayout) -> Result<Self, Error> {
        let needed = Self::required_len(dtype, &layout);
        let available = data.len();
        let data = data.get_mut(..needed).ok_or(Error::KvCacheTooSmall { needed, available })?;
        let layout = KvLayout { n_kv_head: layout.n_kv_head.max(1), ..layout };
        Ok(Self { data, dtype, layout, len: 0 })
    }

    /// Storage dtype.
    pub fn dtype(&self) -> KvDType {
        self.dtype
    }

    /// Where each layer's rows are.
    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    /// Positions that can be processed (a local layer keeps only its last W of them).
    pub fn capacity(&self) -> usize {
        self.layout.capacity
    }

    /// Positions processed so far.
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

    /// Marks positions `..len` as processed (called by the session after a batch is complete).
    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len.min(self.layout.capacity);
    }

    /// Bytes of the cache buffer in use.
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }

    fn head_dim(&self) -> usize {
        self.layout.kv_dim / self.layout.n_kv_head
    }

    /// Where (layer, kv, head, slot) lies: (its first value, its scale's index), or None when
    /// out of range. Head-major (see the module docs): block (layer, kv) is `cap_l` rows of C
    /// values from row `rows_before(layer) + kv · cap_l`, head h's slots contiguous in it.
    fn at(&self, layer: usize, kv: usize, head: usize, slot: usize) -> Option<(usize, usize)> {
        let (c, d, h) = (self.layout.kv_dim, self.head_dim(), self.layout.n_kv_head);
        let cap = self.layout.layer_capacity(layer);
        let first = self.layout.rows_before(layer) + kv * cap;
        (layer < self.layout.n_layer && head < h && slot < cap)
            .then(|| (first * c + (head * cap + slot) * d, first * h + head * cap + slot))
    }

    /// Split of int8 storage: (values, scales).
    fn i8_parts(&self) -> (&[i8], &[f32]) {
        let values = self.layout.rows() * self.layout.kv_dim;
        let (v, s) = self.data.split_at(values.div_ceil(4).min(self.data.len()));
        (bytemuck::cast_slice::<f32, i8>(v), s)
    }

    /// Keys and values of `head` in `layer` for attending from position `end − 1`: its
    /// `min(end, cap_l)` filled slots in slot order (no positions when `layer` or `head` is out
    /// of range). Strided views of the storage, so [`crate::kernels::attention`] walks them
    /// without a lookup per position. For a global layer slot s is position s; for a local one,
    /// once `end > W`, the slots hold positions `end − W .. end` rotated by `end % W`: the order
    /// is a function of `end` alone, so every batch size sums in the same order.
    pub fn head(&self, layer: usize, head: usize, end: usize) -> KvHead<'_> {
        let (c, d, h) = (self.layout.kv_dim, self.head_dim(), self.layout.n_kv_head);
        // out of range: no positions (and offsets of layer 0, head 0, which cannot overflow)
        let (layer, head, end) = if layer < self.layout.n_layer && head < h { (layer, head, end) } else { (0, 0, 0) };
        let cap = self.layout.layer_capacity(layer);
        let len = end.min(cap);
        // first row of (layer, kv) (in range when len > 0, as layer is); head's slots are
        // contiguous from `head · cap` rows of D in it: `at`'s addressing for slot 0, with
        // rows_before computed once for keys and values (going through `at` costs the M4
        // ~1,400 instructions a decoded token)
        let first = self.layout.rows_before(layer);
        let row0 = |kv: usize| first + kv * cap;
        let at = |kv: usize| row0(kv) * c + head * cap * d;
        match self.dtype {
            KvDType::F32 => KvHead::F32 {
                keys: HeadRows::new(self.data, at(0), d, d, len),
                values: HeadRows::new(self.data, at(1), d, d, len),
            },
            KvDType::F16 => {
                let all = bytemuck::cast_slice::<f32, f16>(self.data);
                KvHead::F16 { keys: HeadRows::new(all, at(0), d, d, len), values: HeadRows::new(all, at(1), d, d, len) }
            }
            KvDType::I8 => {
                let (v, s) = self.i8_parts();
                KvHead::I8 {
                    keys: HeadRows::new(v, at(0), d, d, len),
                    key_scales: HeadRows::new(s, row0(0) * h + head * cap, 1, 1, len),
                    values: HeadRows::new(v, at(1), d, d, len),
                    value_scales: HeadRows::new(s, row0(1) * h + head * cap, 1, 1, len),
                }
            }
        }
    }

    /// Stores the key and value rows (C each) of `layer` at position `pos`, in slot
    /// `pos % cap_l` (ignored if out of range): head h's D values go to its own run of slots.
    pub fn store(&mut self, layer: usize, pos: usize, key: &[f32], value: &[f32]) {
        let d = self.head_dim();
        if pos >= self.layout.capacity || d == 0 {
            return;
        }
        let Some(slot) = pos.checked_rem(self.layout.layer_capacity(layer)) else { return };
        let values = self.layout.rows() * self.layout.kv_dim;
        for (kv, src) in [(0, key), (1, value)] {
            for (head, x) in src.chunks_exact(d).enumerate() {
                let Some((first, scale_at)) = self.at(layer, kv, head, slot) else { return };
                let r = first..first + d;
                match self.dtype {
                    KvDType::F32 => {
                        if let Some(dst) = self.data.get_mut(r) {
                            dst.copy_from_slice(x);
                        }
                    }
                    KvDType::F16 => {
                        let all: &mut [f16] = bytemuck::cast_slice_mut(self.data);
                        if let Some(dst) = all.get_mut(r) {
                            // the slice form converts 8 at a time where the CPU can (F16C), with
                            // the same rounding as f16::from_f32 one by one
                            if let Some(x) = x.get(..dst.len()) {
                                dst.convert_from_f32_slice(x);
                            }
                        }
                    }
                    KvDType::I8 => {
                        let (v, s) = self.data.split_at_mut(values.div_ceil(4).min(self.data.len()));
                        let v: &mut [i8] = bytemuck::cast_slice_mut(v);
                        if let (Some(q), Some(scale)) = (v.get_mut(r), s.get_mut(scale_at)) {
                            *scale = quantize_group_q8(x, q);
                        }
                    }
                }
            }
        }
    }

    /// `q · key[layer, slot, head]` (q is D wide); 0 when out of range. One slot at a time:
    /// with [`KvCache::add_value`], the naive reference for [`crate::kernels::attention`]
    /// (which reads [`KvCache::head`] and must give the same bits).
    #[inline]
    pub fn score(&self, layer: usize, slot: usize, head: usize, q: &[f32]) -> f32 {
        let d = self.head_dim();
        let Some((first, scale_at)) = self.at(layer, 0, head, slot) else { return 0.0 };
        let r = first..first + d;
        match self.dtype {
            KvDType::F32 => dot_f32(q, self.data.get(r).unwrap_or(&[])),
            KvDType::F16 => dot_f16(bytemuck::cast_slice::<f32, f16>(self.data).get(r).unwrap_or(&[]), q),
            KvDType::I8 => {
                let (v, s) = self.i8_parts();
                let k = v.get(r).unwrap_or(&[]);
                let dot: f32 = q.iter().zip(k).map(|(&a, &b)| a * b as f32).sum();
                dot * s.get(scale_at).copied().unwrap_or(0.0)
            }
        }
    }

    /// `out += p · value[layer, slot, head]` (out is D wide); see [`KvCache::score`].
    #[inline]
    pub fn add_value(&self, layer: usize, slot: usize, head: usize, p: f32, out: &mut [f32]) {
        let d = self.head_dim();
        let Some((first, scale_at)) = self.at(layer, 1, head, slot) else { return };
        let r = first..first + d;
        match self.dtype {
            KvDType::F32 => axpy(out, p, self.data.get(r).unwrap_or(&[])),
            KvDType::F16 => {
                let v = bytemuck::cast_slice::<f32, f16>(self.data).get(r).unwrap_or(&[]);
                out.iter_mut().zip(v).for_each(|(o, v)| *o += p * v.to_f32());
            }
            KvDType::I8 => {
                let (v, s) = self.i8_parts();
                let ps = p * s.get(scale_at).copied().unwrap_or(0.0);
                out.iter_mut().zip(v.get(r).unwrap_or(&[])).for_each(|(o, &v)| *o += ps * v as f32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::kernels::attention_ref;

    #[test]
    fn too_small_buffer_is_reported_with_numbers() {
        let mut buf = [0.0f32; 35];
        let err = KvCache::new(&mut buf, KvDType::F32, KvLayout::uniform(1, 6, 3, 1)).err();
        assert_eq!(err, Some(Error::KvCacheTooSmall { needed: 36, available: 35 }));
        // int8: 36 values -> 9 slots, plus 12 scales
        assert_eq!(KvCache::required_len(KvDType::I8, &KvLayout::uniform(1, 6, 3, 1)), 9 + 12);
        assert_eq!(KvCache::required_len(KvDType::F16, &KvLayout::uniform(1, 6, 3, 1)), 18);
    }

    /// The tutorial: decoding the third token from a cache that holds the first two gives the
    /// same attention output z as attending over all three at once, for every storage dtype.
    #[test]
    fn tutorial_decode_from_cache() {
        let h: [[f32; 3]; 3] = [[0.2, 1.0, 0.1], [0.9, 0.1, 0.4], [0.6, 0.4, 0.9]];
        for dtype in [KvDType::F32, KvDType::F16, KvDType::I8] {
            let mut buf = [0.0f32; 40];
            let mut cache = KvCache::new(&mut buf, dtype, KvLayout::uniform(1, 3, 3, 1)).unwrap();
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

    /// A local layer is a ring of W slots: after storing position p, its slots hold exactly
    /// positions p − W < j ≤ p (slot j % W), while a global layer beside it keeps every position;
    /// the layers' rows do not overlap, for every dtype, and the sizes are the per-layer sums.
    #[test]
    fn local_layers_are_rings_of_their_window() {
        use crate::config::LayerMask;
        let (cap, w, c, h) = (10usize, 4usize, 4usize, 2usize);
        // layers 0 and 2 global, 1 local
        let layout = KvLayout { n_layer: 3, capacity: cap, local_capacity: w, local: LayerMask::NONE.with(1), kv_dim: c, n_kv_head: h };
        assert_eq!((layout.layer_capacity(0), layout.layer_capacity(1), layout.layer_capacity(2)), (cap, w, cap));
        assert_eq!((layout.rows_before(1), layout.rows_before(2), layout.rows()), (2 * cap, 2 * cap + 2 * w, 4 * cap + 2 * w));
        for dtype in [KvDType::F32, KvDType::F16, KvDType::I8] {
            let per_layer: usize = (0..3).map(|l| layout.layer_bytes(dtype, l)).sum();
            let total = 4 * KvCache::required_len(dtype, &layout);
            assert!(total >= per_layer && total < per_layer + 4, "{dtype:?}: {total} vs {per_layer}");
            let mut buf = std::vec![0.0f32; KvCache::required_len(dtype, &layout)];
            let mut cache = KvCache::new(&mut buf, dtype, layout).unwrap();
            // key of (layer l, position p): every element l·16 + p (exact in f16 and int8)
            let row = |l: usize, p: usize, kv: usize| std::vec![(l * 16 + p) as f32 + kv as f32 * 0.5; c];
            for p in 0..cap {
                for l in 0..3 {
                    cache.store(l, p, &row(l, p, 0), &row(l, p, 1));
                }
                for l in 0..3 {
                    let held = layout.layer_capacity(l).min(p + 1);
                    let KvHead::F32 { keys, values } = cache.head(l, 1, p + 1) else {
                        // f16 / int8: decoded through the reference accessors
                        for s in 0..held {
                            let pos = if p + 1 > held { (p + 1 - held..=p).find(|j| j % held == s).unwrap() } else { s };
                            let one = [1.0f32, 1.0];
                            let want = (l * 16 + pos) as f32 * 2.0;
                            let got = cache.score(l, s, 1, &one);
                            assert!((got - want).abs() <= want * 0.01, "{dtype:?} layer {l} after {p}: slot {s} holds {got}, want {want}");
                        }
                        assert_eq!(cache.head(l, 0, p + 1).len(), held);
                        continue;
                    };
                    assert_eq!(keys.len(), held);
                    // slot order: position j sits in slot j % cap_l, and the slots hold p - held < j <= p
                    let mut positions: std::vec::Vec<usize> = keys.rows().map(|k| k[0] as usize - l * 16).collect();
                    for (s, &j) in positions.iter().enumerate() {
                        assert_eq!(j % layout.layer_capacity(l), s, "{dtype:?} layer {l} after {p}");
                    }
                    positions.sort();
                    assert_eq!(positions, (p + 1 - held..=p).collect::<std::vec::Vec<_>>(), "layer {l} after {p}");
                    assert!(values.rows().zip(keys.rows()).all(|(v, k)| v[0] == k[0] + 0.5));
                }
            }
        }
    }
}
