//! Reading (and, for `random`, writing) Hugging Face GPT-2, GPT-Neo and Llama checkpoints:
//! `config.json` plus `model.safetensors` (or sharded `model.safetensors.index.json`).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use memmap2::Mmap;
use runtime::config::{Arch, LayerMask, Norm, Positions};
use runtime::{Activation, Config};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

/// The `model_type`s `convert` reads.
pub const SUPPORTED_MODEL_TYPES: &str = "gpt2 (GPT2LMHeadModel), gpt_neo (GPTNeoForCausalLM), llama (LlamaForCausalLM)";

/// `config.json` turned into the runtime's [`Config`], plus the fields the converter needs.
#[derive(Debug, Clone)]
pub struct HfConfig {
    /// The runtime config.
    pub config: Config,
    /// `tie_word_embeddings` (default true).
    pub tie_word_embeddings: bool,
    /// Notes about defaults taken or values adjusted.
    pub notes: Vec<String>,
}

fn get_u32(j: &Value, keys: &[&str]) -> Option<u32> {
    keys.iter().find_map(|k| j.get(*k).and_then(Value::as_u64)).map(|v| v as u32)
}

/// Parses `dir/config.json` (a GPT-2, GPT-Neo or Llama config).
pub fn read_config(dir: &Path) -> Result<HfConfig> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let j: Value = serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
    let p = path.display().to_string();
    let mut notes = Vec::new();
    let arch = match j.get("model_type").and_then(Value::as_str) {
        Some("gpt2") => Arch::Gpt2,
        Some("gpt_neo") => Arch::GptNeo,
        Some("llama") => return read_llama_config(&j, &p, notes),
        Some(other) => {
            let what = j.get("architectures").and_then(|a| a.get(0)).and_then(Value::as_str).map_or(String::new(), |a| format!(" ({a})"));
            bail!("{p}: model_type {other:?}{what} is not supported; supported: {SUPPORTED_MODEL_TYPES}")
        }
        None if j.get("attention_types").is_some() || j.get("attention_layers").is_some() => {
            notes.push("config.json has no model_type; read as gpt_neo (it has attention_types)".into());
            Arch::GptNeo
        }
        None => Arch::Gpt2,
    };
    let need = |keys: &[&str]| get_u32(&j, keys).with_context(|| format!("{p}: missing integer field {}", keys[0]));
    let vocab_size = need(&["vocab_size"])?;
    let (n_ctx, n_embd, n_layer, n_head, inner_key) = match arch {
        Arch::Gpt2 => (
            need(&["n_positions", "n_ctx", "max_position_embeddings"])?,
            need(&["n_embd", "hidden_size"])?,
            need(&["n_layer", "num_hidden_layers"])?,
            need(&["n_head", "num_attention_heads"])?,
            "n_inner",
        ),
        _ => (
            need(&["max_position_embeddings"])?,
            need(&["hidden_size"])?,
            need(&["num_layers", "num_hidden_layers"])?,
            need(&["num_heads", "num_attention_heads"])?,
            "intermediate_size",
        ),
    };
    let (embd_key, head_key) = match arch {
        Arch::Gpt2 => ("n_embd", "n_head"),
        _ => ("hidden_size", "num_heads"),
    };
    if n_head == 0 || n_embd % n_head != 0 {
        bail!("{p}: {head_key} {n_head} does not divide {embd_key} {n_embd}");
    }
    let n_inner = match j.get(inner_key) {
        None | Some(Value::Null) => 4 * n_embd,
        Some(v) => v.as_u64().filter(|&n| n > 0).with_context(|| format!("{p}: {inner_key} must be a positive integer or null, found {v}"))? as u32,
    };
    let eps = j.get("layer_norm_epsilon").and_then(Value::as_f64).unwrap_or(1e-5) as f32;
    let act_name = j.get("activation_function").and_then(Value::as_str).unwrap_or("gelu_new");
    let activation = match act_name {
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
        "gelu" | "gelu_python" => Activation::GeluErf,
        "relu" => Activation::Relu,
        other => bail!("{p}: activation_function {other:?} is not supported (gelu_new, gelu_pytorch_tanh, gelu, relu)"),
    };
    let flag = |k: &str, default: bool| j.get(k).and_then(Value::as_bool).unwrap_or(default);
    // GPT-Neo's eos_token_id may be a list; the first is the one generation stops at
    let last = vocab_size.saturating_sub(1);
    let bos_token_id = token_id(&j, "bos_token_id", last, vocab_size, &mut notes);
    let eos_token_id = token_id(&j, "eos_token_id", last, vocab_size, &mut notes);
    let (local_layers, attn_window) = match arch {
        Arch::GptNeo => gpt_neo_attention(&j, &p, n_layer, &mut notes)?,
        _ => (LayerMask::NONE, 0),
    };
    let gpt2 = arch == Arch::Gpt2;
    let config = Config {
        n_inner,
        layer_norm_epsilon: eps,
        activation,
        // GPT-Neo does not scale attention scores (GPTNeoSelfAttention._attn: q·kᵀ, no 1/√D)
        scale_attn_weights: gpt2 && flag("scale_attn_weights", true),
        scale_attn_by_inverse_layer_idx: gpt2 && flag("scale_attn_by_inverse_layer_idx", false),
        bos_token_id,
        eos_token_id,
        arch,
        qkv_bias: gpt2,
        attn_window,
        local_layers,
        ..Config::gpt2(vocab_size, n_ctx, n_embd, n_layer, n_head)
    };
    config.validate().map_err(|e| anyhow::anyhow!("{p}: {e}"))?;
    if flag("reorder_and_upcast_attn", false) {
        notes.push("reorder_and_upcast_attn only changes fp16 training numerics; ignored".into());
    }
    Ok(HfConfig { config, tie_word_embeddings: flag("tie_word_embeddings", true), notes })
}

