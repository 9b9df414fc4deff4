//! q8 / q4 prefill on Intel AMX tiles (`TDPBSSD`), bit-identical to the portable kernel.
//!
//! A tile product multiplies a 16 × 32 int8 block of weights (16 rows, one group of 32
//! values) by a 32 × 16 int8 block of activations (the same group of 16 tokens) into 16 × 16
//! exact i32 group sums. One `TDPBSSD` per group, so every sum is one group's: the float side
//! then runs [`super::super::combine_groups`] for 16 rows × 16 tokens at once — lane `g % 16`
//! collects `isum · (ws · xs)` over the groups in order (mul, mul, add; no FMA), then the fixed
//! [`super::super::reduce`] tree, then the epilogue of `store_out` (bias, accumulate). Integer
//! sums are exact and the float operations and their order are the portable ones, so the bits
//! are too.
//!
//! Layout: q8 weights are read in place, a tile row being 32 values of one weight row; q4
//! weights are unpacked per block of 16 rows to int8 `nibble − 8`, each group as its low then
//! its high nibbles. The activations (int8 from `quantize_rows`; for q4 in
//! [`QuantOrder::Q4Pairs`] order, which for one group is its even-position values, then its
//! odd ones: the permutation the q4 weights have) are re-laid per call as the tile unit wants
//! its second operand: dword `d` (4 values) of token `n` at `[d][n]`, scales at `[g][n]`.
//! Loops: up to 64 tokens at a time; blocks of 16 rows outside, 16-token tiles inside. The
//! last rows and tokens are padded with zeros, and only real results are stored.
//!
//! AMX needs the kernel's permission per process (Linux: `arch_prctl(ARCH_REQ_XCOMP_PERM)`),
//! asked once by [`available`]. `GPT2_MCU_NO_AMX=1` in the environment turns the path off (to
//! compare it with the VNNI kernel it replaces in prefill).
//!
//! [`QuantOrder::Q4Pairs`]: super::super::QuantOrder::Q4Pairs

extern crate std;

use core::arch::asm;
use core::arch::x86_64::*;
use core::mem::MaybeUninit;

/// Rows (weights) and tokens of one tile product.
pub(super) const TILE: usize = 16;
/// Values per group: one tile's K.
const GROUP: usize = 32;
/// Widest matrix row (`cols`) this path takes: its buffers live on the stack, 88 · MAX_COLS
/// bytes (352 KiB: 64 tokens of re-laid activations and their scales, one block of 16
/// unpacked or padded weight rows), plus 24 KiB of sums and lane accumulators; wider rows
/// take the VNNI path.
pub(super) const MAX_COLS: usize = 4096;
/// Token tiles re-laid at a time.
const CHUNK_TILES: usize = 4;
/// Fewest tokens worth a tile (fewer are padded to 16 with zeros).
pub(super) const MIN_TOKENS: usize = 8;

/// Whether the CPU has AMX-INT8 and the OS lets this process use it (asked once).
pub(super) fn available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        if cfg!(miri) || std::env::var_os("GPT2_MCU_NO_AMX").is_some_and(|v| v != "0") || !super::has_avx512vnni() {
            return false;
        }
        // CPUID leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
        let edx = __cpuid_count(7, 0).edx;
        if edx & (3 << 24) != 3 << 24 {
            return false;
        }
        request_tile_data()
    })
}

