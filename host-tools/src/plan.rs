//! `host-tools plan`: will a blob run on a board? Flash and RAM per memory region, a verdict for
//! each, and the largest context whose RAM fits.
//!
//! The run state is sized by the runtime itself (`SessionSizes::with_kv`, which calls
//! `KvCache::required_len`) with the firmware's own settings (`firmware_common::settings`:
//! context `min(CTX_MAX, n_ctx)`, KV dtype, prefill batch), and the blob is placed as the
//! firmware places it (`firmware_common::Aligned`), so the planned arena, KV cache, token window
//! and `.model` are the bytes the firmware links (the test `tests/plan_vs_linker.rs` checks them
//! against `boards/expected/*.size`). Code, stack and other statics are estimates from the
//! measured QEMU firmware (the constants below).

use std::fmt::Write as _;

use anyhow::{bail, Result};
use firmware_common::settings;
use runtime::blob::{self, Preamble, TensorTable};
use runtime::{kernels, model::MIN_GROUP, Config, KvDType, SessionSizes};

use crate::blob_file::BlobFile;
use crate::boards::{Board, Memory, Part, Region};

/// Code and constants of the measured firmware: `.vector_table + .text + .rodata + .data` of
/// qemu-m4 in `boards/expected/qemu-m4.size` (the larger of the two QEMU builds; qemu-m55's is
/// 202,148 B). It includes the boot self-checks (the kernels against the portable reference
/// on 172 shapes) and every family's code: GPT-2, GPT-Neo and Llama (RMSNorm, RoPE with
/// `libm`'s `powf`/`sincosf`, the gated MLP, grouped-query attention's shared int8 key/value
/// reads, the q8 row kernel for stories260K's groups of 172) and both tokenizers (byte-level
/// BPE and SentencePiece).
pub const MEASURED_CODE_BYTES: u64 = 249_748;
/// Code estimate for a board: the measured 249,748 B plus an 8,300 B (3.3%) margin for what
/// a real board adds (clock, UART or USB setup, a HAL), rounded to 252 KiB. An estimate: a board
/// crate's own `.size` is the real figure.
pub const CODE_BYTES: u64 = 252 * 1024;
/// Stack high-water of the measured firmware (`boards/expected/qemu-m4.perf` and
/// `qemu-m55.perf`: 6,056 and 6,128 B, the whole generation run; the larger).
pub const MEASURED_STACK_BYTES: u64 = 6_128;
/// Stack estimate: the measured 6,128 B plus a 2,064 B (34%) margin for interrupt frames and a
/// board's drivers, rounded to 8 KiB.
pub const STACK_BYTES: u64 = 8 * 1024;
/// Statics other than the buffers in the measured firmware: `.data + .bss` = 8 B.
pub const MEASURED_STATICS_BYTES: u64 = 8;
/// Estimate of the other statics: 1 KiB, room for a board's HAL and driver state beyond the
/// measured 8 B.
pub const OTHER_STATICS_BYTES: u64 = 1024;

// Each estimate covers what it estimates (tests/plan_vs_linker.rs checks the measured figures
// against the blessed files).
const _: () = assert!(CODE_BYTES > MEASURED_CODE_BYTES);
const _: () = assert!(STACK_BYTES > MEASURED_STACK_BYTES);
const _: () = assert!(OTHER_STATICS_BYTES > MEASURED_STATICS_BYTES);

/// `--kv-dtype`: the names `host --kv-dtype` takes (`i8` accepted for `int8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KvArg {
    /// 4 bytes per value.
    F32,
    /// 2 bytes per value.
    F16,
    /// 1 byte per value plus an f32 scale per head per position.
    #[value(alias = "i8")]
    Int8,
}

impl KvArg {
    /// The runtime's dtype.
    pub fn dtype(self) -> KvDType {
        match self {
            KvArg::F32 => KvDType::F32,
            KvArg::F16 => KvDType::F16,
            KvArg::Int8 => KvDType::I8,
        }
    }
}

/// Where the plan runs: a known board, or `--flash`/`--ram` of a custom one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Board name (`custom` for `--flash`/`--ram`).
    pub name: String,
    /// Chip, for the report.
    pub chip: String,
    /// Memory regions (see [`Board::regions`]).
    pub regions: Vec<Region>,
}

impl Target {
    /// A known board.
    pub fn board(b: &Board) -> Self {
        Self { name: b.name.to_string(), chip: b.chip.to_string(), regions: b.regions.to_vec() }
    }

