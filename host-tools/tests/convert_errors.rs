//! `host-tools convert` on checkpoints it cannot convert: each stops with one line that names
//! the field or tensor and gives the numbers (and, for another architecture, says what is
//! supported). The GPT-Neo checkpoints are written by `host-tools random`, then edited.

use std::path::{Path, PathBuf};

use host_tools::convert::{convert, ConvertOptions};
use host_tools::hf::{write_checkpoint, Checkpoint};
use host_tools::random::{write_random, RandomShape};
use serde_json::Value;

/// A fresh directory under the system temp dir, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

/// A 4-layer GPT-Neo (C 16, 4 heads, MLP 40, window 3, layers global, local, global, local).
fn neo(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("host-tools-convert-errors-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let shape = RandomShape { n_inner: Some(40), ..RandomShape::gpt_neo(4, 16, 4, 50, 12, 3) };
    write_random(&dir, shape, 5).unwrap();
    Scratch(dir)
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let path = dir.join("config.json");
    let mut j: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(j.as_object_mut().unwrap());
    std::fs::write(&path, serde_json::to_string_pretty(&j).unwrap()).unwrap();
}

/// Rewrites the checkpoint's tensors through `edit` (name, shape, data).
fn edit_tensors(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Vec<usize>, Vec<f32>)>)) {
    let ckpt = Checkpoint::open(dir).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = ckpt
        .names()
        .map(|n| {
            let t = ckpt.read(n).unwrap();
            (n.to_string(), t.shape, t.data)
        })
        .collect();
    drop(ckpt);
    edit(&mut tensors);
    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    write_checkpoint(dir, &config, &tensors).unwrap();
}

/// The error `convert` stops with, as `host-tools` prints it (one line).
fn error(dir: &Path) -> String {
    let e = convert(dir, &ConvertOptions::default()).err().expect("conversion must fail");
    let text = format!("{e:#}");
    assert!(!text.contains('\n'), "not one line: {text}");
    text
}

fn assert_says(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{text:?} does not say {p:?}");
    }
}

#[test]
fn the_unedited_checkpoint_converts() {
    let dir = neo("ok");
    let conv = convert(&dir, &ConvertOptions::default()).unwrap();
    let c = conv.config;
    assert_eq!((c.n_layer, c.n_embd, c.n_head, c.n_inner, c.attn_window, c.qkv_bias, c.scale_attn_weights), (4, 16, 4, 40, 3, false, false));
    assert_eq!((0..4).map(|l| c.is_local(l)).collect::<Vec<_>>(), [false, true, false, true]);
}

#[test]
fn other_architectures_are_named_with_what_is_supported() {
    for (model_type, arch) in [("mistral", "MistralForCausalLM"), ("gpt_neox", "GPTNeoXForCausalLM"), ("bert", "BertForMaskedLM"), ("something_new", "")] {
        let dir = neo(model_type);
        edit_config(&dir, |j| {
            j.insert("model_type".into(), model_type.into());
            j.insert("architectures".into(), if arch.is_empty() { Value::Null } else { serde_json::json!([arch]) });
        });
        let text = error(&dir);
        assert_says(&text, &["config.json", &format!("model_type \"{model_type}\""), "not supported", "gpt2", "gpt_neo", "llama"]);
        if !arch.is_empty() {
            assert_says(&text, &[arch]);
        }
    }
}