/// The special-token id `key` of `config.json` (the first of a list), `default` when absent or
/// null; an id outside the vocabulary falls back to `default` (or the last token) with a note.
fn token_id(j: &Value, key: &str, default: u32, vocab_size: u32, notes: &mut Vec<String>) -> u32 {
    let id = match j.get(key) {
        Some(Value::Array(a)) => {
            if a.len() > 1 {
                notes.push(format!("{key} lists {} ids; the runtime stops at the first", a.len()));
            }
            a.first().and_then(Value::as_u64)
        }
        Some(v) => v.as_u64(),
        None => None,
    };
    let fallback = if default < vocab_size { default } else { vocab_size.saturating_sub(1) };
    match id {
        Some(id) if id < vocab_size as u64 => id as u32,
        Some(id) => {
            notes.push(format!("{key} {id} is outside the vocabulary ({vocab_size}); using {fallback}"));
            fallback
        }
        None => fallback,
    }
}

/// A `LlamaForCausalLM` `config.json` (transformers' `LlamaConfig`, 4.x and 5.x field names):
/// RMSNorm, RoPE, a gated SiLU MLP, grouped-query attention. Every field that would change the
/// arithmetic and that the runtime does not implement stops the conversion with a one-line
/// error naming it: a RoPE scaling type other than the default (linear, dynamic, yarn, llama3,
/// longrope), a partial rotary factor, an activation other than SiLU, a `num_key_value_heads`
/// that does not divide `num_attention_heads`.
fn read_llama_config(j: &Value, p: &str, mut notes: Vec<String>) -> Result<HfConfig> {
    let need = |key: &str| get_u32(j, &[key]).with_context(|| format!("{p}: missing integer field {key}"));
    let vocab_size = need("vocab_size")?;
    let n_embd = need("hidden_size")?;
    let n_inner = need("intermediate_size")?;
    let n_layer = need("num_hidden_layers")?;
    let n_head = need("num_attention_heads")?;
    let n_ctx = get_u32(j, &["max_position_embeddings"]).unwrap_or(2048);
    if n_head == 0 {
        bail!("{p}: num_attention_heads is 0");
    }
    let n_kv_head = match j.get("num_key_value_heads") {
        None | Some(Value::Null) => n_head,
        Some(v) => v.as_u64().with_context(|| format!("{p}: num_key_value_heads must be an integer, found {v}"))? as u32,
    };
    if n_kv_head == 0 || n_head % n_kv_head != 0 {
        bail!("{p}: num_key_value_heads {n_kv_head} does not divide num_attention_heads {n_head} (grouped-query attention needs whole groups)");
    }
    let head_dim = match j.get("head_dim") {
        None | Some(Value::Null) => {
            if n_embd % n_head != 0 {
                bail!("{p}: num_attention_heads {n_head} does not divide hidden_size {n_embd} and there is no head_dim");
            }
            n_embd / n_head
        }
        Some(v) => v.as_u64().filter(|&d| d > 0).with_context(|| format!("{p}: head_dim must be a positive integer, found {v}"))? as u32,
    };
    match j.get("hidden_act").and_then(Value::as_str).unwrap_or("silu") {
        "silu" | "swish" => {}
        other => bail!("{p}: hidden_act {other:?} is not supported for llama (the runtime's gated MLP uses silu)"),
    }
    let eps = j.get("rms_norm_eps").and_then(Value::as_f64).unwrap_or(1e-6) as f32;
    let theta = rope_theta(j, p, &mut notes)?;
    if let Some(f) = j.get("partial_rotary_factor").and_then(Value::as_f64).filter(|&f| f != 1.0) {
        bail!("{p}: partial_rotary_factor {f} is not supported (RoPE on the whole head only)");
    }
    if j.get("pretraining_tp").and_then(Value::as_u64).is_some_and(|tp| tp > 1) {
        notes.push("pretraining_tp > 1 only splits transformers' products into slices; computed whole".into());
    }
    let flag = |k: &str| j.get(k).and_then(Value::as_bool).unwrap_or(false);
    let (attention_bias, mlp_bias) = (flag("attention_bias"), flag("mlp_bias"));
    let bos_token_id = token_id(j, "bos_token_id", 1, vocab_size, &mut notes);
    let eos_token_id = token_id(j, "eos_token_id", 2, vocab_size, &mut notes);
    let config = Config {
        layer_norm_epsilon: eps,
        positions: Positions::Rope { theta },
        head_dim,
        bos_token_id,
        eos_token_id,
        qkv_bias: attention_bias,
        attn_out_bias: attention_bias,
        mlp_bias,
        norm: Norm::RmsNorm,
        ..Config::llama(vocab_size, n_ctx, n_embd, n_layer, n_head, n_kv_head, n_inner)
    };
    config.validate().map_err(|e| anyhow::anyhow!("{p}: {e}"))?;
    // LlamaConfig's default: an untied head
    let tie_word_embeddings = j.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
    Ok(HfConfig { config, tie_word_embeddings, notes })
}

