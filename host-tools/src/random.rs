//! `host-tools random`: a random-initialised GPT-2, GPT-Neo or Llama checkpoint in the Hugging
//! Face layout (`GPT2LMHeadModel` / `GPTNeoForCausalLM` / `LlamaForCausalLM.from_pretrained`
//! load it), for benchmarks, memory plans, parity checks and trying a shape before training one.
//!
//! Initialisation follows transformers' `_init_weights`: N(0, 0.02) weights, zero biases,
//! LayerNorm / RMSNorm weight 1 and bias 0; GPT-2 also scales its residual projections
//! (`c_proj`) to N(0, 0.02/√(2·n_layer)), GPT-Neo and Llama do not.

use std::path::Path;

use anyhow::{ensure, Result};
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use runtime::config::{Arch, LayerMask};
use serde_json::{json, Value};

use crate::hf::write_checkpoint;

/// Shape of a random model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RandomShape {
    /// Checkpoint family (and so key layout and `config.json` fields).
    pub arch: Arch,
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
    /// MLP width (None: 4·C, written as null).
    pub n_inner: Option<u32>,
    /// GPT-Neo: `window_size` of the local layers.
    pub window: u32,
    /// GPT-Neo: the local layers (the others are global).
    pub local: LayerMask,
    /// Llama: key/value heads (`num_key_value_heads`; 0 = `n_head`).
    pub n_kv_head: u32,
    /// Llama: `head_dim` (0 = C / H, written as absent).
    pub head_dim: u32,
    /// Llama: `tie_word_embeddings` (GPT-2 and GPT-Neo are always tied).
    pub tied: bool,
}

/// Layers 1, 3, 5, … of `n`: GPT-Neo's `[[["global", "local"], n / 2]]`.
pub const fn alternating(n: u32) -> LayerMask {
    let mut m = LayerMask::NONE;
    let mut l = 1;
    while l < n as usize {
        m = m.with(l);
        l += 2;
    }
    m
}

impl RandomShape {
    /// GPT-2 small (124M): 12 layers, 768 wide, 12 heads, 50257 tokens, 1024 positions.
    pub const GPT2: RandomShape = RandomShape::gpt2(12, 768, 12, 50257, 1024);
    /// Shaped like TinyStories-1M (`roneneldan/TinyStories-1M`): GPT-Neo, 8 layers, 64 wide,
    /// 16 heads (head_dim 4), alternating global/local with a window of 256, 50257 tokens,
    /// 2048 positions, tied head.
    pub const TINYSTORIES_1M: RandomShape = RandomShape::gpt_neo(8, 64, 16, 50257, 2048, 256);
    /// Shaped like TinyStories-3M and its fine-tune TinyTalk: as TinyStories-1M, 128 wide.
    pub const TINYSTORIES_3M: RandomShape = RandomShape::gpt_neo(8, 128, 16, 50257, 2048, 256);
    /// A small Llama for trying the family: 4 layers, 64 wide, 8 heads on 2 key/value heads
    /// (grouped-query), MLP 176, 512 tokens, 256 positions, untied head.
    pub const LLAMA_TINY: RandomShape = RandomShape { tied: false, ..RandomShape::llama(4, 64, 8, 2, 176, 512, 256) };
    /// Shaped like llama2.c's stories260K: 5 layers, 64 wide, 8 heads on 4 key/value heads, MLP
    /// 172, 512 tokens, 512 positions, tied head.
    pub const STORIES_260K: RandomShape = RandomShape::llama(5, 64, 8, 4, 172, 512, 512);
    /// Shaped like llama2.c's stories15M: 6 layers, 288 wide, 6 heads, MLP 768, 32000 tokens,
    /// 256 positions, tied head.
    pub const STORIES_15M: RandomShape = RandomShape::llama(6, 288, 6, 6, 768, 32000, 256);
    /// Shaped like llama2.c's stories42M: 8 layers, 512 wide, 8 heads, MLP 1376, 32000 tokens,
    /// 1024 positions, tied head.
    pub const STORIES_42M: RandomShape = RandomShape::llama(8, 512, 8, 8, 1376, 32000, 1024);