/// Asks Linux for the AMX tile state: `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`.
#[cfg(target_os = "linux")]
fn request_tile_data() -> bool {
    let ret: i64;
    // SAFETY: a system call that only changes this process's permissions; it reads no
    // memory. rcx and r11 are clobbered by `syscall`.
    unsafe {
        asm!("syscall", inlateout("rax") 158i64 => ret, in("rdi") 0x1023i64, in("rsi") 18i64,
             lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    ret == 0
}

/// Elsewhere the VNNI path runs (not tried on other systems).
#[cfg(not(target_os = "linux"))]
fn request_tile_data() -> bool {
    false
}

/// The palette-1 tile configuration: tmm0–3 = sums (16 × 16 i32) of four groups, tmm4–5 =
/// weights (16 rows × 32 int8), tmm6–7 = activations (8 × 64: 32 values × 16 tokens, four
/// values per dword).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    /// Palette 1; bytes per row of tile t (u16 at 16 + 2t) and its rows (u8 at 48 + t):
    /// sums (tmm0–3) 16 rows × 64 bytes, weights (tmm4–5) 16 × 32, activations (tmm6–7) 8 × 64.
    const fn new() -> Self {
        #[rustfmt::skip]
        let c = [
            1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            64, 0, 64, 0, 64, 0, 64, 0, 32, 0, 32, 0, 64, 0, 64, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            16, 16, 16, 16, 16, 16, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        Self(c)
    }
}

/// The weights of one `linear` call as `linear_quant_vnni` checked them.
pub(super) struct Weights<'a> {
    pub q4: bool,
    pub data: &'a [u8],
    pub scales: &'a [f32],
    pub rows: usize,
    pub cols: usize,
}

/// A q8/q4 (group 32) `linear` for all `tokens` on AMX tiles: `out[t, o] (+)= …` with the
/// portable kernel's bits.
///
/// # Safety
/// AMX must be [`available`] (so AVX-512F/BW is there); `cols % 32 == 0` (q4: `% 128`),
/// `cols ≤ MAX_COLS`; `w.data`/`w.scales` hold `rows` rows (cols bytes, q4 cols / 2
/// bytes, and `cols / 32` scales each); `q` holds `tokens · cols` values (q4: in `Q4Pairs`
/// order) and `xs` `tokens · cols / 32` scales; `out` holds `tokens · rows` floats.
///
/// Never inlined: its buffers take ~360 KiB of stack, and inlined into the VNNI kernel they made
/// every `linear` call on a VNNI CPU probe that much stack, ~20% of the shipped model's decode.
#[inline(never)]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn linear(out: &mut [f32], w: &Weights<'_>, q: &[i8], xs: &[f32], tokens: usize, bias: &[f32], accumulate: bool) {
    let (rows, cols) = (w.rows, w.cols);
    let gpr = cols / GROUP;
    let row_bytes = if w.q4 { cols / 2 } else { cols };
    // up to 64 tokens re-laid: tile i, dword d, token n at [i][d][n]; scales at [i][g][n]
    let mut acts = MaybeUninit::<[u32; CHUNK_TILES * MAX_COLS / 4 * TILE]>::uninit();
    let mut act_scales = MaybeUninit::<[f32; CHUNK_TILES * MAX_COLS / GROUP * TILE]>::uninit();
    // one block of 16 weight rows as int8 (q4 unpacked; the last rows padded with zeros)
    let mut wbuf = MaybeUninit::<[i8; TILE * MAX_COLS]>::uninit();
    let (acts, act_scales, wbuf) = (acts.as_mut_ptr().cast::<u32>(), act_scales.as_mut_ptr().cast::<f32>(), wbuf.as_mut_ptr().cast::<i8>());
    let tile_dwords = cols / 4 * TILE;
    let mut sums: Sums = [[[[0; TILE]; TILE]; 4]; 2];
    // zeroed once per call, not per block (16 KiB; see `block`)
    let mut lanes: Lanes = [[_mm512_setzero_ps(); TILE]; 16];
    let config = TileConfig::new();
    // SAFETY: a valid palette-1 configuration, 64 aligned bytes.
    unsafe { asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly)) };
    for c0 in (0..tokens).step_by(CHUNK_TILES * TILE) {
        let nc = (tokens - c0).min(CHUNK_TILES * TILE);
        for i in 0..nc.div_ceil(TILE) {
            let t0 = c0 + i * TILE;
            // SAFETY: tokens t0..t0+nt < tokens are inside q and xs; tile i of the buffers
            // holds cols / 4 · 16 dwords and gpr · 16 scales (cols ≤ MAX_COLS).
            unsafe { pack_tokens(q, xs, w.q4, cols, t0, (tokens - t0).min(TILE), acts.add(i * tile_dwords), act_scales.add(i * gpr * TILE)) };
        }
        for r0 in (0..rows).step_by(TILE) {
            let nr = (rows - r0).min(TILE);
            // SAFETY: rows r0..r0+nr are inside w.data; wbuf holds 16 · cols bytes.
            let (a, stride) = unsafe {
                let row = w.data.as_ptr().add(r0 * row_bytes);
                if w.q4 {
                    unpack_q4(row, row_bytes, nr, cols, wbuf);
                    (wbuf.cast_const(), cols)
                } else if nr < TILE {
                    core::ptr::copy_nonoverlapping(row.cast::<i8>(), wbuf, nr * cols);
                    core::ptr::write_bytes(wbuf.add(nr * cols), 0, (TILE - nr) * cols);
                    (wbuf.cast_const(), cols)
                } else {
                    (row.cast::<i8>(), row_bytes)
                }
            };
            // SAFETY: rows r0..r0+nr have gpr scales each.
            let ws = unsafe { w.scales.as_ptr().add(r0 * gpr) };
            let rows_mask: __mmask16 = ((1u32 << nr) - 1) as u16;
            // bias of these rows (missing entries count as 0, as in store_out)
            let nb = bias.len().saturating_sub(r0).min(nr);
            // SAFETY: nb entries from r0 are inside bias.
            let b = unsafe { _mm512_maskz_loadu_ps(((1u32 << nb) - 1) as u16, bias.as_ptr().wrapping_add(r0)) };
            let column = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
            for i in 0..nc.div_ceil(TILE) {
                let t0 = c0 + i * TILE;
                let nt = (tokens - t0).min(TILE);
                // SAFETY: tiles configured; a holds 16 rows of gpr groups; tile i re-laid;
                // rows < nr have scales.
                let ys = unsafe { block(a, stride, ws, gpr, nr, acts.add(i * tile_dwords), act_scales.add(i * gpr * TILE), &mut sums, &mut lanes) };
                for n in 0..nt {
                    // store_out for 16 rows at once: token n's column of the block, + bias,
                    // then added to out or stored
                    // SAFETY: ys is 16 × 16 f32 (column n: elements n, n + 16, …); token
                    // t0 + n < tokens, rows r0..r0+nr of its output row.
                    unsafe {
                        let y = _mm512_i32gather_ps::<4>(column, ys.as_ptr().cast::<f32>().add(n));
                        let dst = out.as_mut_ptr().add((t0 + n) * rows + r0);
                        let y = _mm512_add_ps(y, b);
                        let y = if accumulate { _mm512_add_ps(_mm512_maskz_loadu_ps(rows_mask, dst), y) } else { y };
                        _mm512_mask_storeu_ps(dst, rows_mask, y);
                    }
                }
            }
        }
    }
    // SAFETY: releases the tile state configured above.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// Group sums of two chunks of four groups: `[buffer][group of the chunk][row][token]`.
