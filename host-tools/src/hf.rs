//! Reading (and, for `random`, writing) Hugging Face GPT-2 checkpoints: `config.json` plus
//! `model.safetensors` (or sharded `model.safetensors.index.json`).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use memmap2::Mmap;
use runtime::{Activation, Config};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

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

/// Parses `dir/config.json`.
pub fn read_config(dir: &Path) -> Result<HfConfig> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let j: Value = serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
    let mut notes = Vec::new();
    if let Some(mt) = j.get("model_type").and_then(Value::as_str) {
        if mt != "gpt2" {
            notes.push(format!("model_type is {mt:?}, not \"gpt2\": converting as GPT-2 anyway"));
        }
    }
    let need = |keys: &[&str]| get_u32(&j, keys).with_context(|| format!("{}: missing integer field {}", path.display(), keys[0]));
    let vocab_size = need(&["vocab_size"])?;
    let n_ctx = need(&["n_positions", "n_ctx", "max_position_embeddings"])?;
    let n_embd = need(&["n_embd", "hidden_size"])?;
    let n_layer = need(&["n_layer", "num_hidden_layers"])?;
    let n_head = need(&["n_head", "num_attention_heads"])?;
    let n_inner = match j.get("n_inner") {
        Some(Value::Number(n)) => n.as_u64().context("n_inner must be an integer")? as u32,
        _ => 4 * n_embd,
    };
    let eps = j.get("layer_norm_epsilon").and_then(Value::as_f64).unwrap_or(1e-5) as f32;
    let act_name = j.get("activation_function").and_then(Value::as_str).unwrap_or("gelu_new");
    let activation = match act_name {
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
        "gelu" | "gelu_python" => Activation::GeluErf,
        "relu" => Activation::Relu,
        other => bail!("{}: activation_function {other:?} is not supported (gelu_new, gelu_pytorch_tanh, gelu, relu)", path.display()),
    };
    let flag = |k: &str, default: bool| j.get(k).and_then(Value::as_bool).unwrap_or(default);
    let mut token = |k: &str| -> u32 {
        let id = get_u32(&j, &[k]).unwrap_or(vocab_size.saturating_sub(1));
        if id >= vocab_size {
            notes.push(format!("{k} {id} is outside the vocabulary ({vocab_size}); using {}", vocab_size - 1));
            vocab_size - 1
        } else {
            id
        }
    };
    let bos_token_id = token("bos_token_id");
    let eos_token_id = token("eos_token_id");
    let config = Config {
        vocab_size,
        n_ctx,
        n_embd,
        n_layer,
        n_head,
        n_inner,
        layer_norm_epsilon: eps,
        activation,
        scale_attn_weights: flag("scale_attn_weights", true),
        scale_attn_by_inverse_layer_idx: flag("scale_attn_by_inverse_layer_idx", false),
        bos_token_id,
        eos_token_id,
    };
    config.validate().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if flag("reorder_and_upcast_attn", false) {
        notes.push("reorder_and_upcast_attn only changes fp16 training numerics; ignored".into());
    }
    Ok(HfConfig { config, tie_word_embeddings: flag("tie_word_embeddings", true), notes })
}

/// An open safetensors checkpoint (one or more memory-mapped shards).
pub struct Checkpoint {
    shards: Vec<(PathBuf, Mmap)>,
    /// tensor name -> shard index
    index: BTreeMap<String, usize>,
}

/// A tensor read from the checkpoint, widened to f32.
pub struct Tensor {
    /// Shape as stored.
    pub shape: Vec<usize>,
    /// Values, row-major.
    pub data: Vec<f32>,
    /// Storage dtype in the checkpoint.
    pub dtype: Dtype,
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
        Ok(Self { shards, index })
    }

    /// All tensor names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }

    /// Whether `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Reads `name` and widens it to f32 (F32, F16 and BF16 storage).
    pub fn read(&self, name: &str) -> Result<Tensor> {
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
        Ok(Tensor { shape: view.shape().to_vec(), data, dtype: view.dtype() })
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
