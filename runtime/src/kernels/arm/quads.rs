//! q8 and q4 `linear` on Cortex-M, four groups at a time: one assembly function per dtype,
//! group size (28, 32) and build (`arm-dsp`, `arm-helium`) that runs every row of one token,
//! for rows of 4 to 16 groups (every matrix of the default model: rows of 112 and 448; wider
//! and narrower rows take the row kernels of `arm.rs`).
//!
//! Per row, the groups go through a chain of four *quads*, Q0 to Q3, each the integer dots of
//! four groups and their float steps written out in full, Q_j putting its four terms into the
//! lanes s(16+4j)..s(19+4j) (group g into lane g mod 16, as [`super::super::combine_groups`]):
//! - integer dots (`arm-dsp`): per 16 weights one `LDM` of 4 weight words, two `LDM` of 4
//!   words of int16 activation pairs ([`super::super::QuantOrder::Pairs16`]), 8 `SXTB16` and
//!   8 `SMLAD`: 19 instructions per 16 multiply-accumulates (1.19), the group boundaries of 28
//!   falling inside the loads (a quad of 112 weights is 7 whole blocks); each group's sum moves
//!   to s0-s3 (`VMOV`).
//! - q4 integer dots (`arm-dsp`): per weight word the 8 nibbles masked in place (3 `AND`,
//!   `LSR` + `AND`) and 4 `SMLAD` against activations laid out to match
//!   ([`super::super::QuantOrder::Nibbles16`]: unsigned nibbles, each group's sum starting at
//!   -2048·Σx and ending with `ASR #8`); a 28-group takes 14 bytes, so in each quad two words
//!   hold the tail of one group and the head of the next, taken by `SMLABx` and `SMLATx`.
//! - integer dots (`arm-helium`): per group `VLDRB` ×2 + `VMLADAV` per 16 weights (q4: the 8
//!   bytes unpacked by `VLDRB.U16`, `VSLI`, `VBIC`, `VSUB`), the 12 of a 28-group's tail
//!   predicated; the four sums move into one vector register (two `VMOV` of two lanes each)
//!   and one vector `VCVT` converts them (integer to float never meets a denormal, so
//!   Helium's flush-to-zero cannot change it).
//! - float steps, for the quad at once: `VLDM` of the four weight and four activation scales,
//!   4 `VMUL` (ws·xs), 4 `VCVT` (the DSP build; Helium's one), 4 `VMUL` into the lanes.
//! - where the quad goes next is a word in the stack frame (`LDR PC`), set once per call:
//!   the next quad, or the tree. Rows of 4k + r groups (r = 1..3) go on to a loop over the
//!   r tail groups whose terms pass through the lanes' copy in memory.
//! - the tree ([`super::super::combine_groups`]' reduction) over the T = groups lanes, then
//!   the row's end: + bias, + the output's old value, store, next row.
//!
//! The lanes take each first term as it is, where the portable code adds it to 0.0: the two
//! differ only when a term is -0.0 (0.0 + -0.0 = +0.0), and that difference survives each later
//! add (x + y with x = ±0 equals y unless both are zeros) up to the row's result, which is then
//! -0.0 where the portable one is +0.0. One add of +0.0 to the result (s12 holds it) makes it
//! the portable value bit for bit, NaN included.
//!
//! Cost, in executed instructions (QEMU `-icount`), of a q8 row of 4 groups of 28 (112
//! weights, the default model's `c_attn`, `attn.c_proj`, `mlp.c_fc` and head rows):
//!
//! | | `arm-dsp` (M4) | `arm-helium` (M55) |
//! |---|---:|---:|
//! | integer dots | 133 (7 × 19) | 28 (4 × 7) |
//! | sums to the FPU, float steps | 4 + 14 | 2 + 1 + 10 |
//! | next step, tree (T = 4) | 1 + 3 | 1 + 3 |
//! | row's end (fix, bias, store, loop; +2 when accumulating) | 10 | 10 |
//! | total, per multiply-accumulate | 165, 1.47 | 55, 0.49 |
//!
//! plus, per call, quantizing the activations (about 12 instructions a value on the M4) and
//! the prologue. The DSP build's integer dots are at the floor of `SMLAD` with int8 weights:
//! `SMLAD` multiplies 16-bit halves, so each pair of weights needs one `SXTB16`, 1.0
//! instructions per multiply-accumulate for the two alone; the weights' loads add 1/16 (an
//! `LDM` of 16 weights) and the activations', widened once per call, 1/8 (an `LDM` of 8): 1.19.
//! Two rows a pass, sharing each activation load, come to the same 19 per 16: fourteen
//! registers then leave each row's weights an `LDRD` of 8. What is left is per group (the
//! float steps: 4.5 instructions, 0.16 per multiply-accumulate at 28) and per row (0.13).
//!
//! q4 on the DSP build: 172 for the integer dots of a quad of 28-groups (1.54 per
//! multiply-accumulate: 9 per 8 weights, plus the loads, the two split words and the group
//! starts), 1.87 for the whole `mlp.c_fc` call; with Helium 14 per group (0.76 for the call).
//!
//! `cargo test` cannot run the assembly; the firmware's boot check (`linear_check` in
//! `boards/firmware-common/src/kernels.rs`) runs every row length of 4 to 16 groups of 28 and
//! 32, q8 and q4, then random shapes, against the naive reference, tails and every quad count
//! included.

