//! `host-tools inspect`: what is inside a blob — config, provenance, tensor table, bytes per
//! section, checksum, and the memory a session needs.

use std::fmt::Write;

use anyhow::Result;
use runtime::blob::{self, DType, Preamble, TensorEntry, TensorTable};
use runtime::config::Config;
use runtime::kv_cache::KvLayout;
use runtime::{KvDType, SessionSizes};

use crate::blob_file::checksums;

/// Renders the inspection report of a blob (its bytes as read from the file).
pub fn inspect(bytes: &[u8], ctx: Option<usize>) -> Result<String> {
    let mut s = String::new();
    let pre = Preamble::parse(bytes).map_err(|e| anyhow::anyhow!("invalid blob: {e}"))?;
    let (stored, computed) = checksums(bytes)?;
    let (header, table) = blob::parse_header(bytes, &pre).map_err(|e| anyhow::anyhow!("invalid blob: {e}"))?;
    let cfg = header.config;
    writeln!(s, "blob format v{}  {} bytes ({:.2} MiB)", pre.version, pre.file_len, pre.file_len as f64 / 1048576.0)?;
    writeln!(
        s,
        "checksum: CRC-32 {stored:#010x} {}",
        if stored == computed { "OK".to_string() } else { format!("MISMATCH (computed {computed:#010x})") }
    )?;
    writeln!(s, "source: {} ({}), written by {}", header.provenance.source, header.provenance.source_dtype, header.provenance.converter)?;
    writeln!(s, "\nconfig:")?;
    writeln!(s, "  vocab_size {}  n_ctx {}  n_embd {}  n_layer {}  n_head {} (head_dim {})  n_inner {}", cfg.vocab_size, cfg.n_ctx, cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.head_dim(), cfg.n_inner)?;
    writeln!(s, "  layer_norm_epsilon {:e}  activation {:?}  scale_attn_weights {}  scale_attn_by_inverse_layer_idx {}", cfg.layer_norm_epsilon, cfg.activation, cfg.scale_attn_weights, cfg.scale_attn_by_inverse_layer_idx)?;
    writeln!(s, "  bos_token_id {}  eos_token_id {}", cfg.bos_token_id, cfg.eos_token_id)?;
    writeln!(s, "  architecture {}  q/k/v bias {}", cfg.arch.name(), cfg.qkv_bias)?;
    let positions = match cfg.positions {
        runtime::config::Positions::Learned => "learned (wpe)".to_string(),
        runtime::config::Positions::Rope { theta } => format!("RoPE θ {theta}"),
    };
    let heads = if cfg.n_kv_head == cfg.n_head { format!("{} (multi-head)", cfg.n_kv_head) } else { format!("{} (groups of {})", cfg.n_kv_head, cfg.kv_group()) };
    writeln!(
        s,
        "  norm {:?}  positions {positions}  MLP {}  key/value heads {heads}  biases: attn out {}, mlp {}",
        cfg.norm,
        if cfg.gated_mlp { format!("gated ({:?}(gate) · up)", cfg.activation) } else { "plain".to_string() },
        cfg.attn_out_bias,
        cfg.mlp_bias
    )?;
    let (locals, globals) = layer_kinds(&cfg);
    match cfg.local_layers.count() {
        0 => writeln!(s, "  attention: every layer global")?,
        n => writeln!(
            s,
            "  attention: window {}; local layers {} ({n} of {}), global layers {}",
            cfg.attn_window,
            layer_list(&locals),
            cfg.n_layer,
            if globals.is_empty() { "none".to_string() } else { layer_list(&globals) }
        )?,
    }
    if let Some(src) = header.source_vocab {
        writeln!(s, "  vocabulary pruned: {} of the source vocabulary's {} tokens kept", cfg.vocab_size, src.vocab_size)?;
    }
    let mut head_rows: Vec<TensorEntry> = Vec::new(); // wte and an untied lm_head

    writeln!(s, "\ntensors ({}):", header.n_tensors)?;
    writeln!(s, "  {:<28} {:<9} {:>14} {:>12} {:>12}  quant. error (est. RMS / RMS)", "name", "dtype", "shape", "offset", "bytes")?;
    let (mut emb, mut layers, mut other, mut params) = (0u64, 0u64, 0u64, 0u64);
    for e in TensorTable::new(table, header.n_tensors) {
        let e = e.map_err(|e| anyhow::anyhow!("invalid tensor table: {e}"))?;
        let suffix = e.role.family_suffix(cfg.arch);
        let name = if e.role.is_layer() { format!("{}{}.{suffix}", if cfg.arch == runtime::config::Arch::Llama { "layers." } else { "h." }, e.layer) } else { suffix.to_string() };
        let shape = if e.shape[1] == 1 { format!("[{}]", e.shape[0]) } else { format!("[{}, {}]", e.shape[0], e.shape[1]) };
        let dtype = match e.dtype {
            DType::Q8 { group_len } | DType::Q4 { group_len } => format!("{}/g{group_len}", e.dtype.name()),
            d => d.name().to_string(),
        };
        let qerr = quant_error(bytes, &e).map_or(String::new(), |r| format!("{:.3}%", r * 100.0));
        writeln!(s, "  {:<28} {:<9} {:>14} {:>12} {:>12}  {}", name, dtype, shape, e.data.offset, e.data.len, qerr)?;
        params += e.shape[0] as u64 * e.shape[1] as u64;
        if matches!(e.role, runtime::blob::Role::Wte | runtime::blob::Role::LmHead) {
            head_rows.push(e);
        }
        if e.role.is_layer() {
            layers += e.data.len;
        } else if matches!(e.role, runtime::blob::Role::Wte | runtime::blob::Role::Wpe | runtime::blob::Role::LmHead) {
            emb += e.data.len;
        } else {
            other += e.data.len;
        }
    }
    let header_bytes = blob::PREAMBLE_LEN as u64 + pre.header_len as u64;
    let tok = header.tokenizer.map_or(0, |t| t.len);
    let source_ids = header.source_vocab.map_or(0, |v| v.ids.len);
    let padding = pre.file_len - header_bytes - emb - layers - other - tok - source_ids;
    writeln!(s, "\nbytes per section:")?;
    writeln!(s, "  preamble + header + table {header_bytes:>12}")?;
    writeln!(s, "  embeddings (wte, wpe, head) {emb:>10}")?;
    writeln!(s, "  transformer blocks        {layers:>12}")?;
    writeln!(s, "  final norm                {other:>12}")?;
    writeln!(s, "  tokenizer                 {tok:>12}{}", if header.tokenizer.is_none() { "  (none: use --ids)" } else { "" })?;
    if header.source_vocab.is_some() {
        writeln!(s, "  source ids (pruned vocab) {source_ids:>12}")?;
    }
    writeln!(s, "  alignment padding         {padding:>12}")?;
    writeln!(s, "  parameters                {params:>12}")?;

    if let Some(src) = header.source_vocab {
        let dropped = src.vocab_size.saturating_sub(cfg.vocab_size);
        writeln!(s, "\nvocabulary (pruned by convert --keep-vocab):")?;
        writeln!(s, "  source vocabulary         {:>12} tokens", src.vocab_size)?;
        writeln!(s, "  kept                      {:>12} tokens ({dropped} dropped, {:.1}% kept)", cfg.vocab_size, 100.0 * cfg.vocab_size as f64 / src.vocab_size.max(1) as f64)?;
        let mut saved = 0u64;
        for e in &head_rows {
            let full = e.dtype.data_len(src.vocab_size as u64, e.shape[1] as u64).unwrap_or(0);
            let row = full.saturating_sub(e.data.len) / u64::from(dropped.max(1));
            writeln!(s, "  {:<25} {:>12} bytes saved ({dropped} rows of ~{row} B, {})", format!("{} rows dropped", e.role.hf_name(0)), full.saturating_sub(e.data.len), e.dtype.name())?;
            saved += full.saturating_sub(e.data.len);
        }
        writeln!(s, "  source-id table           {:>12} bytes spent (4 per kept token)", source_ids)?;
        writeln!(s, "  saved in the weights      {:>12} bytes net; the tokenizer shrinks too (to {tok} B here; convert prints the full one's size)", saved as i64 - source_ids as i64)?;
    }

    let ctx = ctx.unwrap_or(cfg.n_ctx as usize).min(cfg.n_ctx as usize);
    let sizes = SessionSizes::new(&cfg, ctx, 1);
    writeln!(s, "\nsession memory at context {ctx} (decode batch 1):")?;
    writeln!(s, "  activation arena          {:>12} bytes", sizes.arena_bytes())?;
    let layout = KvLayout::new(&cfg, ctx);
    let kvs = [(KvDType::F32, 4), (KvDType::F16, 2), (KvDType::I8, 1)];
    for (kv, per) in kvs {
        let b = SessionSizes::with_kv(&cfg, ctx, 1, kv).kv_bytes();
        let positions = if locals.is_empty() {
            format!("n_layer {} · ctx {ctx}", cfg.n_layer)
        } else {
            format!("({} global · ctx {ctx} + {} local · {})", globals.len(), locals.len(), layout.local_capacity)
        };
        let extra = if kv == KvDType::I8 { format!(" + 2 · {positions} · H_kv {} · 4 (scales)", cfg.n_kv_head) } else { String::new() };
        writeln!(s, "  KV cache ({:<4})           {:>12} bytes  = 2 · {positions} · C_kv {} · {per}{extra}", kv.name(), b, cfg.kv_dim())?;
    }
    writeln!(s, "  KV cache per layer (f32 / f16 / int8 bytes):")?;
    for (what, layers) in [("global", &globals), ("local", &locals)] {
        let Some(&l) = layers.first() else { continue };
        let bytes: Vec<String> = kvs.iter().map(|&(kv, _)| layout.layer_bytes(kv, l).to_string()).collect();
        let held = match what {
            "local" => format!("a ring of {} positions (min(ctx, window {}))", layout.layer_capacity(l), cfg.attn_window),
            _ => format!("{} positions", layout.layer_capacity(l)),
        };
        writeln!(s, "    {what} layers {}: {held}, {} each", layer_list(layers), bytes.join(" / "))?;
    }
    Ok(s)
}

