//! `index.html` of `host trace`: one self-contained page (inline SVG and CSS, no script, no
//! network) with the token strip, a layer × head grid of attention heatmaps, the residual
//! stream's norm per layer, the logit lens, the sampler's bars and the KV cache as it fills (with
//! a map of each local-attention ring: the position every slot holds after each step), and last
//! the table of every stage's array. Each section opens with a sentence or two on what it shows
//! and the page links the tutorial page (`tutorial.html`, beside it).
//!
//! A heatmap labels both axes with each position and its token (or a bin's positions), has a
//! colour scale with its values, and each cell's SVG `<title>` (the hover text) holds its weight;
//! clicking a head enlarges it (CSS `:target`, no script). Positions read as people count them:
//! `0–14` for positions 0 to 14.
//!
//! What it draws is bounded whatever the model (see [`limits`]): each heatmap has at most
//! [`HEAT_MAX_SIDE`]² cells and all of them together at most [`HEAT_CELL_BUDGET`] (beyond that
//! positions are binned: a cell is the mean over its query positions of the attention summed
//! over its key positions); the logit lens shows the last [`LENS_MAX_POS`] positions, the
//! sampler the first [`DRAW_MAX`] draws with their [`BARS`] most likely tokens, the KV table
//! and the ring maps the first and last [`KV_ROWS`] / 2 steps. With about 80 bytes per drawn cell
//! (its square and its hover text) the page stays within a few megabytes: GPT-2 small's shape at
//! 1024 positions draws 144 heatmaps of 28 × 28 cells, GPT-2 XL's at 2048 1,200 of 10 × 10.

use std::fmt::Write;

use runtime::{Config, Model};
use serde_json::Value;

use runtime::observe::slot_position;

use crate::trace::{kv_report, local_layers, residual_norms, token_text, KvReport, Trace};

/// Cells per side of one heatmap at most.
pub const HEAT_MAX_SIDE: usize = 64;
/// Cells of all heatmaps together at most (side² each).
pub const HEAT_CELL_BUDGET: usize = 120_000;
/// Positions the logit-lens table shows (the last ones).
pub const LENS_MAX_POS: usize = 16;
/// Draws the sampler section shows (the first ones).
pub const DRAW_MAX: usize = 24;
/// Bars per draw.
pub const BARS: usize = 10;
/// Rows of the KV-cache table.
pub const KV_ROWS: usize = 16;

/// Cells per side of every heatmap for T positions and `maps` heatmaps.
pub fn heat_side(t: usize, maps: usize) -> usize {
    let by_budget = ((HEAT_CELL_BUDGET / maps.max(1)) as f64).sqrt() as usize;
    t.min(HEAT_MAX_SIDE).min(by_budget.max(1)).max(1)
}

/// The page's limits in one sentence (also in the README).
pub fn limits(t: usize, n_layer: usize, n_head: usize) -> String {
    let side = heat_side(t, n_layer * n_head);
    let binned = if side < t {
        format!(
            "here T = {t} > {side}, so each cell covers {} positions: the mean over its queries of the attention summed over its keys",
            t.div_ceil(side)
        )
    } else {
        format!("here every one of the T = {t} positions has its own row and column")
    };
    format!(
        "Limits: each of the {} heatmaps (layers × heads) draws at most {side} × {side} cells (at most {HEAT_MAX_SIDE} per side, {HEAT_CELL_BUDGET} cells in all); {binned}. \
         The logit lens shows the last {LENS_MAX_POS} positions, the sampler the first {DRAW_MAX} draws ({BARS} bars each), the KV table the first and last {} steps. \
         Every value is in the .npy files and trace.json.",
        n_layer * n_head,
        KV_ROWS / 2
    )
}

/// `1, 3, 5`.
fn list(v: &[usize]) -> String {
    v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {
                let _ = write!(o, "\\x{:02x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o
}

/// A token's text for display: spaces as `·`, newlines as `↵`, empty as `∅`.
fn shown(s: &str) -> String {
    esc(&visible(s))
}

/// [`shown`] before escaping.
fn visible(s: &str) -> String {
    if s.is_empty() {
        return "∅".into();
    }
    s.replace(' ', "·").replace('\n', "↵").replace('\t', "→")
}

/// Characters of a token an axis label keeps (longer ones end in `…`).
const LABEL_CHARS: usize = 8;

/// A heatmap's axis label: the position, then the token as the strip shows it, cut to
/// [`LABEL_CHARS`] characters (`…` marks a cut), escaped.
fn axis_label(pos: usize, s: &str) -> String {
    let v = visible(s);
    let cut: String = if v.chars().count() > LABEL_CHARS { v.chars().take(LABEL_CHARS - 1).chain(['…']).collect() } else { v };
    format!("{pos} {}", esc(&cut))
}

/// Positions `first..end` as people count them: `3`, `0–14` (both ends included), `none`.
fn span(first: usize, end: usize) -> String {
    match end.saturating_sub(first) {
        0 => "none".to_string(),
        1 => first.to_string(),
        _ => format!("{first}–{}", end - 1),
    }
}

/// An attention weight as a cell's hover text prints it: 4 decimals, or 3 significant digits
/// below 0.001 (`2.50e-5`).
fn weight(v: f32) -> String {
    if v >= 0.001 || v == 0.0 {
        format!("{v:.4}")
    } else {
        format!("{v:.2e}")
    }
}

/// Ticks of an axis from 0 to at least `max`: about `n` steps of 1, 2 or 5 × 10^k. Returns the
/// axis' top (the last tick) and the ticks.
fn nice_ticks(max: f64, n: usize) -> (f64, Vec<f64>) {
    let max = if max.is_finite() && max > 0.0 { max } else { 1.0 };
    let raw = max / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|&s| s >= raw * (1.0 - 1e-9)).unwrap_or(10.0 * mag);
    let steps = (max / step - 1e-9).ceil().max(1.0) as usize;
    let ticks: Vec<f64> = (0..=steps).map(|i| i as f64 * step).collect();
    (steps as f64 * step, ticks)
}

/// A tick's label with as many decimals as the step needs.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 { 0 } else { (-step.log10()).ceil() as usize };
    format!("{v:.decimals$}")
}

/// Every how many of `n` points an axis labels one, so that at most `max` labels show: 1, 2, 5,
/// 10, 20, 50, ...
fn label_every(n: usize, max: usize) -> usize {
    let mut mag = 1usize;
    loop {
        for m in [1, 2, 5] {
            if n.div_ceil(m * mag) <= max.max(1) {
                return m * mag;
            }
        }
        mag *= 10;
    }
}

/// A line chart's frame: the plot area inside the margins, and the map from data to it.
struct Frame {
    w: f64,
    h: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    x_max: f64,
    y_top: f64,
}