/// A 2-layer Llama (C 32, 4 heads on 2 key/value heads, MLP 48, untied head).
fn llama(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("host-tools-convert-errors-{}-llama-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let shape = RandomShape { tied: false, ..RandomShape::llama(2, 32, 4, 2, 48, 60, 16) };
    write_random(&dir, shape, 6).unwrap();
    Scratch(dir)
}

#[test]
fn the_unedited_llama_checkpoint_converts() {
    let dir = llama("ok");
    let c = convert(&dir, &ConvertOptions::default()).unwrap().config;
    assert_eq!((c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim, c.n_inner, c.gated_mlp, c.qkv_bias), (2, 32, 4, 2, 8, 48, true, false));
    assert_eq!(c.positions, runtime::config::Positions::Rope { theta: 10000.0 });
    // transformers 4.x writes rope_theta at the top level only, and no rope_parameters
    let dir = llama("v4-theta");
    edit_config(&dir, |j| {
        j.remove("rope_parameters");
        j.insert("rope_theta".into(), 500000.0.into());
        j.insert("rope_scaling".into(), Value::Null);
    });
    let c = convert(&dir, &ConvertOptions::default()).unwrap().config;
    assert_eq!(c.positions, runtime::config::Positions::Rope { theta: 500000.0 });
}

/// Hostile Llama configs: each stops with one line naming the field and its value.
#[test]
fn llama_configs_the_runtime_does_not_compute_are_refused_by_name() {
    let cases: [ConfigCase; 11] = [
        ("linear", |j| {
            j.insert("rope_scaling".into(), serde_json::json!({"type": "linear", "factor": 2.0}));
        }, &["rope_scaling", "\"linear\"", "not supported"]),
        ("llama3", |j| {
            j.insert("rope_parameters".into(), serde_json::json!({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}));
        }, &["rope_parameters", "\"llama3\"", "not supported"]),
        ("yarn", |j| {
            j.insert("rope_scaling".into(), serde_json::json!({"rope_type": "yarn", "factor": 4.0}));
        }, &["rope_scaling", "\"yarn\""]),
        ("dynamic", |j| {
            j.insert("rope_scaling".into(), serde_json::json!({"type": "dynamic", "factor": 2.0}));
        }, &["\"dynamic\""]),
        ("longrope", |j| {
            j.insert("rope_scaling".into(), serde_json::json!({"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}));
        }, &["\"longrope\""]),
        ("act", |j| {
            j.insert("hidden_act".into(), "gelu".into());
        }, &["hidden_act \"gelu\"", "silu"]),
        ("kv-heads", |j| {
            j.insert("num_key_value_heads".into(), 3.into());
        }, &["num_key_value_heads 3 does not divide num_attention_heads 4"]),
        ("theta", |j| {
            j.insert("rope_parameters".into(), serde_json::json!({"rope_type": "default", "rope_theta": -1.0}));
            j.remove("rope_theta");
        }, &["rope_theta -1", "positive"]),
        ("theta-disagree", |j| {
            j.insert("rope_theta".into(), 1000.0.into());
        }, &["rope_theta 1000", "rope_parameters.rope_theta 10000", "disagree"]),
        ("partial", |j| {
            j.insert("partial_rotary_factor".into(), 0.5.into());
        }, &["partial_rotary_factor 0.5"]),
        ("head-dim", |j| {
            j.insert("head_dim".into(), 7.into());
        }, &["HeadDim", "7"]),
    ];
    for (name, edit, says) in cases {
        let dir = llama(name);
        edit_config(&dir, edit);
        let text = error(&dir);
        assert_says(&text, &["config.json"]);
        assert_says(&text, says);
    }
    // a missing and a mis-shaped tensor name the Hugging Face key and the shapes
    let dir = llama("missing-k");
    edit_tensors(&dir, |t| t.retain(|(n, _, _)| n != "model.layers.1.self_attn.k_proj.weight"));
    assert_says(&error(&dir), &["tensor model.layers.1.self_attn.k_proj.weight missing", "[16, 32]"]);
    let dir = llama("k-as-q");
    edit_tensors(&dir, |t| {
        // k_proj written with every query head (no grouped-query attention)
        let k = t.iter_mut().find(|(n, _, _)| n == "model.layers.0.self_attn.k_proj.weight").unwrap();
        k.1 = vec![32, 32];
        k.2 = vec![0.0; 32 * 32];
    });
    assert_says(&error(&dir), &["tensor model.layers.0.self_attn.k_proj.weight has shape [32, 32], expected [16, 32]"]);
    let dir = llama("no-head");
    edit_tensors(&dir, |t| t.retain(|(n, _, _)| n != "lm_head.weight"));
    assert_says(&error(&dir), &["tie_word_embeddings = false", "lm_head.weight is missing"]);
}

/// A named edit of config.json and what the error must say.
type ConfigCase = (&'static str, fn(&mut serde_json::Map<String, Value>), &'static [&'static str]);

#[test]
fn inconsistent_gpt_neo_configs() {
    let cases: [ConfigCase; 7] = [
        (
            "layers",
            |j| {
                j.remove("attention_types");
                j.insert("attention_layers".into(), serde_json::json!(["global", "local", "global"]));
            },
            &["attention_layers has 3 entries", "num_layers is 4"],
        ),
        (
            "types",
            |j| {
                j.remove("attention_layers");
                j.insert("attention_types".into(), serde_json::json!([[["global", "local"], 3]]));
            },
            &["attention_layers has 6 entries", "num_layers is 4"],
        ),
        (
            "unknown",
            |j| {
                j.remove("attention_layers");
                j.insert("attention_types".into(), serde_json::json!([[["global", "sparse"], 2]]));
            },
            &["attention_types[0][0][1]", "\"sparse\"", "unknown attention type", "global", "local"],
        ),
        (
            "disagree",
            |j| {
                j.insert("attention_layers".into(), serde_json::json!(["global", "local", "local", "local"]));
            },
            &["attention_layers", "attention_types", "disagree at layer 2", "local vs global"],
        ),
        ("window", |j| {
            j.insert("window_size".into(), 0.into());
        }, &["window_size 0", "2 of 4"]),
        ("heads", |j| {
            j.insert("num_heads".into(), 5.into());
        }, &["num_heads 5 does not divide hidden_size 16"]),
        ("missing", |j| {
            j.remove("hidden_size");
        }, &["missing integer field hidden_size"]),
    ];
    for (name, edit, says) in cases {
        let dir = neo(name);
        edit_config(&dir, edit);
        let text = error(&dir);
        assert_says(&text, &["config.json"]);
        assert_says(&text, says);
    }
}

#[test]
fn missing_and_mis_shaped_gpt_neo_tensors() {
    let dir = neo("missing-tensor");
    edit_tensors(&dir, |t| t.retain(|(n, _, _)| n != "transformer.h.2.attn.attention.k_proj.weight"));
    assert_says(&error(&dir), &["tensor transformer.h.2.attn.attention.k_proj.weight missing", "[16, 16]"]);

    let dir = neo("misshaped-fc");
    edit_tensors(&dir, |t| {
        // stored as GPT-2's Conv1D [in, out] instead of nn.Linear [out, in]
        let fc = t.iter_mut().find(|(n, _, _)| n == "transformer.h.1.mlp.c_fc.weight").unwrap();
        fc.1 = vec![16, 40];
    });
    assert_says(&error(&dir), &["tensor transformer.h.1.mlp.c_fc.weight has shape [16, 40], expected [40, 16]"]);

    let dir = neo("misshaped-out-proj-bias");
    edit_tensors(&dir, |t| {
        let b = t.iter_mut().find(|(n, _, _)| n == "transformer.h.3.attn.attention.out_proj.bias").unwrap();
        b.1 = vec![15];
        b.2.pop();
    });
    assert_says(&error(&dir), &["tensor transformer.h.3.attn.attention.out_proj.bias has shape [15], expected [16]"]);
}

/// A tokenizer the runtime cannot reproduce (a SentencePiece model with an NFKC normaliser, as
/// sentencepiece trains by default) stops the conversion with the reason and the way out;
/// `--no-tokenizer` converts the weights alone.
#[test]
fn an_unsupported_tokenizer_is_named_and_can_be_left_out() {
    // 400 tokens: `random` trains a SentencePiece tokenizer of that size beside the weights
    let dir = Scratch(std::env::temp_dir().join(format!("host-tools-convert-errors-{}-nfkc", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    write_random(&dir, RandomShape::llama(2, 32, 4, 2, 48, 400, 16), 7).unwrap();
    let path = dir.join("tokenizer.model");
    let mut model = host_tools::sp_model::SpModel::parse(&std::fs::read(&path).unwrap()).unwrap();
    // sentencepiece normalises through its precompiled character map; the name is a label
    model.normalizer.name = "nmt_nfkc".into();
    model.normalizer.precompiled_charsmap = vec![0; 64];
    std::fs::write(&path, model.to_bytes()).unwrap();
    assert_says(&error(&dir), &["tokenizer.model", "\"nmt_nfkc\"", "only the identity normalizer", "--no-tokenizer"]);
    let conv = convert(&dir, &ConvertOptions { no_tokenizer: true, ..ConvertOptions::default() }).unwrap();
    assert!(!conv.has_tokenizer);
    let file = host_tools::blob_file::BlobFile::from_bytes(&conv.blob);
    assert!(file.model().unwrap().tokenizer().is_none());
}
