//! `index.html` of `host trace`: one self-contained page (inline SVG and CSS, no script, no
//! network) with the token strip, a layer × head grid of attention heatmaps, the residual
//! stream's norm per layer, the logit lens, the sampler's bars and the KV cache as it fills (with
//! a map of each local-attention ring: the position every slot holds after each step).
//!
//! What it draws is bounded whatever the model (see [`limits`]): each heatmap has at most
//! [`HEAT_MAX_SIDE`]² cells and all of them together at most [`HEAT_CELL_BUDGET`] (beyond that
//! positions are binned: a cell is the mean over its query positions of the attention summed
//! over its key positions); the logit lens shows the last [`LENS_MAX_POS`] positions, the
//! sampler the first [`DRAW_MAX`] draws with their [`BARS`] most likely tokens, the KV table
//! and the ring maps the first and last [`KV_ROWS`] / 2 steps. The page stays in the low
//! megabytes for GPT-2 XL at full context (48 × 25 heatmaps of 14 × 14 cells).

use std::fmt::Write;

use runtime::{Config, Model};
use serde_json::Value;

use runtime::observe::slot_position;

use crate::trace::{kv_report, local_layers, residual_norms, token_text, KvReport, Trace};

/// Cells per side of one heatmap at most.
pub const HEAT_MAX_SIDE: usize = 64;
/// Cells of all heatmaps together at most (side² each).
pub const HEAT_CELL_BUDGET: usize = 250_000;
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
    if s.is_empty() {
        return "∅".into();
    }
    esc(&s.replace(' ', "·").replace('\n', "↵").replace('\t', "→"))
}

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
.meta,.note{color:#555;font-size:12px}.scroll{overflow-x:auto}
.strip{display:flex;flex-wrap:wrap;gap:3px}
.tok{font:13px ui-monospace,monospace;white-space:pre;padding:2px 4px;border-radius:3px;border:1px solid #bbb}
.tok.prompt{background:#e3edf9;border-color:#9bb8df}.tok.generated{background:#fbe7d3;border-color:#e0a56c}
.tok sub{color:#888;font-size:9px;margin-left:2px}
table.grid{border-collapse:collapse}table.grid th{font-weight:normal;color:#555;font-size:11px;padding:2px 4px}
table.grid td{padding:2px}
svg.heatmap{display:block;border:1px solid #ccc;background:#fff}
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
        "<p class=\"meta\">{} · {} layers, n_embd {}, {} heads of {}, n_inner {}, vocab {}, n_ctx {} · {} weights, KV cache {} · T = {} positions: {} prompt + {} generated (temperature {}, top-k {}, top-p {}, seed {})</p>",
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
        trace.n_prompt,
        d.t - trace.n_prompt,
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
    let _ = writeln!(h, "<p class=\"note\">{}</p>", esc(&limits(d.t, d.n_layer, d.n_head)));

    // token strip
    let _ = writeln!(h, "<h2 id=\"tokens\">Tokens</h2><div class=\"strip\">");
    for (pos, &id) in trace.tokens.iter().enumerate() {
        let src = if pos < trace.n_prompt { "prompt" } else { "generated" };
        let _ = write!(h, "<span class=\"tok {src}\" data-pos=\"{pos}\" title=\"position {pos}, id {id}, {src}\">{}<sub>{pos}</sub></span>", shown(&text(id)));
    }
    let _ = writeln!(h, "</div>");

    stages_table(&mut h, trace, cfg);
    attention_grid(&mut h, trace, cfg);
    residual_chart(&mut h, trace);
    lens_table(&mut h, trace, json, &text);
    sampler_bars(&mut h, trace, &text);
    kv_section(&mut h, trace, cfg);
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
    let _ = writeln!(h, "<h2 id=\"stages\">The pass, stage by stage</h2>");
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

fn attention_grid(h: &mut String, trace: &Trace, cfg: &Config) {
    let d = trace.rec.dims;
    let t = d.t;
    let side = heat_side(t, d.n_layer * d.n_head);
    let bin = t.div_ceil(side);
    let cells = t.div_ceil(bin);
    let px = (side * 3).clamp(72, 160);
    let w = cfg.attn_window as usize;
    let band = if local_layers(cfg).is_empty() {
        String::new()
    } else {
        format!(" A local layer (window {w}) also hides every key {w} or more positions back: its map is a band along the diagonal.")
    };
    let _ = writeln!(
        h,
        "<h2 id=\"attention\">Attention patterns (<code>blocks.l.attn.hook_pattern</code>)</h2><p class=\"note\">Rows: query positions 0..{t} top to bottom; columns: key positions left to right; darker = more attention (shade ∝ √weight). The masked future is blank.{band}{}</p>",
        if bin > 1 { format!(" Binned: {bin} positions per cell.") } else { String::new() }
    );
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
            let mut paths = vec![String::new(); LEVELS];
            for qi in 0..cells {
                let qs = qi * bin..((qi + 1) * bin).min(t);
                let nq = qs.len() as f32;
                for ki in 0..=qi {
                    let ks = ki * bin..((ki + 1) * bin).min(t);
                    let v: f32 = qs.clone().map(|q| ks.clone().map(|k| map[q * t + k]).sum::<f32>()).sum::<f32>() / nq;
                    let level = (v.max(0.0).sqrt() * LEVELS as f32).ceil() as usize;
                    if level > 0 {
                        let _ = write!(paths[level.min(LEVELS) - 1], "M{ki} {qi}h1v1h-1z");
                    }
                }
            }
            let _ = write!(
                h,
                "<td><svg class=\"heatmap\" data-layer=\"{l}\" data-head=\"{hd}\" viewBox=\"0 0 {cells} {cells}\" width=\"{px}\" height=\"{px}\" shape-rendering=\"crispEdges\"><title>layer {l}, head {hd}</title>"
            );
            for (k, p) in paths.iter().enumerate() {
                if !p.is_empty() {
                    let _ = write!(h, "<path fill=\"{}\" d=\"{p}\"/>", level_color(k));
                }
            }
            let _ = write!(h, "</svg></td>");
        }
        let _ = writeln!(h, "</tr>");
    }
    let _ = writeln!(h, "</table></div>");
}

fn residual_chart(h: &mut String, trace: &Trace) {
    let d = trace.rec.dims;
    let norms = residual_norms(&trace.rec);
    let (w, ht, pad) = (560.0, 220.0, 40.0);
    let max = norms.iter().flatten().copied().fold(0.0f32, f32::max).max(1e-6);
    let x = |i: usize| pad + (w - 2.0 * pad) * i as f64 / d.n_layer.max(1) as f64;
    let y = |v: f32| ht - pad + -(ht - 2.0 * pad) * (v / max) as f64;
    let line = |vals: &[f32]| vals.iter().enumerate().map(|(i, &v)| format!("{:.1},{:.1}", x(i), y(v))).collect::<Vec<_>>().join(" ");
    let mean: Vec<f32> = norms.iter().map(|r| r.iter().sum::<f32>() / r.len().max(1) as f32).collect();
    let maxs: Vec<f32> = norms.iter().map(|r| r.iter().copied().fold(0.0, f32::max)).collect();
    let last: Vec<f32> = norms.iter().map(|r| r.last().copied().unwrap_or(0.0)).collect();
    let _ = writeln!(h, "<h2 id=\"residual\">Residual stream norm per layer (<code>hook_resid_post</code>)</h2><p class=\"note\">‖x‖₂ after the embeddings and after each block: mean over positions (blue), largest (grey), last position (orange). The last block's point is before <code>ln_f</code>.</p>");
    let _ = write!(h, "<svg class=\"chart\" width=\"{w}\" height=\"{ht}\" viewBox=\"0 0 {w} {ht}\"><rect width=\"{w}\" height=\"{ht}\" fill=\"#fafafa\"/>");
    let _ = write!(h, "<line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>", ht - pad, w - pad, ht - pad);
    for i in 0..=d.n_layer {
        let label = if i == 0 { "emb".to_string() } else { format!("{}", i - 1) };
        let _ = write!(h, "<text x=\"{:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\" fill=\"#555\">{label}</text>", x(i), ht - pad + 14.0);
    }
    let _ = write!(h, "<text x=\"4\" y=\"{:.1}\" font-size=\"10\" fill=\"#555\">{max:.1}</text><text x=\"4\" y=\"{}\" font-size=\"10\" fill=\"#555\">0</text>", y(max) + 4.0, ht - pad);
    for (vals, color, width) in [(&maxs, "#aaa", 1.0), (&last, "#e07b28", 1.5), (&mean, "#2a62b8", 2.5)] {
        let _ = write!(h, "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"{width}\" points=\"{}\"/>", line(vals));
    }
    let _ = writeln!(h, "</svg>");
}

fn lens_table(h: &mut String, trace: &Trace, json: &Value, text: &dyn Fn(u32) -> String) {
    let d = trace.rec.dims;
    let first = d.t.saturating_sub(LENS_MAX_POS);
    let _ = writeln!(h, "<h2 id=\"lens\">Logit lens</h2><p class=\"note\">The top token that <code>ln_f</code> and the head give at each layer's residual stream, for positions {first}..{} (shade: its probability; bold: it is the token that actually comes next; hover for the top {}).</p>", d.t, crate::trace::TOP_N);
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
        "<p class=\"note\">Each generated token: the tokens kept after temperature {}, top-k {} and top-p {}, with their probabilities among the kept; the drawn one in red. The thin bar below walks the kept tokens in the draw's order; the drawn token is the one whose segment holds u (black mark).</p><div class=\"draws\">",
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
        "<h2 id=\"kv\">KV cache as it fills</h2><p class=\"note\">{} storage, {} B per slot per layer (keys + values{}); slots per layer: {} ({} B in all). A layer whose slots are fewer than the positions (a local-attention ring) writes position p over slot p mod slots. \"read\" counts the earlier positions a decode step attends to from the cache instead of recomputing their keys and values.</p>",
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
    let (w, ht, pad) = (560.0, 180.0, 40.0);
    let n = kv.steps.len();
    let max = kv.steps.iter().flat_map(|s| s.layers.iter().map(|l| l.bytes)).max().unwrap_or(1).max(1) as f64;
    let x = |i: usize| pad + (w - 2.0 * pad) * i as f64 / (n.max(2) - 1) as f64;
    let y = |v: usize| ht - pad - (ht - 2.0 * pad) * v as f64 / max;
    let _ = write!(h, "<svg class=\"chart\" width=\"{w}\" height=\"{ht}\" viewBox=\"0 0 {w} {ht}\"><rect width=\"{w}\" height=\"{ht}\" fill=\"#fafafa\"/><line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>", ht - pad, w - pad, ht - pad);
    let _ = write!(h, "<text x=\"4\" y=\"{:.1}\" font-size=\"10\" fill=\"#555\">{} B</text><text x=\"{pad}\" y=\"{}\" font-size=\"10\" fill=\"#555\">prefill</text><text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#555\" text-anchor=\"end\">step {}</text>", y(max as usize) + 4.0, max as usize, ht - pad + 14.0, w - pad, ht - pad + 14.0, n.saturating_sub(1));
    for (g, (r, layers)) in groups.iter().enumerate() {
        let l = layers[0];
        let color = format!("hsl({}, 60%, 42%)", (210 + g * 150) % 360);
        let name = esc(&group_name(*r, layers));
        let pts: Vec<String> = kv.steps.iter().enumerate().map(|(i, s)| format!("{:.1},{:.1}", x(i), y(s.layers[l].bytes))).collect();
        let _ = write!(h, "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"><title>{name}</title></polyline>", pts.join(" "));
        let _ = write!(h, "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"{color}\">{name}</text>", pad + 8.0, 14.0 + 12.0 * g as f64);
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
        let _ = write!(h, "<tr><td>{}</td><td>{}..{}</td>", step_name(s.kind, i), s.first, s.end);
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
    let longest = shown_steps.iter().map(|&i| format!("{} {}..{}", step_name(kv.steps[i].kind, i), kv.steps[i].first, kv.steps[i].end).len()).max().unwrap_or(0);
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
            "<text x=\"4\" y=\"{}\" font-size=\"10\" fill=\"#333\">{} <tspan fill=\"#888\">{}..{}</tspan><title>slots 0..{r} hold positions {}</title></text>",
            y + 12,
            step_name(s.kind, i),
            s.first,
            s.end,
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
        for (t, maps, want) in [(13, 16, 13), (128, 16, 64), (1024, 12 * 12, 41), (2048, 48 * 25, 14), (1, 1, 1), (5, 1 << 20, 1)] {
            let side = heat_side(t, maps);
            assert_eq!(side, want, "T {t}, {maps} maps");
            assert!(side <= HEAT_MAX_SIDE && side <= t.max(1));
            assert!(side * side * maps <= HEAT_CELL_BUDGET || side == 1);
        }
        assert!(limits(2048, 48, 25).contains("each cell covers 147 positions"));
        assert!(limits(13, 4, 4).contains("every one of the T = 13 positions"));
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        assert_eq!(shown(" a\n"), "·a↵");
        assert_eq!(shown(""), "∅");
        assert_eq!(esc("\u{1}"), "\\x01");
    }
}