/// RoPE's θ: `rope_theta` at the top level (transformers 4.x) or in `rope_parameters`
/// (transformers 5); default 10000. `rope_scaling` / `rope_parameters` must be absent, null or
/// of the default type: any other type (linear, dynamic, yarn, llama3, longrope, …) is an error
/// that names it.
fn rope_theta(j: &Value, p: &str, notes: &mut Vec<String>) -> Result<f32> {
    for key in ["rope_scaling", "rope_parameters"] {
        let Some(v) = j.get(key).filter(|v| !v.is_null()) else { continue };
        let Some(obj) = v.as_object() else { bail!("{p}: {key} must be an object or null, found {v}") };
        let kind = obj.get("rope_type").or_else(|| obj.get("type")).and_then(Value::as_str).unwrap_or("default");
        if kind != "default" {
            bail!("{p}: {key} type {kind:?} is not supported (only the default RoPE; not linear, dynamic, yarn, llama3, longrope)");
        }
        // transformers 5 may also key per-layer-type parameters; a plain factor would scale
        if let Some(f) = obj.get("factor").and_then(Value::as_f64).filter(|&f| f != 1.0) {
            bail!("{p}: {key} has factor {f}; RoPE scaling is not supported");
        }
    }
    let top = j.get("rope_theta").and_then(Value::as_f64);
    let nested = j.get("rope_parameters").and_then(|r| r.get("rope_theta")).and_then(Value::as_f64);
    let theta = match (top, nested) {
        (Some(a), Some(b)) if a != b => bail!("{p}: rope_theta {a} and rope_parameters.rope_theta {b} disagree"),
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => {
            notes.push("config.json gives no rope_theta; taking LlamaConfig's default 10000".into());
            10000.0
        }
    };
    if !(theta.is_finite() && theta > 0.0) {
        bail!("{p}: rope_theta {theta} must be a positive number");
    }
    Ok(theta as f32)
}

