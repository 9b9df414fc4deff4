//! Watching the one forward pass and the sampler: every intermediate value, per layer, token and
//! head, under TransformerLens's hook names, without a traced copy of the pass.
//!
//! [`Session::prefill_observed`](crate::Session::prefill_observed) and
//! [`Sampler::sample_observed`](crate::sampler::Sampler::sample_observed) take an [`Observer`];
//! the plain `prefill` / `decode` / `sample` pass [`NoObserver`], whose `ENABLED` is false and
//! whose methods are empty and always inlined, so the unobserved pass compiles to the code it
//! was before (the firmware's sizes and instruction counts in `boards/expected` did not move).
//!
//! Every value reported is the value the pass computes, bit for bit. Two are not materialised
//! by the unobserved pass, which fuses them into the residual add (`x += W·a + b`): `attn_out`
//! and `mlp_out`. When observing, the pass runs that product once more without the add, into
//! scratch it no longer needs (the qkv rows; the `ln_2` rows), and reports it: `linear` adds
//! `out + (W·a + b)` in every build, so `resid_mid == resid_pre + attn_out` exactly. The
//! attention scores and pattern are recomputed per head by [`kernels::attention_scores`]
//! and [`kernels::softmax`], the two steps [`kernels::attention`] runs, into the scores scratch
//! just before the real call. The unobserved arithmetic is untouched.
//!
//! | stage (`Stage::name`) | TransformerLens hook | values per report |
//! |---|---|---|
//! | `embed` | `hook_embed` | C: `wte[token]` |
//! | `pos_embed` | `hook_pos_embed` | C: `wpe[pos]` (learned positions only) |
//! | `resid_pre` | `blocks.{l}.hook_resid_pre` | C |
//! | `ln1_scale` | `blocks.{l}.ln1.hook_scale` | 1: the norm's divisor, √(var + ε) (LayerNorm) or √(mean(x²) + ε) (RMSNorm) |
//! | `ln1` | `blocks.{l}.ln1.hook_normalized` | C (after the gain and bias) |
//! | `q` | `blocks.{l}.attn.hook_q` | C_q: head h is `h·D..(h+1)·D` (before RoPE) |
//! | `k`, `v` | `blocks.{l}.attn.hook_k`, `hook_v` | C_kv: key/value head h is `h·D..(h+1)·D` (k before RoPE) |
//! | `rot_q`, `rot_k` | `blocks.{l}.attn.hook_rot_q`, `hook_rot_k` | C_q, C_kv: after RoPE (RoPE only) |
//! | `attn_scores` | `blocks.{l}.attn.hook_attn_scores` | per query head: the scaled scores of the cached slots ([`AttnRow`]); masked positions are absent |
//! | `attn_pattern` | `blocks.{l}.attn.hook_pattern` | per query head: softmax of those |
//! | `z` | `blocks.{l}.attn.hook_z` | C_q: head h is `h·D..(h+1)·D` |
//! | `attn_out` | `blocks.{l}.hook_attn_out` | C: `c_proj(z) + b` |
//! | `resid_mid` | `blocks.{l}.hook_resid_mid` | C |
//! | `ln2_scale` | `blocks.{l}.ln2.hook_scale` | 1 |
//! | `ln2` | `blocks.{l}.ln2.hook_normalized` | C |
//! | `mlp_pre` | `blocks.{l}.mlp.hook_pre` | I: `c_fc` output (gated MLP: the gate, before the activation) |
//! | `mlp_pre_linear` | `blocks.{l}.mlp.hook_pre_linear` | I: the gated MLP's `up` (gated MLP only) |
//! | `mlp_post` | `blocks.{l}.mlp.hook_post` | I: after the activation (gated: `act(gate) · up`) |
//! | `mlp_out` | `blocks.{l}.hook_mlp_out` | C: `c_proj(h) + b` |
//! | `resid_post` | `blocks.{l}.hook_resid_post` | C |
//! | `ln_final_scale` | `ln_final.hook_scale` | 1 |
//! | `ln_final` | `ln_final.hook_normalized` | C |
//! | `logits` | (the model's output) | V |
//!
//! A model reports only the stages it has ([`Stage::applies`]): no `pos_embed` with RoPE, no
//! `rot_q` / `rot_k` without it, no `mlp_pre_linear` without a gated MLP.
//!
//! Reports come in the pass's order: per batch, the embeddings of its tokens, then layer by
//! layer the stages in the order above for every token of the batch, then `ln_final` and
//! `logits` token by token. Positions are absolute (the first prompt token is 0).

