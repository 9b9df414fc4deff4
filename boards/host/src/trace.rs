//! `host trace`: inside the model.
//!
//! ```text
//! host trace --model B (--prompt T | --ids L) [-n N] --out DIR   every stage of the pass (host_tools::trace)
//! host trace --tutorial [--lang ko] [--seed S] [--out DIR]        the tutorial's worked example to the next token (src/tutorial.rs)
//! host trace --digest [--model B]                                 per-layer digests of the firmware's fixed run
//! ```

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;
use firmware_common::settings;
use host_tools::trace::{self, TraceOptions};
use runtime::generate::{generate_observed, Control, GenerateOptions};
use runtime::observe::{write_digest_line, Digests};
use runtime::sampler::Sampler;
use runtime::{KvDType, Session, SessionSizes};

use crate::tutorial::{self, Lang};

use crate::{encode_prompt, load, tokenizer, DEFAULT_MODEL};

/// `host trace --help` (main.rs puts it on the subcommand: its doc comment would replace it).
pub const LONG_ABOUT: &str = "Inside the model.\n\n  host trace --model B (--prompt T | --ids L) [-n N] --out DIR\n      Runs the prompt and N generated tokens (T = prompt + N positions; every one goes through the forward pass) with an observer and writes DIR/hidden_states.npy [n_layer+1, T, C] and DIR/attentions.npy [n_layer, n_head, T, T] (transformers' output_hidden_states / output_attentions), one .npy per stage (embed, pos_embed, resid_pre, ln1, q, k, v, attn_scores, attn_pattern, z, attn_out, resid_mid, ln2, mlp_pre, mlp_post, mlp_out, resid_post, ln_final, logits), DIR/trace.json, DIR/index.html and DIR/tutorial.html (the tutorial's walk, in --lang's language).\n\n  host trace --tutorial [--lang ko] [--seed S] [--out DIR]\n      The worked example of the tutorial this project grew from (V = 6, d = 3, the sentence 나는 밥을 먹었다), from the token ids to a sampled next token, every number computed by the runtime's kernels, KV cache and sampler: embeddings + positions, one head's scores, causal softmax and z, two heads, concat and W_O, the residual, pre-LayerNorm and the GELU MLP, prefill then a decode step from the KV cache, the final LayerNorm, the output layer over the six tokens, and softmax with temperature, top-k, top-p and the draw (seeded by --seed, 42 by default). Weights the tutorial does not give are marked as ours. With --out DIR: the same walk as DIR/tutorial.html, one self-contained page (every model trace writes one beside its index.html too).\n\n  host trace --digest [--model B]\n      One line per layer per token, a CRC-32 of resid_post's f32 bits, for the firmware's fixed run (boards/firmware-common/src/settings.rs: prompt, sampling, 48 tokens, context min(128, n_ctx), int8 KV cache, batch 1); the firmware built with --features trace prints the same lines (boards/qemu-digest.sh compares them).";

#[derive(Args, Clone)]
#[command(about = "Inside the model: every stage of the forward pass and the sampler, as arrays, JSON and a page")]
pub struct TraceArgs {
    /// Model blob. Default: models/default/model.blob (with --digest: model-q8.blob, the firmware's).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Prompt text (needs a blob with a tokenizer).
    #[arg(long, conflicts_with = "ids")]
    prompt: Option<String>,
    /// Prompt token ids, comma-separated.
    #[arg(long, value_delimiter = ',')]
    ids: Option<Vec<u32>>,
    /// Tokens to generate after the prompt (end-of-text does not stop a trace).
    #[arg(short = 'n', long = "max-tokens", default_value_t = 0)]
    n: usize,
    /// Output directory.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    sampling: crate::SamplingArgs,
    /// Storage of the KV cache: f32 (default), f16 or int8.
    #[arg(long, value_enum)]
    kv_dtype: Option<host_tools::plan::KvArg>,
    /// Print the tutorial's worked example instead, from the token ids to a sampled next token
    /// (with --out DIR: write it as DIR/tutorial.html). Its sampling settings are its own; --seed
    /// changes the draw.
    #[arg(long, conflicts_with_all = ["model", "prompt", "ids", "digest", "n", "kv_dtype", "greedy", "temperature", "top_k", "top_p", "repetition_penalty"])]
    tutorial: bool,
    /// Language of the tutorial (--tutorial, and the tutorial.html a trace writes beside index.html).
    #[arg(long, value_enum, default_value_t = Lang::En, conflicts_with = "digest")]
    lang: Lang,
    /// Print the per-layer digests of the firmware's fixed run instead.
    #[arg(long, conflicts_with_all = ["prompt", "ids", "out", "kv_dtype"])]
    digest: bool,
}

