//! The model configuration: the numbers that fix every shape (Hugging Face `GPT2Config`, and
//! `GPTNeoConfig` and `LlamaConfig` in the same words). The families differ only in data here:
//!
//! | field | GPT-2 | GPT-Neo | Llama |
//! |---|---|---|---|
//! | [`Config::norm`] | LayerNorm | LayerNorm | RMSNorm |
//! | [`Config::positions`] | learned (`wpe`) | learned | RoPE (θ) |
//! | [`Config::activation`], [`Config::gated_mlp`] | GELU | GELU | SiLU, gated: `down(silu(gate(x)) · up(x))` |
//! | [`Config::n_kv_head`] | = `n_head` | = `n_head` | divides `n_head` (grouped-query) |
//! | [`Config::head_dim`] | C / H | C / H | any (`head_dim` in `config.json`) |
//! | [`Config::qkv_bias`], [`Config::attn_out_bias`], [`Config::mlp_bias`] | all | q/k/v none | `attention_bias`, `mlp_bias` |
//! | local layers ([`Config::local_layers`]) | none | some | none |
//! | scores scaled by 1/√D | yes | no | yes |
//!
//! The forward pass ([`crate::Session`]) reads these at a few branch points and is otherwise one
//! function for all three.

use serde::{Deserialize, Serialize};

use crate::error::{ConfigField, Error};

/// The MLP nonlinearity (`activation_function` in `config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Activation {
    /// `gelu_new` / `gelu_pytorch_tanh`: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    GeluTanh,
    /// `gelu`: exact 0.5·x·(1 + erf(x/√2)).
    GeluErf,
    /// `relu`: max(x, 0).
    Relu,
    /// `silu` (Llama's `hidden_act`): x·σ(x) = x / (1 + e^(−x)).
    Silu,
}

/// The normalisation before attention, before the MLP and before the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Norm {
    /// `nn.LayerNorm`: (x − mean) / √(var + ε) · weight + bias.
    LayerNorm,
    /// `LlamaRMSNorm`: x / √(mean(x²) + ε) · weight (no bias, no centring).
    RmsNorm,
}

/// How the model knows where a token is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Positions {
    /// A learned embedding per position (`wpe`, `n_ctx` rows) added to the token's.
    Learned,
    /// Rotary position embedding on q and k after their product, in Hugging Face's rotate-half
    /// pairing (element i with i + D/2), angle `pos · θ^(−2i/D)`.
    Rope {
        /// θ (`rope_theta`, 10000 in Llama 1/2).
        theta: f32,
    },
}

/// The checkpoint family a blob was converted from. For display only: the forward pass never
/// looks at it (every difference between the families is a field of [`Config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arch {
    /// `GPT2LMHeadModel` (`model_type: "gpt2"`).
    Gpt2,
    /// `GPTNeoForCausalLM` (`model_type: "gpt_neo"`): TinyStories, TinyTalk, GPT-Neo 125M…2.7B.
    GptNeo,
    /// `LlamaForCausalLM` (`model_type: "llama"`): Llama 1/2/3-shaped models, TinyLlama, SmolLM,
    /// llama2.c's stories models.
    Llama,
}

impl Arch {
    /// The `model_type` of `config.json` (`gpt2`, `gpt_neo`).
    pub const fn name(self) -> &'static str {
        match self {
            Arch::Gpt2 => "gpt2",
            Arch::GptNeo => "gpt_neo",
            Arch::Llama => "llama",
        }
    }
}

/// A set of layers (bit l of word l / 64), for [`Config::local_layers`]: bounded (1024 layers,
/// the most [`Config::validate`] accepts), `Copy`, and 16 bytes in the header when empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LayerMask(pub [u64; 16]);

impl LayerMask {
    /// No layer.
    pub const NONE: LayerMask = LayerMask([0; 16]);
    /// Layers this type can name (`0..CAPACITY`).
    pub const CAPACITY: usize = 1024;

    /// Whether layer `l` is in the set (false beyond [`LayerMask::CAPACITY`]).
    pub const fn contains(&self, l: usize) -> bool {
        match self.word(l / 64) {
            Some(w) => w >> (l % 64) & 1 == 1,
            None => false,
        }
    }

    /// The set with layer `l` added (unchanged beyond [`LayerMask::CAPACITY`]).
    pub const fn with(mut self, l: usize) -> LayerMask {
        if l < Self::CAPACITY {
            // in range: l / 64 < 16
            #[allow(clippy::indexing_slicing)]
            {
                self.0[l / 64] |= 1 << (l % 64);
            }
        }
        self
    }