use super::{quantize_rows, QuantOrder, QuantRows};

/// What one call of a quad kernel needs (read by the assembly at these offsets).
#[repr(C)]
struct Job {
    /// First row's output (the row's result is added to it).
    out: *mut f32,
    /// First row's bias, or null (no bias: `y + 0.0`, which the -0.0 fix already is).
    bias: *const f32,
    /// Nonzero: add the results to `out`; zero: store them.
    accumulate: usize,
    /// `out` + rows.
    out_end: *mut f32,
    /// The token's activations: on the DSP build int16 pairs (q8) or the nibble layout (q4),
    /// with Helium int8 values.
    x: *const u8,
    /// The token's activation scales, one per group.
    xs: *const f32,
    /// First row's weights (int8 or packed 4-bit; 4-byte aligned on the DSP build).
    w: *const u8,
    /// First row's weight scales.
    ws: *const f32,
    /// Groups per row, 4..=16.
    gpr: usize,
}

/// The activation layout the quad kernels read (`q4`: for packed 4-bit weights).
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
const fn order(q4: bool) -> QuantOrder {
    if q4 {
        QuantOrder::Nibbles16
    } else {
        QuantOrder::Pairs16
    }
}
#[cfg(feature = "arm-helium")]
const fn order(_q4: bool) -> QuantOrder {
    QuantOrder::Natural
}

/// Groups per row the quad kernels take.
pub(super) const GROUPS: core::ops::RangeInclusive<usize> = 4..=16;

/// q8 (`q4` false: int8 weights) or q4 (packed 4-bit) `linear` through the quad kernel for
/// groups of `gs` (28 or 32): false, with nothing written, for other groups, rows of groups
/// outside [`GROUPS`], on the DSP build weights not 4-byte aligned or q4 rows not a multiple
/// of 8 values (so that every row starts on a word), short weights or scales or scratch.
#[allow(clippy::too_many_arguments)]
pub(super) fn linear(out: &mut [f32], x: &[f32], weights: &[u8], scales: &[f32], q4: bool, gs: usize, rows: usize, cols: usize, bias: &[f32], accumulate: bool, scratch: &mut [f32]) -> bool {
    let kernel: unsafe fn(*const Job) = match (q4, gs) {
        (false, 28) => q8_quads_28,
        (false, 32) => q8_quads_32,
        (true, 28) => q4_quads_28,
        (true, 32) => q4_quads_32,
        _ => return false,
    };
    let gpr = cols / gs;
    let order = order(q4);
    let dsp = order != QuantOrder::Natural;
    let row_bytes = if q4 { cols / 2 } else { cols };
    let aligned = !dsp || ((weights.as_ptr() as usize).is_multiple_of(4) && row_bytes.is_multiple_of(4));
    let fits = |len: usize, per_row: usize| rows.checked_mul(per_row).is_some_and(|n| n <= len);
    if rows == 0 || !GROUPS.contains(&gpr) || !cols.is_multiple_of(gs) || !aligned || !fits(weights.len(), row_bytes) || !fits(scales.len(), gpr) {
        return false;
    }
    let tokens = (x.len() / cols).min(out.len() / rows);
    // bytes of one token's activations: int16 pairs take two per value, the q4 layout one more
    // word per group
    let x_bytes = match order {
        QuantOrder::Pairs16 => 2 * cols,
        QuantOrder::Nibbles16 => 2 * cols + 4 * gpr,
        QuantOrder::Natural | QuantOrder::Q4Pairs => cols,
    };
    if scratch.len() < tokens * (x_bytes / 4 + gpr) {
        return false;
    }
    let QuantRows { q, scales: xs, pairs, .. } = quantize_rows(x, cols, gs, tokens, scratch, order);
    let xq: &[u8] = if dsp { bytemuck::cast_slice(pairs) } else { bytemuck::cast_slice(q) };
    if xq.len() < tokens * x_bytes || xs.len() < tokens * gpr {
        return false;
    }
    // rows 0..nb have a bias, the rest add 0.0
    let nb = bias.len().min(rows);
    for (t, out_t) in out.chunks_exact_mut(rows).take(tokens).enumerate() {
        for (start, end, b) in [(0, nb, bias.as_ptr()), (nb, rows, core::ptr::null())] {
            if start == end {
                continue;
            }
            let range = out_t.as_mut_ptr_range();
            // SAFETY: start < end ≤ rows = out_t.len(), so out and out_end bound rows start..end
            // of out_t; the weights and scales of those rows are inside `weights` and `scales`
            // (rows·row_bytes and rows·gpr checked above); token t's activations (x_bytes) and
            // scales (gpr) are inside xq and xs (checked above); with a bias, rows 0..nb are
            // inside `bias`.
            let job = unsafe {
                Job {
                    out: range.start.add(start),
                    bias: b,
                    accumulate: usize::from(accumulate),
                    out_end: range.start.add(end),
                    x: xq.as_ptr().add(t * x_bytes),
                    xs: xs.as_ptr().add(t * gpr),
                    w: weights.as_ptr().add(start * row_bytes),
                    ws: scales.as_ptr().add(start * gpr),
                    gpr,
                }
            };
            // SAFETY: the job describes memory as the kernels require (above): they read
            // end - start rows of gpr groups of gs weights (row_bytes a row) and scales from w
            // and ws, one token's activations (layout `order`, x_bytes) and gpr scales from x
            // and xs, one bias per row when it is not null, and read and write
            // out[..end - start]; gpr is in GROUPS.
            unsafe { kernel(&job) };
        }
    }
    true
}

