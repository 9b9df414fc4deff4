//! `host trace`: inside the model.
//!
//! ```text
//! host trace --model B (--prompt T | --ids L) [-n N] --out DIR   every stage of the pass (host_tools::trace)
//! host trace --tutorial [--lang ko]                               the tutorial's worked example, through the kernels
//! host trace --digest [--model B]                                 per-layer digests of the firmware's fixed run
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use firmware_common::settings;
use host_tools::trace::{self, TraceOptions};
use runtime::generate::{generate_observed, Control, GenerateOptions};
use runtime::kernels;
use runtime::model::{Matrix, MatrixData};
use runtime::observe::{write_digest_line, Digests};
use runtime::sampler::Sampler;
use runtime::kv_cache::KvLayout;
use runtime::{KvCache, KvDType, Session, SessionSizes};

use crate::{encode_prompt, load, tokenizer, DEFAULT_MODEL};

/// The firmware's default blob (`boards/qemu-*/build.rs`: `Layout::default_blob`).

#[derive(Args, Clone)]
#[command(
    about = "Inside the model: every stage of the forward pass and the sampler, as arrays, JSON and a page",
    long_about = "Inside the model.\n\n  host trace --model B (--prompt T | --ids L) [-n N] --out DIR\n      Runs the prompt and N generated tokens (T = prompt + N positions; every one goes through the forward pass) with an observer and writes DIR/hidden_states.npy [n_layer+1, T, C] and DIR/attentions.npy [n_layer, n_head, T, T] (transformers' output_hidden_states / output_attentions), one .npy per stage (embed, pos_embed, resid_pre, ln1, q, k, v, attn_scores, attn_pattern, z, attn_out, resid_mid, ln2, mlp_pre, mlp_post, mlp_out, resid_post, ln_final, logits), DIR/trace.json and DIR/index.html.\n\n  host trace --tutorial [--lang ko]\n      The tutorial's worked example (V = 6, d = 3, W_Q = W_K = W_V = I) through the runtime's kernels.\n\n  host trace --digest [--model B]\n      One line per layer per token, a CRC-32 of resid_post's f32 bits, for the firmware's fixed run (boards/firmware-common/src/settings.rs: prompt, sampling, 48 tokens, context min(128, n_ctx), int8 KV cache, batch 1); the firmware built with --features trace prints the same lines (boards/qemu-digest.sh compares them)."
)]
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
    /// Print the tutorial's worked example instead.
    #[arg(long, conflicts_with_all = ["model", "prompt", "ids", "out", "digest"])]
    tutorial: bool,
    /// Language of the tutorial's stage names.
    #[arg(long, value_enum, default_value_t = Lang::En, requires = "tutorial")]
    lang: Lang,
    /// Print the per-layer digests of the firmware's fixed run instead.
    #[arg(long, conflicts_with_all = ["prompt", "ids", "out", "kv_dtype"])]
    digest: bool,
}

/// Language of the tutorial's stage names.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// English.
    En,
    /// Korean (the tutorial's own).
    Ko,
}