impl Frame {
    fn x(&self, v: f64) -> f64 {
        self.left + (self.w - self.left - self.right) * v / self.x_max.max(1e-12)
    }
    fn y(&self, v: f64) -> f64 {
        self.h - self.bottom - (self.h - self.top - self.bottom) * v / self.y_top.max(1e-12)
    }

    /// The chart's `<svg>`, background, grid, both axes with their ticks (`xtick`, `ytick`) and
    /// titles (`xtitle`, `ytitle`). `x_ticks` are (value, label); the y ticks are `y_ticks`.
    fn open(&self, h: &mut String, class: &str, x_ticks: &[(f64, String)], y_ticks: &[f64], x_title: &str, y_title: &str) {
        let (w, ht) = (self.w, self.h);
        let _ = write!(h, "<svg class=\"chart {class}\" width=\"{w}\" height=\"{ht}\" viewBox=\"0 0 {w} {ht}\" font-size=\"11\"><rect width=\"{w}\" height=\"{ht}\" fill=\"#fafafa\"/>");
        let (x0, x1, y0) = (self.left, w - self.right, ht - self.bottom);
        let step = y_ticks.get(1).copied().unwrap_or(1.0);
        for &v in y_ticks {
            let y = self.y(v);
            let _ = write!(h, "<line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\" stroke=\"#e2e2e2\"/><line x1=\"{}\" y1=\"{y:.1}\" x2=\"{x0}\" y2=\"{y:.1}\" stroke=\"#888\"/><text class=\"ytick\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#444\">{}</text>", x0 - 4.0, x0 - 6.0, y + 4.0, tick_label(v, step));
        }
        for (v, label) in x_ticks {
            let x = self.x(*v);
            let _ = write!(h, "<line x1=\"{x:.1}\" y1=\"{y0}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#888\"/><text class=\"xtick\" x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\" fill=\"#444\">{label}</text>", y0 + 4.0, y0 + 16.0);
        }
        let _ = write!(
            h,
            "<line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"#666\"/><line x1=\"{x0}\" y1=\"{}\" x2=\"{x0}\" y2=\"{y0}\" stroke=\"#666\"/><text class=\"xtitle\" x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" fill=\"#222\">{x_title}</text><text class=\"ytitle\" transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\" fill=\"#222\">{y_title}</text>",
            self.top,
            (x0 + x1) / 2.0,
            ht - 8.0,
            (self.top + y0) / 2.0
        );
    }
}

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
.meta,.note{color:#555;font-size:12px}.scroll{overflow-x:auto}
.what{max-width:900px;margin:4px 0 8px}
nav a{margin-right:10px}
.strip{display:flex;flex-wrap:wrap;gap:3px}
.tok{font:13px ui-monospace,monospace;white-space:pre;padding:2px 4px;border-radius:3px;border:1px solid #bbb}
.tok.prompt{background:#e3edf9;border-color:#9bb8df}.tok.generated{background:#fbe7d3;border-color:#e0a56c}
.tok sub{color:#888;font-size:9px;margin-left:2px}
table.grid{border-collapse:collapse}table.grid th{font-weight:normal;color:#555;font-size:12px;padding:2px 4px;white-space:nowrap}
table.grid td{padding:2px 6px 6px 0;vertical-align:top}
figure.head{margin:0}figure.head figcaption{font-size:12px;color:#555}
figure.head a.open{display:block;cursor:zoom-in}figure.head .close,figure.head .big{display:none}
svg.heatmap{display:block;border:1px solid #ccc;background:#fff}
svg.heatmap text{font-family:ui-monospace,monospace}svg.heatmap .q,svg.heatmap .k{fill:#333}svg.heatmap .q{text-anchor:end}
figure.head:target{position:fixed;top:2vh;left:2vw;right:2vw;bottom:2vh;z-index:9;background:#fff;padding:12px 16px;overflow:auto;border:1px solid #888;box-shadow:0 0 0 100vmax rgba(0,0,0,.45)}
figure.head:target a.open{cursor:default}
figure.head:target svg.heatmap{width:min(82vh,94vw);height:min(82vh,94vw)}
figure.head:target .close,figure.head:target .big{display:inline}
figure.head:target figcaption{font-size:15px;color:#222;margin-bottom:6px}
.close{float:right;font-size:15px}
h3.ring{font-size:14px;margin:18px 0 4px}svg.ring{display:block;margin:4px 0 14px}
table.lens{border-collapse:collapse;font:12px ui-monospace,monospace}
table.lens td,table.lens th{border:1px solid #ddd;padding:2px 4px;white-space:pre;text-align:left}
table.lens th{background:#f4f4f4;font-weight:normal}
table.lens td.hit{font-weight:bold}
.draws{display:flex;flex-wrap:wrap;gap:16px}.draw{border:1px solid #ddd;padding:6px;border-radius:4px}
.draw h3{font-size:13px;margin:0 0 4px;font-weight:normal}
table.kv{border-collapse:collapse;font-size:12px}table.kv td,table.kv th{border:1px solid #ddd;padding:2px 6px;text-align:right}
";

/// The page, from a finished trace and its `trace.json`.
pub fn render(model: &Model<'_>, trace: &Trace, json: &Value) -> String {
    let rec = &trace.rec;
    let d = rec.dims;
    let cfg = model.config();
    let text = |id: u32| token_text(model, id);
    let mut h = String::new();
    let title = esc(&trace.tokens.iter().take(12).map(|&id| text(id)).collect::<String>());
    let _ = write!(h, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>trace: {title}</title><style>{STYLE}</style></head><body>\n");
    let _ = writeln!(h, "<h1>Inside the model</h1>");
    let _ = writeln!(
        h,
        "<p class=\"meta\">{} · {} layers, n_embd {}, {} heads of {}, n_inner {}, vocab {}, n_ctx {} · {} weights, KV cache {} · T = {} positions, {}: {} prompt (positions {}) + {} generated (positions {}; temperature {}, top-k {}, top-p {}, seed {})</p>",
        esc(json["model"].as_str().unwrap_or("")),
        d.n_layer,
        d.n_embd,
        d.n_head,
        d.head_dim,
        d.n_inner,
        d.vocab,
        cfg.n_ctx,
        model.weight_dtype().name(),
        trace.opts.kv.name(),
        d.t,
        span(0, d.t),
        trace.n_prompt,
        span(0, trace.n_prompt),
        d.t - trace.n_prompt,
        span(trace.n_prompt, d.t),
        trace.opts.sampler.temperature,
        trace.opts.sampler.top_k,
        trace.opts.sampler.top_p,
        trace.opts.sampler.seed
    );
    let local = local_layers(cfg);
    if !local.is_empty() {
        let _ = writeln!(
            h,
            "<p class=\"meta\">{}: layers {} attend locally, each position to itself and the {} before it (window {}); the others to every earlier position.</p>",
            cfg.arch.name(),
            list(&local),
            cfg.attn_window.saturating_sub(1),
            cfg.attn_window
        );
    }
    let _ = writeln!(
        h,
        "<p class=\"what\">This page follows one run of the model, the prompt and each token it generated, through every stage of its forward pass, with the values the runtime computed. New to transformers? <a href=\"tutorial.html\">The tutorial page</a> beside this one works a tiny example (a six-token vocabulary, vectors of 3 numbers) through the same kernels one number at a time; this page shows the same stages at full size.</p>"
    );
    let _ = writeln!(h, "<nav class=\"note\"><a href=\"#tokens\">Tokens</a><a href=\"#attention\">Attention</a><a href=\"#residual\">Residual stream</a><a href=\"#lens\">Logit lens</a><a href=\"#sampler\">Sampler</a><a href=\"#kv\">KV cache</a><a href=\"#stages\">Every stage</a><a href=\"tutorial.html\">Tutorial</a></nav>");
    let _ = writeln!(h, "<p class=\"note\">{}</p>", esc(&limits(d.t, d.n_layer, d.n_head)));

    // token strip
    let _ = writeln!(
        h,
        "<h2 id=\"tokens\">Tokens</h2><p class=\"what\">The text is cut into tokens, pieces of words with one id each in the model's vocabulary. The prompt's tokens are blue, the ones the model generated, one at a time, orange; the small number is each token's position, counted from 0.</p><div class=\"strip\">"
    );
    for (pos, &id) in trace.tokens.iter().enumerate() {
        let src = if pos < trace.n_prompt { "prompt" } else { "generated" };
        let _ = write!(h, "<span class=\"tok {src}\" data-pos=\"{pos}\" title=\"position {pos}, id {id}, {src}\">{}<sub>{pos}</sub></span>", shown(&text(id)));
    }
    let _ = writeln!(h, "</div>");

    attention_grid(&mut h, trace, cfg, &text);
    residual_chart(&mut h, trace);
    lens_table(&mut h, trace, json, &text);
    sampler_bars(&mut h, trace, &text);
    kv_section(&mut h, trace, cfg);
    // the reference last: every array of the directory
    stages_table(&mut h, trace, cfg);
    let _ = writeln!(h, "<p class=\"note\">Made by <code>host trace</code> (gpt2-mcu): the runtime's own forward pass with an observer; arrays in the .npy files beside this page, everything else in trace.json.</p>");
    let _ = writeln!(h, "</body></html>");
    h
}

/// The pass, stage by stage, for this model's family: every stage it reports (its
/// TransformerLens hook, the shape of its `.npy`), with the RMS of its values per layer, and a
/// line on what the family's own stages do (RMSNorm's divisor, RoPE, the gated MLP).
fn stages_table(h: &mut String, trace: &Trace, cfg: &Config) {
    let rec = &trace.rec;
    let d = rec.dims;
    let _ = writeln!(
        h,
        "<h2 id=\"stages\">The pass, stage by stage</h2><p class=\"what\">Every position's vector goes through the same stages in each of the {} blocks: a norm, attention (which mixes in earlier positions), an add back into the residual stream, a norm, the MLP (which works on each position alone), and another add. The table lists each stage the trace recorded, its TransformerLens name, its array's shape and the typical size (RMS) of its values per layer.</p>",
        d.n_layer
    );
    let mut notes = Vec::new();
    notes.push(match cfg.norm {
        runtime::config::Norm::LayerNorm => "LayerNorm: (x − mean) / scale · weight + bias, scale = √(var + ε) (<code>ln1_scale</code>).".to_string(),
        runtime::config::Norm::RmsNorm => "RMSNorm: x / scale · weight, scale = √(mean(x²) + ε) (<code>ln1_scale</code>, <code>ln2_scale</code>, <code>ln_final_scale</code>): no centring, no bias.".to_string(),
    });
    notes.push(match cfg.positions {
        runtime::config::Positions::Learned => "Positions: a learned row of <code>wpe</code> added to each token's embedding (<code>pos_embed</code>).".to_string(),
        runtime::config::Positions::Rope { theta } => format!(
            "Positions: RoPE, no position embedding. After the q·k·v product each head's q and k are rotated (<code>q</code> → <code>rot_q</code>, <code>k</code> → <code>rot_k</code>): element i pairs with i + {} and turns by the angle pos · {theta}^(−2i/{}), so q·k depends on how far apart two positions are.",
            d.head_dim / 2,
            d.head_dim
        ),
    });
    if cfg.n_kv_head != cfg.n_head {
        notes.push(format!(
            "Grouped-query attention: {} query heads share {} key/value heads (head h reads key/value head h / {}), so <code>k</code>, <code>v</code> and the KV cache hold {} heads.",
            cfg.n_head,
            cfg.n_kv_head,
            cfg.kv_group(),
            cfg.n_kv_head
        ));
    }
    if cfg.gated_mlp {
        notes.push(format!("Gated MLP: <code>mlp_pre</code> is the gate, <code>mlp_pre_linear</code> the up product; <code>mlp_post</code> = {:?}(gate) · up.", cfg.activation));
    }
    for n in notes {
        let _ = writeln!(h, "<p class=\"note\">{n}</p>");
    }
    let _ = writeln!(h, "<table class=\"kv stages\"><tr><th>stage</th><th>hook</th><th>array</th><th>RMS per layer (block stages) or over all positions</th></tr>");
    for stage in d.stages() {
        let values = rec.get(stage);
        let per = if stage.per_layer() { d.n_layer } else { 1 };
        let chunk = values.len() / per.max(1);
        let rms: Vec<String> = values
            .chunks(chunk.max(1))
            .map(|c| {
                let finite: Vec<f64> = c.iter().filter(|v| v.is_finite()).map(|&v| v as f64).collect();
                let r = (finite.iter().map(|v| v * v).sum::<f64>() / finite.len().max(1) as f64).sqrt();
                format!("{r:.3}")
            })
            .collect();
        let shape: Vec<String> = d.shape(stage).iter().map(u64::to_string).collect();
        let _ = writeln!(
            h,
            "<tr class=\"stage\" data-stage=\"{}\"><td style=\"text-align:left\">{}</td><td style=\"text-align:left\"><code>{}</code></td><td>[{}]</td><td style=\"text-align:left\">{}</td></tr>",
            stage.name(),
            stage.name(),
            stage.hook(),
            shape.join(", "),
            rms.join(" · ")
        );
    }
    let _ = writeln!(h, "</table>");
}

/// Color of level k of [`LEVELS`] (white to dark blue).
fn level_color(k: usize) -> String {
    let f = (k + 1) as f64 / LEVELS as f64;
    let lerp = |a: f64, b: f64| (a + (b - a) * f).round() as u8;
    format!("#{:02x}{:02x}{:02x}", lerp(235.0, 8.0), lerp(243.0, 48.0), lerp(251.0, 107.0))
}

/// Shades of the heatmaps (a cell's level: `ceil(sqrt(v) · LEVELS)`, 0 not drawn).
const LEVELS: usize = 8;

/// The level of a weight: 0 (not drawn) for 0, else 1..=LEVELS.
fn level(v: f32) -> usize {
    ((v.max(0.0).sqrt() * LEVELS as f32).ceil() as usize).min(LEVELS)
}

/// The weight where level `k` (1..=LEVELS) ends: (k / LEVELS)².
fn level_top(k: usize) -> f64 {
    (k as f64 / LEVELS as f64).powi(2)
}

/// Fill of the masked future (a position never reads a later one).
const MASKED: &str = "#eeeeee";

/// Units of the heatmaps' SVG coordinates per cell, and their labels' font size in them.
const CELL: usize = 16;
const LABEL_FONT: usize = 11;

/// The colour scale's size, and the width of one level's swatch in it.
const LEGEND_W: usize = 8 + LEVELS * LEGEND_SWATCH + 160;
const LEGEND_H: usize = 52;
const LEGEND_SWATCH: usize = 54;

/// The colour scale: every level's colour with the weights where it starts and ends.
fn heat_legend(h: &mut String) {
    let (sw, x0, w, ht) = (LEGEND_SWATCH, 8, LEGEND_W, LEGEND_H);
    let _ = write!(h, "<svg class=\"legend\" width=\"{w}\" height=\"{ht}\" viewBox=\"0 0 {w} {ht}\" font-size=\"12\"><g id=\"heat-legend\"><text x=\"{x0}\" y=\"12\" fill=\"#444\">attention weight (shade ∝ √weight):</text>");
    for k in 0..LEVELS {
        let x = x0 + k * sw;
        let _ = write!(h, "<rect x=\"{x}\" y=\"18\" width=\"{sw}\" height=\"14\" fill=\"{}\"><title>{} &lt; weight ≤ {}</title></rect>", level_color(k), level_top(k), level_top(k + 1));
    }
    for k in 0..=LEVELS {
        let v = level_top(k);
        let label = if k == 0 { "0".to_string() } else if k == LEVELS { "1".to_string() } else if v < 0.1 { format!("{v:.3}") } else { format!("{v:.2}") };
        let _ = write!(h, "<text class=\"lvl\" x=\"{}\" y=\"46\" text-anchor=\"middle\" fill=\"#444\">{label}</text>", x0 + k * sw);
    }
    let x = x0 + LEVELS * sw + 14;
    let _ = write!(h, "<rect x=\"{x}\" y=\"18\" width=\"13\" height=\"13\" fill=\"{MASKED}\" stroke=\"#ccc\"/><text x=\"{}\" y=\"29\" fill=\"#444\">masked future</text><rect x=\"{x}\" y=\"35\" width=\"13\" height=\"13\" fill=\"#fff\" stroke=\"#ccc\"/><text x=\"{}\" y=\"46\" fill=\"#444\">weight 0</text></g></svg>", x + 18, x + 18);
}

fn attention_grid(h: &mut String, trace: &Trace, cfg: &Config, text: &dyn Fn(u32) -> String) {
    let d = trace.rec.dims;
    let t = d.t;
    let side = heat_side(t, d.n_layer * d.n_head);
    let bin = t.div_ceil(side);
    let cells = t.div_ceil(bin);
    let w = cfg.attn_window as usize;
    let band = if local_layers(cfg).is_empty() {
        String::new()
    } else {
        format!(" A local layer (window {w}) also gives weight 0 to every key {w} or more positions back: its map is a band along the diagonal.")
    };
    let _ = writeln!(
        h,
        "<h2 id=\"attention\">Attention patterns (<code>blocks.l.attn.hook_pattern</code>)</h2>\
         <p class=\"what\">Each of the {} layers has {} attention heads that work side by side. A head lets every position read the positions up to its own: it scores each of them (its query · their key), turns the scores into weights that sum to 1 (softmax), and takes the weighted mix of their values. Those weights are the head's attention pattern, drawn below: row = the position that reads (query), column = the position it reads (key). <a href=\"tutorial.html\">The tutorial</a> works one head by hand.</p>\
         <p class=\"note\">Rows: query positions {} top to bottom; columns: key positions {} left to right; each row sums to 1. Hover a cell for its weight; click a head to enlarge it.{band}{}</p>",
        d.n_layer,
        d.n_head,
        span(0, t),
        span(0, t),
        if bin > 1 { format!(" Binned: each cell covers {bin} positions, its weight the mean over its queries of the weights summed over its keys.") } else { String::new() }
    );
    heat_legend(h);
    // the axes' labels: a position and its token, or a bin's positions
    let labels: Vec<String> = (0..cells)
        .map(|c| if bin == 1 { axis_label(c, &text(trace.tokens[c])) } else { span(c * bin, ((c + 1) * bin).min(t)) })
        .collect();
    let longest = labels.iter().map(|l| l.chars().map(|c| if c as u32 >= 0x1100 { 2 } else { 1 }).sum::<usize>()).max().unwrap_or(1);
    // the margin for the labels (monospace, about 0.62 em a character), the same left and top
    let margin = (8 + (longest as f64 * LABEL_FONT as f64 * 0.62).ceil() as usize).max(64);
    let size = margin + cells * CELL;
    // thumbnails: a quarter larger than the drawing's units where the row has room, at least 170 px
    let thumb = (size * 5 / 4).min((1200 / d.n_head.max(1)).max(170));
    // the hover text of a cell: the query, the key, the weight
    let who: Vec<String> = (0..cells).map(|c| if bin == 1 { format!("{c} {}", esc(&visible(&text(trace.tokens[c])))) } else { span(c * bin, ((c + 1) * bin).min(t)) }).collect();
    let (query, key) = if bin == 1 { ("query", " reads key") } else { ("queries", ", keys") };
    // the masked future: right of the diagonal, one strip per row
    let mut mask = String::new();
    for q in 0..cells.saturating_sub(1) {
        let _ = write!(mask, "M{} {q}H{cells}v1H{}z", q + 1, q + 1);
    }
    let _ = write!(h, "<div class=\"scroll\"><table class=\"grid\"><tr><th></th>");
    for hd in 0..d.n_head {
        let _ = write!(h, "<th>head {hd}</th>");
    }
    let _ = writeln!(h, "</tr>");
    let pattern = trace.rec.attentions();
    for l in 0..d.n_layer {
        let kind = if cfg.is_local(l) { format!("<br>local, window {w}") } else if !local_layers(cfg).is_empty() { "<br>global".to_string() } else { String::new() };
        let _ = write!(h, "<tr><th>layer {l}{kind}</th>");
        for hd in 0..d.n_head {
            let base = (l * d.n_head + hd) * t * t;
            let map = &pattern[base..base + t * t];
            let mut groups = vec![String::new(); LEVELS];
            for qi in 0..cells {
                let qs = qi * bin..((qi + 1) * bin).min(t);
                let nq = qs.len() as f32;
                for ki in 0..=qi {
                    let ks = ki * bin..((ki + 1) * bin).min(t);
                    let v: f32 = qs.clone().map(|q| ks.clone().map(|k| map[q * t + k]).sum::<f32>()).sum::<f32>() / nq;
                    let level = level(v);
                    if level > 0 {
                        let _ = write!(groups[level - 1], "<path d=\"M{ki} {qi}h1v1h-1z\"><title>{query} {}{key} {}: {}</title></path>", who[qi], who[ki], weight(v));
                    }
                }
            }
            let id = format!("attn-l{l}-h{hd}");
            let _ = write!(
                h,
                "<td><figure class=\"head\" id=\"{id}\"><figcaption><a class=\"close\" href=\"#attention\">close ✕</a><span class=\"big\">layer {l}, head {hd}: hover a cell for its weight</span></figcaption><a class=\"open\" href=\"#{id}\" title=\"layer {l}, head {hd}: click to enlarge\"><svg class=\"heatmap\" data-layer=\"{l}\" data-head=\"{hd}\" viewBox=\"0 0 {size} {size}\" width=\"{thumb}\" height=\"{thumb}\" font-size=\"{LABEL_FONT}\"><title>layer {l}, head {hd}</title>"
            );
            // corner: which axis is which; left: queries; top: keys (reading upwards)
            let _ = write!(h, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#999\">key →</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#999\">query ↓</text>", margin - 4, margin - 20, margin - 4, margin - 4);
            for (c, label) in labels.iter().enumerate() {
                let mid = margin + c * CELL + CELL / 2 + LABEL_FONT * 35 / 100;
                let _ = write!(h, "<text class=\"q\" x=\"{}\" y=\"{mid}\">{label}</text>", margin - 4);
                let _ = write!(h, "<text class=\"k\" transform=\"translate({mid} {}) rotate(-90)\">{label}</text>", margin - 4);
            }
            let _ = write!(h, "<g transform=\"translate({margin} {margin}) scale({CELL})\" shape-rendering=\"crispEdges\"><path fill=\"{MASKED}\" d=\"{mask}\"/>");
            for (k, g) in groups.iter().enumerate() {
                if !g.is_empty() {
                    let _ = write!(h, "<g fill=\"{}\">{g}</g>", level_color(k));
                }
            }
            let _ = write!(h, "</g></svg></a><svg class=\"big\" width=\"{LEGEND_W}\" height=\"{LEGEND_H}\"><use href=\"#heat-legend\"/></svg></figure></td>");
        }
        let _ = writeln!(h, "</tr>");
    }
    let _ = writeln!(h, "</table></div>");
}

fn residual_chart(h: &mut String, trace: &Trace) {
    let d = trace.rec.dims;
    let norms = residual_norms(&trace.rec);
    let max = norms.iter().flatten().copied().fold(0.0f32, f32::max).max(1e-6);
    let (y_top, y_ticks) = nice_ticks(max as f64, 6);
    let f = Frame { w: 760.0, h: 300.0, left: 64.0, right: 170.0, top: 16.0, bottom: 48.0, x_max: d.n_layer.max(1) as f64, y_top };
    let mean: Vec<f32> = norms.iter().map(|r| r.iter().sum::<f32>() / r.len().max(1) as f32).collect();
    let maxs: Vec<f32> = norms.iter().map(|r| r.iter().copied().fold(0.0, f32::max)).collect();
    let last: Vec<f32> = norms.iter().map(|r| r.last().copied().unwrap_or(0.0)).collect();
    let _ = writeln!(
        h,
        "<h2 id=\"residual\">Residual stream norm per layer (<code>hook_resid_post</code>)</h2>\
         <p class=\"what\">The residual stream is the vector of {} numbers that each position carries through the model: the embeddings start it, and every block adds its attention output and its MLP output to it. The chart shows how long that vector is (its L2 norm ‖x‖₂) after the embeddings and after each block.</p>\
         <p class=\"note\">Mean over the {} positions (blue), the largest (grey), the last position (orange); hover a point for the numbers. The last block's point is before <code>ln_f</code>.</p>",
        d.n_embd, d.t
    );
    let every = label_every(d.n_layer + 1, 16);
    let x_ticks: Vec<(f64, String)> = (0..=d.n_layer).filter(|i| i % every == 0).map(|i| (i as f64, if i == 0 { "emb".to_string() } else { format!("{}", i - 1) })).collect();
    f.open(h, "residual", &x_ticks, &y_ticks, "after: the embeddings (emb), then block 0, 1, …", "‖x‖₂ (L2 norm)");
    let line = |vals: &[f32]| vals.iter().enumerate().map(|(i, &v)| format!("{:.1},{:.1}", f.x(i as f64), f.y(v as f64))).collect::<Vec<_>>().join(" ");
    let series = [(&maxs, "#aaa", 1.0, "largest"), (&last, "#e07b28", 1.5, "last position"), (&mean, "#2a62b8", 2.5, "mean")];
    for (vals, color, width, _) in series {
        let _ = write!(h, "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"{width}\" points=\"{}\"/>", line(vals));
    }
    for i in 0..=d.n_layer {
        let after = if i == 0 { "the embeddings".to_string() } else { format!("block {}", i - 1) };
        let _ = write!(
            h,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"#2a62b8\"><title>after {after}: mean {:.3}, largest {:.3}, last position {:.3}</title></circle>",
            f.x(i as f64),
            f.y(mean[i] as f64),
            mean[i],
            maxs[i],
            last[i]
        );
    }
    let lx = f.w - f.right + 16.0;
    for (k, (_, color, width, name)) in series.iter().rev().enumerate() {
        let y = f.top + 12.0 + 18.0 * k as f64;
        let _ = write!(h, "<line x1=\"{lx}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{color}\" stroke-width=\"{width}\"/><text x=\"{}\" y=\"{}\" fill=\"#333\">{name}</text>", lx + 22.0, lx + 28.0, y + 4.0);
    }
    let _ = writeln!(h, "</svg>");
}

fn lens_table(h: &mut String, trace: &Trace, json: &Value, text: &dyn Fn(u32) -> String) {
    let d = trace.rec.dims;
    let first = d.t.saturating_sub(LENS_MAX_POS);
    let _ = writeln!(h, "<h2 id=\"lens\">Logit lens</h2><p class=\"what\">The model makes its prediction only at the end: the final norm (<code>ln_f</code>) and the output layer turn the last residual stream into a score for every token of the vocabulary. The logit lens applies those two early, to the residual stream after the embeddings and after each block, to show which next token the model would predict if it stopped there.</p><p class=\"note\">The top token at each depth (rows) for positions {} (columns; the last {LENS_MAX_POS} at most). Shade: its probability; bold: it is the token that actually comes next; hover for the top {}.</p>", span(first, d.t), crate::trace::TOP_N);
    let _ = write!(h, "<div class=\"scroll\"><table class=\"lens\"><tr><th>residual \\ position</th>");
    for pos in first..d.t {
        let _ = write!(h, "<th>{pos} {}</th>", shown(&text(trace.tokens[pos])));
    }
    let _ = writeln!(h, "</tr>");
    let rows = json["logit_lens"].as_array().cloned().unwrap_or_default();
    for row in &rows {
        let _ = write!(h, "<tr><th>{}</th>", esc(row["residual"].as_str().unwrap_or("")));
        let top = row["top"].as_array().cloned().unwrap_or_default();
        for pos in first..d.t {
            let cands = top.get(pos).and_then(|v| v.as_array()).cloned().unwrap_or_default();
            let Some(best) = cands.first() else {
                let _ = write!(h, "<td></td>");
                continue;
            };
            let p = best["prob"].as_f64().unwrap_or(0.0);
            let id = best["id"].as_u64().unwrap_or(0) as u32;
            let hit = trace.tokens.get(pos + 1) == Some(&id);
            let tip: Vec<String> = cands.iter().map(|c| format!("{} {:.3}", c["text"].as_str().unwrap_or(""), c["prob"].as_f64().unwrap_or(0.0))).collect();
            let _ = write!(
                h,
                "<td{} style=\"background:rgba(42,98,184,{:.2})\" title=\"{}\">{}</td>",
                if hit { " class=\"hit\"" } else { "" },
                (p * 0.6).min(0.6),
                esc(&tip.join(" | ")),
                shown(best["text"].as_str().unwrap_or(""))
            );
        }
        let _ = writeln!(h, "</tr>");
    }
    let _ = writeln!(h, "</table></div>");
}

fn sampler_bars(h: &mut String, trace: &Trace, text: &dyn Fn(u32) -> String) {
    let _ = writeln!(h, "<h2 id=\"sampler\">Sampler</h2>");
    if trace.rec.draws.is_empty() {
        let _ = writeln!(h, "<p class=\"note\">No tokens were generated (-n 0).</p>");
        return;
    }
    let s = &trace.opts.sampler;
    let _ = writeln!(
        h,
        "<p class=\"what\">At each generated position the output layer's scores (logits) become probabilities over the whole vocabulary (softmax, after dividing by the temperature); the sampler keeps the likeliest tokens and draws one of them at random, in proportion to its probability.</p><p class=\"note\">Each generated token: the tokens kept after temperature {}, top-k {} and top-p {}, with their probabilities among the kept; the drawn one in red. The thin bar below walks the kept tokens in the draw's order; the drawn token is the one whose segment holds u (black mark).</p><div class=\"draws\">",
        s.temperature, s.top_k, s.top_p
    );
    for (k, dr) in trace.rec.draws.iter().enumerate().take(DRAW_MAX) {
        let pos = trace.n_prompt + k;
        let mut bars: Vec<(u32, f32)> = dr.kept.iter().copied().take(BARS).collect();
        if !bars.iter().any(|b| b.0 == dr.token) {
            if let Some(&b) = dr.kept.iter().find(|b| b.0 == dr.token) {
                bars.push(b);
            }
        }
        let (w, row) = (300.0, 16.0);
        let ht = row * bars.len() as f64 + 26.0;
        let u = dr.u.map_or("greedy".to_string(), |u| format!("u = {u:.4}"));
        let _ = write!(
            h,
            "<div class=\"draw\" data-pos=\"{pos}\"><h3>position {pos}: drew <b>{}</b> ({u}, {} kept)</h3><svg width=\"{w}\" height=\"{ht}\">",
            shown(&text(dr.token)),
            dr.kept_len
        );
        for (i, &(id, p)) in bars.iter().enumerate() {
            let y = i as f64 * row;
            let drawn = id == dr.token;
            let color = if drawn { "#d23b2f" } else { "#8aa8d8" };
            let bw = (p as f64 * 170.0).max(1.0);
            let _ = write!(
                h,
                "<text x=\"96\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\" font-family=\"monospace\">{}</text><rect x=\"100\" y=\"{:.1}\" width=\"{bw:.1}\" height=\"{:.1}\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"#444\">{:.3}{}</text>",
                y + 11.0,
                shown(&text(id)),
                y + 2.0,
                row - 4.0,
                104.0 + bw,
                y + 11.0,
                p,
                if drawn { " ◀ drawn" } else { "" }
            );
        }
        // the walk: [0, 1] with the drawn token's segment and u
        let y = bars.len() as f64 * row + 8.0;
        let (a, b) = dr.drawn_span;
        let _ = write!(h, "<rect x=\"10\" y=\"{y:.1}\" width=\"280\" height=\"8\" fill=\"#ddd\"/><rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"8\" fill=\"#d23b2f\"/>", 10.0 + 280.0 * a as f64, (280.0 * (b - a) as f64).max(1.0));
        if let Some(u) = dr.u {
            let _ = write!(h, "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"2\" height=\"14\" fill=\"#000\"/>", 9.0 + 280.0 * u as f64, y - 3.0);
        }
        let _ = writeln!(h, "</svg></div>");
    }
    let _ = writeln!(h, "</div>");
}

fn kv_section(h: &mut String, trace: &Trace, cfg: &Config) {
    let d = trace.rec.dims;
    let kv = kv_report(trace);
    let total: usize = kv.slots.iter().map(|&r| r * kv.slot_bytes).sum();
    let _ = writeln!(
        h,
        "<h2 id=\"kv\">KV cache as it fills</h2><p class=\"what\">Attention needs every earlier position's key and value. The prompt's are computed together (prefill); after that each decode step computes them only for its one new position and keeps all of them in the KV cache, so the past is never recomputed. This section shows the cache growing step by step.</p><p class=\"note\">{} storage, {} B per slot per layer (keys + values{}); slots per layer: {} ({} B in all). A layer whose slots are fewer than the positions (a local-attention ring) writes position p over slot p mod slots. \"read\" counts the earlier positions a decode step attends to from the cache instead of recomputing their keys and values.</p>",
        kv.dtype.name(),
        kv.slot_bytes,
        if kv.dtype == runtime::KvDType::I8 { " + one f32 scale per head" } else { "" },
        kv.slots.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "),
        total
    );
    // layers with the same number of slots fill alike: one line (and one ring map) per group
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for (l, &r) in kv.slots.iter().enumerate() {
        match groups.iter_mut().find(|g| g.0 == r) {
            Some(g) => g.1.push(l),
            None => groups.push((r, vec![l])),
        }
    }
    let group_name = |r: usize, layers: &[usize]| {
        let kind = if r < d.t { format!("a ring of {}", slots(r)) } else { slots(r) };
        if layers.len() == d.n_layer {
            format!("every layer: {kind}")
        } else {
            format!("layer{} {}: {kind}", if layers.len() > 1 { "s" } else { "" }, list(layers))
        }
    };
    // bytes used per layer per step
    let n = kv.steps.len();
    let max = kv.steps.iter().flat_map(|s| s.layers.iter().map(|l| l.bytes)).max().unwrap_or(1).max(1) as f64;
    let (y_top, y_ticks) = nice_ticks(max, 4);
    let f = Frame { w: 760.0, h: 220.0, left: 64.0, right: 200.0, top: 14.0, bottom: 44.0, x_max: n.max(2) as f64 - 1.0, y_top };
    let every = label_every(n, 12);
    let x_ticks: Vec<(f64, String)> = (0..n).filter(|i| i % every == 0).map(|i| (i as f64, if i == 0 { "prefill".to_string() } else { i.to_string() })).collect();
    f.open(h, "kv", &x_ticks, &y_ticks, "step (prefill, then decode 1, 2, …)", "bytes per layer");
    for (g, (r, layers)) in groups.iter().enumerate() {
        let l = layers[0];
        let color = format!("hsl({}, 60%, 42%)", (210 + g * 150) % 360);
        let name = esc(&group_name(*r, layers));
        let pts: Vec<String> = kv.steps.iter().enumerate().map(|(i, s)| format!("{:.1},{:.1}", f.x(i as f64), f.y(s.layers[l].bytes as f64))).collect();
        let _ = write!(h, "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"><title>{name}</title></polyline>", pts.join(" "));
        let _ = write!(h, "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">{name}</text>", f.w - f.right + 12.0, f.top + 12.0 + 14.0 * g as f64);
    }
    let _ = writeln!(h, "</svg>");
    let shown_steps: Vec<usize> = if n <= KV_ROWS { (0..n).collect() } else { (0..KV_ROWS / 2).chain(n - KV_ROWS / 2..n).collect() };
    for (r, layers) in &groups {
        if *r < d.t {
            ring_map(h, &kv, *r, layers, &shown_steps, cfg);
        }
    }
    let _ = write!(h, "<div class=\"scroll\"><table class=\"kv\"><tr><th>step</th><th>positions stored</th>");
    for l in 0..d.n_layer {
        let _ = write!(h, "<th>layer {l}: bytes / read / overwritten</th>");
    }
    let _ = writeln!(h, "</tr>");
    let mut prev = None;
    for &i in &shown_steps {
        if prev.is_some_and(|p: usize| p + 1 != i) {
            let _ = writeln!(h, "<tr><td>…</td><td></td>{}</tr>", "<td></td>".repeat(d.n_layer));
        }
        prev = Some(i);
        let s = &kv.steps[i];
        let _ = write!(h, "<tr><td>{}</td><td>{}</td>", step_name(s.kind, i), span(s.first, s.end));
        for l in &s.layers {
            let _ = write!(h, "<td>{} / {} / {}</td>", l.bytes, l.read, l.overwritten);
        }
        let _ = writeln!(h, "</tr>");
    }
    let _ = writeln!(h, "</table></div>");
}

/// `1 slot`, `8 slots`.
fn slots(r: usize) -> String {
    format!("{r} slot{}", if r == 1 { "" } else { "s" })
}

fn step_name(kind: &str, i: usize) -> String {
    if kind == "prefill" {
        "prefill".to_string()
    } else {
        format!("decode {i}")
    }
}

/// Slots of a ring map labelled with the position they hold (wider rings: colour only).
const RING_LABELLED: usize = 32;

/// Ring-map colours: an empty slot, a slot held from an earlier step, written this step into
/// an empty slot, written this step over an older position.
const EMPTY: &str = "#f3f3f3";
const HELD: &str = "#d6e4f5";
const NEW: &str = "#fbd9b8";
const REUSED: &str = "#f2a097";

/// The ring of `layers` (`r` slots, fewer than the positions): after each shown step, which
/// position every slot holds ([`slot_position`], the one mapping the attention reports go
/// through), and whether the step wrote it there, over an older position (the slot reused) or
/// into an empty slot. One SVG of at most (`KV_ROWS` + 2) × `r` cells.
fn ring_map(h: &mut String, kv: &KvReport, r: usize, layers: &[usize], shown_steps: &[usize], cfg: &Config) {
    let labelled = r <= RING_LABELLED;
    let row_h = 16usize;
    // the step labels ("decode 12 16..17") in 10 px monospace, about 6 px a character
    let longest = shown_steps.iter().map(|&i| format!("{} {}", step_name(kv.steps[i].kind, i), span(kv.steps[i].first, kv.steps[i].end)).chars().count()).max().unwrap_or(0);
    let label_w = 12 + 6 * longest.max(12);
    let cw = if labelled { 24 } else { (768 / r).max(1) };
    let rows = shown_steps.len() + shown_steps.windows(2).filter(|p| p[0] + 1 != p[1]).count();
    let (width, height) = (label_w + r * cw, row_h * (rows + 1));
    let _ = writeln!(
        h,
        "<h3 class=\"ring\">The ring of layer{} {} (window {}, {})</h3><p class=\"note\">After each step, the position each slot holds{}: <span style=\"background:{HELD}\">&nbsp;held from an earlier step (a decode step reads it)&nbsp;</span> <span style=\"background:{NEW}\">&nbsp;written by this step into an empty slot&nbsp;</span> <span style=\"background:{REUSED}\">&nbsp;written by this step over an older position&nbsp;</span>. Position p lives in slot p mod {r}; the attention maps above draw it at its position.</p>",
        if layers.len() > 1 { "s" } else { "" },
        list(layers),
        cfg.attn_window,
        slots(r),
        if labelled { "" } else { " (hover a step for the positions)" }
    );
    let _ = write!(h, "<div class=\"scroll\"><svg class=\"ring\" data-layers=\"{}\" data-slots=\"{r}\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"monospace\">", list(layers));
    let _ = write!(h, "<text x=\"4\" y=\"11\" font-size=\"9\" fill=\"#777\">step \\ slot</text>");
    if labelled {
        for slot in 0..r {
            let _ = write!(h, "<text x=\"{}\" y=\"11\" font-size=\"9\" fill=\"#777\" text-anchor=\"middle\">{slot}</text>", label_w + slot * cw + cw / 2);
        }
    } else {
        let _ = write!(h, "<text x=\"{label_w}\" y=\"11\" font-size=\"9\" fill=\"#777\">slot 0</text><text x=\"{width}\" y=\"11\" font-size=\"9\" fill=\"#777\" text-anchor=\"end\">slot {}</text>", r - 1);
    }
    let mut paths = [String::new(), String::new(), String::new(), String::new()]; // empty, held, new, reused
    let mut labels = String::new();
    let mut row = 1;
    let mut prev: Option<usize> = None;
    // a 1 px gap between labelled cells; narrow ones touch (a gap would stripe the ring)
    let cell = if labelled { cw - 1 } else { cw };
    for &i in shown_steps {
        if prev.is_some_and(|p| p + 1 != i) {
            let _ = write!(h, "<text x=\"4\" y=\"{}\" font-size=\"10\" fill=\"#555\">…</text>", row * row_h + 12);
            row += 1;
        }
        prev = Some(i);
        let s = &kv.steps[i];
        let y = row * row_h;
        let held: Vec<usize> = (0..s.end.min(r)).map(|slot| slot_position(s.end - 1, slot, r)).collect();
        let _ = write!(
            h,
            "<text x=\"4\" y=\"{}\" font-size=\"10\" fill=\"#333\">{} <tspan fill=\"#888\">{}</tspan><title>slots {} hold positions {}</title></text>",
            y + 12,
            step_name(s.kind, i),
            span(s.first, s.end),
            span(0, r),
            list(&held)
        );
        for slot in 0..r {
            let class = match held.get(slot) {
                None => 0,
                Some(&p) if p < s.first => 1,
                Some(&p) if p < r => 2,
                Some(_) => 3,
            };
            let _ = write!(paths[class], "M{} {}h{cell}v{}h-{cell}z", label_w + slot * cw, y + 1, row_h - 2);
            if let (true, Some(p)) = (labelled, held.get(slot)) {
                let _ = write!(labels, "<text x=\"{}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\">{p}</text>", label_w + slot * cw + cw / 2, y + 11);
            }
        }
        row += 1;
    }
    for (p, color) in paths.iter().zip([EMPTY, HELD, NEW, REUSED]) {
        if !p.is_empty() {
            let _ = write!(h, "<path fill=\"{color}\" d=\"{p}\"/>");
        }
    }
    let _ = writeln!(h, "{labels}</svg></div>");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heatmaps' side for a few models at full context: within the per-map cap and, all
    /// maps together, within the cell budget.
    #[test]
    fn heatmaps_are_capped_per_map_and_in_all() {
        for (t, maps, want) in [(13, 16, 13), (128, 16, 64), (1024, 12 * 12, 28), (2048, 48 * 25, 10), (1, 1, 1), (5, 1 << 20, 1)] {
            let side = heat_side(t, maps);
            assert_eq!(side, want, "T {t}, {maps} maps");
            assert!(side <= HEAT_MAX_SIDE && side <= t.max(1));
            assert!(side * side * maps <= HEAT_CELL_BUDGET || side == 1);
        }
        assert!(limits(2048, 48, 25).contains("each cell covers 205 positions"));
        assert!(limits(13, 4, 4).contains("every one of the T = 13 positions"));
    }

    /// Positions as people count them, both ends included.
    #[test]
    fn ranges_read_first_to_last() {
        assert_eq!(span(0, 15), "0–14");
        assert_eq!(span(23, 24), "23");
        assert_eq!(span(5, 5), "none");
        assert_eq!(span(7, 3), "none");
    }

    /// Axis labels: the position and the token as the strip shows it, cut to 8 characters.
    #[test]
    fn axis_labels_are_cut_and_escaped() {
        assert_eq!(axis_label(3, " be"), "3 ·be");
        assert_eq!(axis_label(12, " <abcdefgh"), "12 ·&lt;abcde…");
        assert_eq!(axis_label(0, "12345678"), "0 12345678");
        assert_eq!(axis_label(0, "한국어토큰입니다요"), "0 한국어토큰입니…");
        assert_eq!(axis_label(1, ""), "1 ∅");
    }

    /// Ticks: 0 and steps of 1, 2 or 5 × 10^k up to the first tick at or above the maximum.
    #[test]
    fn ticks_are_round_and_cover_the_data() {
        let (top, ticks) = nice_ticks(29.3, 6);
        assert_eq!((top, ticks), (30.0, vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0]));
        let (top, ticks) = nice_ticks(10752.0, 4);
        assert_eq!((top, ticks.len()), (15000.0, 4));
        let (top, ticks) = nice_ticks(0.37, 5);
        assert!((top - 0.4).abs() < 1e-12 && ticks.len() == 5, "{top} {ticks:?}");
        assert_eq!(tick_label(0.30000000000000004, 0.1), "0.3");
        assert_eq!(tick_label(15000.0, 5000.0), "15000");
        for max in [1e-7, 0.9, 1.0, 7.3, 123.0, 4.5e6] {
            let (top, ticks) = nice_ticks(max, 5);
            assert!(top >= max && ticks[ticks.len() - 2] < max && (2..=11).contains(&ticks.len()), "{max}: {ticks:?}");
        }
        assert_eq!(nice_ticks(0.0, 5).1, vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]);
        assert_eq!([label_every(5, 16), label_every(49, 16), label_every(2049, 12)], [1, 5, 200]);
    }

    /// A weight's hover text: 4 decimals, or 3 significant digits below 0.001.
    #[test]
    fn weights_print_their_digits() {
        assert_eq!(weight(0.058_859_55), "0.0589");
        assert_eq!(weight(1.0), "1.0000");
        assert_eq!(weight(0.0), "0.0000");
        assert_eq!(weight(1.523e-5), "1.52e-5");
        assert_eq!((level(0.0), level(1e-9), level(0.015), level(0.0157), level(1.0)), (0, 1, 1, 2, LEVELS));
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        assert_eq!(shown(" a\n"), "·a↵");
        assert_eq!(shown(""), "∅");
        assert_eq!(esc("\u{1}"), "\\x01");
    }
}