use crate::blob::crc32_update;
use crate::config::Norm;
use crate::kernels::{self, Parallel};
use crate::model::Matrix;
use crate::kv_cache::KvCache;

pub use crate::sampler::Draw;

/// A hook point of the forward pass (see the module docs for what each reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// Token embedding `wte[token]`.
    Embed,
    /// Position embedding `wpe[pos]`.
    PosEmbed,
    /// Residual stream entering block l (block 0: `embed + pos_embed`).
    ResidPre,
    /// `ln_1`'s divisor (one value a token).
    Ln1Scale,
    /// `ln_1` output.
    Ln1,
    /// Queries (`c_attn`'s first C_q outputs), before RoPE.
    Q,
    /// Keys (the next C_kv), as computed: before RoPE, and before the KV cache stores (and
    /// maybe rounds) them.
    K,
    /// Values (the last C_kv).
    V,
    /// Queries after RoPE.
    RotQ,
    /// Keys after RoPE (what the KV cache stores).
    RotK,
    /// `q·k · scale` per cached slot (scaled; the causal mask leaves later positions out).
    AttnScores,
    /// Softmax of the scores.
    AttnPattern,
    /// Attention output per head, heads concatenated (`c_proj`'s input).
    Z,
    /// `attn.c_proj(z) + b`, before the residual add.
    AttnOut,
    /// `resid_pre + attn_out`.
    ResidMid,
    /// `ln_2`'s divisor (one value a token).
    Ln2Scale,
    /// `ln_2` output.
    Ln2,
    /// `mlp.c_fc` output, before the activation (a gated MLP's gate).
    MlpPre,
    /// A gated MLP's `up` product.
    MlpPreLinear,
    /// After the activation.
    MlpPost,
    /// `mlp.c_proj(h) + b`, before the residual add.
    MlpOut,
    /// `resid_mid + mlp_out`: the block's output.
    ResidPost,
    /// `ln_f`'s divisor (one value a token).
    LnFinalScale,
    /// `ln_f` output.
    LnFinal,
    /// The head's output.
    Logits,
}

impl Stage {
    /// Every stage, in the order of the pass.
    pub const ALL: [Stage; 25] = [
        Stage::Embed,
        Stage::PosEmbed,
        Stage::ResidPre,
        Stage::Ln1Scale,
        Stage::Ln1,
        Stage::Q,
        Stage::K,
        Stage::V,
        Stage::RotQ,
        Stage::RotK,
        Stage::AttnScores,
        Stage::AttnPattern,
        Stage::Z,
        Stage::AttnOut,
        Stage::ResidMid,
        Stage::Ln2Scale,
        Stage::Ln2,
        Stage::MlpPre,
        Stage::MlpPreLinear,
        Stage::MlpPost,
        Stage::MlpOut,
        Stage::ResidPost,
        Stage::LnFinalScale,
        Stage::LnFinal,
        Stage::Logits,
    ];

    /// Whether a model of `config` has (and reports) this stage: `pos_embed` needs learned
    /// positions, `rot_q` / `rot_k` RoPE, `mlp_pre_linear` a gated MLP; every other stage is in
    /// every model.
    pub const fn applies(self, config: &crate::Config) -> bool {
        match self {
            Stage::PosEmbed => config.learned_positions(),
            Stage::RotQ | Stage::RotK => !config.learned_positions(),
            Stage::MlpPreLinear => config.gated_mlp,
            _ => true,
        }
    }

