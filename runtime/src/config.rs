//! The model configuration: the numbers that fix every shape (Hugging Face `GPT2Config`, and
//! `GPTNeoConfig` in the same words). The two families differ only in data here: which layers
//! attend to a window of recent positions, whether q/k/v have biases, and the attention scale.

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
}

/// The checkpoint family a blob was converted from. For display only: the forward pass never
/// looks at it (every difference between the families is a field of [`Config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arch {
    /// `GPT2LMHeadModel` (`model_type: "gpt2"`).
    Gpt2,
    /// `GPTNeoForCausalLM` (`model_type: "gpt_neo"`): TinyStories, TinyTalk, GPT-Neo 125M…2.7B.
    GptNeo,
}

impl Arch {
    /// The `model_type` of `config.json` (`gpt2`, `gpt_neo`).
    pub const fn name(self) -> &'static str {
        match self {
            Arch::Gpt2 => "gpt2",
            Arch::GptNeo => "gpt_neo",
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

/// Shapes and hyper-parameters of a GPT-2 or GPT-Neo model, stored in the blob header.
///
/// Shape legend used across the crate: C = `n_embd`, H = `n_head`, D = C / H (head_dim),
/// I = `n_inner`, V = `vocab_size`, T = tokens.
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
    /// H: attention heads per block (C must be a multiple of H).
    pub n_head: u32,
    /// I: width of the MLP hidden layer (4·C when `config.json` says null).
    pub n_inner: u32,
    /// ε added to the variance in every LayerNorm.
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
    /// D = C / H, the width of one attention head.
    pub const fn head_dim(&self) -> usize {
        match self.n_embd.checked_div(self.n_head) {
            Some(d) => d as usize,
            None => 0,
        }
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
        if self.n_head == 0 || !self.n_embd.is_multiple_of(self.n_head) {
            return bad(ConfigField::NHead, self.n_head);
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
}