type Sums = [[[[i32; TILE]; TILE]; 4]; 2];

/// `combine_groups`' 16 lanes of 16 rows, each a vector over 16 tokens: `[lane][row]`.
type Lanes = [[__m512; TILE]; 16];

/// 16 rows × 16 tokens: `[row][token]` results (before bias), each bit-identical to
/// `combine_groups` over its group sums. Rows `nr..` hold garbage (the caller masks them).
///
/// `lanes` is the accumulator, kept by the caller across the blocks of one call so that it is
/// not zeroed per block (a 16 KiB memset per block was 7% of the call): groups 0..16 write
/// their lane (`0.0 + term`, as the portable lanes start at 0.0) and later groups add to it.
/// Lanes `gpr..16` are never written and must be zero (the caller zeroes them once; the
/// reduction tree keeps them zero).
///
/// # Safety
/// Tiles configured by [`TileConfig`]; `a` readable as 16 rows of `32 · gpr` int8 `stride`
/// apart; `ws` holds `nr` rows × `gpr` scales; `acts`/`act_scales` one tile as
/// [`pack_tokens`] wrote it. `sums` is scratch.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
#[allow(clippy::too_many_arguments)]
unsafe fn block(a: *const i8, stride: usize, ws: *const f32, gpr: usize, nr: usize, acts: *const u32, act_scales: *const f32, sums: &mut Sums, lanes: &mut Lanes) -> [[f32; TILE]; TILE] {
    // chunks of four groups (then single groups): the tile products of chunk k + 1 are
    // issued before the float side of chunk k, so both units work at once
    let fours = gpr / 4;
    let chunks = fours + gpr % 4;
    let chunk = |k: usize| if k < fours { (4 * k, 4) } else { (4 * fours + (k - fours), 1) };
    if chunks > 0 {
        let (g, n) = chunk(0);
        // SAFETY: groups g..g+n < gpr (caller's contract); sums[0] holds 4 × 1 KiB.
        unsafe { products(a, stride, acts, g, n, sums.as_mut_ptr().cast()) };
    }
    for k in 0..chunks {
        if k + 1 < chunks {
            let (g, n) = chunk(k + 1);
            let buf = sums.get_mut((k + 1) % 2).map_or(core::ptr::null_mut(), |b| b.as_mut_ptr().cast());
            // SAFETY: as above, into the other buffer.
            unsafe { products(a, stride, acts, g, n, buf) };
        }
        let (g, n) = chunk(k);
        let Some(buf) = sums.get(k % 2) else { continue };
        for (j, s) in buf.iter().enumerate().take(n) {
            let gj = g + j;
            // SAFETY: the 16 tokens' scales of group gj.
            let sx = unsafe { _mm512_loadu_ps(act_scales.add(gj * TILE)) };
            let Some(lane) = lanes.get_mut(gj % 16) else { continue };
            let first = gj < 16;
            for ((acc, s), m) in lane.iter_mut().zip(s).zip(0..nr) {
                // SAFETY: row m < nr's scale of group gj.
                let sw = _mm512_set1_ps(unsafe { *ws.add(m * gpr + gj) });
                // SAFETY: s is 16 i32.
                let isum = _mm512_cvtepi32_ps(unsafe { _mm512_loadu_si512(s.as_ptr().cast()) });
                let start = if first { _mm512_setzero_ps() } else { *acc };
                *acc = _mm512_add_ps(start, _mm512_mul_ps(isum, _mm512_mul_ps(sw, sx)));
            }
        }
    }
    // the reduce tree for 16 rows × 16 tokens at once: lane i += lane i + n, n = 8, 4, 2, 1
    let mut n = 16;
    while n > 1 {
        n /= 2;
        let (lo, hi) = lanes.split_at_mut(n);
        for (lo, hi) in lo.iter_mut().zip(hi.iter()) {
            for (l, &h) in lo.iter_mut().zip(hi) {
                *l = _mm512_add_ps(*l, h);
            }
        }
    }
    let mut out = [[0.0f32; TILE]; TILE];
    for (o, &v) in out.iter_mut().zip(lanes.first().into_iter().flatten()) {
        // SAFETY: o is 16 f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), v) };
    }
    out
}

