//! `host trace --tutorial [--lang ko] [--out DIR]`: the worked example of the tutorial this
//! project grew from (a Korean walk through GPT's forward pass with V = 6, d = 3 and the sentence
//! 나는 밥을 먹었다), from the token ids to a sampled next token.
//!
//! Every number printed comes out of the runtime: its kernels (`runtime::kernels`), its KV cache
//! and its sampler, called here on the example's tiny matrices, and each stage names what made
//! it. The tutorial's own numbers (its W_E, P, and the values it prints along the way) are
//! reproduced to their printed digits (`tests/trace_cli.rs` checks them); where it gives no
//! weights (the two heads, W_O, the MLP, the output layer, the sampling settings) the values
//! below are this project's, chosen small (W_O's and W_1's so that the results the tutorial
//! prints for those stages come out), and the walk marks them `[ours]`. Where the tutorial's
//! number differs from what the arithmetic gives (it rounds along the way), the walk prints its
//! own and says why (`[differs]`).
//!
//! The walk is built once ([`Walk`], the numbers) and laid out once ([`Doc`], the words in one
//! language); [`Doc::text`] prints it (tables aligned by display width, so Korean cells line up)
//! and [`Doc::html`] writes the same thing as one self-contained page (`DIR/tutorial.html`, also
//! written beside every model trace's `index.html`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use runtime::config::{Activation, Norm};
use runtime::kernels;
use runtime::kv_cache::KvLayout;
use runtime::model::{Matrix, MatrixData};
use runtime::observe::{Draw, Observer};
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::{KvCache, KvDType};
use unicode_width::UnicodeWidthStr;

/// Language of the walk's words (the numbers and symbols are the same in both).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// English.
    En,
    /// Korean (the tutorial's own).
    Ko,
}

impl Lang {
    fn tr(self, en: &str, ko: &str) -> String {
        match self {
            Lang::En => en.to_string(),
            Lang::Ko => ko.to_string(),
        }
    }
}

// ---- the example's numbers ----------------------------------------------------------------------

const V: usize = 6;
const D: usize = 3;
/// Tokens of the sentence (and positions of P).
const N: usize = 3;
const N_HEAD: usize = 2;
const HEAD_DIM: usize = 2;
const D_FF: usize = 6;
const EPS: f32 = 1e-5;

/// The tutorial's token embeddings W_E (its part 1; also in the runtime's `tutorial_*` tests).
const W_E: [[f32; D]; V] = [[0.2, 0.9, 0.1], [0.8, 0.1, 0.3], [0.4, 0.3, 0.9], [0.5, 0.5, 0.2], [0.1, 0.7, 0.6], [0.9, 0.2, 0.4]];
/// The tutorial's position embeddings P for positions 0, 1, 2.
const P: [[f32; D]; N] = [[0.0, 0.1, 0.0], [0.1, 0.0, 0.1], [0.2, 0.1, 0.0]];
/// 나는 밥을 먹었다.
const TOKENS: [usize; N] = [0, 1, 2];
/// The six tokens: 0–2 are the tutorial's; it names 3–5 too, and these three names are ours.
const VOCAB: [&str; V] = ["나는", "밥을", "먹었다", "그리고", "물을", "."];
const VOCAB_OURS: [bool; V] = [false, false, false, true, true, true];

/// Ours: each head's W_Q = W_K = W_V (d → 2, `x·W`): head 1 reads components 0 and 1 of a row,
/// head 2 components 1 and 2.
const W_HEAD: [[[f32; HEAD_DIM]; D]; N_HEAD] = [[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]];
/// Ours: W_O (4 → 3), mixing both heads into every output; picked from the multiples of 0.1 so
/// that row 2 of the attention output is the tutorial's [0.74, 0.44, 0.77].
const W_O: [[f32; D]; N_HEAD * HEAD_DIM] = [[0.0, 0.5, 0.8], [0.5, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.3, 0.6]];
/// Ours: the MLP's W_1 (3 → 6, no bias); units 0–3 picked so that row 2's h holds the values the
/// tutorial prints (1.61, −0.40, 1.21, −0.33), units 4 and 5 free.
const W_1: [[f32; D_FF]; D] = [[0.5, 0.3, 1.0, -0.4, 0.0, 0.5], [-1.0, 0.0, -0.8, 0.2, 1.0, 0.0], [0.2, -0.4, 0.0, 0.0, 0.0, 0.5]];
/// Ours: the MLP's W_2 (6 → 3, no bias).
const W_2: [[f32; D]; D_FF] = [[0.5, 0.0, -0.5], [0.0, 0.5, 0.0], [0.0, 0.0, 0.5], [0.5, 0.0, 0.0], [0.0, -0.5, 0.0], [0.0, 0.0, 0.5]];
/// Ours: the output layer W_U (3 → V). Not W_E tied, as GPT-2 would: W_E[5] − W_E[1] is 0.1 in
/// every component, and a LayerNorm output sums to 0, so tokens 1 and 5 would always tie.
const W_U: [[f32; V]; D] = [[0.0, -0.5, 0.0, 0.0, 0.5, 0.5], [0.0, 0.5, 0.5, -0.5, 0.0, -0.5], [-0.5, 0.0, 0.0, 0.5, -0.5, 0.5]];
/// Ours: the sampling settings (the seed is `--seed`'s, 42 by default).
const TEMPERATURE: f32 = 0.8;
const TOP_K: usize = 3;
const TOP_P: f32 = 0.8;
/// The seed of the draw when none is given (`--seed`'s default too).
pub const SEED: u64 = 42;
/// Candidates the tutorial's sampler keeps (≥ TOP_K).
const K_CAP: usize = 8;

/// `[in][out]` (the tutorial's `x·W`) to the kernels' row-major `[out][in]`.
fn transpose<const I: usize, const O: usize>(w: &[[f32; O]; I]) -> Vec<f32> {
    (0..O).flat_map(|o| w.iter().map(move |row| row[o])).collect()
}

/// A weight matrix in the kernels' layout, owning its values.
struct Weight {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
}

impl Weight {
    fn from_xw<const I: usize, const O: usize>(w: &[[f32; O]; I]) -> Self {
        Weight { rows: O, cols: I, data: transpose(w) }
    }
    /// A lookup table: row r is `t[r]`.
    fn table<const C: usize>(t: &[[f32; C]]) -> Self {
        Weight { rows: t.len(), cols: C, data: t.iter().flatten().copied().collect() }
    }
    fn m(&self) -> Matrix<'_> {
        Matrix { rows: self.rows, cols: self.cols, data: MatrixData::F32(&self.data) }
    }
}

/// The example's model: one block of two heads, no biases, every norm γ = 1, β = 0.
struct Net {
    wte: Weight,
    wpe: Weight,
    /// Both heads' W (q, k and v alike), heads side by side: 3 → 4.
    w_head: Weight,
    w_o: Weight,
    w_1: Weight,
    w_2: Weight,
    w_u: Weight,
}