    /// Layers in the set below `l`. (Out of line: one short loop in the firmware, not one
    /// unrolled copy per caller.)
    #[inline(never)]
    pub const fn count_below(&self, l: usize) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < 16 && i * 64 < l {
            let mut w = match self.word(i) {
                Some(w) => w,
                None => 0,
            };
            let bits = l - i * 64;
            if bits < 64 {
                w &= (1u64 << bits) - 1;
            }
            // one step per set bit: a short loop where Cortex-M has no popcount instruction
            while w != 0 {
                w &= w - 1;
                n += 1;
            }
            i += 1;
        }
        n
    }

    /// True when no layer is in the set.
    pub const fn is_empty(&self) -> bool {
        self.last().is_none()
    }

    /// Layers in the set.
    pub const fn count(&self) -> usize {
        self.count_below(Self::CAPACITY)
    }

    /// The highest layer in the set, if any.
    pub const fn last(&self) -> Option<usize> {
        let mut i = 16;
        while i > 0 {
            i -= 1;
            if let Some(w) = self.word(i) {
                if w != 0 {
                    return Some(i * 64 + 63 - w.leading_zeros() as usize);
                }
            }
        }
        None
    }

    const fn word(&self, i: usize) -> Option<u64> {
        if i < 16 {
            // in range: checked just above
            #[allow(clippy::indexing_slicing)]
            Some(self.0[i])
        } else {
            None
        }
    }
}

/// Shapes and hyper-parameters of a GPT-2, GPT-Neo or Llama model, stored in the blob header.
///
/// Shape legend used across the crate: C = `n_embd`, H = `n_head`, H_kv = `n_kv_head`,
/// D = `head_dim` (C / H for GPT-2 and GPT-Neo), C_q = H·D (q and the attention output),
/// C_kv = H_kv·D (k and v), I = `n_inner`, V = `vocab_size`, T = tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// V: number of tokens in the vocabulary (rows of `wte`).
    pub vocab_size: u32,
    /// Largest position the model has an embedding for (rows of `wpe`).
    pub n_ctx: u32,
    /// C: width of the residual stream.
    pub n_embd: u32,
    /// Number of transformer blocks.
    pub n_layer: u32,
    /// H: attention heads (queries) per block.
    pub n_head: u32,
    /// I: width of the MLP hidden layer (4·C when `config.json` says null).
    pub n_inner: u32,
    /// ε added to the variance (LayerNorm) or the mean square (RMSNorm) in every norm.
    pub layer_norm_epsilon: f32,
    /// MLP nonlinearity.
    pub activation: Activation,
    /// Divide attention scores by √D (`scale_attn_weights`, true for GPT-2).
    pub scale_attn_weights: bool,
    /// Also divide attention scores of layer l by (l + 1) (`scale_attn_by_inverse_layer_idx`).
    pub scale_attn_by_inverse_layer_idx: bool,
    /// Beginning-of-text token id.
    pub bos_token_id: u32,
    /// End-of-text token id (generation stops here).
    pub eos_token_id: u32,
    /// The checkpoint family, for display only (never read by the forward pass).
    pub arch: Arch,
    /// Whether `attn.c_attn` has a bias (GPT-2: yes; GPT-Neo's q/k/v projections: no, and the
    /// blob then has no `attn.c_attn.bias` tensor).
    pub qkv_bias: bool,
    /// W: a local layer's position i attends positions j with i − W < j ≤ i (GPT-Neo's
    /// `window_size`); 0 when no layer is local.
    pub attn_window: u32,
    /// The layers that attend locally (GPT-Neo's `"local"` entries of `attention_layers`); the
    /// others attend to every earlier position.
    pub local_layers: LayerMask,
    /// H_kv: key/value heads (`num_key_value_heads`): H for multi-head attention, a divisor of H
    /// for grouped-query attention (query head h reads key/value head h / (H / H_kv)), 1 for
    /// multi-query. The KV cache holds H_kv heads.
    pub n_kv_head: u32,
    /// D: the width of one attention head (`head_dim`; C / H unless the checkpoint says
    /// otherwise).
    pub head_dim: u32,
    /// LayerNorm (GPT-2, GPT-Neo) or RMSNorm (Llama).
    pub norm: Norm,
    /// Learned position embeddings (GPT-2, GPT-Neo) or RoPE (Llama).
    pub positions: Positions,
    /// The MLP's first product gives `[gate | up]` (2·I rows) and the hidden layer is
    /// `act(gate) · up` (Llama's SwiGLU); otherwise it gives I rows and the hidden layer is
    /// `act(fc)`.
    pub gated_mlp: bool,
    /// Whether the attention output projection (`attn.c_proj`, `o_proj`) has a bias.
    pub attn_out_bias: bool,
    /// Whether the MLP's products have biases.
    pub mlp_bias: bool,
}

