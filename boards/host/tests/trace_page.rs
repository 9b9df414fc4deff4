//! `host trace`'s page in a real browser: headless Chromium (Debian's `chromium`) opens
//! `index.html` from disk, and the rendered DOM must hold one heatmap per layer × head and every
//! token; each heatmap's axes are labelled with every position and its token; each cell's hover
//! text (its SVG `<title>`) is the weight in `attentions.npy` to the printed digits, and its
//! shade the colour scale's for that weight; the residual chart has ticks on both axes covering
//! the norms of `resid_pre`/`resid_post`; ranges read "0–14", never "0..15"; a screenshot must not
//! be blank, and one of `index.html#attn-l0-h0` shows that head enlarged over a darkened page.
//!
//! Without Chromium the test says so loudly on stderr and passes, except when
//! `GPT2_MCU_REQUIRE_CHROMIUM=1` (set by `.ci/run`, which installs it): then it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("host-trace-page-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Chromium's binary: `$CHROMIUM`, else the first of the usual names on PATH.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Headless Chromium on `page` (with `fragment`, "" or "#id") with a fresh profile: `extra`
/// decides what it outputs.
fn run_chromium(bin: &Path, page: &Path, fragment: &str, profile: &Path, extra: &[&str]) -> std::process::Output {
    let url = format!("file://{}{fragment}", page.canonicalize().unwrap().display());
    let out = Command::new(bin)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    assert!(out.status.success(), "{} failed: {}", bin.display(), String::from_utf8_lossy(&out.stderr));
    out
}