impl Net {
    fn new() -> Self {
        let mut both = [[0.0f32; N_HEAD * HEAD_DIM]; D];
        for (h, w) in W_HEAD.iter().enumerate() {
            for (i, row) in w.iter().enumerate() {
                both[i][h * HEAD_DIM..(h + 1) * HEAD_DIM].copy_from_slice(row);
            }
        }
        Net {
            wte: Weight::table(&W_E),
            wpe: Weight::table(&P),
            w_head: Weight::from_xw(&both),
            w_o: Weight::from_xw(&W_O),
            w_1: Weight::from_xw(&W_1),
            w_2: Weight::from_xw(&W_2),
            w_u: Weight::from_xw(&W_U),
        }
    }
}

fn linear(x: &[f32], w: &Weight) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len() / w.cols * w.rows];
    kernels::linear(&mut out, x, &w.m(), &[], false, &mut []);
    out
}

/// `x + W·a`, the residual add fused into the product, as the forward pass does it.
fn residual(x: &[f32], a: &[f32], w: &Weight) -> Vec<f32> {
    let mut out = x.to_vec();
    kernels::linear(&mut out, a, &w.m(), &[], true, &mut []);
    out
}

fn layer_norm(x: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    kernels::layer_norm(&mut out, x, &[1.0; D], Some(&[0.0; D]), EPS);
    out
}

fn kv_cache(buf: &mut Vec<f32>, dtype: KvDType, kv_dim: usize, n_kv_head: usize) -> Result<KvCache<'_>> {
    let layout = KvLayout::uniform(1, N, kv_dim, n_kv_head);
    *buf = vec![0.0f32; KvCache::required_len(dtype, &layout)];
    Ok(KvCache::new(buf, dtype, layout)?)
}

/// One run of the block over tokens at positions `p0..`, every stage kept (rows of the batch).
struct Pass {
    h0: Vec<f32>,
    /// q = k = v (the heads' W is the same for all three), `[n, 4]`.
    qkv: Vec<f32>,
    /// `[t][head]`: the softmax weights over positions `0..=p0 + t`.
    pattern: Vec<Vec<Vec<f32>>>,
    z: Vec<f32>,
    attn_out: Vec<f32>,
    resid_mid: Vec<f32>,
    mean: Vec<f32>,
    std: Vec<f32>,
    ln2: Vec<f32>,
    mlp_pre: Vec<f32>,
    mlp_post: Vec<f32>,
    mlp_out: Vec<f32>,
    resid_post: Vec<f32>,
    ln_f: Vec<f32>,
    logits: Vec<f32>,
}

fn block(net: &Net, tokens: &[usize], p0: usize, cache: &mut KvCache<'_>) -> Pass {
    let n = tokens.len();
    let mut h0 = vec![0.0f32; n * D];
    for (t, (&tok, row)) in tokens.iter().zip(h0.chunks_exact_mut(D)).enumerate() {
        kernels::embedding_row(row, &net.wte.m(), tok, false);
        kernels::embedding_row(row, &net.wpe.m(), p0 + t, true);
    }
    let qkv = linear(&h0, &net.w_head);
    let c = N_HEAD * HEAD_DIM;
    for (t, row) in qkv.chunks_exact(c).enumerate() {
        cache.store(0, p0 + t, row, row);
    }
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();
    let mut z = vec![0.0f32; n * c];
    let mut pattern = Vec::new();
    let mut scratch = [0.0f32; N];
    for (t, (q, zt)) in qkv.chunks_exact(c).zip(z.chunks_exact_mut(c)).enumerate() {
        let mut heads = Vec::new();
        for (h, (qh, zh)) in q.chunks_exact(HEAD_DIM).zip(zt.chunks_exact_mut(HEAD_DIM)).enumerate() {
            let kv = cache.head(0, h, p0 + t + 1);
            let mut s = vec![0.0f32; kv.len()];
            kernels::attention_scores(qh, &kv, scale, &mut s);
            kernels::softmax(&mut s);
            heads.push(s);
            kernels::attention(zh, qh, &kv, scale, &mut scratch);
        }
        pattern.push(heads);
    }
    let attn_out = linear(&z, &net.w_o);
    let resid_mid = residual(&h0, &z, &net.w_o);
    let third = [1.0 / D as f32; D];
    let mean = resid_mid.chunks_exact(D).map(|r| kernels::dot_f32(r, &third)).collect();
    let std = resid_mid.chunks_exact(D).map(|r| kernels::norm_scale(Norm::LayerNorm, r, EPS)).collect();
    let ln2 = layer_norm(&resid_mid);
    let mlp_pre = linear(&ln2, &net.w_1);
    let mut mlp_post = mlp_pre.clone();
    kernels::activate(&mut mlp_post, Activation::GeluTanh);
    let mlp_out = linear(&mlp_post, &net.w_2);
    let resid_post = residual(&resid_mid, &mlp_post, &net.w_2);
    let ln_f = layer_norm(&resid_post);
    let logits = linear(&ln_f, &net.w_u);
    Pass { h0, qkv, pattern, z, attn_out, resid_mid, mean, std, ln2, mlp_pre, mlp_post, mlp_out, resid_post, ln_f, logits }
}

/// What the sampler reported of one draw.
#[derive(Default)]
struct Seen {
    token: u32,
    u: Option<f32>,
    total: f32,
    /// `(token, weight)` in the order the draw walks them.
    kept: Vec<(u32, f32)>,
}

impl Observer for Seen {
    fn draw(&mut self, d: &Draw<'_>) {
        self.token = d.token();
        self.u = d.u();
        self.total = d.total();
        self.kept = d.kept().collect();
    }
}

fn sample(logits: &[f32], cfg: SamplerConfig) -> Result<Seen> {
    let mut sampler = Sampler::<K_CAP>::new(cfg)?;
    let mut seen = Seen::default();
    let mut l = logits.to_vec();
    let token = sampler.sample_observed(&mut l, &[], &mut seen)?;
    if token != seen.token {
        bail!("the sampler reported token {} but returned {token}", seen.token);
    }
    Ok(seen)
}

/// Every number of the walk.
pub struct Walk {
    seed: u64,
    /// The tutorial's part 2: one head, W_Q = W_K = W_V = I.
    h0: Vec<f32>,
    q1: Vec<f32>,
    /// q2·k2 before scaling (the tutorial's 1.33).
    dot22: f32,
    /// `[query][key]`, the causal positions only.
    scores1: Vec<Vec<f32>>,
    weights1: Vec<Vec<f32>>,
    z1: Vec<f32>,
    /// Decoding token 2 from a cache holding tokens 0 and 1, per KV storage type.
    decode1: Vec<(KvDType, Vec<f32>)>,
    /// The block, all three tokens in one prefill.
    full: Pass,
    /// The block again: prefill tokens 0, 1, then decode token 2 (its rows), per KV storage.
    decode: Vec<(KvDType, Pass)>,
    softmax1: Vec<f32>,
    temp: Seen,
    top_k: Seen,
    top_p: Seen,
    greedy: u32,
}