pub fn cmd_trace(a: &TraceArgs) -> Result<()> {
    if a.tutorial {
        return tutorial::run(a.lang, a.sampling.config().seed, a.out.as_deref());
    }
    if a.digest {
        return digest(a.model.as_deref().unwrap_or(Path::new(super::FIRMWARE_MODEL)));
    }
    let Some(out) = &a.out else { bail!("give --out DIR (or --tutorial, or --digest)") };
    let model_path = a.model.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL));
    let file = load(&model_path)?;
    let model = file.model()?;
    let prompt = match (&a.prompt, &a.ids) {
        (Some(text), _) => encode_prompt(tokenizer(&model)?, text)?,
        (None, Some(ids)) => ids.clone(),
        (None, None) => bail!("give --prompt TEXT or --ids L"),
    };
    let sampler = a.sampling.config();
    sampler.validate(trace::MAX_TOP_K).map_err(|e| match e {
        runtime::Error::BadSamplerParam { what } => super::sampler_error(what, &sampler, trace::MAX_TOP_K),
        e => e.into(),
    })?;
    let kv = a.kv_dtype.map_or(KvDType::F32, host_tools::plan::KvArg::dtype);
    let opts = TraceOptions { prompt, n: a.n, sampler, kv, batch: 64 };
    let t = trace::run(&model, &opts)?;
    // the shipped model by its name in the repository, any other as given
    let shown = if a.model.is_none() { "models/default/model.blob".to_string() } else { model_path.display().to_string() };
    trace::write_dir(&model, &t, out, &shown)?;
    // the tutorial's walk beside the page, which links to it
    tutorial::write_page(out, a.lang, tutorial::SEED, true)?;
    let d = t.rec.dims;
    let page = std::fs::metadata(out.join("index.html")).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "wrote {}: hidden_states.npy [{}, {}, {}], attentions.npy [{}, {}, {}, {}], {} stage arrays, trace.json, index.html ({} KB), tutorial.html",
        out.display(),
        d.n_layer + 1,
        d.t,
        d.n_embd,
        d.n_layer,
        d.n_head,
        d.t,
        d.t,
        d.stages().count(),
        page.div_ceil(1024)
    );
    eprintln!("T = {} positions: {} prompt + {} generated", d.t, t.n_prompt, d.t - t.n_prompt);
    Ok(())
}

/// `host trace --digest`: the firmware's run (settings.rs) with a digest per layer per token.
fn digest(model_path: &Path) -> Result<()> {
    let file = load(model_path)?;
    let model = file.model()?;
    let cfg = *model.config();
    let capacity = settings::capacity(cfg.n_ctx());
    let kv = settings::KV_DTYPE;
    let sizes = SessionSizes::with_kv(&cfg, capacity, settings::PREFILL_BATCH, kv);
    let (mut arena, mut kv_buf) = (vec![0.0f32; sizes.arena_len], vec![0.0f32; sizes.kv_len]);
    let mut session = Session::with_kv_dtype(&model, &mut arena, &mut kv_buf, capacity, kv)?;
    // the prompt as the firmware makes it (app.rs)
    let prompt: Vec<u32> = match model.tokenizer() {
        Some(tok) => encode_prompt(tok, settings::PROMPT)?,
        None => settings::FALLBACK_PROMPT_IDS.iter().map(|id| id % cfg.vocab_size).collect(),
    };
    let mut sampler = Sampler::<{ settings::TOP_K_CAPACITY }>::new(settings::SAMPLER)?;
    let opts = GenerateOptions { max_tokens: settings::MAX_NEW_TOKENS, stop_at_eos: settings::STOP_AT_EOS, context_shift: false };
    let mut window = vec![0u32; capacity];
    let mut lines = String::new();
    let mut count = 0usize;
    let mut obs = Digests(|pos, layer, crc| {
        count += 1;
        let _ = write_digest_line(&mut lines, pos, layer, crc);
    });
    let mut generated = 0usize;
    let summary = generate_observed(&mut session, &mut sampler, &prompt, &mut window, &opts, &mut obs, |_| {
        generated += 1;
        Control::Continue
    })?;
    print!("{lines}");
    eprintln!(
        "{count} digests: {} positions ({} prompt + {} generated, the last one not run) x {} layers; stopped: {:?}",
        count / cfg.n_layer().max(1),
        prompt.len(),
        generated,
        cfg.n_layer,
        summary.reason
    );
    Ok(())
}
