//! `host-tools random`: a random-initialised GPT-2 checkpoint in the Hugging Face layout, for
//! benchmarks and for trying a shape before training one. Initialisation follows
//! `GPT2PreTrainedModel._init_weights`: N(0, 0.02) weights, N(0, 0.02/√(2·n_layer)) for the
//! residual projections (`c_proj`), zero biases, LayerNorm weight 1 and bias 0.

use std::path::Path;

use anyhow::{ensure, Result};
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use serde_json::json;

use crate::hf::write_checkpoint;

/// Shape of a random model.
#[derive(Debug, Clone, Copy)]
pub struct RandomShape {
    /// Blocks.
    pub n_layer: u32,
    /// Width C.
    pub n_embd: u32,
    /// Heads.
    pub n_head: u32,
    /// Vocabulary V.
    pub vocab_size: u32,
    /// Positions.
    pub n_ctx: u32,
}

impl RandomShape {
    /// GPT-2 small (124M): 12 layers, 768 wide, 12 heads, 50257 tokens, 1024 positions.
    pub const GPT2: RandomShape = RandomShape { n_layer: 12, n_embd: 768, n_head: 12, vocab_size: 50257, n_ctx: 1024 };
}

/// Writes `config.json` + `model.safetensors` for a random model of `shape` into `dir`.
pub fn write_random(dir: &Path, shape: RandomShape, seed: u64) -> Result<u64> {
    let RandomShape { n_layer, n_embd, n_head, vocab_size, n_ctx } = shape;
    ensure!(n_layer > 0 && n_embd > 0 && n_head > 0 && vocab_size > 0 && n_ctx > 0, "every dimension must be positive");
    ensure!(n_embd % n_head == 0, "n_embd ({n_embd}) must be a multiple of n_head ({n_head})");
    let (c, v, t) = (n_embd as usize, vocab_size as usize, n_ctx as usize);
    let inner = 4 * c;
    let eos = vocab_size - 1;
    let config = json!({
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "activation_function": "gelu_new",
        "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1,
        "bos_token_id": eos, "eos_token_id": eos,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-5,
        "n_ctx": n_ctx, "n_positions": n_ctx,
        "n_embd": n_embd, "n_head": n_head, "n_layer": n_layer, "n_inner": null,
        "vocab_size": vocab_size,
        "scale_attn_weights": true,
        "scale_attn_by_inverse_layer_idx": false,
        "reorder_and_upcast_attn": false,
        "tie_word_embeddings": true,
        "torch_dtype": "float32",
        "note": format!("random-initialised by host-tools random --seed {seed}")
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let std = 0.02f32;
    let proj_std = std / (2.0 * n_layer as f32).sqrt();
    let normal = |n: usize, s: f32, rng: &mut rand::rngs::StdRng| -> Vec<f32> {
        let d = Normal::new(0.0f32, s).expect("positive std");
        (0..n).map(|_| d.sample(rng)).collect()
    };
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    tensors.push(("transformer.wte.weight".into(), vec![v, c], normal(v * c, std, &mut rng)));
    tensors.push(("transformer.wpe.weight".into(), vec![t, c], normal(t * c, std, &mut rng)));
    for l in 0..n_layer {
        let p = format!("transformer.h.{l}.");
        tensors.push((format!("{p}ln_1.weight"), vec![c], vec![1.0; c]));
        tensors.push((format!("{p}ln_1.bias"), vec![c], vec![0.0; c]));
        tensors.push((format!("{p}attn.c_attn.weight"), vec![c, 3 * c], normal(3 * c * c, std, &mut rng)));
        tensors.push((format!("{p}attn.c_attn.bias"), vec![3 * c], vec![0.0; 3 * c]));
        tensors.push((format!("{p}attn.c_proj.weight"), vec![c, c], normal(c * c, proj_std, &mut rng)));
        tensors.push((format!("{p}attn.c_proj.bias"), vec![c], vec![0.0; c]));
        tensors.push((format!("{p}ln_2.weight"), vec![c], vec![1.0; c]));
        tensors.push((format!("{p}ln_2.bias"), vec![c], vec![0.0; c]));
        tensors.push((format!("{p}mlp.c_fc.weight"), vec![c, inner], normal(c * inner, std, &mut rng)));
        tensors.push((format!("{p}mlp.c_fc.bias"), vec![inner], vec![0.0; inner]));
        tensors.push((format!("{p}mlp.c_proj.weight"), vec![inner, c], normal(inner * c, proj_std, &mut rng)));
        tensors.push((format!("{p}mlp.c_proj.bias"), vec![c], vec![0.0; c]));
    }
    tensors.push(("transformer.ln_f.weight".into(), vec![c], vec![1.0; c]));
    tensors.push(("transformer.ln_f.bias".into(), vec![c], vec![0.0; c]));
    let params: u64 = tensors.iter().map(|(_, _, d)| d.len() as u64).sum();
    write_checkpoint(dir, &config, &tensors)?;
    Ok(params)
}