    /// A GPT-2 shape (MLP 4·C).
    pub const fn gpt2(n_layer: u32, n_embd: u32, n_head: u32, vocab_size: u32, n_ctx: u32) -> Self {
        RandomShape { arch: Arch::Gpt2, n_layer, n_embd, n_head, vocab_size, n_ctx, n_inner: None, window: 0, local: LayerMask::NONE, n_kv_head: 0, head_dim: 0, tied: true }
    }

    /// A GPT-Neo shape with alternating global/local layers (MLP 4·C).
    pub const fn gpt_neo(n_layer: u32, n_embd: u32, n_head: u32, vocab_size: u32, n_ctx: u32, window: u32) -> Self {
        RandomShape { arch: Arch::GptNeo, window, local: alternating(n_layer), ..Self::gpt2(n_layer, n_embd, n_head, vocab_size, n_ctx) }
    }

    /// A Llama shape with a tied head (as llama2.c's models).
    pub const fn llama(n_layer: u32, n_embd: u32, n_head: u32, n_kv_head: u32, n_inner: u32, vocab_size: u32, n_ctx: u32) -> Self {
        RandomShape { arch: Arch::Llama, n_inner: Some(n_inner), n_kv_head, ..Self::gpt2(n_layer, n_embd, n_head, vocab_size, n_ctx) }
    }

    /// A preset by name (see [`RandomShape::PRESETS`]).
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "gpt2" => Some(Self::GPT2),
            "tinystories-1m" => Some(Self::TINYSTORIES_1M),
            "tinystories-3m" | "tinytalk" => Some(Self::TINYSTORIES_3M),
            "llama-tiny" => Some(Self::LLAMA_TINY),
            "stories260k" => Some(Self::STORIES_260K),
            "stories15m" => Some(Self::STORIES_15M),
            "stories42m" => Some(Self::STORIES_42M),
            _ => None,
        }
    }

    /// The preset names.
    pub const PRESETS: [&'static str; 8] = ["gpt2", "tinystories-1m", "tinystories-3m", "tinytalk", "llama-tiny", "stories260k", "stories15m", "stories42m"];

    /// The MLP width: `n_inner`, else 4·C (GPT-2, GPT-Neo) or the multiple of 32 at or above
    /// 8·C/3 (Llama's 2/3 of 4·C, as llama2.c rounds it).
    pub const fn inner(&self) -> u32 {
        match (self.n_inner, self.arch) {
            (Some(i), _) => i,
            (None, Arch::Llama) => (8 * self.n_embd / 3).div_ceil(32) * 32,
            (None, _) => 4 * self.n_embd,
        }
    }
}

/// GPT-Neo's `attention_types` for a per-layer list: `[[pattern, repeats]]` when one pattern
/// repeats over all layers (as transformers' configs say it), else one entry per run.
fn attention_types(layers: &[&str]) -> Value {
    for len in 1..=layers.len() {
        if layers.len().is_multiple_of(len) && layers.chunks(len).all(|c| c == &layers[..len]) {
            return json!([[layers[..len].to_vec(), layers.len() / len]]);
        }
    }
    json!([])
}