// ---- The assembly -------------------------------------------------------------------------
//
// Stack frame (after the pushes), shared by both builds; the row's end reloads the first six
// words with one LDM:
//   0 out, 4 bias, 8 accumulate, 12 out_end, 16 x, 20 xs: the next row's output and bias, the
//     rest as the job has them
//   24, 28, 32: where Q0, Q1, Q2 go next (a Thumb address: the next quad, the tree, the tail)
//   36: T - 1 (T = groups ≤ 16 lanes: the tree's entry after a tail)
//   40: tail groups, 44: the tail's first lane in the copy at 48
//   48..112: the lanes s16-s31 in memory (for the tail)
//   112: the caller's VPR (Helium)

/// The float steps of a row's end, shared: [`super::super::combine_groups`]' tree over T lanes
/// (entries for T = 16, 12, 8, 4 and, through the TBB of the tail, any T), the -0.0 fix, bias,
/// accumulate, store, next row. `$ld` is the register list that
/// reloads out, bias, accumulate, out_end, x, xs, `$o`, `$b`, `$a`, `$e` the first four of
/// them.
macro_rules! quads_end {
    ($ld:literal, $o:literal, $b:literal, $a:literal, $e:literal) => {
        concat!(
            // the tail: the lanes to memory, the tail groups' terms into their lanes there,
            // the lanes back, into the tree at T
            "14:\n",
            "add r8, sp, #48\n",
            "vstmia r8, {{s16-s31}}\n",
            "ldrd r8, r9, [sp, #40]\n",
            "15:\n",
            "gm_tail_iter\n",
            "bne 15b\n",
            "add r8, sp, #48\n",
            "vldmia r8, {{s16-s31}}\n",
            "ldr r8, [sp, #36]\n",
            "tbb [pc, r8]\n",
            "16:\n",
            ".byte (20f - 16b) / 2, (21f - 16b) / 2, (22f - 16b) / 2, (23f - 16b) / 2\n",
            ".byte (24f - 16b) / 2, (25f - 16b) / 2, (26f - 16b) / 2, (27f - 16b) / 2\n",
            ".byte (28f - 16b) / 2, (29f - 16b) / 2, (30f - 16b) / 2, (31f - 16b) / 2\n",
            ".byte (32f - 16b) / 2, (33f - 16b) / 2, (34f - 16b) / 2, (35f - 16b) / 2\n",
            ".p2align 1\n",
            // the tree: level by level, each level's adds from the highest lane down, so that
            // entering at T's label runs exactly the adds whose upper lane is below T (lane i
            // += lane i + n; an upper lane below T has its lower one below T too; the others
            // add the portable code's untouched +0.0 lanes, which changes nothing)
            "35:\n", "vadd.f32 s23, s23, s31\n",
            "34:\n", "vadd.f32 s22, s22, s30\n",
            "33:\n", "vadd.f32 s21, s21, s29\n",
            "32:\n", "vadd.f32 s20, s20, s28\n",
            "31:\n", "vadd.f32 s19, s19, s27\n",
            "30:\n", "vadd.f32 s18, s18, s26\n",
            "29:\n", "vadd.f32 s17, s17, s25\n",
            "28:\n", "vadd.f32 s16, s16, s24\n",
            "27:\n", "vadd.f32 s19, s19, s23\n",
            "26:\n", "vadd.f32 s18, s18, s22\n",
            "25:\n", "vadd.f32 s17, s17, s21\n",
            "24:\n", "vadd.f32 s16, s16, s20\n",
            "23:\n", "vadd.f32 s17, s17, s19\n",
            "22:\n", "vadd.f32 s16, s16, s18\n",
            "21:\n", "vadd.f32 s16, s16, s17\n",
            "20:\n",
            // the row's end: -0.0 fix, + bias (if any), out + y (if accumulating), store, next row
            "vadd.f32 s16, s16, s12\n",
            "ldm sp, {{", $ld, "}}\n",
            "cbz ", $b, ", 1f\n",
            "vldmia ", $b, "!, {{s0}}\n",
            "vadd.f32 s16, s16, s0\n",
            "1:\n",
            "cbz ", $a, ", 2f\n",
            "vldr s1, [", $o, "]\n",
            "vadd.f32 s16, s1, s16\n",
            "2:\n",
            "vstmia ", $o, "!, {{s16}}\n",
            "strd ", $o, ", ", $b, ", [sp]\n",
            "cmp ", $o, ", ", $e, "\n",
            "blo 10b\n",
        )
    };
}