impl Config {
    /// A GPT-2 configuration with Hugging Face's `GPT2Config` defaults for everything but the
    /// shape: `n_inner` 4·C, GELU (tanh), ε 1e-5, scores scaled by 1/√D only, and the last token
    /// as both beginning and end of text (GPT-2's `<|endoftext|>`). A `const fn`, so that a
    /// board can size its `static` buffers with [`SessionSizes`](crate::SessionSizes) for the
    /// model it ships (see the crate's example); [`Model::from_blob`](crate::Model::from_blob)
    /// reads the real one from the blob.
    pub const fn gpt2(vocab_size: u32, n_ctx: u32, n_embd: u32, n_layer: u32, n_head: u32) -> Self {
        Config {
            vocab_size,
            n_ctx,
            n_embd,
            n_layer,
            n_head,
            n_inner: n_embd.saturating_mul(4),
            layer_norm_epsilon: 1e-5,
            activation: Activation::GeluTanh,
            scale_attn_weights: true,
            scale_attn_by_inverse_layer_idx: false,
            bos_token_id: vocab_size.saturating_sub(1),
            eos_token_id: vocab_size.saturating_sub(1),
            arch: Arch::Gpt2,
            qkv_bias: true,
            attn_window: 0,
            local_layers: LayerMask::NONE,
            n_kv_head: n_head,
            head_dim: match n_embd.checked_div(n_head) {
                Some(d) => d,
                None => 0,
            },
            norm: Norm::LayerNorm,
            positions: Positions::Learned,
            gated_mlp: false,
            attn_out_bias: true,
            mlp_bias: true,
        }
    }

    /// A Llama configuration (`LlamaConfig`'s defaults but for the shape): RMSNorm with ε 1e-5,
    /// RoPE with θ = 10000, a gated SiLU MLP of `n_inner`, no biases, D = C / H, BOS 1 and
    /// EOS 2 (SentencePiece's ids). A `const fn` like [`Config::gpt2`].
    pub const fn llama(vocab_size: u32, n_ctx: u32, n_embd: u32, n_layer: u32, n_head: u32, n_kv_head: u32, n_inner: u32) -> Self {
        let gpt2 = Self::gpt2(vocab_size, n_ctx, n_embd, n_layer, n_head);
        Config {
            n_inner,
            activation: Activation::Silu,
            bos_token_id: if vocab_size > 1 { 1 } else { 0 },
            eos_token_id: if vocab_size > 2 { 2 } else { 0 },
            arch: Arch::Llama,
            qkv_bias: false,
            n_kv_head,
            norm: Norm::RmsNorm,
            positions: Positions::Rope { theta: 10000.0 },
            gated_mlp: true,
            attn_out_bias: false,
            mlp_bias: false,
            ..gpt2
        }
    }