/// Writes `config.json` + `model.safetensors` for a random model of `shape` into `dir`, and a
/// tokenizer of its vocabulary size beside them (GPT-2 and GPT-Neo: the
/// [`ByteLevelTokenizer`] for it, GPT-2's own at 50,257 tokens; Llama: a SentencePiece BPE
/// trained on [`TOKENIZER_TEXT`]), so that `convert` and `--keep-vocab` work on the folder as
/// written; returns the number of parameters.
pub fn write_random(dir: &Path, shape: RandomShape, seed: u64) -> Result<u64> {
    let RandomShape { arch, n_layer, n_embd, n_head, vocab_size, n_ctx, n_inner, window, local, n_kv_head, head_dim, tied } = shape;
    ensure!(n_layer > 0 && n_embd > 0 && n_head > 0 && vocab_size > 0 && n_ctx > 0, "every dimension must be positive");
    ensure!(head_dim > 0 || n_embd % n_head == 0, "n_embd ({n_embd}) must be a multiple of n_head ({n_head})");
    ensure!(n_layer as usize <= LayerMask::CAPACITY, "at most {} layers", LayerMask::CAPACITY);
    ensure!(n_inner != Some(0), "n_inner must be positive");
    if arch == Arch::Llama {
        return write_random_llama(dir, shape, seed);
    }
    ensure!(n_kv_head == 0 || n_kv_head == n_head, "--n-kv-head is a Llama setting (GPT-2 and GPT-Neo have n_head key/value heads)");
    ensure!(head_dim == 0 || head_dim * n_head == n_embd, "--head-dim is a Llama setting (GPT-2 and GPT-Neo have n_embd / n_head)");
    ensure!(tied, "GPT-2 and GPT-Neo checkpoints are written with a tied head");
    let (c, v, t) = (n_embd as usize, vocab_size as usize, n_ctx as usize);
    let inner = shape.inner() as usize;
    let eos = vocab_size - 1;
    let note = format!("random-initialised by host-tools random --seed {seed}");
    let config = match arch {
        Arch::Gpt2 => json!({
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "activation_function": "gelu_new",
            "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1,
            "bos_token_id": eos, "eos_token_id": eos,
            "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-5,
            "n_ctx": n_ctx, "n_positions": n_ctx,
            "n_embd": n_embd, "n_head": n_head, "n_layer": n_layer, "n_inner": n_inner,
            "vocab_size": vocab_size,
            "scale_attn_weights": true,
            "scale_attn_by_inverse_layer_idx": false,
            "reorder_and_upcast_attn": false,
            "tie_word_embeddings": true,
            "torch_dtype": "float32",
            "note": note
        }),
        Arch::GptNeo => {
            ensure!(local.last().is_none_or(|l| l < n_layer as usize), "a local layer beyond n_layer {n_layer}");
            ensure!(local.count() == 0 || window > 0, "local layers need a window of at least 1");
            let layers: Vec<&str> = (0..n_layer as usize).map(|l| if local.contains(l) { "local" } else { "global" }).collect();
            json!({
                "activation_function": "gelu_new",
                "architectures": ["GPTNeoForCausalLM"],
                "attention_dropout": 0.0,
                "attention_layers": layers,
                "attention_types": attention_types(&layers),
                "bos_token_id": eos,
                "classifier_dropout": 0.1,
                "embed_dropout": 0.0,
                "eos_token_id": eos,
                "hidden_size": n_embd,
                "initializer_range": 0.02,
                "intermediate_size": n_inner,
                "layer_norm_epsilon": 1e-5,
                "max_position_embeddings": n_ctx,
                "model_type": "gpt_neo",
                "num_heads": n_head,
                "num_layers": n_layer,
                "resid_dropout": 0.0,
                "tie_word_embeddings": true,
                "torch_dtype": "float32",
                "use_cache": true,
                "vocab_size": vocab_size,
                "window_size": if window == 0 { 256 } else { window },
                "note": note
            })
        }
        Arch::Llama => unreachable!("written by write_random_llama"),
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let std = 0.02f32;
    let proj_std = match arch {
        Arch::Gpt2 => std / (2.0 * n_layer as f32).sqrt(),
        _ => std,
    };
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
        match arch {
            Arch::Gpt2 => {
                // Conv1D [in, out]
                tensors.push((format!("{p}attn.c_attn.weight"), vec![c, 3 * c], normal(3 * c * c, std, &mut rng)));
                tensors.push((format!("{p}attn.c_attn.bias"), vec![3 * c], vec![0.0; 3 * c]));
                tensors.push((format!("{p}attn.c_proj.weight"), vec![c, c], normal(c * c, proj_std, &mut rng)));
                tensors.push((format!("{p}attn.c_proj.bias"), vec![c], vec![0.0; c]));
            }
            _ => {
                // nn.Linear [out, in]; q/k/v without bias
                for proj in ["k_proj", "v_proj", "q_proj"] {
                    tensors.push((format!("{p}attn.attention.{proj}.weight"), vec![c, c], normal(c * c, std, &mut rng)));
                }
                tensors.push((format!("{p}attn.attention.out_proj.weight"), vec![c, c], normal(c * c, proj_std, &mut rng)));
                tensors.push((format!("{p}attn.attention.out_proj.bias"), vec![c], vec![0.0; c]));
            }
        }
        tensors.push((format!("{p}ln_2.weight"), vec![c], vec![1.0; c]));
        tensors.push((format!("{p}ln_2.bias"), vec![c], vec![0.0; c]));
        let (fc, proj) = match arch {
            Arch::Gpt2 => (vec![c, inner], vec![inner, c]),
            _ => (vec![inner, c], vec![c, inner]),
        };
        tensors.push((format!("{p}mlp.c_fc.weight"), fc, normal(c * inner, std, &mut rng)));
        tensors.push((format!("{p}mlp.c_fc.bias"), vec![inner], vec![0.0; inner]));
        tensors.push((format!("{p}mlp.c_proj.weight"), proj, normal(inner * c, proj_std, &mut rng)));
        tensors.push((format!("{p}mlp.c_proj.bias"), vec![c], vec![0.0; c]));
    }
    tensors.push(("transformer.ln_f.weight".into(), vec![c], vec![1.0; c]));
    tensors.push(("transformer.ln_f.bias".into(), vec![c], vec![0.0; c]));
    let params: u64 = tensors.iter().map(|(_, _, d)| d.len() as u64).sum();
    write_checkpoint(dir, &config, &tensors)?;
    write_byte_level_tokenizer(dir, vocab_size)?;
    Ok(params)
}