/// The call's start, shared: the frame (see above) from the job at r0, the quads' next-step
/// words, +0.0 in s12, then the build's weight and scale registers (`$wl`) and the first row's
/// registers (`$ld`, as [`quads_end`]).
macro_rules! quads_start {
    ($wl:literal, $ld:literal) => {
        concat!(
            "sub sp, sp, #116\n",
            "ldm r0, {{r1-r6}}\n",
            "stm sp, {{r1-r6}}\n",
            "ldr r6, [r0, #32]\n",
            // T - 1 (T = groups ≤ 16)
            "sub r7, r6, #1\n",
            "str r7, [sp, #36]\n",
            // Q0 → Q1, Q1 → Q2, Q2 → Q3 unless the row ends first
            "adr.w r1, 11f\n", "orr r1, r1, #1\n", "str r1, [sp, #24]\n",
            "adr.w r1, 12f\n", "orr r1, r1, #1\n", "str r1, [sp, #28]\n",
            "adr.w r1, 13f\n", "orr r1, r1, #1\n", "str r1, [sp, #32]\n",
            // tail groups, and their first lane's place in the copy: 48 + 16·quads
            "and r7, r6, #3\n",
            "lsr r8, r6, #2\n",
            "add r9, sp, #48\n",
            "add r9, r9, r8, lsl #4\n",
            "strd r7, r9, [sp, #40]\n",
            // after the last quad (Q0..Q2; Q3 always ends the row): the tail, or the tree
            "cmp r8, #4\n",
            "beq 3f\n",
            "add r9, sp, #24\n",
            "sub r8, r8, #1\n",
            "cbz r7, 1f\n",
            "adr.w r1, 14f\n",
            "b 2f\n",
            "1:\n",
            "adr.w r1, 17f\n",
            "ldr r1, [r1, r8, lsl #2]\n",
            "2:\n",
            "orr r1, r1, #1\n",
            "str r1, [r9, r8, lsl #2]\n",
            "3:\n",
            "movs r1, #0\n",
            "vmov s12, r1\n",
            $wl,
            "ldm sp, {{", $ld, "}}\n",
        )
    };
}

/// The tree entries after 1, 2, 3 whole quads (T = 4, 8, 12), as data for `quads_start`
/// (placed where no path runs: after Q3's jump into the tree).
macro_rules! quads_trees {
    () => {
        concat!(".p2align 2\n", "17:\n", ".word 23f, 27f, 31f\n",)
    };
}

/// The body of one quad kernel, saving and restoring the registers the compiler must not see
/// changed (r4-r11, lr, s16-s31; r6 and r7 cannot even be named as operands): `$wg` the
/// group's words (GS/4), `$pre`/`$post` the build's set-up and restore, `$wl`, `$ld` as
/// [`quads_start`], `$o`, `$b`, `$a`, `$e` as [`quads_end`]. Local labels: 10 the row, 11-13
/// the quads Q1-Q3, 14, 15 the tail, 16 its jump table, 17 the trees' table, 20 + k the tree's
/// entry for k + 1 lanes; 1-3 inside the start and the row's end.
macro_rules! quads_fn {
    ($wg:literal, $pre:expr, $post:expr, $wl:literal, $ld:literal, $o:literal, $b:literal, $a:literal, $e:literal) => {
        concat!(
            "push {{r4-r11, lr}}\n",
            "vpush {{s16-s31}}\n",
            quads_start!($wl, $ld),
            $pre,
            "10:\n",
            "gm_quad ", $wg, ", s16, s17, s18, s19\n",
            "ldr.w pc, [sp, #24]\n",
            "11:\n",
            "gm_quad ", $wg, ", s20, s21, s22, s23\n",
            "ldr.w pc, [sp, #28]\n",
            "12:\n",
            "gm_quad ", $wg, ", s24, s25, s26, s27\n",
            "ldr.w pc, [sp, #32]\n",
            "13:\n",
            "gm_quad ", $wg, ", s28, s29, s30, s31\n",
            "b 35f\n",
            quads_trees!(),
            quads_end!($ld, $o, $b, $a, $e),
            $post,
            "add sp, sp, #116\n",
            "vpop {{s16-s31}}\n",
            "pop {{r4-r11, lr}}\n",
        )
    };
}

// ---- arm-dsp: SXTB16 + SMLAD ----------------------------------------------------------------
//
// Registers in the quads: r0 the group's sum, r1 scratch, r2-r5 activation words, r6-r9
// weight words, r10 the activations, r11 the weights, r12 the weight scales, lr the activation
// scales. s0-s3 the group sums, s4-s11 the scales, s12 +0.0, s16-s31 the lanes.
/// A tail group's float step, shared by both builds (the group's sum converted in s0): its
/// term into the lanes' copy at r9.
macro_rules! tail_float {
    () => {
        concat!(
            ".macro gm_tail_float\n",
            "vldmia r12!, {{s1}}\n",
            "vldmia lr!, {{s2}}\n",
            "vmul.f32 s1, s1, s2\n",
            "vmul.f32 s0, s0, s1\n",
            "vstmia r9!, {{s0}}\n",
            ".endm\n",
        )
    };
}