/// The group sums of groups `g..g+n` (n = 4 or 1) for 16 rows × 16 tokens into
/// `sums[j][row][token]` (j < n; rows 64 bytes apart).
///
/// # Safety
/// Tiles configured by [`TileConfig`]; groups g..g+n inside `a` (16 rows `stride` apart) and
/// inside `acts`; `sums` writable for `n · 1024` bytes.
#[inline(always)]
unsafe fn products(a: *const i8, stride: usize, acts: *const u32, g: usize, n: usize, sums: *mut i32) {
    let a_at = |g: usize| a.wrapping_add(g * GROUP);
    let b_at = |g: usize| acts.wrapping_add(g * GROUP / 4 * TILE);
    if n == 4 {
        // four groups' products in flight (tmm0–3), loads alternating over tmm4–7
        // SAFETY: the caller's contract.
        unsafe {
            asm!(
                "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                "tileloadd tmm4, [{a0} + {sa}*1]",
                "tileloadd tmm6, [{b0} + {sb}*1]",
                "tileloadd tmm5, [{a1} + {sa}*1]",
                "tileloadd tmm7, [{b1} + {sb}*1]",
                "tdpbssd tmm0, tmm4, tmm6",
                "tdpbssd tmm1, tmm5, tmm7",
                "tileloadd tmm4, [{a2} + {sa}*1]",
                "tileloadd tmm6, [{b2} + {sb}*1]",
                "tileloadd tmm5, [{a3} + {sa}*1]",
                "tileloadd tmm7, [{b3} + {sb}*1]",
                "tdpbssd tmm2, tmm4, tmm6",
                "tdpbssd tmm3, tmm5, tmm7",
                "tilestored [{c} + {sb}*1], tmm0",
                "tilestored [{c} + {sb}*1 + 1024], tmm1",
                "tilestored [{c} + {sb}*1 + 2048], tmm2",
                "tilestored [{c} + {sb}*1 + 3072], tmm3",
                a0 = in(reg) a_at(g), a1 = in(reg) a_at(g + 1), a2 = in(reg) a_at(g + 2), a3 = in(reg) a_at(g + 3),
                b0 = in(reg) b_at(g), b1 = in(reg) b_at(g + 1), b2 = in(reg) b_at(g + 2), b3 = in(reg) b_at(g + 3),
                sa = in(reg) stride, sb = in(reg) 64usize, c = in(reg) sums,
                options(nostack),
            );
        }
    } else {
        // SAFETY: as above, for group g alone.
        unsafe {
            asm!(
                "tilezero tmm0",
                "tileloadd tmm4, [{a0} + {sa}*1]",
                "tileloadd tmm6, [{b0} + {sb}*1]",
                "tdpbssd tmm0, tmm4, tmm6",
                "tilestored [{c} + {sb}*1], tmm0",
                a0 = in(reg) a_at(g), b0 = in(reg) b_at(g), sa = in(reg) stride, sb = in(reg) 64usize,
                c = in(reg) sums,
                options(nostack),
            );
        }
    }
}