impl Walk {
    /// Runs the example through the runtime; `seed` is the sampler's.
    pub fn run(seed: u64) -> Result<Walk> {
        let net = Net::new();
        // one head, identity weights (the tutorial's part 2)
        let mut buf = Vec::new();
        let mut cache = kv_cache(&mut buf, KvDType::F32, N_HEAD * HEAD_DIM, N_HEAD)?;
        let full = block(&net, &TOKENS, 0, &mut cache);
        let h0 = full.h0.clone();
        let mut eye = [[0.0f32; D]; D];
        for (i, row) in eye.iter_mut().enumerate() {
            row[i] = 1.0;
        }
        let q1 = linear(&h0, &Weight::from_xw(&eye));
        let row = |t: usize| &q1[t * D..(t + 1) * D];
        let scale = 1.0 / (D as f32).sqrt();
        let mut buf1 = Vec::new();
        let mut c1 = kv_cache(&mut buf1, KvDType::F32, D, 1)?;
        for t in 0..N {
            c1.store(0, t, row(t), row(t));
        }
        let (mut scores1, mut weights1, mut z1) = (Vec::new(), Vec::new(), vec![0.0f32; N * D]);
        let mut scratch = [0.0f32; N];
        for (t, zt) in z1.chunks_exact_mut(D).enumerate() {
            let kv = c1.head(0, 0, t + 1);
            let mut s = vec![0.0f32; t + 1];
            kernels::attention_scores(row(t), &kv, scale, &mut s);
            scores1.push(s.clone());
            kernels::softmax(&mut s);
            weights1.push(s);
            kernels::attention(zt, row(t), &kv, scale, &mut scratch);
        }
        let dot22 = kernels::dot_f32(row(2), row(2));
        let mut decode1 = Vec::new();
        for dtype in [KvDType::F32, KvDType::F16, KvDType::I8] {
            let mut b = Vec::new();
            let mut c = kv_cache(&mut b, dtype, D, 1)?;
            // prefill: tokens 0 and 1 store their k, v; decode: token 2 stores its own and
            // attends with its q
            for t in 0..N {
                c.store(0, t, row(t), row(t));
            }
            let mut z = vec![0.0f32; D];
            kernels::attention(&mut z, row(2), &c.head(0, 0, N), scale, &mut scratch);
            decode1.push((dtype, z));
        }
        // the whole block: prefill 0, 1, then decode 2
        let mut decode = Vec::new();
        for dtype in [KvDType::F32, KvDType::F16, KvDType::I8] {
            let mut b = Vec::new();
            let mut c = kv_cache(&mut b, dtype, N_HEAD * HEAD_DIM, N_HEAD)?;
            let _prefill = block(&net, &TOKENS[..2], 0, &mut c);
            decode.push((dtype, block(&net, &TOKENS[2..], 2, &mut c)));
        }
        // the next token, from the last row
        let last = &full.logits[(N - 1) * V..];
        let mut softmax1 = last.to_vec();
        kernels::softmax(&mut softmax1);
        let cfg = |top_k, top_p| SamplerConfig { temperature: TEMPERATURE, top_k, top_p, repetition_penalty: 1.0, seed };
        let temp = sample(last, cfg(0, 1.0))?;
        let top_k = sample(last, cfg(TOP_K, 1.0))?;
        let top_p = sample(last, cfg(TOP_K, TOP_P))?;
        let greedy = sample(last, SamplerConfig::greedy())?.token;
        Ok(Walk { seed, h0, q1, dot22, scores1, weights1, z1, decode1, full, decode, softmax1, temp, top_k, top_p, greedy })
    }
}

// ---- the words ----------------------------------------------------------------------------------

/// What a note is about.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tag {
    /// Values the tutorial does not give, chosen here.
    Ours,
    /// A number that is not the tutorial's, and why.
    Differs,
    /// Anything else worth saying.
    Aside,
}

struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Columns from the left that are text (left-aligned); the rest are numbers.
    left: usize,
}

enum Item {
    /// Numbers and symbols (monospace on the page).
    Line(String),
    /// A sentence.
    Prose(String),
    Table(Table),
    Note(Tag, String),
}

struct Section {
    title: String,
    /// What made the numbers: the runtime's functions.
    made_by: String,
    items: Vec<Item>,
}

/// The walk in one language: what is printed and what the page shows.
pub struct Doc {
    lang: Lang,
    title: String,
    lead: Vec<Item>,
    sections: Vec<Section>,
    end: Vec<Item>,
}

/// Two decimals, as the tutorial prints (never `-0.00`).
fn f2(x: f32) -> String {
    let s = format!("{x:.2}");
    if s == "-0.00" {
        "0.00".into()
    } else {
        s
    }
}

/// A row vector, each entry five wide: `[ 0.60,  0.40,  0.90]`.
fn vecf(v: &[f32]) -> String {
    let cells: Vec<String> = v.iter().map(|&x| format!("{:>5}", f2(x))).collect();
    format!("[{}]", cells.join(", "))
}

/// A matrix as a table: the row labels, then one column per output.
fn matrix_table<const O: usize>(w: &[[f32; O]], rows: impl Fn(usize) -> String, cols: impl Fn(usize) -> String) -> Table {
    let mut head = vec![String::new()];
    head.extend((0..O).map(cols));
    let rows = w.iter().enumerate().map(|(i, r)| std::iter::once(rows(i)).chain(r.iter().map(|&x| f2(x))).collect()).collect();
    Table { head, rows, left: 1 }
}

/// `5 .`: a token's id and its text.
fn token_name(id: usize) -> String {
    format!("{id} {}", VOCAB.get(id).copied().unwrap_or("?"))
}