/// The assembler macros of the DSP kernels (defined in each asm block, purged at its end).
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
macro_rules! dsp_macros {
    () => {
        concat!(
            // One weight word (4 int8 weights, word i of the group's or quad's run) against its two
            // words of int16 activation pairs: SXTB16 takes bytes 0 and 2, SXTB16 ROR #8 bytes 1 and 3
            // (the halves of a0 and a1); the group's first word starts the sum (SMUAD), its last moves
            // the sum to s(i / wg).
            ".macro gm_w8 i, wg, p, a0, a1\n",
            "sxtb16 r1, \\p\n",
            ".if ((\\i) % (\\wg)) == 0\n",
            "smuad r0, r1, \\a0\n",
            ".else\n",
            "smlad r0, r1, \\a0, r0\n",
            ".endif\n",
            "sxtb16 \\p, \\p, ror #8\n",
            "smlad r0, \\p, \\a1, r0\n",
            ".if ((\\i) % (\\wg)) == ((\\wg) - 1)\n",
            ".if ((\\i) / (\\wg)) == 0\n",
            "vmov s0, r0\n",
            ".elseif ((\\i) / (\\wg)) == 1\n",
            "vmov s1, r0\n",
            ".elseif ((\\i) / (\\wg)) == 2\n",
            "vmov s2, r0\n",
            ".else\n",
            "vmov s3, r0\n",
            ".endif\n",
            ".endif\n",
            ".endm\n",
            // 16 weights of a quad: block b (words 4b..4b+3).
            ".macro gm_blk b, wg\n",
            "ldm r11!, {{r6-r9}}\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm_w8 (4*(\\b)), \\wg, r6, r2, r3\n",
            "gm_w8 (4*(\\b)+1), \\wg, r7, r4, r5\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm_w8 (4*(\\b)+2), \\wg, r8, r2, r3\n",
            "gm_w8 (4*(\\b)+3), \\wg, r9, r4, r5\n",
            ".endm\n",
            // A quad: 4 groups of wg words (wg blocks of 16 weights), then their float steps into
            // the lanes l0-l3: term = sum as f32 · (ws · xs), the portable operand order.
            ".macro gm_quad wg, l0, l1, l2, l3\n",
            ".if gm_q4\n",
            ".if (\\wg) == 7\n",
            "gm4_quad28\n",
            ".else\n",
            "gm4_quad32\n",
            ".endif\n",
            ".else\n",
            ".set gm_qb, 0\n",
            ".rept \\wg\n",
            "gm_blk gm_qb, \\wg\n",
            ".set gm_qb, gm_qb + 1\n",
            ".endr\n",
            ".endif\n",
            "vldmia r12!, {{s4-s7}}\n",
            "vldmia lr!, {{s8-s11}}\n",
            "vmul.f32 s4, s4, s8\n",
            "vmul.f32 s5, s5, s9\n",
            "vmul.f32 s6, s6, s10\n",
            "vmul.f32 s7, s7, s11\n",
            "vcvt.f32.s32 s0, s0\n",
            "vcvt.f32.s32 s1, s1\n",
            "vcvt.f32.s32 s2, s2\n",
            "vcvt.f32.s32 s3, s3\n",
            "vmul.f32 \\l0, s0, s4\n",
            "vmul.f32 \\l1, s1, s5\n",
            "vmul.f32 \\l2, s2, s6\n",
            "vmul.f32 \\l3, s3, s7\n",
            ".endm\n",
            // One tail group of wg words, the sum converted in s0: weights by LDRD (r6, r7; r8, r9
            // are the tail loop's).
            ".macro gm_tail_w wg\n",
            ".set gm_tb, 0\n",
            ".rept (\\wg) / 2\n",
            "ldrd r6, r7, [r11], #8\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm_w8 (2*gm_tb), \\wg, r6, r2, r3\n",
            "gm_w8 (2*gm_tb+1), \\wg, r7, r4, r5\n",
            ".set gm_tb, gm_tb + 1\n",
            ".endr\n",
            ".if (\\wg) % 2\n",
            "ldr r6, [r11], #4\n",
            "ldrd r2, r3, [r10], #8\n",
            "gm_w8 ((\\wg)-1), \\wg, r6, r2, r3\n",
            ".endif\n",
            "vcvt.f32.s32 s0, s0\n",
            ".endm\n",
            // q4 (QuantOrder::Nibbles16 activations: per group the start value -2048·Σx,
            // then per 8 values 256·(x0, x4), 16·(x1, x5), (x2, x6), (x3, x7) as int16 pairs,
            // a 4-value head or tail as 256·x0 | 16·x1 << 16, x2 | x3 << 16): a weight word's 8
            // nibbles masked in place (unsigned, stored + 8: the start value takes the 8 off,
            // the sum is 256× and ends with ASR #8), each mask one SMLAD against the pair that
            // matches it. gm4_full: word p against r2-r5 into r0 (p is spent).
            ".macro gm4_full p\n",
            "and r1, \\p, #0x000F000F\n",
            "smlad r0, r1, r2, r0\n",
            "and r1, \\p, #0x00F000F0\n",
            "smlad r0, r1, r3, r0\n",
            "and r1, \\p, #0x0F000F00\n",
            "smlad r0, r1, r4, r0\n",
            "lsr \\p, \\p, #4\n",
            "and \\p, \\p, #0x0F000F00\n",
            "smlad r0, \\p, r5, r0\n",
            ".endm\n",
            // The 4 nibbles in the bottom halves of p (a 28-group's tail: bytes 12, 13 of an
            // even group) against r2, r3; p is kept for the top halves (the next group's head).
            ".macro gm4_low p\n",
            "and r1, \\p, #0x000F000F\n",
            "smlabb r0, r1, r2, r0\n",
            "and r1, \\p, #0x00F000F0\n",
            "smlabt r0, r1, r2, r0\n",
            "and r1, \\p, #0x0F000F00\n",
            "smlabb r0, r1, r3, r0\n",
            "lsr r1, \\p, #4\n",
            "and r1, r1, #0x0F000F00\n",
            "smlabt r0, r1, r3, r0\n",
            ".endm\n",
            // The 4 nibbles in the top halves of p (an odd 28-group's head) against r2, r3.
            ".macro gm4_high p\n",
            "and r1, \\p, #0x000F000F\n",
            "smlatb r0, r1, r2, r0\n",
            "and r1, \\p, #0x00F000F0\n",
            "smlatt r0, r1, r2, r0\n",
            "and r1, \\p, #0x0F000F00\n",
            "smlatb r0, r1, r3, r0\n",
            "lsr r1, \\p, #4\n",
            "and r1, r1, #0x0F000F00\n",
            "smlatt r0, r1, r3, r0\n",
            ".endm\n",
            // A q4 group's end: the 256× sum exact to the true one, into s(g).
            ".macro gm4_end g\n",
            "asr r0, r0, #8\n",
            "vmov s\\g, r0\n",
            ".endm\n",
            // A q4 quad of groups of 32: 4 weight words and 1 + 16 activation words a group.
            ".macro gm4_quad32\n",
            ".irp g, 0, 1, 2, 3\n",
            "ldm r11!, {{r6-r9}}\n",
            "ldm r10!, {{r0, r2-r5}}\n",
            "gm4_full r6\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r7\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r8\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r9\n",
            "gm4_end \\g\n",
            ".endr\n",
            ".endm\n",
            // A q4 quad of groups of 28: 14 weight words; words 3 and 10 hold the tail of
            // group 0 (2) in their bottom halves and the head of group 1 (3) in their top ones.
            ".macro gm4_quad28\n",
            "ldm r11!, {{r6-r9}}\n",
            "ldm r10!, {{r0, r2-r5}}\n",
            "gm4_full r6\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r7\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r8\n",
            "ldrd r2, r3, [r10], #8\n",
            "gm4_low r9\n",
            "gm4_end 0\n",
            "ldm r10!, {{r0, r2, r3}}\n",
            "gm4_high r9\n",
            "ldm r11!, {{r6-r9}}\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r6\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r7\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r8\n",
            "gm4_end 1\n",
            "ldm r10!, {{r0, r2-r5}}\n",
            "gm4_full r9\n",
            "ldm r11!, {{r6-r9}}\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r6\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r7\n",
            "ldrd r2, r3, [r10], #8\n",
            "gm4_low r8\n",
            "gm4_end 2\n",
            "ldm r10!, {{r0, r2, r3}}\n",
            "gm4_high r8\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r9\n",
            "ldrd r6, r7, [r11], #8\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r6\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r7\n",
            "gm4_end 3\n",
            ".endm\n",
            // One tail step: q8 one group; q4 in groups of 32 one group, in groups of 28 an
            // even-odd pair (q4 rows of 28-groups have an even number of them: rows of a
            // multiple of 8 values); weights by LDRD (r6, r7; r8, r9 are the tail loop's).
            ".macro gm_tail_iter\n",
            ".if gm_q4 == 0\n",
            "gm_tail_w gm_wg\n",
            "gm_tail_float\n",
            "subs r8, r8, #1\n",
            ".elseif gm_wg == 8\n",
            "ldm r10!, {{r0, r2-r5}}\n",
            "ldrd r6, r7, [r11], #8\n",
            "gm4_full r6\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r7\n",
            "ldrd r6, r7, [r11], #8\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r6\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r7\n",
            "gm4_end 0\n",
            "vcvt.f32.s32 s0, s0\n",
            "gm_tail_float\n",
            "subs r8, r8, #1\n",
            ".else\n",
            "ldm r10!, {{r0, r2-r5}}\n",
            "ldrd r6, r7, [r11], #8\n",
            "gm4_full r6\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r7\n",
            "ldrd r6, r7, [r11], #8\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r6\n",
            "ldrd r2, r3, [r10], #8\n",
            "gm4_low r7\n",
            "gm4_end 0\n",
            "vcvt.f32.s32 s0, s0\n",
            "gm_tail_float\n",
            "ldm r10!, {{r0, r2, r3}}\n",
            "gm4_high r7\n",
            "ldr r6, [r11], #4\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r6\n",
            "ldrd r6, r7, [r11], #8\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r6\n",
            "ldm r10!, {{r2-r5}}\n",
            "gm4_full r7\n",
            "gm4_end 0\n",
            "vcvt.f32.s32 s0, s0\n",
            "gm_tail_float\n",
            "subs r8, r8, #2\n",
            ".endif\n",
            ".endm\n",
        )
    };
}