    /// The short name (`resid_pre`, `attn_pattern`, …), as in TransformerLens's
    /// `cache["resid_pre", l]`.
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Embed => "embed",
            Stage::PosEmbed => "pos_embed",
            Stage::ResidPre => "resid_pre",
            Stage::Ln1Scale => "ln1_scale",
            Stage::Ln1 => "ln1",
            Stage::Q => "q",
            Stage::K => "k",
            Stage::V => "v",
            Stage::RotQ => "rot_q",
            Stage::RotK => "rot_k",
            Stage::AttnScores => "attn_scores",
            Stage::AttnPattern => "attn_pattern",
            Stage::Z => "z",
            Stage::AttnOut => "attn_out",
            Stage::ResidMid => "resid_mid",
            Stage::Ln2Scale => "ln2_scale",
            Stage::Ln2 => "ln2",
            Stage::MlpPre => "mlp_pre",
            Stage::MlpPreLinear => "mlp_pre_linear",
            Stage::MlpPost => "mlp_post",
            Stage::MlpOut => "mlp_out",
            Stage::ResidPost => "resid_post",
            Stage::LnFinalScale => "ln_final_scale",
            Stage::LnFinal => "ln_final",
            Stage::Logits => "logits",
        }
    }

    /// TransformerLens's full hook name, with `{l}` standing for the layer.
    pub const fn hook(self) -> &'static str {
        match self {
            Stage::Embed => "hook_embed",
            Stage::PosEmbed => "hook_pos_embed",
            Stage::ResidPre => "blocks.{l}.hook_resid_pre",
            Stage::Ln1Scale => "blocks.{l}.ln1.hook_scale",
            Stage::Ln1 => "blocks.{l}.ln1.hook_normalized",
            Stage::Q => "blocks.{l}.attn.hook_q",
            Stage::K => "blocks.{l}.attn.hook_k",
            Stage::V => "blocks.{l}.attn.hook_v",
            Stage::RotQ => "blocks.{l}.attn.hook_rot_q",
            Stage::RotK => "blocks.{l}.attn.hook_rot_k",
            Stage::AttnScores => "blocks.{l}.attn.hook_attn_scores",
            Stage::AttnPattern => "blocks.{l}.attn.hook_pattern",
            Stage::Z => "blocks.{l}.attn.hook_z",
            Stage::AttnOut => "blocks.{l}.hook_attn_out",
            Stage::ResidMid => "blocks.{l}.hook_resid_mid",
            Stage::Ln2Scale => "blocks.{l}.ln2.hook_scale",
            Stage::Ln2 => "blocks.{l}.ln2.hook_normalized",
            Stage::MlpPre => "blocks.{l}.mlp.hook_pre",
            Stage::MlpPreLinear => "blocks.{l}.mlp.hook_pre_linear",
            Stage::MlpPost => "blocks.{l}.mlp.hook_post",
            Stage::MlpOut => "blocks.{l}.hook_mlp_out",
            Stage::ResidPost => "blocks.{l}.hook_resid_post",
            Stage::LnFinalScale => "ln_final.hook_scale",
            Stage::LnFinal => "ln_final.hook_normalized",
            Stage::Logits => "logits",
        }
    }

    /// True for the stages inside a block (reported once per layer).
    pub const fn per_layer(self) -> bool {
        !matches!(self, Stage::Embed | Stage::PosEmbed | Stage::LnFinalScale | Stage::LnFinal | Stage::Logits)
    }

    /// True for the stages whose rows hold one D-wide slice per head (q, k, v, their rotated
    /// forms, z) or that are reported per head (the attention scores and pattern).
    pub const fn per_head(self) -> bool {
        matches!(self, Stage::Q | Stage::K | Stage::V | Stage::RotQ | Stage::RotK | Stage::Z | Stage::AttnScores | Stage::AttnPattern)
    }

    /// True for the key/value stages, whose rows hold H_kv heads rather than H (k, v, rot_k).
    pub const fn kv_heads(self) -> bool {
        matches!(self, Stage::K | Stage::V | Stage::RotK)
    }

    /// The scale stages (one value a token).
    pub const fn is_scale(self) -> bool {
        matches!(self, Stage::Ln1Scale | Stage::Ln2Scale | Stage::LnFinalScale)
    }
}

/// Which position the KV slot `slot` holds when query position `query` attends, in a cache of
/// `ring` slots per layer where position p is stored at slot `p % ring`: the latest position
/// `≤ query` that maps to `slot`, i.e. `query − ((query − slot) mod ring)`. A cache that never
/// wraps (`ring` = its capacity > query) holds position `slot` at `slot`. The one mapping from
/// slots to positions; attention reports go through it ([`AttnRow::key_pos`]).
pub const fn slot_position(query: usize, slot: usize, ring: usize) -> usize {
    if ring == 0 {
        return slot;
    }
    let back = (query % ring + ring - slot % ring) % ring;
    query.saturating_sub(back)
}

