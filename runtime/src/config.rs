//! The model configuration: the numbers that fix every shape (mirrors Hugging Face `GPT2Config`).

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

/// Shapes and hyper-parameters of a GPT-2 model, stored in the blob header.
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
        Ok(())
    }
}