/// GPT-Neo's per-layer attention: `attention_types` (`[[["global", "local"], n], …]`, expanded
/// as transformers' `expand_attention_types_params`) and/or `attention_layers` (the expanded
/// list; when both are given they must agree), and `window_size`. Returns the local layers and
/// the window (0 when no layer is local).
fn gpt_neo_attention(j: &Value, p: &str, n_layer: u32, notes: &mut Vec<String>) -> Result<(LayerMask, u32)> {
    let kind = |v: &Value, at: &str| -> Result<bool> {
        match v.as_str() {
            Some("global") => Ok(false),
            Some("local") => Ok(true),
            _ => bail!("{p}: {at} is {v}, an unknown attention type (supported: \"global\", \"local\")"),
        }
    };
    let from_types = match j.get("attention_types") {
        None | Some(Value::Null) => None,
        Some(types) => {
            let shape_err = || anyhow::anyhow!("{p}: attention_types must be a list of [[types…], count] pairs, like [[[\"global\", \"local\"], 4]]; found {types}");
            let mut layers = Vec::new();
            for (i, item) in types.as_array().ok_or_else(shape_err)?.iter().enumerate() {
                let (Some(kinds), Some(count)) = (item.get(0).and_then(Value::as_array), item.get(1).and_then(Value::as_u64)) else {
                    return Err(shape_err());
                };
                if item.as_array().map_or(0, Vec::len) != 2 {
                    return Err(shape_err());
                }
                let kinds = kinds.iter().enumerate().map(|(k, v)| kind(v, &format!("attention_types[{i}][0][{k}]"))).collect::<Result<Vec<bool>>>()?;
                if count > 1 << 16 {
                    bail!("{p}: attention_types[{i}] repeats {count} times (more layers than any model has)");
                }
                for _ in 0..count {
                    layers.extend(&kinds);
                }
            }
            Some(layers)
        }
    };
    let from_layers = match j.get("attention_layers") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(a.iter().enumerate().map(|(i, v)| kind(v, &format!("attention_layers[{i}]"))).collect::<Result<Vec<bool>>>()?),
        Some(v) => bail!("{p}: attention_layers must be a list of \"global\" / \"local\", found {v}"),
    };
    let name = |local: bool| if local { "local" } else { "global" };
    let layers = match (from_types, from_layers) {
        (Some(t), Some(l)) => {
            if let Some(i) = (0..t.len().max(l.len())).find(|&i| t.get(i) != l.get(i)) {
                let at = |v: &Vec<bool>| v.get(i).map_or("(none)", |&x| name(x));
                bail!(
                    "{p}: attention_layers ({} entries) and attention_types (expanding to {}) disagree at layer {i}: {} vs {}",
                    l.len(),
                    t.len(),
                    at(&l),
                    at(&t)
                );
            }
            l
        }
        (Some(t), None) => t,
        (None, Some(l)) => l,
        (None, None) => {
            // transformers' default attention_types, [[["global", "local"], 12]]
            notes.push("config.json has neither attention_types nor attention_layers; taking transformers' default [[[\"global\", \"local\"], 12]]".into());
            [false, true].repeat(12)
        }
    };
    if layers.len() != n_layer as usize {
        bail!("{p}: attention_layers has {} entries but num_layers is {n_layer}", layers.len());
    }
    let mask = layers.iter().enumerate().filter(|(_, &local)| local).fold(LayerMask::NONE, |m, (l, _)| m.with(l));
    if mask.count() == 0 {
        return Ok((mask, 0));
    }
    let window = match j.get("window_size") {
        None | Some(Value::Null) => {
            notes.push("config.json has no window_size; taking transformers' default 256".into());
            256
        }
        Some(v) => v.as_u64().with_context(|| format!("{p}: window_size must be an integer, found {v}"))?,
    };
    if window == 0 {
        bail!("{p}: window_size 0: local layers ({} of {n_layer}) need a window of at least 1", mask.count());
    }
    Ok((mask, window.min(u32::MAX as u64) as u32))
}

/// An open checkpoint under Hugging Face tensor names: safetensors shards, memory-mapped, or
/// tensors already in memory (a llama2.c `model.bin` read by [`crate::llama2c`]).
pub struct Checkpoint {
    shards: Vec<(PathBuf, Mmap)>,
    /// tensor name -> shard index
    index: BTreeMap<String, usize>,
    /// tensors held in memory, by name
    memory: BTreeMap<String, Tensor>,
}