pub fn cmd_trace(a: &TraceArgs) -> Result<()> {
    if a.tutorial {
        return tutorial(a.lang);
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
    let d = t.rec.dims;
    let page = std::fs::metadata(out.join("index.html")).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "wrote {}: hidden_states.npy [{}, {}, {}], attentions.npy [{}, {}, {}, {}], {} stage arrays, trace.json, index.html ({} KB)",
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

// ---- the tutorial -------------------------------------------------------------------------------

/// The tutorial's token embeddings W_E (V = 6, d = 3) and positions P (3 positions), as in the
/// runtime's tests (`kernels.rs`: `tutorial_*`; `kv_cache.rs`: `tutorial_decode_from_cache`).
const W_E: [[f32; 3]; 6] = [[0.2, 0.9, 0.1], [0.8, 0.1, 0.3], [0.4, 0.3, 0.9], [0.5, 0.5, 0.2], [0.1, 0.7, 0.6], [0.9, 0.2, 0.4]];
const P: [[f32; 3]; 3] = [[0.0, 0.1, 0.0], [0.1, 0.0, 0.1], [0.2, 0.1, 0.0]];
const TOKENS: [usize; 3] = [0, 1, 2];
/// The residual row the tutorial normalises, and the GELU inputs it shows.
const LN_X: [f32; 3] = [1.34, 0.84, 1.67];
const GELU_X: [f32; 2] = [-0.40, -0.33];

struct Words {
    title: &'static str,
    embed: &'static str,
    qkv: &'static str,
    scores: &'static str,
    softmax: &'static str,
    z: &'static str,
    cache: &'static str,
    ln: &'static str,
    gelu: &'static str,
    masked: &'static str,
    token: &'static str,
    position: &'static str,
    prefill: &'static str,
    decode: &'static str,
    same: &'static str,
    note: &'static str,
}

const EN: Words = Words {
    title: "The tutorial's worked example, through the runtime's kernels (V = 6, d = 3, one head, W_Q = W_K = W_V = I)",
    embed: "Embedding + position: H0 = W_E[token] + P[position]",
    qkv: "Q, K, V = H0 · W_Q, H0 · W_K, H0 · W_V (identity: each is H0)",
    scores: "Attention scores Q·Kᵀ/√d (causal: a token sees itself and the tokens before it)",
    softmax: "Causal softmax weights (each row sums to 1)",
    z: "Attention output z = weights · V",
    cache: "The same z decoded from the KV cache: prefill tokens 0 and 1 (their k, v stored), then decode token 2 against the cache",
    ln: "LayerNorm of the residual row x",
    gelu: "GELU (tanh form, as GPT-2's gelu_new; exact erf form beside it)",
    masked: "masked",
    token: "token",
    position: "position",
    prefill: "prefill",
    decode: "decode",
    same: "bit for bit the z above",
    note: "the tutorial prints 0.47 for z2[1]: it mixes with the weights rounded to 0.27, 0.32, 0.41",
};

const KO: Words = Words {
    title: "튜토리얼 예제를 런타임의 실제 커널로 계산 (V = 6, d = 3, 헤드 1개, W_Q = W_K = W_V = I)",
    embed: "임베딩 + 위치 인코딩: H0 = W_E[토큰] + P[위치]",
    qkv: "쿼리·키·값: Q, K, V = H0 · W_Q, H0 · W_K, H0 · W_V (항등 행렬: 모두 H0)",
    scores: "어텐션 점수 Q·Kᵀ/√d (인과 마스크: 자기 자신과 앞선 토큰만 봄)",
    softmax: "소프트맥스 가중치 (인과적, 각 행의 합은 1)",
    z: "어텐션 출력 z = 가중치 · V",
    cache: "KV 캐시로 디코딩한 같은 z: 토큰 0, 1을 프리필(k, v 저장)한 뒤 캐시를 보고 토큰 2를 디코딩",
    ln: "레이어 정규화 (잔차 행 x)",
    gelu: "GELU 활성화 (GPT-2의 gelu_new인 tanh 근사; 옆은 erf 정확식)",
    masked: "마스킹",
    token: "토큰",
    position: "위치",
    prefill: "프리필",
    decode: "디코드",
    same: "위의 z와 비트 단위로 같음",
    note: "튜토리얼의 z2[1] = 0.47은 가중치를 0.27, 0.32, 0.41로 반올림해 섞은 값",
};

fn row(v: &[f32]) -> String {
    let cells: Vec<String> = v.iter().map(|x| format!("{x:5.2}")).collect();
    format!("[{}]", cells.join(", "))
}

/// `host trace --tutorial`: every number below comes from a runtime kernel.
fn tutorial(lang: Lang) -> Result<()> {
    let w = if lang == Lang::Ko { &KO } else { &EN };
    let d = 3usize;
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", w.title);

    // 1. H0 = wte[token] + wpe[pos]   (kernels::embedding_row, as the forward pass)
    let we_flat: Vec<f32> = W_E.iter().flatten().copied().collect();
    let p_flat: Vec<f32> = P.iter().flatten().copied().collect();
    let wte = Matrix { rows: 6, cols: d, data: MatrixData::F32(&we_flat) };
    let wpe = Matrix { rows: 3, cols: d, data: MatrixData::F32(&p_flat) };
    let mut h0 = vec![0.0f32; 3 * d];
    for (t, (&tok, ht)) in TOKENS.iter().zip(h0.chunks_exact_mut(d)).enumerate() {
        kernels::embedding_row(ht, &wte, tok, false);
        kernels::embedding_row(ht, &wpe, t, true);
    }
    let _ = writeln!(out, "1. {}   (kernels::embedding_row)", w.embed);
    for (t, ht) in h0.chunks_exact(d).enumerate() {
        let _ = writeln!(out, "   H0[{t}] = {} + {} = {}   ({} {}, {} {t})", row(&W_E[TOKENS[t]]), row(&P[t]), row(ht), w.token, TOKENS[t], w.position);
    }

    // 2. Q, K, V through the matrix kernel with identity weights
    let mut eye = vec![0.0f32; d * d];
    for i in 0..d {
        eye[i * d + i] = 1.0;
    }
    let id = Matrix { rows: d, cols: d, data: MatrixData::F32(&eye) };
    let (mut q, mut k, mut v) = (vec![0.0f32; 3 * d], vec![0.0f32; 3 * d], vec![0.0f32; 3 * d]);
    for m in [&mut q, &mut k, &mut v] {
        kernels::linear(m, &h0, &id, &[], false, &mut []);
    }
    let _ = writeln!(out, "\n2. {}   (kernels::linear)", w.qkv);
    for t in 0..3 {
        let _ = writeln!(out, "   q{t} = k{t} = v{t} = {}", row(&q[t * d..(t + 1) * d]));
    }

    // 3. scores and 4. the causal softmax, row by row
    let scale = 1.0 / (d as f32).sqrt();
    let _ = writeln!(out, "\n3. {}   (kernels::dot_f32 · 1/√3)", w.scores);
    let _ = writeln!(out, "          k0      k1      k2");
    let mut weights = vec![vec![0.0f32; 0]; 3];
    for i in 0..3 {
        let qi = &q[i * d..(i + 1) * d];
        let mut s: Vec<f32> = (0..=i).map(|j| kernels::dot_f32(qi, &k[j * d..(j + 1) * d]) * scale).collect();
        let cells: Vec<String> = (0..3).map(|j| if j <= i { format!("{:7.2}", s[j]) } else { format!("{:>7}", w.masked) }).collect();
        let _ = writeln!(out, "   q{i}  {}", cells.join(" "));
        kernels::softmax(&mut s);
        weights[i] = s;
    }
    let _ = writeln!(out, "\n4. {}   (kernels::softmax)", w.softmax);
    let _ = writeln!(out, "          k0      k1      k2");
    for (i, wi) in weights.iter().enumerate() {
        let cells: Vec<String> = (0..3).map(|j| if j <= i { format!("{:7.2}", wi[j]) } else { format!("{:>7}", "0") }).collect();
        let _ = writeln!(out, "   q{i}  {}", cells.join(" "));
    }

    // 5. z for every query: the real attention kernel over a KV cache holding all three
    let mut buf = vec![0.0f32; KvCache::required_len(KvDType::F32, &KvLayout::uniform(1, 3, d, 1))];
    let mut cache = KvCache::new(&mut buf, KvDType::F32, KvLayout::uniform(1, 3, d, 1))?;
    for t in 0..3 {
        cache.store(0, t, &k[t * d..(t + 1) * d], &v[t * d..(t + 1) * d]);
    }
    let mut scratch = [0.0f32; 3];
    let mut z = vec![0.0f32; 3 * d];
    for i in 0..3 {
        kernels::attention(&mut z[i * d..(i + 1) * d], &q[i * d..(i + 1) * d], &cache.head(0, 0, i + 1), scale, &mut scratch);
    }
    let _ = writeln!(out, "\n5. {}   (kernels::attention)", w.z);
    for i in 0..3 {
        let _ = writeln!(out, "   z{i} = {}", row(&z[i * d..(i + 1) * d]));
    }
    let _ = writeln!(out, "   ({})", w.note);

    // 6. decode from the cache, for every KV storage type
    let _ = writeln!(out, "\n6. {}   (KvCache::store, kernels::attention)", w.cache);
    for dtype in [KvDType::F32, KvDType::F16, KvDType::I8] {
        let mut buf = vec![0.0f32; KvCache::required_len(dtype, &KvLayout::uniform(1, 3, d, 1))];
        let mut cache = KvCache::new(&mut buf, dtype, KvLayout::uniform(1, 3, d, 1))?;
        // prefill: tokens 0 and 1
        for t in 0..2 {
            cache.store(0, t, &k[t * d..(t + 1) * d], &v[t * d..(t + 1) * d]);
        }
        // decode: token 2 appends its k, v and attends with its q
        cache.store(0, 2, &k[2 * d..], &v[2 * d..]);
        let mut z2 = [0.0f32; 3];
        kernels::attention(&mut z2, &q[2 * d..], &cache.head(0, 0, 3), scale, &mut scratch);
        let same = z2.iter().zip(&z[2 * d..]).all(|(a, b)| a.to_bits() == b.to_bits());
        let _ = writeln!(
            out,
            "   {:>4} KV: {} 0, 1; {} 2 -> z2 = {}{}",
            dtype.name(),
            w.prefill,
            w.decode,
            row(&z2),
            if same { format!("   ({})", w.same) } else { String::new() }
        );
    }

    // 7. LayerNorm, 8. GELU
    let mut normed = [0.0f32; 3];
    kernels::layer_norm(&mut normed, &LN_X, &[1.0; 3], Some(&[0.0; 3]), 1e-5);
    let mean = LN_X.iter().sum::<f32>() / 3.0;
    let var = LN_X.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / 3.0;
    let _ = writeln!(out, "\n7. {}   (kernels::layer_norm, γ = 1, β = 0, ε = 1e-5)", w.ln);
    let _ = writeln!(out, "   x = {}   mean {:.2}   std {:.2}   (x − mean)/std = {}", row(&LN_X), mean, (var + 1e-5).sqrt(), row(&normed));
    let _ = writeln!(out, "\n8. {}   (kernels::gelu_tanh, kernels::gelu_erf)", w.gelu);
    for x in GELU_X {
        let _ = writeln!(out, "   GELU({x:.2}) = {:.2}   (erf: {:.4}, tanh: {:.4})", kernels::gelu_tanh(x), kernels::gelu_erf(x), kernels::gelu_tanh(x));
    }
    print!("{out}");
    Ok(())
}