/// One query's attention over the cached slots of one (layer, head): the scaled scores or
/// their softmax, slot by slot in the order the kernel reads them.
#[derive(Debug, Clone, Copy)]
pub struct AttnRow<'a> {
    /// [`Stage::AttnScores`] or [`Stage::AttnPattern`].
    pub stage: Stage,
    /// Layer.
    pub layer: usize,
    /// The query's position.
    pub pos: usize,
    /// Head.
    pub head: usize,
    /// Slots of this layer's KV cache (position p is stored at slot `p % ring`).
    pub ring: usize,
    /// One value per filled slot, slot 0 first.
    pub values: &'a [f32],
}

impl AttnRow<'_> {
    /// The position whose key slot `slot` holds ([`slot_position`]).
    pub const fn key_pos(&self, slot: usize) -> usize {
        slot_position(self.pos, slot, self.ring)
    }

    /// `(key position, value)` for every slot.
    pub fn by_position(&self) -> impl Iterator<Item = (usize, f32)> + '_ {
        self.values.iter().enumerate().map(|(s, &v)| (self.key_pos(s), v))
    }
}

/// Receives the values of the forward pass and the sampler's draws. Every method has an empty
/// default, so an observer implements only what it wants.
pub trait Observer {
    /// False only for [`NoObserver`]: the pass then skips the extra work of observing
    /// (recomputing the scores, the products before the residual adds).
    const ENABLED: bool = true;

    /// One token's values of a row stage (every stage but the two attention ones): the row at
    /// position `pos` of `layer` (0 for the stages outside the blocks).
    #[inline(always)]
    fn row(&mut self, stage: Stage, layer: usize, pos: usize, values: &[f32]) {
        let _ = (stage, layer, pos, values);
    }

    /// One query's attention scores or pattern for one head.
    #[inline(always)]
    fn attention(&mut self, row: &AttnRow<'_>) {
        let _ = row;
    }

    /// One draw of the sampler.
    #[inline(always)]
    fn draw(&mut self, draw: &Draw<'_>) {
        let _ = draw;
    }
}

/// The observer of the plain `prefill`, `decode` and `sample`: nothing, at no cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl Observer for NoObserver {
    const ENABLED: bool = false;
}

impl<O: Observer> Observer for &mut O {
    const ENABLED: bool = O::ENABLED;
    #[inline(always)]
    fn row(&mut self, stage: Stage, layer: usize, pos: usize, values: &[f32]) {
        (**self).row(stage, layer, pos, values)
    }
    #[inline(always)]
    fn attention(&mut self, row: &AttnRow<'_>) {
        (**self).attention(row)
    }
    #[inline(always)]
    fn draw(&mut self, draw: &Draw<'_>) {
        (**self).draw(draw)
    }
}

// ---- the forward pass's hooks (one call per stage in `Session::forward_batch`) -----------------

/// Reports `data` (`[T, width]`, tokens at positions `p0..`) as `stage` of `layer`.
#[inline(always)]
pub(crate) fn rows<O: Observer>(obs: &mut O, stage: Stage, layer: usize, p0: usize, data: &[f32], width: usize) {
    if !O::ENABLED || width == 0 {
        return;
    }
    for (t, row) in data.chunks_exact(width).enumerate() {
        obs.row(stage, layer, p0 + t, row);
    }
}

/// Reports the q, k and v parts of the `c_attn` rows (`[T, C_q + 2·C_kv]`).
#[inline(always)]
pub(crate) fn qkv<O: Observer>(obs: &mut O, layer: usize, p0: usize, qkv: &[f32], cq: usize, ckv: usize) {
    if !O::ENABLED || cq == 0 {
        return;
    }
    for (t, row) in qkv.chunks_exact(cq + 2 * ckv).enumerate() {
        let (q, kv) = row.split_at(cq);
        let (k, v) = kv.split_at(ckv);
        for (stage, part) in [(Stage::Q, q), (Stage::K, k), (Stage::V, v)] {
            obs.row(stage, layer, p0 + t, part);
        }
    }
}

/// Reports the rotated q and k parts of the `c_attn` rows (after RoPE).
#[inline(always)]
pub(crate) fn rotated<O: Observer>(obs: &mut O, layer: usize, p0: usize, qkv: &[f32], cq: usize, ckv: usize) {
    if !O::ENABLED || cq == 0 {
        return;
    }
    for (t, row) in qkv.chunks_exact(cq + 2 * ckv).enumerate() {
        let (q, kv) = row.split_at(cq);
        obs.row(Stage::RotQ, layer, p0 + t, q);
        obs.row(Stage::RotK, layer, p0 + t, kv.get(..ckv).unwrap_or(&[]));
    }
}