/// GPT-2's byte-level BPE tables (`tests/fixtures/gpt2-tokenizer`: 50,257 tokens, 50,000
/// merges, 1.5 MB), compiled into `host-tools` so that `random` writes them wherever the binary
/// runs from (an installed binary has no repository beside it to look them up in).
const GPT2_VOCAB_JSON: &str = include_str!("../../tests/fixtures/gpt2-tokenizer/vocab.json");
const GPT2_MERGES_TXT: &str = include_str!("../../tests/fixtures/gpt2-tokenizer/merges.txt");
/// The shipped default model's 3,072-token byte-level BPE (`models/default`), 63 KB.
const DEFAULT_VOCAB_JSON: &str = include_str!("../../models/default/vocab.json");
const DEFAULT_MERGES_TXT: &str = include_str!("../../models/default/merges.txt");

/// The byte-level BPE tokenizer [`write_random`] puts beside a GPT-2 or GPT-Neo checkpoint of
/// `vocab_size` tokens (whose config says end-of-text is `vocab_size - 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteLevelTokenizer {
    /// 50,257: GPT-2's own (TinyStories, TinyTalk and GPT-2 use it).
    Gpt2,
    /// 3,072: the shipped default model's (`models/default`).
    DefaultModel,
    /// 257 to 50,256: GPT-2's first `vocab_size - 1` tokens (the 256 bytes and the first
    /// `vocab_size - 257` merges, each of which makes token 256 + its rank) and
    /// `<|endoftext|>` as id `vocab_size - 1`; a valid BPE, since no kept merge makes a
    /// dropped token.
    Gpt2Prefix(u32),
    /// Fewer than 257 or more than 50,257 tokens: no tokenizer (a byte-level BPE needs the 256
    /// byte tokens and an end-of-text token; none here has more than GPT-2's).
    None,
}

impl ByteLevelTokenizer {
    /// The tokenizer for a checkpoint of `vocab_size` tokens.
    pub fn for_vocab(vocab_size: u32) -> Self {
        match vocab_size {
            50257 => Self::Gpt2,
            3072 => Self::DefaultModel,
            257..50257 => Self::Gpt2Prefix(vocab_size),
            _ => Self::None,
        }
    }