/// A tensor read from the checkpoint, widened to f32.
#[derive(Debug, Clone)]
pub struct Tensor {
    /// Shape as stored.
    pub shape: Vec<usize>,
    /// Values, row-major.
    pub data: Vec<f32>,
    /// Storage dtype in the checkpoint.
    pub dtype: Dtype,
    /// The int8 values and scales `data` was dequantized from, when the checkpoint stores the
    /// tensor quantized in groups that lie within rows (llama2.c's Q8_0): `convert --dtype q8`
    /// keeps them instead of quantizing `data` again.
    pub q8: Option<Q8Rows>,
}

/// A matrix quantized symmetrically in groups along its rows: value i is `q[i] · s[i / group]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Q8Rows {
    /// Values per group; divides the row length.
    pub group: usize,
    /// The int8 values, row-major.
    pub q: Vec<i8>,
    /// One scale per group.
    pub s: Vec<f32>,
}

impl Checkpoint {
    /// Opens `dir/model.safetensors` or the shards listed in `dir/model.safetensors.index.json`.
    pub fn open(dir: &Path) -> Result<Self> {
        let single = dir.join("model.safetensors");
        let index_path = dir.join("model.safetensors.index.json");
        let files: Vec<PathBuf> = if single.exists() {
            vec![single]
        } else if index_path.exists() {
            let j: Value = serde_json::from_str(&std::fs::read_to_string(&index_path)?)
                .with_context(|| format!("{} is not valid JSON", index_path.display()))?;
            let map = j.get("weight_map").and_then(Value::as_object).context("index has no weight_map")?;
            let mut names: Vec<String> = map.values().filter_map(|v| v.as_str().map(String::from)).collect();
            names.sort();
            names.dedup();
            names.into_iter().map(|n| dir.join(n)).collect()
        } else if dir.join("pytorch_model.bin").exists() {
            bail!("{}: only safetensors checkpoints are read; re-save with `model.save_pretrained(dir, safe_serialization=True)`", dir.display());
        } else {
            bail!("{}: no model.safetensors found", dir.display());
        };
        let mut shards = Vec::new();
        let mut index = BTreeMap::new();
        for (i, path) in files.into_iter().enumerate() {
            let file = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
            // SAFETY: the file is only read; a concurrent writer could change the bytes we see,
            // which safetensors' own bounds checks turn into errors, not UB in our code.
            let map = unsafe { Mmap::map(&file) }.with_context(|| format!("cannot map {}", path.display()))?;
            let st = SafeTensors::deserialize(&map).with_context(|| format!("{} is not a valid safetensors file", path.display()))?;
            for name in st.names() {
                index.insert(name.to_string(), i);
            }
            shards.push((path, map));
        }
        Ok(Self { shards, index, memory: BTreeMap::new() })
    }

    /// A checkpoint of tensors already in memory.
    pub fn from_tensors(tensors: impl IntoIterator<Item = (String, Tensor)>) -> Self {
        Self { shards: Vec::new(), index: BTreeMap::new(), memory: tensors.into_iter().collect() }
    }

    /// All tensor names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().chain(self.memory.keys()).map(String::as_str)
    }

    /// Whether `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name) || self.memory.contains_key(name)
    }

    /// Reads `name` and widens it to f32 (F32, F16 and BF16 storage).
    pub fn read(&self, name: &str) -> Result<Tensor> {
        if let Some(t) = self.memory.get(name) {
            return Ok(t.clone());
        }
        let &i = self.index.get(name).with_context(|| format!("tensor {name} missing"))?;
        let (path, map) = &self.shards[i];
        let st = SafeTensors::deserialize(map)?;
        let view = st.tensor(name).with_context(|| format!("{}: tensor {name}", path.display()))?;
        let bytes = view.data();
        let data: Vec<f32> = match view.dtype() {
            Dtype::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::F16 => bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::BF16 => bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            other => bail!("tensor {name} has dtype {other:?}; F32, F16 and BF16 are supported"),
        };
        Ok(Tensor { shape: view.shape().to_vec(), data, dtype: view.dtype(), q8: None })
    }
}

/// Writes a checkpoint in the Hugging Face layout (`config.json` + `model.safetensors`).
pub fn write_checkpoint(dir: &Path, config_json: &Value, tensors: &[(String, Vec<usize>, Vec<f32>)]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(config_json)? + "\n")?;
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, shape, data)| {
            let view = safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), bytemuck::cast_slice(data))?;
            Ok((name.clone(), view))
        })
        .collect::<Result<_>>()?;
    let mut meta = std::collections::HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    safetensors::serialize_to_file(views, Some(meta), &dir.join("model.safetensors"))?;
    Ok(())
}