/// Reports a gated MLP's gate (`mlp_pre`) and up (`mlp_pre_linear`) products (`[T, 2·I]`).
#[inline(always)]
pub(crate) fn gate_up<O: Observer>(obs: &mut O, layer: usize, p0: usize, fc: &[f32], inner: usize) {
    if !O::ENABLED || inner == 0 {
        return;
    }
    for (t, row) in fc.chunks_exact(2 * inner).enumerate() {
        let (gate, up) = row.split_at(inner);
        obs.row(Stage::MlpPre, layer, p0 + t, gate);
        obs.row(Stage::MlpPreLinear, layer, p0 + t, up);
    }
}

/// Reports a norm: its divisor per row of `x` as `scale_stage` (recomputed by
/// [`kernels::norm_scale`], the function the kernel divides by), then its output `normed` as the
/// matching normalized stage (`ln1`, `ln2`, `ln_final`), for the T rows from position `p0`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn norm<O: Observer>(obs: &mut O, (scale_stage, layer, p0): (Stage, usize, usize), kind: Norm, x: &[f32], normed: &[f32], c: usize, eps: f32) {
    if !O::ENABLED || c == 0 {
        return;
    }
    for (t, xr) in x.chunks_exact(c).enumerate() {
        obs.row(scale_stage, layer, p0 + t, &[kernels::norm_scale(kind, xr, eps)]);
    }
    let stage = match scale_stage {
        Stage::Ln1Scale => Stage::Ln1,
        Stage::Ln2Scale => Stage::Ln2,
        _ => Stage::LnFinal,
    };
    rows(obs, stage, layer, p0, normed, c);
}

/// Reports `wpe[p0 + t]` for the T rows of `scratch` (`[T, C]`, overwritten).
#[inline(always)]
pub(crate) fn pos_embed<O: Observer>(obs: &mut O, scratch: &mut [f32], wpe: &Matrix<'_>, p0: usize, c: usize) {
    if !O::ENABLED || c == 0 {
        return;
    }
    for (t, row) in scratch.chunks_exact_mut(c).enumerate() {
        kernels::embedding_row(row, wpe, p0 + t, false);
        obs.row(Stage::PosEmbed, 0, p0 + t, row);
    }
}

/// Reports the scaled scores and the softmax of query `q` (at `pos`, query head `head` of
/// `layer`) over the `slots` filled slots of key/value head `kv_head` of `cache` (which holds
/// `ring` slots per layer), computed as [`kernels::attention`] computes them over
/// `cache.head(layer, kv_head, slots)`, in `scores`
/// (scratch of at least `slots`, overwritten; the real call follows and overwrites it again).
/// Takes the cache rather than a view of it so that the unobserved pass makes no view here.
#[inline(always)]
pub(crate) fn attention<O: Observer>(
    obs: &mut O,
    (layer, pos, head): (usize, usize, usize),
    q: &[f32],
    (cache, kv_head, slots, ring): (&KvCache<'_>, usize, usize, usize),
    scale: f32,
    scores: &mut [f32],
) {
    if !O::ENABLED {
        return;
    }
    let kv = cache.head(layer, kv_head, slots);
    let Some(s) = scores.get_mut(..kv.len()) else { return };
    kernels::attention_scores(q, &kv, scale, s);
    obs.attention(&AttnRow { stage: Stage::AttnScores, layer, pos, head, ring, values: s });
    kernels::softmax(s);
    obs.attention(&AttnRow { stage: Stage::AttnPattern, layer, pos, head, ring, values: s });
}

/// Reports `x · Wᵀ + b` (`stage`, the product the pass adds to the residual stream) for the T
/// rows of `x`, computed into `scratch` (`[T, W.rows]`, overwritten) by the same `linear`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn product<O: Observer>(
    obs: &mut O,
    (stage, layer, p0): (Stage, usize, usize),
    par: Option<&dyn Parallel>,
    scratch: &mut [f32],
    x: &[f32],
    w: &Matrix<'_>,
    bias: &[f32],
    quant: &mut [f32],
) {
    if !O::ENABLED || w.cols == 0 {
        return;
    }
    let tokens = x.len() / w.cols;
    let Some(out) = scratch.get_mut(..tokens * w.rows) else { return };
    kernels::linear_par(par, out, x, w, bias, false, quant);
    rows(obs, stage, layer, p0, out, w.rows);
}