    /// A board given by its flash (code and model) and RAM (everything else) sizes.
    pub fn custom(flash: u64, ram: u64) -> Self {
        Self {
            name: "custom".to_string(),
            chip: "--flash/--ram".to_string(),
            regions: vec![
                Region { name: "FLASH", memory: Memory::Flash, bytes: flash, holds: &[Part::Model, Part::Code], what: "--flash" },
                Region { name: "RAM", memory: Memory::Ram, bytes: ram, holds: &[Part::Buffers, Part::Stack], what: "--ram" },
            ],
        }
    }
}

/// The blob as the firmware places it in flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFlash {
    /// Tensor data (all tensors).
    pub weights: u64,
    /// Number of tensors.
    pub n_tensors: u32,
    /// Tokenizer section (0 without one).
    pub tokenizer: u64,
    /// Source-vocabulary ids of a pruned vocabulary (0 without pruning).
    pub source_ids: u64,
    /// For a pruned vocabulary: (tokens kept, tokens of the source vocabulary).
    pub pruned: Option<(u32, u32)>,
    /// Preamble, header and tensor table.
    pub header: u64,
    /// The blob's alignment padding plus the rounding of `.model` to the firmware's alignment.
    pub padding: u64,
    /// Bytes of the blob file.
    pub blob: u64,
    /// Bytes of the `.model` section: the blob rounded up to `align_of::<Aligned<_>>()`.
    pub placed: u64,
}

/// The run state the firmware declares for one context (its `static` buffers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunState {
    /// The runtime's sizes (`SessionSizes::with_kv(config, ctx, PREFILL_BATCH, kv_dtype)`).
    pub sizes: SessionSizes,
    /// Bytes of the arena's residual, normed and qkv/MLP rows (the arena minus the three below).
    pub activations: u64,
    /// Bytes of the arena's quantized copy of an activation row (`kernels::quant_scratch_len`).
    pub quant_scratch: u64,
    /// Bytes of the arena's attention scores (one f32 per cached position and query head of a
    /// key/value head's group).
    pub scores: u64,
    /// Bytes of the arena's logits (one f32 per vocabulary entry).
    pub logits: u64,
    /// Bytes of the token window (`[u32; ctx]`, the ids in the cache, for context shift).
    pub window: u64,
}

impl RunState {
    /// The buffers for `ctx` positions and a `kv` cache, with the firmware's prefill batch.
    pub fn new(cfg: &Config, ctx: usize, kv: KvDType) -> Self {
        let sizes = SessionSizes::with_kv(cfg, ctx, settings::PREFILL_BATCH, kv);
        let f32_bytes = size_of::<f32>() as u64;
        let widest = cfg.n_embd().max(cfg.n_inner());
        let quant_scratch = (sizes.batch * kernels::quant_scratch_len(widest, MIN_GROUP)) as u64 * f32_bytes;
        let scores = SessionSizes::scores_len(cfg, ctx) as u64 * f32_bytes;
        let logits = cfg.vocab_size() as u64 * f32_bytes;
        let activations = (sizes.arena_bytes() as u64).saturating_sub(quant_scratch + scores + logits);
        let window = (ctx * size_of::<u32>()) as u64;
        Self { sizes, activations, quant_scratch, scores, logits, window }
    }

    /// Arena bytes.
    pub fn arena(&self) -> u64 {
        self.sizes.arena_bytes() as u64
    }

    /// KV-cache bytes.
    pub fn kv(&self) -> u64 {
        self.sizes.kv_bytes() as u64
    }

    /// Arena + KV cache + token window: the buffers' section (`.uninit` on qemu-m4, `.sram` on
    /// qemu-m55).
    pub fn total(&self) -> u64 {
        self.arena() + self.kv() + self.window
    }
}

/// Bytes a region needs, and what it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionUse {
    /// The region.
    pub region: Region,
    /// Bytes of what it holds.
    pub used: u64,
}

impl RegionUse {
    /// Bytes left (0 when it does not fit).
    pub fn headroom(&self) -> u64 {
        self.region.bytes.saturating_sub(self.used)
    }

    /// Bytes missing (0 when it fits).
    pub fn short(&self) -> u64 {
        self.used.saturating_sub(self.region.bytes)
    }
}

/// A memory plan: a blob, a target, a context and a KV dtype.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Where it runs.
    pub target: Target,
    /// The model's config.
    pub config: Config,
    /// Weight dtype name (`q8`, `f32`, ...).
    pub weight_dtype: &'static str,
    /// Context (KV-cache capacity) planned for.
    pub ctx: usize,
    /// KV-cache storage.
    pub kv_dtype: KvDType,
    /// The blob in flash.
    pub model: ModelFlash,
    /// The buffers at `ctx`.
    pub run: RunState,
    /// Largest context ≤ n_ctx whose RAM fits (None if not even 1 does).
    pub largest_ctx: Option<usize>,
}