/// The local and the global layers.
fn layer_kinds(cfg: &Config) -> (Vec<usize>, Vec<usize>) {
    (0..cfg.n_layer()).partition(|&l| cfg.is_local(l))
}

/// `0-3, 5, 7`: layer numbers with runs collapsed.
fn layer_list(layers: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut j = i;
        while j + 1 < layers.len() && layers[j + 1] == layers[j] + 1 {
            j += 1;
        }
        parts.push(if j > i + 1 { format!("{}-{}", layers[i], layers[j]) } else { layers[i..=j].iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ") });
        i = j + 1;
    }
    parts.join(", ")
}

/// Estimated relative quantization error of a q8/q4 tensor: rounding to a step s leaves an
/// error uniform in ±s/2 (RMS s/√12); reported relative to the RMS of the stored weights.
fn quant_error(bytes: &[u8], e: &TensorEntry) -> Option<f64> {
    let (four, g) = match e.dtype {
        DType::Q8 { group_len } => (false, group_len as usize),
        DType::Q4 { group_len } => (true, group_len as usize),
        _ => return None,
    };
    let n = e.shape[0] as usize * e.shape[1] as usize;
    let data = bytes.get(e.data.offset as usize..(e.data.offset + e.data.len) as usize)?;
    let value_bytes = if four { n / 2 } else { n };
    let at = value_bytes.div_ceil(16) * 16;
    let scales: Vec<f32> = data.get(at..at + n / g * 4)?.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let (mut err2, mut w2) = (0.0f64, 0.0f64);
    for i in 0..n {
        let s = scales[i / g] as f64;
        let q = if four {
            let b = data[i / 2];
            (if i % 2 == 0 { b & 15 } else { b >> 4 }) as f64 - 8.0
        } else {
            data[i] as i8 as f64
        };
        w2 += (q * s) * (q * s);
        err2 += s * s / 12.0;
    }
    (w2 > 0.0).then(|| (err2 / w2).sqrt())
}