impl Doc {
    /// Lays the walk out in `lang`.
    pub fn new(w: &Walk, lang: Lang) -> Doc {
        let l = |en: &str, ko: &str| lang.tr(en, ko);
        let line = |s: String| Item::Line(s);
        let f = &w.full;
        let row = |v: &[f32], width: usize, t: usize| v[t * width..(t + 1) * width].to_vec();
        let masked = l("masked", "마스킹");
        let mut sections = Vec::new();

        let title = l(
            "From token ids to the next token: the tutorial's worked example, computed by the runtime",
            "토큰 ID에서 다음 토큰까지: 튜토리얼의 예제를 런타임으로 계산",
        );
        let lead = vec![
            Item::Prose(l(
                "This follows the worked example of the tutorial this project grew from (written in Korean):",
                "이 프로젝트가 출발한 튜토리얼(한국어)의 예제를 그대로 따라간다:",
            )),
            Item::Prose(l(
                "a vocabulary of V = 6 tokens, d_model = 3, and the sentence 나는 밥을 먹었다 (\"I ate rice\") = ids 0, 1, 2.",
                "어휘 V = 6, d_model = 3, 문장 나는 밥을 먹었다 = ID 0, 1, 2.",
            )),
            Item::Prose(l(
                "Every number below comes from the runtime's kernels, KV cache or sampler (each stage names them);",
                "아래의 모든 수는 런타임의 커널, KV 캐시, 샘플러가 계산한 값이다 (단계마다 이름을 적었다).",
            )),
            Item::Prose(l(
                "where the tutorial prints a number, the same digits appear here. Positions count from 0 (its z₃ is z2 here).",
                "튜토리얼에 나오는 수는 여기서도 같은 자릿수로 나온다. 위치는 0부터 센다 (튜토리얼의 z₃ = 여기의 z2).",
            )),
            Item::Note(
                Tag::Aside,
                l(
                    "[ours] marks values the tutorial does not give, chosen here; [differs] a number that is not the tutorial's, with the reason.",
                    "[우리 값]은 튜토리얼에 없어 여기서 정한 값, [차이]는 튜토리얼과 다른 수와 그 이유를 뜻한다.",
                ),
            ),
            Item::Table(Table {
                head: vec![l("id", "ID"), l("token", "토큰"), l("from", "출처")],
                rows: (0..V)
                    .map(|i| vec![i.to_string(), VOCAB[i].to_string(), if VOCAB_OURS[i] { l("ours", "우리 값") } else { l("the tutorial", "튜토리얼") }])
                    .collect(),
                left: 3,
            }),
        ];

        // 1. embeddings
        sections.push(Section {
            title: l("Token embedding + position: H0[t] = W_E[token] + P[t]", "토큰 임베딩 + 위치 임베딩: H0[t] = W_E[토큰] + P[t]"),
            made_by: "kernels::embedding_row".into(),
            items: (0..N)
                .map(|t| line(format!("H0[{t}] = {} + {} = {}   ({})", vecf(&W_E[TOKENS[t]]), vecf(&P[t]), vecf(&row(&w.h0, D, t)), token_name(TOKENS[t]))))
                .collect(),
        });

        // 2. one head: q = k = v
        sections.push(Section {
            title: l(
                "One head, W_Q = W_K = W_V = I (the identity, as the tutorial starts): q, k, v are the rows of H0",
                "헤드 1개, W_Q = W_K = W_V = I (튜토리얼처럼 항등 행렬로 시작): q, k, v는 H0의 행",
            ),
            made_by: "kernels::linear".into(),
            items: (0..N).map(|t| line(format!("q{t} = k{t} = v{t} = {}", vecf(&row(&w.q1, D, t))))).collect(),
        });

        // 3. scores
        let head = |n: usize, p: &str| std::iter::once(String::new()).chain((0..n).map(|j| format!("{p}{j}"))).collect::<Vec<_>>();
        let causal = |m: &[Vec<f32>], label: &str, fill: &str| -> Vec<Vec<String>> {
            m.iter()
                .enumerate()
                .map(|(i, r)| std::iter::once(format!("{label}{i}")).chain((0..N).map(|j| r.get(j).map_or(fill.to_string(), |&x| f2(x)))).collect())
                .collect()
        };
        sections.push(Section {
            title: l(
                "Scores q·k/√3, causal: a query sees its own token and the ones before it",
                "어텐션 점수 q·k/√3, 인과 마스크: 쿼리는 자기 토큰과 앞선 토큰만 본다",
            ),
            made_by: l("kernels::attention_scores; q2·k2 alone: kernels::dot_f32", "kernels::attention_scores; q2·k2만: kernels::dot_f32"),
            items: vec![
                line(format!("q2·k2 = {}   √3 = {}   q2·k2/√3 = {}", f2(w.dot22), f2(3f32.sqrt()), f2(w.scores1[2][2]))),
                Item::Table(Table { head: head(N, "k"), rows: causal(&w.scores1, "q", &masked), left: 1 }),
            ],
        });

        // 4. softmax
        sections.push(Section {
            title: l("Softmax of each row: the attention weights (each row sums to 1)", "행마다 소프트맥스: 어텐션 가중치 (각 행의 합은 1)"),
            made_by: "kernels::softmax".into(),
            items: vec![
                Item::Table(Table { head: head(N, "k"), rows: causal(&w.weights1, "q", "0"), left: 1 }),
                Item::Note(
                    Tag::Aside,
                    l(
                        "The tutorial's own 3 × 3 example leaves the mask out at first; the last row (먹었다 sees every token) is the same either way.",
                        "튜토리얼은 처음에 마스크 없이 3 × 3 전체를 계산한다. 마지막 행(먹었다는 모든 토큰을 본다)은 마스크가 있든 없든 같다.",
                    ),
                ),
            ],
        });

        // 5. z
        let mut items: Vec<Item> = (0..N).map(|t| line(format!("z{t} = {}", vecf(&row(&w.z1, D, t))))).collect();
        items.push(Item::Note(
            Tag::Differs,
            l(
                &format!(
                    "the tutorial prints 0.47 for z2[1]: it mixes v with the weights already rounded to 0.27, 0.32, 0.41; unrounded, z2[1] = {:.4}.",
                    w.z1[2 * D + 1]
                ),
                &format!("튜토리얼의 z2[1] = 0.47은 가중치를 0.27, 0.32, 0.41로 반올림한 뒤 섞은 값이다. 반올림하지 않으면 z2[1] = {:.4}.", w.z1[2 * D + 1]),
            ),
        ));
        sections.push(Section {
            title: l("Attention output z = weights · V", "어텐션 출력 z = 가중치 · V"),
            made_by: "kernels::attention".into(),
            items,
        });

        // 6. two heads
        let c = N_HEAD * HEAD_DIM;
        let mut items = vec![
            line(format!(
                "W¹ = {:?}   W² = {:?}",
                W_HEAD[0].map(|r| r.map(|x| x as i32)),
                W_HEAD[1].map(|r| r.map(|x| x as i32))
            )),
            Item::Note(
                Tag::Ours,
                l(
                    "each head's W_Q = W_K = W_V (3 × 2): head 1 reads components 0, 1 of a row, head 2 components 1, 2. Scale 1/√2.",
                    "헤드마다 W_Q = W_K = W_V (3 × 2): 헤드 1은 행의 성분 0, 1을, 헤드 2는 성분 1, 2를 읽는다. 스케일 1/√2.",
                ),
            ),
        ];
        for t in 0..N {
            items.push(line(format!("q[{t}] = k[{t}] = v[{t}] = H0[{t}]·[W¹ W²] = {}", vecf(&row(&f.qkv, c, t)))));
        }
        for h in 0..N_HEAD {
            let m: Vec<Vec<f32>> = f.pattern.iter().map(|p| p[h].clone()).collect();
            items.push(Item::Prose(l(&format!("head {} attention weights:", h + 1), &format!("헤드 {} 어텐션 가중치:", h + 1))));
            items.push(Item::Table(Table { head: head(N, "k"), rows: causal(&m, "q", "0"), left: 1 }));
        }
        let sup = ["¹", "²"];
        for t in 0..N {
            let parts: Vec<String> = (0..N_HEAD)
                .map(|h| format!("Z{}[{t}] = {}", sup[h], vecf(&f.z[t * c + h * HEAD_DIM..t * c + (h + 1) * HEAD_DIM])))
                .collect();
            items.push(line(parts.join("   ")));
        }
        sections.push(Section {
            title: l(
                "Two heads of width 2, each with its own weights and the same causal softmax",
                "폭 2의 헤드 2개: 헤드마다 자기 가중치, 같은 인과 소프트맥스",
            ),
            made_by: "kernels::linear, KvCache::store, kernels::attention_scores, kernels::softmax, kernels::attention".into(),
            items,
        });

        // 7. concat and W_O
        let mut items = vec![line("W_O:".into()), Item::Table(matrix_table(&W_O, |i| format!("{}{}", if i < HEAD_DIM { "Z¹" } else { "Z²" }, i % HEAD_DIM), |j| format!("out{j}")))];
        items.push(Item::Note(
            Tag::Ours,
            l(
                "W_O (4 × 3) mixes both heads into every output; its entries, multiples of 0.1, are picked so that row 2 comes out at the tutorial's [0.74, 0.44, 0.77].",
                "W_O (4 × 3)는 두 헤드를 모든 출력에 섞는다. 0.1 단위 값으로, 2행이 튜토리얼의 [0.74, 0.44, 0.77]이 되도록 골랐다.",
            ),
        ));
        for t in 0..N {
            items.push(line(format!("concat[{t}] = {}   attn_out[{t}] = concat[{t}]·W_O = {}", vecf(&row(&f.z, c, t)), vecf(&row(&f.attn_out, D, t)))));
        }
        sections.push(Section {
            title: l("Concatenate the heads (3 × 4) and mix them with W_O (4 × 3)", "헤드 이어붙이기 (3 × 4), W_O (4 × 3)로 섞기"),
            made_by: "kernels::linear".into(),
            items,
        });

        // 8. residual
        sections.push(Section {
            title: l("Residual: resid_mid = H0 + attn_out", "잔차 연결: resid_mid = H0 + attn_out"),
            made_by: l(
                "kernels::linear with accumulate (the add fused into W_O's product, as the forward pass does it)",
                "kernels::linear의 accumulate (순전파처럼 W_O 곱에 덧셈을 합침)",
            ),
            items: (0..N).map(|t| line(format!("resid_mid[{t}] = {} + {} = {}", vecf(&row(&f.h0, D, t)), vecf(&row(&f.attn_out, D, t)), vecf(&row(&f.resid_mid, D, t))))).collect(),
        });

        // 9. pre-LayerNorm
        let mut items: Vec<Item> = (0..N)
            .map(|t| line(format!("mean[{t}] = {}   std[{t}] = {}   ln2[{t}] = {}", f2(f.mean[t]), f2(f.std[t]), vecf(&row(&f.ln2, D, t)))))
            .collect();
        items.push(Item::Note(
            Tag::Aside,
            l(
                "GPT-2 normalises H0 before attention too (ln_1); the tutorial's attention reads H0 as it is, and so does this walk, so that its numbers stay the tutorial's.",
                "GPT-2는 어텐션 앞에서도 H0를 정규화한다 (ln_1). 튜토리얼의 어텐션은 H0를 그대로 쓰고, 수를 튜토리얼과 맞추려고 여기서도 그렇게 한다.",
            ),
        ));
        sections.push(Section {
            title: l(
                "LayerNorm before the MLP (pre-LN): (x − mean)/std, γ = 1, β = 0, ε = 1e-5",
                "MLP 앞의 레이어 정규화 (pre-LN): (x − 평균)/표준편차, γ = 1, β = 0, ε = 1e-5",
            ),
            made_by: l(
                "kernels::layer_norm; std = kernels::norm_scale; mean = kernels::dot_f32 with (1/3, 1/3, 1/3)",
                "kernels::layer_norm; 표준편차 = kernels::norm_scale; 평균 = kernels::dot_f32와 (1/3, 1/3, 1/3)",
            ),
            items,
        });

        // 10. MLP
        let mut items = vec![
            line("W_1:".into()),
            Item::Table(matrix_table(&W_1, |i| format!("ln2_{i}"), |j| format!("h{j}"))),
            line("W_2:".into()),
            Item::Table(matrix_table(&W_2, |i| format!("h{i}"), |j| format!("out{j}"))),
            Item::Note(
                Tag::Ours,
                l(
                    "W_1 (3 × 6) and W_2 (6 × 3), no biases. W_1's units 0–3 are picked so that h[2] holds the tutorial's 1.61, -0.40, 1.21, -0.33.",
                    "W_1 (3 × 6), W_2 (6 × 3), 편향 없음. W_1의 유닛 0–3은 h[2]에 튜토리얼의 1.61, -0.40, 1.21, -0.33이 나오도록 골랐다.",
                ),
            ),
            Item::Note(
                Tag::Differs,
                l(
                    "the tutorial feeds its MLP the row before LayerNorm, [0.74, 0.44, 0.77], to keep the numbers short; a GPT-2 block feeds ln_2's output, as here.",
                    "튜토리얼은 수를 간단히 하려고 정규화 전의 행 [0.74, 0.44, 0.77]을 MLP에 넣는다. GPT-2 블록은 여기처럼 ln_2의 출력을 넣는다.",
                ),
            ),
            Item::Prose(l("Row 2 (먹었다), unit by unit:", "2행(먹었다), 유닛별:")),
            Item::Table(Table {
                head: vec![l("unit", "유닛"), "h[2]".into(), "GELU (tanh)".into(), "GELU (erf)".into()],
                rows: (0..D_FF)
                    .map(|j| {
                        let x = f.mlp_pre[2 * D_FF + j];
                        vec![format!("h{j}"), f2(x), f2(f.mlp_post[2 * D_FF + j]), f2(kernels::gelu_erf(x))]
                    })
                    .collect(),
                left: 1,
            }),
        ];
        for t in 0..N {
            items.push(line(format!("h[{t}] = ln2[{t}]·W_1 = {}", vecf(&row(&f.mlp_pre, D_FF, t)))));
        }
        for t in 0..N {
            items.push(line(format!("mlp_out[{t}] = GELU(h[{t}])·W_2 = {}", vecf(&row(&f.mlp_out, D, t)))));
        }
        for t in 0..N {
            items.push(line(format!("resid_post[{t}] = resid_mid[{t}] + mlp_out[{t}] = {}", vecf(&row(&f.resid_post, D, t)))));
        }
        items.push(Item::Note(
            Tag::Aside,
            l(
                "GELU (tanh form, GPT-2's gelu_new) keeps large positives nearly as they are and pulls negatives towards 0 without flattening them.",
                "GELU (tanh 근사, GPT-2의 gelu_new)는 큰 양수는 거의 그대로 두고, 음수는 0 쪽으로 당기되 완전히 0으로 만들지는 않는다.",
            ),
        ));
        sections.push(Section {
            title: l(
                "MLP: h = ln2·W_1 (3 → 6), GELU, then ·W_2 (6 → 3), added back to the residual",
                "MLP: h = ln2·W_1 (3 → 6), GELU, ·W_2 (6 → 3), 잔차에 다시 더하기",
            ),
            made_by: l(
                "kernels::linear, kernels::activate (GELU tanh), kernels::gelu_erf, kernels::linear with accumulate",
                "kernels::linear, kernels::activate (GELU tanh), kernels::gelu_erf, kernels::linear의 accumulate",
            ),
            items,
        });

        // 11. prefill then decode, one head
        let same = |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        let mut items = vec![Item::Prose(l(
            "prefill 나는 밥을 (tokens 0, 1: their k, v stored); decode 먹었다: store its k, v, attend with its q alone",
            "프리필 나는 밥을 (토큰 0, 1: k, v 저장); 디코드 먹었다: k, v를 저장하고 q 하나로 캐시를 본다",
        ))];
        for (dtype, z) in &w.decode1 {
            let tail = if same(z, &row(&w.z1, D, 2)) {
                l("   (bit for bit the z2 above)", "   (위의 z2와 비트 단위로 같음)")
            } else {
                l("   (the rounded cache moves the last bits)", "   (반올림된 캐시라 마지막 비트가 다름)")
            };
            items.push(line(format!("{:>4} KV: z2 = {}{tail}", dtype.name(), vecf(z))));
        }
        sections.push(Section {
            title: l(
                "Prefill, then one decode step from the KV cache (the tutorial's one head, W = I)",
                "프리필 후 KV 캐시로 디코드 한 단계 (튜토리얼의 헤드 1개, W = I)",
            ),
            made_by: "KvCache::store, KvCache::head, kernels::attention".into(),
            items,
        });

        // 12. the whole block from the cache
        let mut items = vec![Item::Prose(l(
            "the whole block again: prefill tokens 0, 1 as one batch, then decode token 2 alone against the cache",
            "블록 전체를 다시: 토큰 0, 1을 한 번에 프리필한 뒤, 토큰 2 하나만 캐시를 보고 디코드",
        ))];
        for (dtype, p) in &w.decode {
            let tail = if same(&p.resid_post, &row(&f.resid_post, D, 2)) && same(&p.logits, &row(&f.logits, V, 2)) {
                l("   (bit for bit the prefill's row, and the same logits)", "   (프리필의 행과 비트 단위로 같고, 로짓도 같음)")
            } else {
                l("   (the rounded cache moves the last bits)", "   (반올림된 캐시라 마지막 비트가 다름)")
            };
            items.push(line(format!("{:>4} KV: resid_post[2] = {}{tail}", dtype.name(), vecf(&p.resid_post))));
        }
        sections.push(Section {
            title: l(
                "The same for the whole block: a decode step gives the prefill's last row",
                "블록 전체도 같다: 디코드 한 단계가 프리필의 마지막 행을 낸다",
            ),
            made_by: l("every kernel above, with KvCache", "위의 모든 커널과 KvCache"),
            items,
        });

        // 13. final LayerNorm
        let mut items: Vec<Item> = (0..N).map(|t| line(format!("ln_f[{t}] = {}", vecf(&row(&f.ln_f, D, t))))).collect();
        items.push(Item::Note(
            Tag::Aside,
            l("one block here; GPT-2 small stacks 12 before ln_f, GPT-3 96.", "여기서는 블록 1개. GPT-2 small은 ln_f 앞에 12개, GPT-3는 96개를 쌓는다."),
        ));
        sections.push(Section {
            title: l("Final LayerNorm (ln_f, γ = 1, β = 0) of the block's output", "블록 출력의 마지막 레이어 정규화 (ln_f, γ = 1, β = 0)"),
            made_by: "kernels::layer_norm".into(),
            items,
        });

        // 14. output layer
        let mut items = vec![
            line("W_U:".into()),
            Item::Table(matrix_table(&W_U, |i| format!("ln_f_{i}"), |j| VOCAB[j].to_string())),
            Item::Note(
                Tag::Ours,
                l(
                    "W_U (3 × 6). GPT-2 reuses W_E here (tied weights), but with this W_E tokens 1 and 5 would always tie: W_E[5] − W_E[1] = [0.1, 0.1, 0.1], and a LayerNorm output sums to 0.",
                    "W_U (3 × 6). GPT-2는 여기서 W_E를 다시 쓰지만(가중치 공유), 이 W_E로는 토큰 1과 5가 늘 같은 점수가 된다: W_E[5] − W_E[1] = [0.1, 0.1, 0.1]이고, 정규화된 행의 합은 0이다.",
                ),
            ),
        ];
        for t in 0..N {
            items.push(line(format!("logits[{t}] = ln_f[{t}]·W_U = {}", vecf(&row(&f.logits, V, t)))));
        }
        items.push(Item::Prose(l(
            "Only the last row, logits[2], predicts the next token; the rows before it predict tokens already known.",
            "다음 토큰은 마지막 행 logits[2]만으로 정한다. 앞의 행들은 이미 아는 토큰의 자리다.",
        )));
        sections.push(Section {
            title: l(
                "Output layer: logits = ln_f·W_U, one score per token of the vocabulary (3 → 6)",
                "출력층: logits = ln_f·W_U, 어휘의 토큰마다 점수 하나 (3 → 6)",
            ),
            made_by: "kernels::linear".into(),
            items,
        });

        // 15. sampling
        let prob = |s: &Seen, id: usize| s.kept.iter().find(|k| k.0 as usize == id).map(|k| k.1 / s.total);
        let dropped = l("dropped", "제외");
        let cell = |p: Option<f32>| p.map_or(dropped.clone(), f2);
        let last = &f.logits[(N - 1) * V..];
        let rows = last
            .iter()
            .zip(&w.softmax1)
            .enumerate()
            .map(|(id, (&logit, &p))| vec![token_name(id), f2(logit), f2(p), cell(prob(&w.temp, id)), cell(prob(&w.top_k, id)), cell(prob(&w.top_p, id))])
            .collect();
        let mut items = vec![
            line(format!("T = {TEMPERATURE}   top-k = {TOP_K}   top-p = {TOP_P}   seed = {}", w.seed)),
            Item::Note(
                Tag::Ours,
                l(
                    "the temperature, top-k and top-p; the seed is --seed's (42 by default), so the draw is the same on every run.",
                    "온도, top-k, top-p 값. 시드는 --seed 값(기본 42)이라 실행할 때마다 같은 토큰이 뽑힌다.",
                ),
            ),
            Item::Table(Table {
                head: vec![
                    l("token", "토큰"),
                    "logit".into(),
                    "softmax".into(),
                    format!("T = {TEMPERATURE}"),
                    format!("top-k {TOP_K}"),
                    format!("top-p {TOP_P}"),
                ],
                rows,
                left: 1,
            }),
            Item::Prose(l(
                &format!(
                    "softmax: the probabilities at T = 1. T = {TEMPERATURE}: the sampler's weights exp((logit − max)/T), normalised. top-k keeps the {TOP_K} most likely; top-p the fewest of those whose mass reaches {TOP_P}."
                ),
                &format!(
                    "softmax: T = 1의 확률. T = {TEMPERATURE}: 샘플러의 가중치 exp((로짓 − 최댓값)/T)를 정규화한 값. top-k는 확률이 높은 {TOP_K}개를, top-p는 그중 누적 확률이 {TOP_P}에 닿는 최소 개수를 남긴다."
                ),
            )),
            line(l(
                &format!("greedy (temperature 0, the argmax): {}", token_name(w.greedy as usize)),
                &format!("그리디 (온도 0, 최댓값): {}", token_name(w.greedy as usize)),
            )),
        ];
        // the draw: the kept tokens split [0, 1) in the order the sampler walks them
        let s = &w.top_p;
        let mut run = 0.0f32;
        let mut spans = Vec::new();
        for &(id, wt) in &s.kept {
            let a = run / s.total;
            run += wt;
            spans.push(format!("[{}, {}) {}", f2(a), f2(run / s.total), token_name(id as usize)));
        }
        let u = s.u.unwrap_or(0.0);
        items.push(line(format!("u = {u:.4}   (PCG32, seed {})   {}", w.seed, spans.join("   "))));
        let next = token_name(s.token as usize);
        items.push(Item::Prose(l(
            &format!("The draw lands in the span of {next}: the next token is {next}."),
            &format!("u는 {next}의 구간에 떨어진다: 다음 토큰은 {next}."),
        )));
        sections.push(Section {
            title: l(
                "The next token: softmax with temperature, top-k, top-p, then one draw",
                "다음 토큰: 온도를 준 소프트맥스, top-k, top-p, 그리고 뽑기 한 번",
            ),
            made_by: "kernels::softmax, runtime::sampler::Sampler (sample_observed)".into(),
            items,
        });

        let sentence: Vec<&str> = TOKENS.iter().map(|&t| VOCAB[t]).collect();
        let end = vec![line(format!("{} → {}", sentence.join(" "), VOCAB.get(s.token as usize).copied().unwrap_or("?")))];
        Doc { lang, title, lead, sections, end }
    }