/// The firmware's context for a model: `settings::capacity(n_ctx)` = min(CTX_MAX, n_ctx).
pub fn default_ctx(cfg: &Config) -> usize {
    settings::capacity(cfg.n_ctx())
}

impl Plan {
    /// Plans `blob` (the file's bytes; validated completely, CRC included) on `target` at context
    /// `ctx` (default: the firmware's) with a `kv` cache (default: the firmware's).
    pub fn new(blob: &[u8], target: Target, ctx: Option<usize>, kv: Option<KvDType>) -> Result<Self> {
        let file = BlobFile::from_bytes(blob);
        let model = file.model()?;
        let config = *model.config();
        let weight_dtype = model.weight_dtype().name();
        let n_ctx = config.n_ctx();
        let ctx = ctx.unwrap_or_else(|| default_ctx(&config));
        if ctx == 0 || ctx > n_ctx {
            bail!("--ctx {ctx} must be between 1 and the model's n_ctx ({n_ctx})");
        }
        let kv_dtype = kv.unwrap_or(settings::KV_DTYPE);
        let mut plan = Self {
            target,
            config,
            weight_dtype,
            ctx,
            kv_dtype,
            model: model_flash(blob)?,
            run: RunState::new(&config, ctx, kv_dtype),
            largest_ctx: None,
        };
        plan.largest_ctx = (1..=n_ctx).rev().find(|&c| plan.ram_fits_at(c));
        Ok(plan)
    }

    /// Bytes of one part.
    pub fn part_bytes(&self, part: Part) -> u64 {
        self.part_bytes_with(part, &self.run)
    }

    fn part_bytes_with(&self, part: Part, run: &RunState) -> u64 {
        match part {
            Part::Code => CODE_BYTES,
            Part::Model => self.model.placed,
            Part::Buffers => run.total(),
            Part::Stack => STACK_BYTES + OTHER_STATICS_BYTES,
        }
    }

    fn region_use(&self, region: &Region, run: &RunState) -> RegionUse {
        RegionUse { region: *region, used: region.holds.iter().map(|&p| self.part_bytes_with(p, run)).sum() }
    }

    /// Use of every region of one kind, in table order.
    pub fn regions(&self, memory: Memory) -> Vec<RegionUse> {
        self.target.regions.iter().filter(|r| r.memory == memory).map(|r| self.region_use(r, &self.run)).collect()
    }

    fn ram_fits_at(&self, ctx: usize) -> bool {
        let run = RunState::new(&self.config, ctx, self.kv_dtype);
        self.target.regions.iter().filter(|r| r.memory == Memory::Ram).all(|r| self.region_use(r, &run).short() == 0)
    }

    /// Whether every region of a kind fits.
    pub fn fits_in(&self, memory: Memory) -> bool {
        self.regions(memory).iter().all(|u| u.short() == 0)
    }

    /// Whether flash and RAM fit.
    pub fn fits(&self) -> bool {
        self.fits_in(Memory::Flash) && self.fits_in(Memory::Ram)
    }

    /// `fits, headroom 1,234 B` or `does not fit by 5,678 B`, for flash or RAM (regions named
    /// when there are several).
    pub fn verdict(&self, memory: Memory) -> String {
        let uses = self.regions(memory);
        let several = uses.len() > 1;
        let each = |f: &dyn Fn(&RegionUse) -> u64, uses: &[&RegionUse]| -> String {
            if several {
                uses.iter().map(|u| format!("{} B in {}", thousands(f(u)), u.region.name)).collect::<Vec<_>>().join(", ")
            } else {
                uses.iter().map(|u| format!("{} B", thousands(f(u)))).collect()
            }
        };
        let short: Vec<&RegionUse> = uses.iter().filter(|u| u.short() > 0).collect();
        if short.is_empty() {
            format!("fits, headroom {}", each(&RegionUse::headroom, &uses.iter().collect::<Vec<_>>()))
        } else {
            format!("does not fit by {}", each(&RegionUse::short, &short))
        }
    }

    /// `largest context that fits: ...` line (without the label).
    pub fn largest_ctx_text(&self) -> String {
        let n_ctx = self.config.n_ctx();
        match self.largest_ctx {
            Some(c) if c == n_ctx => format!("{c} (all of n_ctx, KV cache {})", self.kv_dtype.name()),
            Some(c) => format!("{c} (of n_ctx {n_ctx}, KV cache {})", self.kv_dtype.name()),
            None => {
                let short: u64 = {
                    let run = RunState::new(&self.config, 1, self.kv_dtype);
                    self.target
                        .regions
                        .iter()
                        .filter(|r| r.memory == Memory::Ram)
                        .map(|r| self.region_use(r, &run).short())
                        .sum()
                };
                format!("none (RAM is {} B short even at context 1, KV cache {})", thousands(short), self.kv_dtype.name())
            }
        }
    }