    /// C as `usize`.
    pub const fn n_embd(&self) -> usize {
        self.n_embd as usize
    }
    /// H as `usize`.
    pub const fn n_head(&self) -> usize {
        self.n_head as usize
    }
    /// D, the width of one attention head.
    pub const fn head_dim(&self) -> usize {
        self.head_dim as usize
    }
    /// H_kv as `usize`.
    pub const fn n_kv_head(&self) -> usize {
        self.n_kv_head as usize
    }
    /// C_q = H·D: the width of the queries and of the attention output (`c_proj`'s input).
    pub const fn q_dim(&self) -> usize {
        (self.n_head as usize).saturating_mul(self.head_dim as usize)
    }
    /// C_kv = H_kv·D: the width of the keys and of the values (a KV-cache row).
    pub const fn kv_dim(&self) -> usize {
        (self.n_kv_head as usize).saturating_mul(self.head_dim as usize)
    }
    /// Rows of the stacked q|k|v product (`attn.c_attn`): C_q + 2·C_kv (3C for GPT-2).
    pub const fn qkv_rows(&self) -> usize {
        self.q_dim().saturating_add(self.kv_dim().saturating_mul(2))
    }
    /// Rows of the MLP's first product (`mlp.c_fc`): 2·I (gate | up) when gated, else I.
    pub const fn mlp_rows(&self) -> usize {
        if self.gated_mlp {
            (self.n_inner as usize).saturating_mul(2)
        } else {
            self.n_inner as usize
        }
    }
    /// Query heads per key/value head (H / H_kv, 1 without grouped-query attention).
    pub const fn kv_group(&self) -> usize {
        match self.n_head.checked_div(self.n_kv_head) {
            Some(g) => g as usize,
            None => 1,
        }
    }
    /// True when position embeddings are learned (the blob has `wpe`).
    pub const fn learned_positions(&self) -> bool {
        matches!(self.positions, Positions::Learned)
    }
    /// True when the norms have a bias (LayerNorm; RMSNorm has none).
    pub const fn norm_bias(&self) -> bool {
        matches!(self.norm, Norm::LayerNorm)
    }
    /// I as `usize`.
    pub const fn n_inner(&self) -> usize {
        self.n_inner as usize
    }
    /// Number of blocks as `usize`.
    pub const fn n_layer(&self) -> usize {
        self.n_layer as usize
    }
    /// V as `usize`.
    pub const fn vocab_size(&self) -> usize {
        self.vocab_size as usize
    }
    /// n_ctx as `usize`.
    pub const fn n_ctx(&self) -> usize {
        self.n_ctx as usize
    }
    /// Whether layer `l` attends only to the last [`Config::attn_window`] positions.
    pub const fn is_local(&self, l: usize) -> bool {
        self.local_layers.contains(l)
    }
    /// The factor on layer `l`'s attention scores: 1/√D with `scale_attn_weights` (GPT-2; GPT-Neo
    /// does not scale: 1), divided by l + 1 with `scale_attn_by_inverse_layer_idx`.
    pub fn attn_scale(&self, l: usize) -> f32 {
        let mut scale = if self.scale_attn_weights { 1.0 / libm::sqrtf(self.head_dim() as f32) } else { 1.0 };
        if self.scale_attn_by_inverse_layer_idx {
            scale /= (l + 1) as f32;
        }
        scale
    }
    /// Positions layer `l` keeps in a KV cache of `capacity` positions: `min(capacity, W)` for
    /// a local layer (a ring of its last W positions), `capacity` for a global one.
    pub const fn layer_capacity(&self, l: usize, capacity: usize) -> usize {
        let w = self.attn_window as usize;
        if self.is_local(l) && w < capacity {
            w
        } else {
            capacity
        }
    }