    /// The walk for a terminal: tables aligned by display width (Korean cells are two columns).
    pub fn text(&self) -> String {
        let mut out = String::new();
        let put = |out: &mut String, s: &str| {
            out.push_str(s);
            out.push('\n');
        };
        put(&mut out, &self.title);
        put(&mut out, "");
        for item in &self.lead {
            self.item_text(&mut out, item, "");
        }
        let made_by = self.lang.tr("made by", "계산");
        for (i, s) in self.sections.iter().enumerate() {
            put(&mut out, "");
            put(&mut out, &format!("{}. {}", i + 1, s.title));
            put(&mut out, &format!("   ({made_by}: {})", s.made_by));
            for item in &s.items {
                self.item_text(&mut out, item, "   ");
            }
        }
        put(&mut out, "");
        for item in &self.end {
            self.item_text(&mut out, item, "");
        }
        out
    }

    fn tag(&self, tag: Tag) -> String {
        match tag {
            Tag::Ours => self.lang.tr("[ours] ", "[우리 값] "),
            Tag::Differs => self.lang.tr("[differs] ", "[차이] "),
            Tag::Aside => String::new(),
        }
    }

    fn item_text(&self, out: &mut String, item: &Item, indent: &str) {
        match item {
            Item::Line(s) | Item::Prose(s) => {
                out.push_str(indent);
                out.push_str(s);
                out.push('\n');
            }
            Item::Note(tag, s) => {
                out.push_str(&format!("{indent}{}{}{s}\n", self.lang.tr("note: ", "참고: "), self.tag(*tag)));
            }
            Item::Table(t) => out.push_str(&table_text(t, indent)),
        }
    }