/// The assembler macros' names, purged at the end of each function that defines them.
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
macro_rules! dsp_purge {
    () => {
        concat!(
            ".purgem gm_w8\n.purgem gm_blk\n.purgem gm_quad\n.purgem gm_tail_w\n.purgem gm_tail_iter\n.purgem gm_tail_float\n",
            ".purgem gm4_full\n.purgem gm4_low\n.purgem gm4_high\n.purgem gm4_end\n.purgem gm4_quad32\n.purgem gm4_quad28\n",
        )
    };
}

/// One DSP quad kernel: `$name`, for groups of `$wg` words (GS/4), `$q4` 1 for packed 4-bit
/// weights, 0 for int8 (see the module notes and [`Job`]).
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
macro_rules! dsp_quads {
    ($(#[$doc:meta])* $name:ident, $wg:literal, $q4:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The job must describe memory as [`linear`] checks it: readable weights, scales,
        /// activations (the layout of `order`) and bias, a writable output, 4 to 16 groups a
        /// row.
        #[inline(never)]
        unsafe fn $name(job: *const Job) {
            // SAFETY: the caller's contract; the asm saves and restores every register it
            // changes but those declared below, and leaves the stack as it found it.
            unsafe {
                core::arch::asm!(
                    tail_float!(),
                    dsp_macros!(),
                    concat!(".set gm_wg, ", $wg, "\n.set gm_q4, ", $q4, "\n"),
                    quads_fn!($wg, "", "", "ldr r11, [r0, #24]\nldr r12, [r0, #28]\n", "r0, r1, r2, r3, r10, lr", "r0", "r1", "r2", "r3"),
                    dsp_purge!(),
                    inout("r0") job => _,
                    out("r1") _, out("r2") _, out("r3") _, out("r12") _,
                    out("s0") _, out("s1") _, out("s2") _, out("s3") _, out("s4") _, out("s5") _, out("s6") _, out("s7") _,
                    out("s8") _, out("s9") _, out("s10") _, out("s11") _, out("s12") _, out("s13") _, out("s14") _, out("s15") _,
                );
            }
        }
    };
}

#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
dsp_quads!(
    /// The q8 quad kernel for groups of 28.
    q8_quads_28, "7", "0"
);
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
dsp_quads!(
    /// The q8 quad kernel for groups of 32.
    q8_quads_32, "8", "0"
);
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
dsp_quads!(
    /// The q4 quad kernel for groups of 28.
    q4_quads_28, "7", "1"
);
#[cfg(all(feature = "arm-dsp", not(feature = "arm-helium")))]
dsp_quads!(
    /// The q4 quad kernel for groups of 32.
    q4_quads_32, "8", "1"
);

// ---- arm-helium: VLDRB + VMLADAV.S8 ---------------------------------------------------------
//
// Registers in the quads: r0, r2, r4, r6 the group sums (VMLADAV wants even registers), r1 the
// weights, r5 the activations, r12 the weight scales, lr the activation scales; q0, q1 the
// loads, then s0-s7 the scales; q2 (s8-s11) the sums as floats, s12 +0.0, s16-s31 the lanes.
// P0 holds VCTP.8 12 (a 28-group's tail) for the whole call; the caller's VPR is restored.
/// The assembler macros of the Helium kernels (defined in each asm block, purged at its end).
#[cfg(feature = "arm-helium")]
macro_rules! mve_macros {
    () => {
        concat!(
            // 16 weights into q0 as signed bytes: int8 (VLDRB), or q4 from 8 bytes (VLDRB.U16
            // puts one byte b = hi·16 + lo in each 16-bit lane, VSLI and VBIC make it the two
            // bytes lo, hi, VSUB takes the 8 off each, r11 = 8; a 28-group's tail of 12 from 6
            // bytes, predicated by P0). (The int8 tail loads with its activations, below.)
            ".macro gm_w16 tail\n",
            ".if gm_q4\n",
            ".if \\tail\n",
            "vpst\n",
            "vldrbt.u16 q0, [r1], #6\n",
            ".else\n",
            "vldrb.u16 q0, [r1], #8\n",
            ".endif\n",
            "vsli.16 q0, q0, #4\n",
            "vbic.i16 q0, #0xf0\n",
            "vsub.i8 q0, q0, r11\n",
            ".else\n",
            "vldrb.s8 q0, [r1], #16\n",
            ".endif\n",
            ".endm\n",
            // One group of gm_gs weights against as many int8 activations, the sum in s.
            ".macro gm_grp s\n",
            "gm_w16 0\n",
            "vldrb.s8 q1, [r5], #16\n",
            "vmladav.s8 \\s, q0, q1\n",
            ".if gm_gs == 32\n",
            "gm_w16 0\n",
            "vldrb.s8 q1, [r5], #16\n",
            "vmladava.s8 \\s, q0, q1\n",
            ".elseif gm_q4\n",
            "gm_w16 1\n",
            "vpstt\n",
            "vldrbt.s8 q1, [r5], #12\n",
            "vmladavat.s8 \\s, q0, q1\n",
            ".else\n",
            "vpsttt\n",
            "vldrbt.s8 q0, [r1], #12\n",
            "vldrbt.s8 q1, [r5], #12\n",
            "vmladavat.s8 \\s, q0, q1\n",
            ".endif\n",
            ".endm\n",
            // A quad: 4 groups, the four sums into q2 and converted at once, then the float
            // steps into the lanes l0-l3 (scalar: Helium's float arithmetic flushes
            // denormals).
            ".macro gm_quad wg, l0, l1, l2, l3\n",
            "gm_grp r0\n",
            "gm_grp r2\n",
            "gm_grp r4\n",
            "gm_grp r6\n",
            // (VMOV Qd[i], Qd[i - 2], Rt, Rt2 writes Rt to lane i - 2 and Rt2 to lane i)
            "vmov q2[2], q2[0], r0, r4\n",
            "vmov q2[3], q2[1], r2, r6\n",
            "vcvt.f32.s32 q2, q2\n",
            "vldmia r12!, {{s0-s3}}\n",
            "vldmia lr!, {{s4-s7}}\n",
            "vmul.f32 s0, s0, s4\n",
            "vmul.f32 s1, s1, s5\n",
            "vmul.f32 s2, s2, s6\n",
            "vmul.f32 s3, s3, s7\n",
            "vmul.f32 \\l0, s8, s0\n",
            "vmul.f32 \\l1, s9, s1\n",
            "vmul.f32 \\l2, s10, s2\n",
            "vmul.f32 \\l3, s11, s3\n",
            ".endm\n",
            // One tail group, the sum converted in s0, then its float step.
            ".macro gm_tail_iter\n",
            "gm_grp r0\n",
            "vmov s0, r0\n",
            "vcvt.f32.s32 s0, s0\n",
            "gm_tail_float\n",
            "subs r8, r8, #1\n",
            ".endm\n",
        )
    };
}

/// The assembler macros' names, purged at the end of each function that defines them.
#[cfg(feature = "arm-helium")]
macro_rules! mve_purge {
    () => {
        ".purgem gm_w16\n.purgem gm_grp\n.purgem gm_quad\n.purgem gm_tail_iter\n.purgem gm_tail_float\n"
    };
}

/// One Helium quad kernel: `$name`, for groups of `$gs` weights (`$wg` = GS/4 words), `$q4`
/// 1 for packed 4-bit weights, 0 for int8 (see the module notes and [`Job`]); `$vctp` sets P0
/// for a 28-group's tail.
#[cfg(feature = "arm-helium")]
macro_rules! mve_quads {
    ($(#[$doc:meta])* $name:ident, $gs:literal, $wg:literal, $q4:literal, $vctp:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The job must describe memory as [`linear`] checks it: readable weights, scales,
        /// activations and bias, a writable output, 4 to 16 groups a row.
        #[inline(never)]
        unsafe fn $name(job: *const Job) {
            // SAFETY: the caller's contract; the asm saves and restores every register it
            // changes but those declared below (VPR included), and leaves the stack as it
            // found it.
            unsafe {
                core::arch::asm!(
                    tail_float!(),
                    mve_macros!(),
                    concat!(".set gm_gs, ", $gs, "\n.set gm_q4, ", $q4, "\n"),
                    quads_fn!(
                        $wg,
                        concat!("vmrs r3, p0\nstr r3, [sp, #112]\nmov r11, #8\n", $vctp),
                        "ldr r3, [sp, #112]\nvmsr p0, r3\n",
                        "ldr r1, [r0, #24]\nldr r12, [r0, #28]\n",
                        "r0, r2, r3, r4, r5, lr",
                        "r0",
                        "r2",
                        "r3",
                        "r4"
                    ),
                    mve_purge!(),
                    inout("r0") job => _,
                    out("r1") _, out("r2") _, out("r3") _, out("r12") _,
                    out("d0") _, out("d1") _, out("d2") _, out("d3") _, out("d4") _, out("d5") _, out("d6") _, out("d7") _,
                );
            }
        }
    };
}

#[cfg(feature = "arm-helium")]
mve_quads!(
    /// The q8 quad kernel for groups of 28.
    q8_quads_28, "28", "7", "0", "movs r3, #12\nvctp.8 r3\n"
);
#[cfg(feature = "arm-helium")]
mve_quads!(
    /// The q8 quad kernel for groups of 32.
    q8_quads_32, "32", "8", "0", ""
);
#[cfg(feature = "arm-helium")]
mve_quads!(
    /// The q4 quad kernel for groups of 28.
    q4_quads_28, "28", "7", "1", "movs r3, #12\nvctp.8 r3\n"
);
#[cfg(feature = "arm-helium")]
mve_quads!(
    /// The q4 quad kernel for groups of 32.
    q4_quads_32, "32", "8", "1", ""
);