/// Re-lays tokens `t0..t0+nt` for the tile unit: `acts[d][n]` = dword `d` (4 values) of token
/// `t0 + n`, `act_scales[g][n]` its scale of group g; tokens `nt..16` are zero. q4: the values
/// of group g are its 16 even-position values, then its 16 odd ones; in `Q4Pairs` order these
/// sit at 16·(g % 4) and 64 + 16·(g % 4) of the group's block of 128.
///
/// # Safety
/// Tokens `t0..t0+nt` exist in `q` (`cols` values each) and `xs` (`cols / 32` each); `acts`
/// writable for `cols / 4 · 16` dwords, `act_scales` for `cols / 32 · 16` floats; q4:
/// `cols % 128 == 0`.
#[allow(clippy::too_many_arguments)]
unsafe fn pack_tokens(q: &[i8], xs: &[f32], q4: bool, cols: usize, t0: usize, nt: usize, acts: *mut u32, act_scales: *mut f32) {
    let gpr = cols / GROUP;
    for n in 0..TILE {
        let real = n < nt;
        // SAFETY: token t0 + n < tokens when real.
        let (row, sc) = unsafe { (q.as_ptr().add(if real { (t0 + n) * cols } else { 0 }), xs.as_ptr().add(if real { (t0 + n) * gpr } else { 0 })) };
        for d in 0..cols / 4 {
            // byte offset of dword d in the token's row
            let at = if q4 {
                let (g, k) = (d / 8, d % 8);
                g / 4 * 128 + if k < 4 { 0 } else { 64 } + g % 4 * 16 + k % 4 * 4
            } else {
                4 * d
            };
            // SAFETY: bytes at..at+4 < cols of the token's row; d < cols / 4, n < 16.
            unsafe {
                let v = if real { row.add(at).cast::<u32>().read_unaligned() } else { 0 };
                acts.add(d * TILE + n).write(v);
            }
        }
        for g in 0..gpr {
            // SAFETY: scale g of the token; g < gpr, n < 16.
            unsafe { act_scales.add(g * TILE + n).write(if real { *sc.add(g) } else { 0.0 }) };
        }
    }
}

/// Unpacks `nr` rows of q4 weights (`row_bytes` apart) to int8 `nibble − 8`, row m at
/// `dst + m · cols`, each group as its 16 low nibbles then its 16 high nibbles (the order of
/// `Q4Pairs` activations); rows `nr..16` are zero.
///
/// # Safety
/// `src` readable for `nr` rows of `cols / 2` bytes `row_bytes` apart; `cols % 128 == 0`;
/// `dst` writable for `16 · cols` bytes; AVX-512F/BW.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn unpack_q4(src: *const u8, row_bytes: usize, nr: usize, cols: usize, dst: *mut i8) {
    let low = _mm512_set1_epi8(0x0F);
    let eight = _mm512_set1_epi8(8);
    // 64 packed bytes = 4 groups, 128-bit lane k = group k's 16 bytes: the low nibbles of
    // lanes 0, 1 with the high nibbles of lanes 0, 1, then the same for lanes 2, 3
    let first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    let second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    for m in 0..TILE {
        // SAFETY: row m's cols outputs.
        let d = unsafe { dst.add(m * cols) };
        if m >= nr {
            // SAFETY: as above.
            unsafe { core::ptr::write_bytes(d, 0, cols) };
            continue;
        }
        // SAFETY: row m < nr of the source.
        let s = unsafe { src.add(m * row_bytes) };
        for c in 0..cols / 128 {
            // SAFETY: packed bytes 64c..64c+64 < cols / 2 and outputs 128c..128c+128 < cols.
            unsafe {
                let p = _mm512_loadu_si512(s.add(64 * c).cast());
                let lo = _mm512_sub_epi8(_mm512_and_si512(p, low), eight);
                let hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16::<4>(p), low), eight);
                _mm512_storeu_si512(d.add(128 * c).cast(), _mm512_permutex2var_epi64(lo, first, hi));
                _mm512_storeu_si512(d.add(128 * c + 64).cast(), _mm512_permutex2var_epi64(lo, second, hi));
            }
        }
    }
}