    /// The report `host-tools plan` prints.
    pub fn report(&self, blob_name: &str) -> String {
        let mut s = String::new();
        let c = &self.config;
        let _ = writeln!(s, "{blob_name} on {} ({})", self.target.name, self.target.chip);
        let attention = match c.local_layers.count() {
            0 => String::new(),
            n => format!(" ({n} local, window {})", c.attn_window),
        };
        let arch = if c.arch == runtime::config::Arch::Gpt2 { String::new() } else { format!("{}, ", c.arch.name()) };
        let _ = writeln!(
            s,
            "model: {arch}{} layers{attention}, n_embd {}, n_head {}, vocab_size {}, n_ctx {}, {} weights",
            c.n_layer, c.n_embd, c.n_head, c.vocab_size, c.n_ctx, self.weight_dtype
        );
        let _ = writeln!(
            s,
            "session: context {}, KV cache {}, prefill batch {} (firmware: context min({}, n_ctx), KV {})",
            self.ctx,
            self.kv_dtype.name(),
            self.run.sizes.batch,
            settings::CTX_MAX,
            settings::KV_DTYPE.name()
        );
        let row = |s: &mut String, indent: usize, label: &str, bytes: u64| {
            let _ = writeln!(s, "{:indent$}{label:<w$}{:>13}", "", thousands(bytes), w = 46 - indent);
        };
        let m = &self.model;
        let r = &self.run;
        for memory in [Memory::Flash, Memory::Ram] {
            let _ = writeln!(s, "\n{:<46}{:>13}", memory.name(), "bytes");
            for u in self.regions(memory) {
                let reg = &u.region;
                row(&mut s, 2, &format!("{} ({}, {})", reg.name, reg.what, crate::boards::size_text(reg.bytes)), reg.bytes);
                for part in reg.holds {
                    match part {
                        Part::Model => {
                            row(&mut s, 4, "model blob (.model)", m.placed);
                            row(&mut s, 6, &format!("weights ({} tensors)", m.n_tensors), m.weights);
                            row(&mut s, 6, "tokenizer", m.tokenizer);
                            if let Some((kept, of)) = m.pruned {
                                row(&mut s, 6, &format!("source ids ({kept} of {of} tokens kept)"), m.source_ids);
                            }
                            row(&mut s, 6, "header + tensor table", m.header);
                            row(&mut s, 6, "alignment padding", m.padding);
                        }
                        Part::Code => row(&mut s, 4, "code + constants (estimate)", CODE_BYTES),
                        Part::Buffers => {
                            row(&mut s, 4, &format!("arena (f32, batch {})", r.sizes.batch), r.arena());
                            row(&mut s, 6, "activations (x, xn, qkv/MLP row)", r.activations);
                            row(&mut s, 6, "quant scratch (quantized activation row)", r.quant_scratch);
                            row(&mut s, 6, "attention scores", r.scores);
                            row(&mut s, 6, "logits", r.logits);
                            row(&mut s, 4, &format!("KV cache ({}, {} positions)", self.kv_dtype.name(), self.ctx), r.kv());
                            let locals = c.local_layers.count();
                            if locals > 0 {
                                // the local layers hold rings of min(ctx, W) positions
                                let layout = runtime::kv_cache::KvLayout::new(c, self.ctx);
                                let bytes = |local: bool| -> u64 {
                                    (0..c.n_layer()).filter(|&l| c.is_local(l) == local).map(|l| layout.layer_bytes(self.kv_dtype, l) as u64).sum()
                                };
                                let globals = c.n_layer() - locals;
                                if globals > 0 {
                                    row(&mut s, 6, &format!("{globals} global layers ({} positions)", self.ctx), bytes(false));
                                }
                                row(&mut s, 6, &format!("{locals} local layers (ring of {})", layout.local_capacity), bytes(true));
                            }
                            row(&mut s, 4, "token window (u32)", r.window);
                        }
                        Part::Stack => {
                            row(&mut s, 4, "stack (estimate)", STACK_BYTES);
                            row(&mut s, 4, "other statics (estimate)", OTHER_STATICS_BYTES);
                        }
                    }
                }
                let verdict = if u.short() == 0 {
                    format!("fits, headroom {} B", thousands(u.headroom()))
                } else {
                    format!("does not fit by {} B", thousands(u.short()))
                };
                let _ = writeln!(s, "    {:<42}{:>13}   {verdict}", "used", thousands(u.used));
            }
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "flash: {}", self.verdict(Memory::Flash));
        let _ = writeln!(s, "RAM: {}", self.verdict(Memory::Ram));
        let flash_note = if self.fits_in(Memory::Flash) { "" } else { "; flash does not fit at any context" };
        let _ = writeln!(s, "largest context that fits: {}{flash_note}", self.largest_ctx_text());
        let _ = writeln!(
            s,
            "estimates: code {} B (measured {} B), stack {} B (measured high-water {} B), other statics {} B",
            thousands(CODE_BYTES),
            thousands(MEASURED_CODE_BYTES),
            thousands(STACK_BYTES),
            thousands(MEASURED_STACK_BYTES),
            thousands(OTHER_STATICS_BYTES)
        );
        s
    }