    /// Checks that the numbers describe a model this runtime can run. Limits keep every size
    /// computation far from `usize` overflow on 32-bit targets.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |what, value: u32| Err(Error::BadConfig { what, value: value as u64 });
        const MAX_DIM: u32 = 1 << 16;
        if self.vocab_size == 0 || self.vocab_size > (1 << 24) {
            return bad(ConfigField::VocabSize, self.vocab_size);
        }
        if self.n_ctx == 0 || self.n_ctx > MAX_DIM {
            return bad(ConfigField::NCtx, self.n_ctx);
        }
        if self.n_embd == 0 || self.n_embd > MAX_DIM {
            return bad(ConfigField::NEmbd, self.n_embd);
        }
        if self.n_layer == 0 || self.n_layer > 1024 {
            return bad(ConfigField::NLayer, self.n_layer);
        }
        if self.n_head == 0 || self.n_head > MAX_DIM {
            return bad(ConfigField::NHead, self.n_head);
        }
        // every query head reads one key/value head: H_kv divides H
        if self.n_kv_head == 0 || !self.n_head.is_multiple_of(self.n_kv_head) {
            return bad(ConfigField::NKvHead, self.n_kv_head);
        }
        // RoPE rotates pairs (i, i + D/2): D even; C_q at most 4·MAX_DIM
        let rope = !self.learned_positions();
        if self.head_dim == 0 || self.head_dim > MAX_DIM || (rope && !self.head_dim.is_multiple_of(2)) || self.q_dim() > 4 * MAX_DIM as usize {
            return bad(ConfigField::HeadDim, self.head_dim);
        }
        if let Positions::Rope { theta } = self.positions {
            if !(theta.is_finite() && theta > 0.0) {
                return Err(Error::BadConfig { what: ConfigField::RopeTheta, value: theta.to_bits() as u64 });
            }
        }
        if self.n_inner == 0 || self.n_inner > 4 * MAX_DIM {
            return bad(ConfigField::NInner, self.n_inner);
        }
        let eps = self.layer_norm_epsilon;
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::BadConfig { what: ConfigField::LayerNormEpsilon, value: eps.to_bits() as u64 });
        }
        if self.bos_token_id >= self.vocab_size {
            return bad(ConfigField::BosTokenId, self.bos_token_id);
        }
        if self.eos_token_id >= self.vocab_size {
            return bad(ConfigField::EosTokenId, self.eos_token_id);
        }
        // a local layer beyond the model (the value is the layer)
        if let Some(l) = self.local_layers.last() {
            if l >= self.n_layer() {
                return Err(Error::BadConfig { what: ConfigField::LocalLayers, value: l as u64 });
            }
            if self.attn_window == 0 {
                return bad(ConfigField::AttnWindow, 0);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_mask_sets_counts_and_bounds() {
        let m = LayerMask::NONE.with(0).with(63).with(64).with(1023).with(1024);
        assert!(m.contains(0) && m.contains(63) && m.contains(64) && m.contains(1023));
        assert!(!m.contains(1) && !m.contains(1024) && !m.contains(usize::MAX));
        assert_eq!((m.count_below(0), m.count_below(1), m.count_below(64), m.count_below(65)), (0, 1, 2, 3));
        assert_eq!((m.count(), m.count_below(usize::MAX), m.last()), (4, 4, Some(1023)));
        assert_eq!(LayerMask::NONE.last(), None);
        let alternating = (0..8).filter(|l| l % 2 == 1).fold(LayerMask::NONE, |m, l| m.with(l));
        assert_eq!(alternating.0[0], 0b1010_1010);
    }

    #[test]
    fn local_layers_need_a_window_and_must_exist() {
        let gpt_neo = Config {
            vocab_size: 10,
            n_ctx: 16,
            n_embd: 8,
            n_layer: 4,
            n_head: 2,
            n_inner: 32,
            layer_norm_epsilon: 1e-5,
            activation: Activation::GeluTanh,
            scale_attn_weights: false,
            scale_attn_by_inverse_layer_idx: false,
            bos_token_id: 9,
            eos_token_id: 9,
            arch: Arch::GptNeo,
            qkv_bias: false,
            attn_window: 5,
            local_layers: LayerMask::NONE.with(1).with(3),
            n_kv_head: 2,
            head_dim: 4,
            norm: Norm::LayerNorm,
            positions: Positions::Learned,
            gated_mlp: false,
            attn_out_bias: true,
            mlp_bias: true,
        };
        assert_eq!(gpt_neo.validate(), Ok(()));
        assert_eq!((gpt_neo.layer_capacity(0, 16), gpt_neo.layer_capacity(1, 16), gpt_neo.layer_capacity(1, 3)), (16, 5, 3));
        let no_window = Config { attn_window: 0, ..gpt_neo };
        assert_eq!(no_window.validate(), Err(Error::BadConfig { what: ConfigField::AttnWindow, value: 0 }));
        let beyond = Config { local_layers: gpt_neo.local_layers.with(4), ..gpt_neo };
        assert_eq!(beyond.validate(), Err(Error::BadConfig { what: ConfigField::LocalLayers, value: 4 }));
        // no local layer: the window is not used, any value is fine
        assert_eq!(Config { local_layers: LayerMask::NONE, attn_window: 0, ..gpt_neo }.validate(), Ok(()));
    }

    #[test]
    fn llama_shapes_and_grouped_query_limits() {
        // stories260K: 64 wide, 8 heads on 4 key/value heads, MLP 172
        let c = Config::llama(512, 512, 64, 5, 8, 4, 172);
        assert_eq!(c.validate(), Ok(()));
        assert_eq!((c.head_dim(), c.q_dim(), c.kv_dim(), c.qkv_rows(), c.mlp_rows(), c.kv_group()), (8, 64, 32, 128, 344, 2));
        assert!(!c.learned_positions() && !c.norm_bias());
        // an explicit head_dim: C_q need not be C
        let wide = Config { head_dim: 32, ..c };
        assert_eq!((wide.validate(), wide.q_dim(), wide.qkv_rows()), (Ok(()), 256, 512));
        for (bad, what, value) in [
            (Config { n_kv_head: 3, ..c }, ConfigField::NKvHead, 3),
            (Config { n_kv_head: 0, ..c }, ConfigField::NKvHead, 0),
            (Config { head_dim: 7, ..c }, ConfigField::HeadDim, 7),
            (Config { head_dim: 0, ..c }, ConfigField::HeadDim, 0),
        ] {
            assert_eq!(bad.validate(), Err(Error::BadConfig { what, value }));
        }
        // an odd head_dim is fine with learned positions (nothing is rotated)
        assert_eq!(Config { head_dim: 7, positions: Positions::Learned, ..c }.validate(), Ok(()));
        let nan = Config { positions: Positions::Rope { theta: f32::NAN }, ..c };
        assert_eq!(nan.validate(), Err(Error::BadConfig { what: ConfigField::RopeTheta, value: f32::NAN.to_bits() as u64 }));
    }
}