/// Writes a trace of the shipped model and returns (dir, trace.json).
fn default_trace(dir: &Path) -> serde_json::Value {
    let st = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["trace", "--model"])
        .arg(root().join("models/default/model.blob"))
        .args(["--prompt", "ROMEO:", "-n", "8", "--out"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(st.success());
    serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap()
}

/// The page's text for a token, as the strip shows it (see trace_page.rs `shown`), as
/// Chromium's DOM serialises it.
fn shown(s: &str) -> String {
    escape(&visible(s))
}

fn visible(s: &str) -> String {
    if s.is_empty() {
        return "∅".into();
    }
    s.replace(' ', "·").replace('\n', "↵").replace('\t', "→")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[test]
fn the_page_renders_every_heatmap_and_token_in_chromium() {
    let dir = tmp("default");
    let json = default_trace(&dir);
    let dom = check_in_chromium(&dir, &json, "the_page_renders_every_heatmap_and_token_in_chromium");
    if let Some(dom) = dom {
        assert!(!dom.contains("class=\"ring\""), "a GPT-2 page draws no ring");
    }
}

/// A GPT-Neo page (the `neo_alternating` fixture: layers 1 and 3 local with window 8, 24
/// positions): every heatmap and token in Chromium, as for GPT-2; a local layer's heatmaps draw
/// cells only inside the band (key within 8 positions back) and a global layer's outside it
/// too; the KV panel draws the local layers' ring, its slots reused.
#[test]
fn a_gpt_neo_page_draws_bands_and_the_ring_in_chromium() {
    let dir = tmp("neo");
    let case = root().join("tests/fixtures/neo_alternating");
    let conv = host_tools::convert::convert(&case, &Default::default()).unwrap();
    let blob = dir.join("neo.blob");
    std::fs::write(&blob, conv.blob).unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["trace", "--model"])
        .arg(&blob)
        .args(["--ids", "60,57,58,57,12", "-n", "19", "--greedy", "--out"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success());
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap();
    assert_eq!(json["config"]["local_layers"], serde_json::json!([1, 3]));
    assert_eq!(json["config"]["attn_window"], 8);
    let (t, w) = (json["T"].as_u64().unwrap() as usize, 8usize);
    assert_eq!(t, 24);
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    // heatmap cells (one `M{key} {query}h1v1h-1z` each; T = 24 draws every position)
    for l in 0..4 {
        let local = l % 2 == 1;
        let mut outside = 0;
        for h in 0..8 {
            let at = html.find(&format!("data-layer=\"{l}\" data-head=\"{h}\"")).unwrap();
            let svg = &html[at..at + html[at..].find("</svg>").unwrap()];
            let cells = cells(svg);
            assert!(cells.len() > t, "layer {l} head {h}: {} cells", cells.len());
            for &(k, q, _) in &cells {
                assert!(k <= q && q < t, "layer {l} head {h}: a cell at query {q}, key {k}");
                if q - k >= w {
                    outside += 1;
                }
            }
        }
        if local {
            assert_eq!(outside, 0, "layer {l} is local: cells outside its window");
        } else {
            assert!(outside > 0, "layer {l} is global: no cell beyond the window");
        }
    }
    // the ring: one map for layers 1 and 3, 8 slots; after the last step (positions 0..24) slot
    // s holds position 16 + s, and the step wrote position 23 over 15
    let at = html.find("<svg class=\"ring\"").expect("no ring map on the page");
    let ring = &html[at..at + html[at..].find("</svg>").unwrap()];
    assert!(ring.contains("data-layers=\"1, 3\" data-slots=\"8\""), "{}", &ring[..200]);
    assert_eq!(html.matches("<svg class=\"ring\"").count(), 1);
    assert!(ring.contains("decode 19 <tspan fill=\"#888\">23</tspan><title>slots 0–7 hold positions 16, 17, 18, 19, 20, 21, 22, 23</title>"), "{ring}");
    assert!(ring.contains("prefill <tspan fill=\"#888\">0–4</tspan>"), "{ring}");
    assert!(ring.contains("fill=\"#f2a097\""), "no slot drawn as reused");
    if let Some(dom) = check_in_chromium(&dir, &json, "a_gpt_neo_page_draws_bands_and_the_ring_in_chromium") {
        assert_eq!(dom.matches("class=\"ring\"").count(), 2, "the ring's heading and map in the DOM");
    }
}

/// `(key, query, hover text)` of every heatmap cell in `svg` (`<path d="M{key} {query}h1v1h-1z">`
/// with its `<title>`).
fn cells(svg: &str) -> Vec<(usize, usize, String)> {
    svg.split("<path d=\"M")
        .skip(1)
        .filter_map(|c| {
            let (at, rest) = c.split_once("h1v1h-1z\">")?;
            let (k, q) = at.split_once(' ')?;
            let title = rest.strip_prefix("<title>")?.split_once("</title>")?.0;
            Some((k.parse().ok()?, q.parse().ok()?, title.to_string()))
        })
        .collect()
}

/// `(fill, key, query, hover text)` of every heatmap cell in `svg`, the fill being that of the
/// `<g fill="...">` (one per shade) that holds it.
fn cells_with_fill(svg: &str) -> Vec<(String, usize, usize, String)> {
    svg.split("<g fill=\"")
        .skip(1)
        .flat_map(|g| {
            let fill = g[..g.find('"').unwrap()].to_string();
            cells(g).into_iter().map(move |(k, q, title)| (fill.clone(), k, q, title))
        })
        .collect()
}

/// The texts of the `<text class="{class}" ...>` elements in `svg`, in order.
fn texts<'a>(svg: &'a str, class: &str) -> Vec<&'a str> {
    let open = format!("<text class=\"{class}\"");
    svg.match_indices(&open)
        .map(|(at, _)| {
            let rest = &svg[at..];
            let body = &rest[rest.find('>').unwrap() + 1..];
            &body[..body.find("</text>").unwrap()]
        })
        .collect()
}

/// The `<svg ...>...</svg>` of `dom` that starts with `open`.
fn svg_at<'a>(dom: &'a str, open: &str) -> &'a str {
    let at = dom.find(open).unwrap_or_else(|| panic!("no {open} in the page"));
    &dom[at..at + dom[at..].find("</svg>").unwrap()]
}

/// `v` printed as `printed` to its digits: |printed − v| is at most half a unit of the last digit.
fn matches_printed(printed: &str, v: f64) -> bool {
    let (mantissa, exp) = match printed.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap()),
        None => (printed, 0),
    };
    let decimals = mantissa.split_once('.').map_or(0, |(_, f)| f.len()) as i32;
    let p: f64 = printed.parse().unwrap_or_else(|_| panic!("not a number: {printed:?}"));
    (p - v).abs() <= 0.5 * 10f64.powi(exp - decimals) + 1e-12
}