    /// One line for `host --board` when the model does not fit, with the byte counts; None
    /// when it fits.
    pub fn error_line(&self) -> Option<String> {
        if self.fits() {
            return None;
        }
        let mut parts = Vec::new();
        for memory in [Memory::Flash, Memory::Ram] {
            let uses = self.regions(memory);
            let several = uses.len() > 1;
            for u in uses.iter().filter(|u| u.short() > 0) {
                let (used, has, short) = (thousands(u.used), thousands(u.region.bytes), thousands(u.short()));
                parts.push(if several {
                    format!("{} needs {used} B in {}, which has {has} B (short by {short} B)", memory.name(), u.region.name)
                } else {
                    format!("{} needs {used} B, board has {has} B (short by {short} B)", memory.name())
                });
            }
        }
        if !self.fits_in(Memory::Ram) {
            parts.push(format!("largest context that fits: {}", self.largest_ctx_text()));
        } else {
            parts.push("a smaller context does not help (the blob and the code are in flash)".to_string());
        }
        Some(format!("model does not fit {}: {}", self.target.name, parts.join("; ")))
    }

    /// One line for `host --board` when it fits: the board's budget.
    pub fn budget_line(&self) -> String {
        let per_kind = |memory: Memory| -> String {
            let uses = self.regions(memory);
            let several = uses.len() > 1;
            uses.iter()
                .map(|u| {
                    let name = if several { format!("{} ", u.region.name) } else { String::new() };
                    format!("{name}{} of {} B", thousands(u.used), thousands(u.region.bytes))
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "board {}: context {}, KV cache {}; RAM {} (arena {} + KV {} + window {} + stack and statics {} est.); flash {} (model {} + code {} est.)",
            self.target.name,
            self.ctx,
            self.kv_dtype.name(),
            per_kind(Memory::Ram),
            thousands(self.run.arena()),
            thousands(self.run.kv()),
            thousands(self.run.window),
            thousands(STACK_BYTES + OTHER_STATICS_BYTES),
            per_kind(Memory::Flash),
            thousands(self.model.placed),
            thousands(CODE_BYTES)
        )
    }
}

/// The blob's sections, and its size as the firmware places it.
fn model_flash(bytes: &[u8]) -> Result<ModelFlash> {
    let invalid = |e: runtime::Error| anyhow::anyhow!("invalid blob: {e}");
    let pre = Preamble::parse(bytes).map_err(invalid)?;
    let (header, table) = blob::parse_header(bytes, &pre).map_err(invalid)?;
    let mut weights = 0;
    for e in TensorTable::new(table, header.n_tensors) {
        weights += e.map_err(invalid)?.data.len;
    }
    let header_bytes = (blob::PREAMBLE_LEN + pre.header_len as usize) as u64;
    let tokenizer = header.tokenizer.map_or(0, |t| t.len);
    let source_ids = header.source_vocab.map_or(0, |v| v.ids.len);
    // The firmware wraps the blob in `Aligned` (`#[repr(align(64))]`), whose size is a multiple
    // of its alignment: that is the `.model` section the linker places.
    let align = align_of::<firmware_common::Aligned<[u8; 1]>>() as u64;
    let placed = pre.file_len.div_ceil(align) * align;
    Ok(ModelFlash {
        weights,
        n_tensors: header.n_tensors,
        tokenizer,
        source_ids,
        pruned: header.source_vocab.map(|v| (header.config.vocab_size, v.vocab_size)),
        header: header_bytes,
        padding: placed.saturating_sub(weights + tokenizer + source_ids + header_bytes),
        blob: pre.file_len,
        placed,
    })
}

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_018_496), "1,018,496");
    }
}