    /// One line for `host-tools random` to print.
    pub fn describe(self) -> String {
        match self {
            Self::Gpt2 => "vocab.json + merges.txt: GPT-2's byte-level BPE (50257 tokens)".into(),
            Self::DefaultModel => "vocab.json + merges.txt: the default model's byte-level BPE (models/default, 3072 tokens)".into(),
            Self::Gpt2Prefix(v) => format!("vocab.json + merges.txt: GPT-2's first {} tokens and <|endoftext|> as {}", v - 1, v - 1),
            Self::None => "none".into(),
        }
    }
}

/// Writes the [`ByteLevelTokenizer`] for `vocab_size` into `dir` (`vocab.json`, `merges.txt`),
/// or, when there is none, `NO_TOKENIZER.txt` saying why (and removes a tokenizer an earlier run
/// left there, which would not match).
pub fn write_byte_level_tokenizer(dir: &Path, vocab_size: u32) -> Result<ByteLevelTokenizer> {
    let choice = ByteLevelTokenizer::for_vocab(vocab_size);
    let (vocab, merges) = match choice {
        ByteLevelTokenizer::Gpt2 => (GPT2_VOCAB_JSON.to_string(), GPT2_MERGES_TXT.to_string()),
        ByteLevelTokenizer::DefaultModel => (DEFAULT_VOCAB_JSON.to_string(), DEFAULT_MERGES_TXT.to_string()),
        ByteLevelTokenizer::Gpt2Prefix(v) => gpt2_prefix(v)?,
        ByteLevelTokenizer::None => {
            for stale in ["vocab.json", "merges.txt"] {
                let _ = std::fs::remove_file(dir.join(stale));
            }
            std::fs::write(
                dir.join("NO_TOKENIZER.txt"),
                format!("host-tools random wrote no tokenizer: a byte-level BPE needs the 256 byte tokens and an end-of-text token (at least 257), and GPT-2's has 50257; this checkpoint has {vocab_size}. Pass token ids (host --ids), or copy a tokenizer of {vocab_size} tokens in.\n"),
            )?;
            return Ok(choice);
        }
    };
    std::fs::write(dir.join("vocab.json"), vocab)?;
    std::fs::write(dir.join("merges.txt"), merges)?;
    let _ = std::fs::remove_file(dir.join("NO_TOKENIZER.txt"));
    Ok(choice)
}

/// `vocab.json` and `merges.txt` of GPT-2's first `v - 1` tokens plus `<|endoftext|>` as
/// `v - 1` (see [`ByteLevelTokenizer::Gpt2Prefix`]).
fn gpt2_prefix(v: u32) -> Result<(String, String)> {
    ensure!((257..50257).contains(&v), "a prefix of GPT-2's vocabulary has 257 to 50256 tokens, not {v}");
    let full = crate::tokenizer_pack::parse_vocab_json(GPT2_VOCAB_JSON)?;
    let mut kept: Vec<(&str, u32)> = full.iter().filter(|&(_, &id)| id < v - 1).map(|(t, &id)| (t.as_str(), id)).collect();
    kept.sort_by_key(|&(_, id)| id);
    kept.push(("<|endoftext|>", v - 1));
    let mut vocab = serde_json::Map::new();
    for (token, id) in kept {
        vocab.insert(token.to_string(), json!(id));
    }
    let mut lines = GPT2_MERGES_TXT.lines();
    let mut merges = String::new();
    if let Some(version) = lines.next() {
        merges.push_str(version);
        merges.push('\n');
    }
    for line in lines.filter(|l| !l.is_empty()).take(v as usize - 257) {
        merges.push_str(line);
        merges.push('\n');
    }
    Ok((serde_json::to_string(&Value::Object(vocab))?, merges))
}