    /// The walk as one self-contained HTML page (inline CSS, nothing fetched). `trace` links
    /// back to the model trace's page when the walk sits beside one.
    pub fn html(&self, trace: bool) -> String {
        let mut h = String::new();
        let lang = if self.lang == Lang::Ko { "ko" } else { "en" };
        h.push_str(&format!("<!DOCTYPE html>\n<html lang=\"{lang}\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"));
        h.push_str(&format!("<title>{}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n<main>\n", esc(&self.title)));
        if trace {
            h.push_str(&format!("<p class=\"back\"><a href=\"index.html\">{}</a></p>\n", esc(&self.lang.tr("← the model's trace", "← 모델 트레이스"))));
        }
        h.push_str(&format!("<h1>{}</h1>\n", esc(&self.title)));
        for item in &self.lead {
            self.item_html(&mut h, item);
        }
        for (i, s) in self.sections.iter().enumerate() {
            h.push_str(&format!("<section id=\"s{}\">\n<h2>{}. {}</h2>\n", i + 1, i + 1, esc(&s.title)));
            h.push_str(&format!("<p class=\"made\">{}: <code>{}</code></p>\n", esc(&self.lang.tr("made by", "계산")), esc(&s.made_by)));
            for item in &s.items {
                self.item_html(&mut h, item);
            }
            h.push_str("</section>\n");
        }
        h.push_str("<section class=\"end\">\n");
        for item in &self.end {
            self.item_html(&mut h, item);
        }
        h.push_str("</section>\n</main>\n</body>\n</html>\n");
        h
    }