/// The first `a..b` (digits on both sides) in `s`: ranges must read "a–b".
fn dotted_range(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    (1..b.len().saturating_sub(2)).find(|&i| &b[i..i + 2] == b".." && b[i - 1].is_ascii_digit() && b[i + 2].is_ascii_digit()).map(|i| &s[i.saturating_sub(30)..(i + 30).min(s.len())])
}

/// A screenshot's pixels as RGB.
fn load_png(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let ch = info.color_type.samples();
    assert!(ch >= 3 && info.bit_depth == png::BitDepth::Eight, "unexpected PNG format {:?} {:?}", info.color_type, info.bit_depth);
    (info.width, info.height, buf[..info.buffer_size()].chunks(ch).map(|p| [p[0], p[1], p[2]]).collect())
}

fn luminance(p: [u8; 3]) -> f64 {
    0.299 * p[0] as f64 + 0.587 * p[1] as f64 + 0.114 * p[2] as f64
}

/// In the page of `dir` (trace.json `json`): no script or external resource, one heatmap per
/// layer x head, no "a..b" range; then in headless Chromium: the same heatmaps and every token in
/// the DOM, the heatmaps' axis labels and hover values, the residual chart's axes, and
/// screenshots (the page not blank; a head enlarged). Returns the DOM (None: no Chromium, and
/// not required).
fn check_in_chromium(dir: &Path, json: &serde_json::Value, test: &str) -> Option<String> {
    let page = dir.join("index.html");
    let html = std::fs::read_to_string(&page).unwrap();
    let (layers, heads) = (json["config"]["n_layer"].as_u64().unwrap() as usize, json["config"]["n_head"].as_u64().unwrap() as usize);
    let t = json["T"].as_u64().unwrap() as usize;
    let tokens = json["tokens"].as_array().unwrap();
    // self-contained: no script, no external resource
    for banned in ["<script", "http://", "https://", "<link", "@import", "src="] {
        assert!(!html.contains(banned), "index.html contains {banned:?}");
    }
    assert_eq!(html.matches("<svg class=\"heatmap\"").count(), layers * heads, "heatmaps in the file");
    // positions as people count them: "0–14", never "0..15"
    assert_eq!(dotted_range(&html), None, "a range printed as a..b");
    assert!(html.contains("<a href=\"tutorial.html\">"), "no link to the tutorial page");

    let Some(bin) = chromium() else {
        if std::env::var("GPT2_MCU_REQUIRE_CHROMIUM").as_deref() == Ok("1") {
            panic!("GPT2_MCU_REQUIRE_CHROMIUM=1 but no chromium on PATH (apt-get install -y chromium)");
        }
        eprintln!("\n*** SKIPPED the browser part of {test}: no chromium on PATH (apt-get install -y chromium; CI sets GPT2_MCU_REQUIRE_CHROMIUM=1) ***\n");
        return None;
    };
    // the DOM as Chromium built it
    let out = run_chromium(&bin, &page, "", &dir.join("profile-dom"), &["--dump-dom"]);
    let dom = String::from_utf8(out.stdout).unwrap();
    assert!(dom.contains("Inside the model"), "the DOM lacks the page's heading:\n{}", &dom[..dom.len().min(500)]);
    let maps = dom.matches("class=\"heatmap\"").count();
    assert_eq!(maps, layers * heads, "heatmaps in the rendered DOM: {maps}, layers x heads = {}", layers * heads);
    assert_eq!(dom.matches("class=\"tok ").count(), tokens.len(), "tokens in the strip");
    let mut texts_of = Vec::new();
    for tok in tokens {
        let (pos, text) = (tok["pos"].as_u64().unwrap(), tok["text"].as_str().unwrap());
        let span = format!("data-pos=\"{pos}\"");
        let at = dom.find(&span).unwrap_or_else(|| panic!("token {pos} missing from the strip"));
        let rest = &dom[at..];
        let body = &rest[rest.find('>').unwrap() + 1..rest.find("<sub>").unwrap()];
        assert_eq!(body, shown(text).as_str(), "token {pos}'s text");
        texts_of.push(text.to_string());
    }
    assert_eq!(texts_of.len(), t);
    // ranges in the rendered text, and the colour scale with its values
    let last = t - 1;
    assert!(dom.contains(&format!("Rows: query positions 0–{last} top to bottom")), "no 0–{last} range on the page");
    let legend = svg_at(&dom, "<svg class=\"legend\"");
    assert_eq!(texts(legend, "lvl"), ["0", "0.016", "0.062", "0.14", "0.25", "0.39", "0.56", "0.77", "1"], "the colour scale's values");
    // each swatch: its colour and the weights it covers (lo, hi], from its hover text
    let swatches: Vec<(String, f64, f64)> = legend
        .split("<rect ")
        .filter_map(|r| {
            let fill = r.split_once("fill=\"")?.1.split_once('"')?.0.to_string();
            let (lo, hi) = r.split_once("<title>")?.1.split_once("</title>")?.0.split_once(" &lt; weight ≤ ")?;
            Some((fill, lo.parse().ok()?, hi.parse().ok()?))
        })
        .collect();
    assert_eq!(swatches.len(), 8, "the colour scale's swatches: {swatches:?}");
    assert!(swatches[0].1 == 0.0 && swatches[7].2 == 1.0 && swatches.windows(2).all(|w| w[0].2 == w[1].1), "the swatches do not tile (0, 1]: {swatches:?}");

    // every heatmap: both axes labelled with every position and its token; every drawn cell's
    // hover text is its weight in attentions.npy, and every weight above 0 has its cell
    let (shape, att) = host_tools::npy::read_f32(&dir.join("attentions.npy")).unwrap();
    assert_eq!(shape, [layers as u64, heads as u64, t as u64, t as u64]);
    let want_label = |pos: usize| {
        let v = visible(&texts_of[pos]);
        if v.chars().count() > 8 {
            format!("{pos} {}…", escape(&v.chars().take(7).collect::<String>()))
        } else {
            format!("{pos} {}", escape(&v))
        }
    };
    let labels: Vec<String> = (0..t).map(want_label).collect();
    let mut checked = 0;
    for l in 0..layers {
        for h in 0..heads {
            let svg = svg_at(&dom, &format!("data-layer=\"{l}\" data-head=\"{h}\""));
            assert_eq!(texts(svg, "q"), labels, "layer {l} head {h}: the query axis (rows)");
            assert_eq!(texts(svg, "k"), labels, "layer {l} head {h}: the key axis (columns)");
            let map = &att[(l * heads + h) * t * t..][..t * t];
            let cells = cells_with_fill(svg);
            let nonzero = (0..t).flat_map(|q| (0..=q).map(move |k| (q, k))).filter(|&(q, k)| map[q * t + k] > 0.0).count();
            assert_eq!(cells.len(), nonzero, "layer {l} head {h}: cells drawn, weights above 0");
            for (fill, k, q, title) in &cells {
                let v = map[q * t + k] as f64;
                let (_, lo, hi) = swatches.iter().find(|s| &s.0 == fill).unwrap_or_else(|| panic!("layer {l} head {h}: cell ({q}, {k}) in {fill}, not a colour of the scale"));
                assert!(*lo < v && v <= hi * (1.0 + 1e-6), "layer {l} head {h}: cell ({q}, {k}) weight {v} drawn in the shade of ({lo}, {hi}]");
                let head = format!("query {q} {} reads key {k} {}: ", escape(&visible(&texts_of[*q])), escape(&visible(&texts_of[*k])));
                let printed = title.strip_prefix(head.as_str()).unwrap_or_else(|| panic!("layer {l} head {h}: cell ({q}, {k}) hover text {title:?}, want it to start {head:?}"));
                assert!(matches_printed(printed, v), "layer {l} head {h}: cell ({q}, {k}) hover {printed}, attentions.npy {v}");
                checked += 1;
            }
        }
    }
    eprintln!("{test}: {checked} heatmap cells' hover values equal attentions.npy to their printed digits");

    // the residual chart: a tick per point (emb, 0, 1, ...), y ticks from 0 up past the
    // largest norm of resid_pre[0] / resid_post rows, and both axis titles
    let chart = svg_at(&dom, "<svg class=\"chart residual\"");
    let want_x: Vec<String> = std::iter::once("emb".to_string()).chain((0..layers).map(|l| l.to_string())).collect();
    assert_eq!(texts(chart, "xtick"), want_x, "the residual chart's x ticks");
    let y: Vec<f64> = texts(chart, "ytick").iter().map(|v| v.parse().unwrap()).collect();
    let norms = |name: &str| {
        let (shape, v) = host_tools::npy::read_f32(&dir.join(name)).unwrap();
        let c = *shape.last().unwrap() as usize;
        v.chunks(c).map(|r| r.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>().sqrt()).collect::<Vec<_>>()
    };
    let max = norms("resid_post.npy").into_iter().chain(norms("resid_pre.npy").into_iter().take(t)).fold(0.0, f64::max);
    assert!(y.len() >= 4 && y[0] == 0.0 && y.windows(2).all(|w| w[1] > w[0]), "the residual chart's y ticks: {y:?}");
    assert!(y[y.len() - 1] >= max && y[y.len() - 2] < max, "y ticks {y:?} do not end just above the largest norm {max}");
    assert_eq!(texts(chart, "xtitle").len() + texts(chart, "ytitle").len(), 2, "the residual chart's axis titles");

    // a screenshot: not blank (enough distinct, non-white pixels)
    let shot = dir.join("shot.png");
    run_chromium(&bin, &page, "", &dir.join("profile-shot"), &["--window-size=1200,1600", &format!("--screenshot={}", shot.display())]);
    let (w, ht, px) = load_png(&shot);
    let lum: Vec<f64> = px.iter().map(|&p| luminance(p)).collect();
    let mean = lum.iter().sum::<f64>() / lum.len() as f64;
    let var = lum.iter().map(|l| (l - mean) * (l - mean)).sum::<f64>() / lum.len() as f64;
    let inked = lum.iter().filter(|&&l| l < 200.0).count() as f64 / lum.len() as f64;
    eprintln!("screenshot {w}x{ht}: luminance mean {mean:.1}, variance {var:.1}, {:.1}% of pixels darker than 200", 100.0 * inked);
    assert!(var > 100.0 && inked > 0.02, "the screenshot looks blank: variance {var:.1}, {:.2}% inked", 100.0 * inked);
    assert!(luminance(px[0]) > 250.0, "the page's corner is not white");
    // a head enlarged (index.html#attn-l0-h0, what clicking it opens): the page behind is
    // darkened, and the heatmap's blues fill a good part of the window
    let big = dir.join("big.png");
    run_chromium(&bin, &page, "#attn-l0-h0", &dir.join("profile-big"), &["--window-size=1200,900", &format!("--screenshot={}", big.display())]);
    let (_, _, px) = load_png(&big);
    let blue = px.iter().filter(|p| p[2] as i32 - p[0] as i32 > 20).count() as f64 / px.len() as f64;
    eprintln!("enlarged head: corner luminance {:.1}, {:.1}% of pixels blue", luminance(px[0]), 100.0 * blue);
    assert!(luminance(px[0]) < 180.0, "#attn-l0-h0 does not darken the page behind the enlarged head");
    assert!(blue > 0.10, "#attn-l0-h0: the enlarged heatmap covers {:.1}% of the window", 100.0 * blue);
    Some(dom)
}

/// The page of a large trace stays small: heatmap cells are capped (binned) and the sections
/// bounded; checked on the widest fixture at its full context without a browser.
#[test]
fn the_page_is_bounded_for_long_traces() {
    let dir = tmp("odd");
    let case = root().join("tests/fixtures/odd");
    let conv = host_tools::convert::convert(&case, &Default::default()).unwrap();
    let blob = dir.join("odd.blob");
    std::fs::write(&blob, conv.blob).unwrap();
    // 3 layers x 5 heads, n_ctx 48: 8 prompt ids and 40 generated
    let st = Command::new(env!("CARGO_BIN_EXE_host"))
        .args(["trace", "--model"])
        .arg(&blob)
        .args(["--ids", "1,2,3,4,5,6,7,8", "-n", "40", "--out"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success());
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert_eq!(html.matches("<svg class=\"heatmap\"").count(), 15);
    assert!(html.contains("Limits: each of the 15 heatmaps"), "the page states its limits");
    assert!(html.len() < 2_000_000, "index.html is {} bytes", html.len());
    assert_eq!(html.matches("class=\"draw\"").count(), 24, "the first 24 draws of 40");
}