/// The repository's own text the Llama presets' tokenizers are trained on: the story text
/// (`models/stories/stories.txt`) and the default model's held-out Shakespeare and Milton
/// (`models/default/val.txt`), public domain.
pub const TOKENIZER_TEXT: [&str; 2] = [include_str!("../../models/stories/stories.txt"), include_str!("../../models/default/val.txt")];

/// [`write_random`] for Llama: `LlamaConfig` fields as transformers 5 writes them (RoPE θ in
/// `rope_parameters` and at the top level), `model.` keys, q|k|v with `n_kv_head` key/value
/// heads, a gated MLP, RMSNorm weights 1, and `lm_head.weight` only when untied; beside it a
/// SentencePiece BPE tokenizer of the model's vocabulary size (`tokenizer.model`,
/// `tokenizer_config.json`: byte fallback, BOS 1, EOS 2, as Llama 2's), trained on
/// [`TOKENIZER_TEXT`] by [`crate::sp_train`]: that text gives about 16,400 pieces by training,
/// and the trainer completes larger vocabularies (stories15m's and stories42m's 32,000) with
/// pieces made of two trained ones. Should training fail all the same, no tokenizer is written
/// and `NO_TOKENIZER.txt` in the folder says why.
fn write_random_llama(dir: &Path, shape: RandomShape, seed: u64) -> Result<u64> {
    let params = write_random_llama_weights(dir, shape, seed)?;
    let text = TOKENIZER_TEXT.join("\n");
    if let Err(e) = crate::sp_train::write_tokenizer_dir(dir, &text, shape.vocab_size as usize) {
        // the weights stand without it: pass token ids, or copy a tokenizer in
        std::fs::write(dir.join("NO_TOKENIZER.txt"), format!("host-tools random wrote no tokenizer: {e:#}\n"))?;
    }
    Ok(params)
}