    fn item_html(&self, h: &mut String, item: &Item) {
        match item {
            Item::Line(s) => h.push_str(&format!("<p class=\"line\">{}</p>\n", esc(s))),
            Item::Prose(s) => h.push_str(&format!("<p>{}</p>\n", esc(s))),
            Item::Note(tag, s) => {
                let class = match tag {
                    Tag::Ours => "note ours",
                    Tag::Differs => "note differs",
                    Tag::Aside => "note",
                };
                h.push_str(&format!("<p class=\"{class}\">{}{}</p>\n", esc(&self.tag(*tag)), esc(s)));
            }
            Item::Table(t) => {
                h.push_str("<table>\n<thead><tr>");
                for (j, c) in t.head.iter().enumerate() {
                    h.push_str(&format!("<th{}>{}</th>", if j < t.left { " class=\"l\"" } else { "" }, esc(c)));
                }
                h.push_str("</tr></thead>\n<tbody>\n");
                for r in &t.rows {
                    h.push_str("<tr>");
                    for (j, c) in r.iter().enumerate() {
                        h.push_str(&format!("<td{}>{}</td>", if j < t.left { " class=\"l\"" } else { "" }, esc(c)));
                    }
                    h.push_str("</tr>\n");
                }
                h.push_str("</tbody>\n</table>\n");
            }
        }
    }
}