// ---- per-layer digests (firmware feature `trace`, `host trace --digest`) ----------------------

/// CRC-32 (zlib's) of the little-endian bytes of `values`' f32 bit patterns: the fingerprint of
/// one row, equal on two machines exactly when every bit of the row is.
pub fn digest(values: &[f32]) -> u32 {
    values.iter().fold(0, |crc, v| crc32_update(crc, &v.to_bits().to_le_bytes()))
}

/// An observer that hands `(pos, layer, digest of resid_post)` to its closure, once per layer
/// per token, in the pass's order (with prefill batches of one token: position by position,
/// layer by layer).
pub struct Digests<F: FnMut(usize, usize, u32)>(pub F);

impl<F: FnMut(usize, usize, u32)> Observer for Digests<F> {
    fn row(&mut self, stage: Stage, layer: usize, pos: usize, values: &[f32]) {
        if stage == Stage::ResidPost {
            (self.0)(pos, layer, digest(values));
        }
    }
}

/// Writes one digest line, `digest: pos 3 layer 1 resid_post crc32 1a2b3c4d`: the line the
/// firmware's `trace` build prints on stderr and `host trace --digest` on stdout.
pub fn write_digest_line(w: &mut impl core::fmt::Write, pos: usize, layer: usize, crc: u32) -> core::fmt::Result {
    writeln!(w, "digest: pos {pos} layer {layer} resid_post crc32 {crc:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::String;

    #[test]
    fn slot_position_is_the_identity_without_wrapping_and_the_ring_rule_with() {
        for q in 0..10 {
            for s in 0..=q {
                assert_eq!(slot_position(q, s, 16), s);
            }
        }
        // ring of 4: query 9 sees slots 0..4 holding 8, 9, 6, 7
        assert_eq!([0, 1, 2, 3].map(|s| slot_position(9, s, 4)), [8, 9, 6, 7]);
        // every slot's position is ≤ the query, within the ring, and stored at that slot
        for ring in 1..7 {
            for q in 0..20 {
                for s in 0..ring.min(q + 1) {
                    let p = slot_position(q, s, ring);
                    assert!(p <= q && q - p < ring && p % ring == s, "q {q} s {s} ring {ring}: {p}");
                }
            }
        }
    }

    #[test]
    fn digest_is_the_crc_of_the_little_endian_bytes() {
        let v = [1.0f32, -0.0, f32::from_bits(0x1234_5678)];
        let mut bytes = [0u8; 12];
        for (b, x) in bytes.chunks_exact_mut(4).zip(v) {
            b.copy_from_slice(&x.to_bits().to_le_bytes());
        }
        assert_eq!(digest(&v), crate::blob::crc32(&bytes));
        assert_ne!(digest(&[0.0]), digest(&[-0.0]), "the bits, not the value");
        let mut line = String::new();
        write_digest_line(&mut line, 3, 1, 0x1a2b3c).unwrap();
        assert_eq!(line, "digest: pos 3 layer 1 resid_post crc32 001a2b3c\n");
    }

    #[test]
    fn stage_names_follow_transformer_lens() {
        let names: std::vec::Vec<&str> = Stage::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "embed", "pos_embed", "resid_pre", "ln1_scale", "ln1", "q", "k", "v", "rot_q", "rot_k", "attn_scores", "attn_pattern",
                "z", "attn_out", "resid_mid", "ln2_scale", "ln2", "mlp_pre", "mlp_pre_linear", "mlp_post", "mlp_out", "resid_post",
                "ln_final_scale", "ln_final", "logits"
            ]
        );
        assert_eq!(Stage::RotQ.hook(), "blocks.{l}.attn.hook_rot_q");
        assert_eq!(Stage::Ln1Scale.hook(), "blocks.{l}.ln1.hook_scale");
        // per-layer hooks are `blocks.{l}.…`, the others not
        assert!(Stage::ALL.iter().all(|s| s.hook().starts_with("blocks.{l}.") == s.per_layer()));
        assert_eq!(Stage::MlpPost.hook(), "blocks.{l}.mlp.hook_post");
        assert_eq!(Stage::AttnPattern.hook(), "blocks.{l}.attn.hook_pattern");
        assert!(!Stage::Logits.per_layer() && Stage::ResidPost.per_layer() && Stage::Z.per_head() && !Stage::Ln1.per_head());
    }
}