fn write_random_llama_weights(dir: &Path, shape: RandomShape, seed: u64) -> Result<u64> {
    let RandomShape { n_layer, n_embd, n_head, vocab_size, n_ctx, n_kv_head, head_dim, tied, .. } = shape;
    let n_kv_head = if n_kv_head == 0 { n_head } else { n_kv_head };
    ensure!(n_head % n_kv_head == 0, "n_kv_head ({n_kv_head}) must divide n_head ({n_head})");
    let d = if head_dim == 0 { n_embd / n_head } else { head_dim } as usize;
    ensure!(d.is_multiple_of(2), "head_dim ({d}) must be even for RoPE");
    let (c, v, inner) = (n_embd as usize, vocab_size as usize, shape.inner() as usize);
    let (cq, ckv) = (n_head as usize * d, n_kv_head as usize * d);
    let mut config = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": false,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": n_embd,
        "initializer_range": 0.02,
        "intermediate_size": inner,
        "max_position_embeddings": n_ctx,
        "mlp_bias": false,
        "num_attention_heads": n_head,
        "num_hidden_layers": n_layer,
        "num_key_value_heads": n_kv_head,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "rope_theta": 10000.0,
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
        "use_cache": true,
        "vocab_size": vocab_size,
        "note": format!("random-initialised by host-tools random --seed {seed}")
    });
    if head_dim != 0 {
        config["head_dim"] = json!(head_dim);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let std = 0.02f32;
    let normal = |n: usize, rng: &mut rand::rngs::StdRng| -> Vec<f32> {
        let dist = Normal::new(0.0f32, std).expect("positive std");
        (0..n).map(|_| dist.sample(rng)).collect()
    };
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    tensors.push(("model.embed_tokens.weight".into(), vec![v, c], normal(v * c, &mut rng)));
    for l in 0..n_layer {
        let p = format!("model.layers.{l}.");
        tensors.push((format!("{p}input_layernorm.weight"), vec![c], vec![1.0; c]));
        for (name, rows) in [("q_proj", cq), ("k_proj", ckv), ("v_proj", ckv)] {
            tensors.push((format!("{p}self_attn.{name}.weight"), vec![rows, c], normal(rows * c, &mut rng)));
        }
        tensors.push((format!("{p}self_attn.o_proj.weight"), vec![c, cq], normal(c * cq, &mut rng)));
        tensors.push((format!("{p}post_attention_layernorm.weight"), vec![c], vec![1.0; c]));
        tensors.push((format!("{p}mlp.gate_proj.weight"), vec![inner, c], normal(inner * c, &mut rng)));
        tensors.push((format!("{p}mlp.up_proj.weight"), vec![inner, c], normal(inner * c, &mut rng)));
        tensors.push((format!("{p}mlp.down_proj.weight"), vec![c, inner], normal(c * inner, &mut rng)));
    }
    tensors.push(("model.norm.weight".into(), vec![c], vec![1.0; c]));
    if !tied {
        tensors.push(("lm_head.weight".into(), vec![v, c], normal(v * c, &mut rng)));
    }
    let params: u64 = tensors.iter().map(|(_, _, d)| d.len() as u64).sum();
    write_checkpoint(dir, &config, &tensors)?;
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_types_are_written_as_transformers_writes_them() {
        assert_eq!(attention_types(&["global", "local", "global", "local"]), json!([[["global", "local"], 2]]));
        assert_eq!(attention_types(&["local", "local", "local"]), json!([[["local"], 3]]));
        assert_eq!(attention_types(&["global", "local", "local"]), json!([[["global", "local", "local"], 1]]));
        assert_eq!(alternating(8), LayerMask::NONE.with(1).with(3).with(5).with(7));
    }

    /// Every GPT-2 / GPT-Neo vocabulary size gets a tokenizer that packs, whose end-of-text is
    /// the config's (`vocab_size - 1`), and that encodes and decodes text byte-exact; GPT-2's
    /// and the default model's are the files themselves, a prefix encodes as GPT-2 does with
    /// the merges it keeps.
    #[test]
    fn byte_level_tokenizers_pack_and_round_trip() {
        let base = std::env::temp_dir().join(format!("random-tokenizer-{}", std::process::id()));
        let text = "Once upon a time, there was a little dog named Max. ROMEO: O, she doth teach the torches!";
        for v in [257, 300, 1000, 3072, 50257] {
            let dir = base.join(v.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            let choice = write_byte_level_tokenizer(&dir, v).unwrap();
            let section = crate::tokenizer_pack::pack_from_dir(&dir).unwrap().expect("a tokenizer");
            let tok = runtime::tokenizer::Tokenizer::from_bytes(&section).unwrap();
            assert!(tok.as_byte_level().is_some() && tok.vocab_size() == v as usize, "{choice:?}");
            assert_eq!(tok.token_bytes(v - 1), Some(&b"<|endoftext|>"[..]), "{choice:?}");
            let mut ids = vec![0u32; text.len() + 1];
            let n = tok.encode(text, &mut ids).unwrap();
            assert!(ids[..n].iter().all(|&id| id < v - 1));
            let mut out = vec![0u8; 4 * text.len()];
            let m = tok.decode(&ids[..n], &mut out).unwrap();
            assert_eq!(&out[..m], text.as_bytes(), "{choice:?}");
            if v == 257 {
                assert_eq!(n, text.len(), "no merges: one token per byte");
            }
        }
        assert_eq!(std::fs::read(base.join("50257/vocab.json")).unwrap(), GPT2_VOCAB_JSON.as_bytes());
        assert_eq!(std::fs::read(base.join("3072/merges.txt")).unwrap(), DEFAULT_MERGES_TXT.as_bytes());
        // below 257 (and above GPT-2's 50257): none, a note, and a stale tokenizer removed
        let dir = base.join("300");
        assert_eq!(write_byte_level_tokenizer(&dir, 256).unwrap(), ByteLevelTokenizer::None);
        assert!(!dir.join("vocab.json").exists() && dir.join("NO_TOKENIZER.txt").is_file());
        assert_eq!(ByteLevelTokenizer::for_vocab(50258), ByteLevelTokenizer::None);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