const CSS: &str = "body{margin:0;background:#fbfbf8;color:#1d1d1b;font:15px/1.5 system-ui,-apple-system,'Segoe UI','Noto Sans KR','Apple SD Gothic Neo',sans-serif}
main{max-width:60rem;margin:0 auto;padding:1.5rem}
h1{font-size:1.5rem;margin:0 0 1rem}
h2{font-size:1.1rem;margin:2rem 0 .25rem;border-top:1px solid #ddd;padding-top:1rem}
p{margin:.3rem 0}
p.line{font-family:ui-monospace,'SFMono-Regular',Menlo,Consolas,'D2Coding',monospace;font-size:13px;white-space:pre-wrap}
p.made{color:#666;font-size:13px}
code{font-family:ui-monospace,'SFMono-Regular',Menlo,Consolas,monospace;font-size:12.5px;background:#efefea;padding:0 .25rem;border-radius:3px}
p.note{font-size:13.5px;color:#444;padding:.2rem .6rem;border-left:3px solid #bbb}
p.note.ours{border-color:#3a7bd5;background:#f0f5fc}
p.note.differs{border-color:#d59a3a;background:#fcf6ec}
table{border-collapse:collapse;margin:.5rem 0;font-family:ui-monospace,'SFMono-Regular',Menlo,Consolas,'D2Coding',monospace;font-size:13px}
th,td{border:1px solid #d6d6d0;padding:.15rem .6rem;text-align:right}
th{background:#efefea;font-weight:600}
.l{text-align:left}
section.end p{font-size:1.3rem;margin-top:1.5rem}
.back{font-size:13px}
";

/// HTML text escaping.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `s` padded with spaces to `width` display columns (text left, numbers right).
fn pad(s: &str, width: usize, left: bool) -> String {
    let fill = " ".repeat(width.saturating_sub(s.width()));
    if left {
        format!("{s}{fill}")
    } else {
        format!("{fill}{s}")
    }
}

/// A table as Markdown's pipes, every column as wide on screen as its widest cell.
fn table_text(t: &Table, indent: &str) -> String {
    let cols = t.head.len();
    let widths: Vec<usize> = (0..cols)
        .map(|j| std::iter::once(&t.head).chain(&t.rows).map(|r| r.get(j).map_or(0, |c| c.width())).max().unwrap_or(0))
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = (0..cols).map(|j| pad(cells.get(j).map_or("", |c| c.as_str()), widths[j], j < t.left)).collect();
        format!("{indent}| {} |\n", padded.join(" | "))
    };
    let mut out = line(&t.head);
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w + 2)).collect();
    out.push_str(&format!("{indent}|{}|\n", rule.join("|")));
    for r in &t.rows {
        out.push_str(&line(r));
    }
    out
}

/// Writes the walk as `dir/tutorial.html`; `trace` when it sits beside a model trace's page.
pub fn write_page(dir: &Path, lang: Lang, seed: u64, trace: bool) -> Result<PathBuf> {
    let page = Doc::new(&Walk::run(seed)?, lang).html(trace);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("tutorial.html");
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// `host trace --tutorial`: the walk on stdout, or as `DIR/tutorial.html` with `--out DIR`.
pub fn run(lang: Lang, seed: u64, out: Option<&Path>) -> Result<()> {
    match out {
        Some(dir) => {
            let path = write_page(dir, lang, seed, false)?;
            let kb = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0).div_ceil(1024);
            eprintln!("wrote {} ({kb} KB)", path.display());
        }
        None => print!("{}", Doc::new(&Walk::run(seed)?, lang).text()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table, in both languages, lines up on screen: each row has the same display width
    /// and its `|` at the same display columns as the header's (Korean cells are two columns
    /// wide; counting chars instead of columns would break this).
    #[test]
    fn tables_line_up_in_display_columns() {
        let walk = Walk::run(42).unwrap();
        for lang in [Lang::En, Lang::Ko] {
            let doc = Doc::new(&walk, lang);
            let tables: Vec<&Table> = doc
                .lead
                .iter()
                .chain(doc.sections.iter().flat_map(|s| &s.items))
                .filter_map(|i| if let Item::Table(t) = i { Some(t) } else { None })
                .collect();
            assert!(tables.len() >= 8, "{}", tables.len());
            let mut wide = 0;
            for t in tables {
                let text = table_text(t, "   ");
                let bars = |l: &str| -> Vec<usize> {
                    let mut col = 0;
                    let mut at = Vec::new();
                    for ch in l.chars() {
                        if ch == '|' {
                            at.push(col);
                        }
                        col += unicode_width::UnicodeWidthChar::width(ch).unwrap_or(0);
                    }
                    at
                };
                let lines: Vec<&str> = text.lines().collect();
                assert_eq!(lines.len(), t.rows.len() + 2);
                for l in &lines {
                    assert_eq!(l.width(), lines[0].width(), "{lang:?}:\n{text}");
                    assert_eq!(bars(l), bars(lines[0]), "{lang:?}:\n{text}");
                }
                wide += lines.iter().filter(|l| l.width() != l.chars().count()).count();
            }
            assert!(wide > 0, "{lang:?}: some cells are wide (the tokens), so the test means something");
        }
    }

    /// Both languages carry the same numbers: the lines differ only in words.
    #[test]
    fn languages_share_the_numbers() {
        let walk = Walk::run(42).unwrap();
        let nums = |s: &str| -> Vec<String> {
            s.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')).filter(|w| w.contains('.') && w.len() > 1).map(str::to_string).collect()
        };
        let (en, ko) = (Doc::new(&walk, Lang::En).text(), Doc::new(&walk, Lang::Ko).text());
        assert_eq!(en.lines().count(), ko.lines().count());
        for (a, b) in en.lines().zip(ko.lines()) {
            // (vector lines and tables; notes are sentences whose numbers sit among words)
            if (a.contains(" = [") && !a.trim_start().starts_with("note:")) || a.trim_start().starts_with('|') {
                assert_eq!(nums(a), nums(b), "\n{a}\n{b}");
            }
        }
    }

    /// The draw is the sampler's, repeatable, and follows the seed.
    #[test]
    fn the_draw_is_reproducible() {
        let a = Walk::run(42).unwrap();
        let b = Walk::run(42).unwrap();
        assert_eq!(a.top_p.token, b.top_p.token);
        assert_eq!(a.top_p.u.map(f32::to_bits), b.top_p.u.map(f32::to_bits));
        // the same u at each stage (one draw per sampler, same seed)
        assert_eq!(a.temp.u, a.top_p.u);
        // top-k keeps 3, top-p fewer or as many, and the token is among them
        assert_eq!(a.top_k.kept.len(), TOP_K);
        assert!(a.top_p.kept.len() <= TOP_K && a.top_p.kept.iter().any(|k| k.0 == a.top_p.token));
        let us: std::collections::BTreeSet<u32> = (0..16).map(|s| Walk::run(s).unwrap().top_p.u.unwrap().to_bits()).collect();
        assert!(us.len() > 8, "the seed changes u");
    }
}
