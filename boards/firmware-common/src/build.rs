//! Build-script helper (feature `build`, std): everything a board's `build.rs` does, so that file
//! only states the board's memory layout.
//!
//! 1. Finds the model blob: `$MODEL_BLOB`, else the board's default (`Layout::default_blob`,
//!    e.g. `models/default/model-q8.blob` in the repository).
//! 2. Validates it completely with the runtime itself (`Model::from_blob`: structure, shapes,
//!    CRC-32), so a bad blob fails the build rather than the board.
//! 3. Sizes the static buffers from its config: `SessionSizes::new(&config, capacity, 1)` with
//!    `capacity = min(CTX_MAX, n_ctx)` (a GPT-Neo local layer's KV cache is a ring of
//!    `min(capacity, window)` positions), and checks them and the blob against the board's
//!    memory.x regions; a model that does not fit fails the build with the byte counts.
//! 4. Writes `$OUT_DIR/consts.rs` (`BLOB_LEN`, `CAPACITY`, `ARENA_LEN`, `KV_LEN`), sets
//!    `MODEL_BLOB_PATH` for `include_bytes!`, and puts memory.x on the linker's search path.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs, process};

use runtime::{Model, SessionSizes};

use crate::settings;

/// Where a board puts things, by memory.x region name.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// The blob to build with when `$MODEL_BLOB` is not set, relative to the repository root,
    /// e.g. `models/default/model-q8.blob`.
    pub default_blob: &'static str,
    /// Region that holds the `.model` section (the blob, read in place).
    pub model_region: &'static str,
    /// Bytes of `model_region` that must stay free for everything else placed there (vector
    /// table, code, constants). 0 when the blob has the region to itself.
    pub model_reserve: usize,
    /// Region that holds the arena and the KV cache.
    pub buffer_region: &'static str,
    /// Bytes of `buffer_region` that must stay free for everything else placed there (stack,
    /// other statics). 0 when the buffers have the region to themselves.
    pub buffer_reserve: usize,
}

/// A `MEMORY` entry of memory.x.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// Region name (`FLASH`, `RAM`, ...).
    pub name: String,
    /// Start address.
    pub origin: u64,
    /// Size in bytes.
    pub length: u64,
}

/// Parses the `MEMORY { NAME (attrs) : ORIGIN = x, LENGTH = y }` lines of a memory.x file
/// (numbers in decimal or 0x hex, with an optional K or M suffix).
pub fn parse_memory_x(text: &str) -> Vec<Region> {
    let number = |s: &str| -> Option<u64> {
        let s = s.trim();
        let (digits, scale) = match s.as_bytes().last()? {
            b'K' | b'k' => (&s[..s.len() - 1], 1024),
            b'M' | b'm' => (&s[..s.len() - 1], 1024 * 1024),
            _ => (s, 1),
        };
        let v = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16).ok()?,
            None => digits.parse().ok()?,
        };
        Some(v * scale)
    };
    let mut regions = Vec::new();
    for line in text.lines() {
        let line = line.split("/*").next().unwrap_or("");
        let Some((name, rest)) = line.split_once(':') else { continue };
        let name = name.split('(').next().unwrap_or("").trim();
        let (Some(o), Some(l)) = (rest.find("ORIGIN"), rest.find("LENGTH")) else { continue };
        let value =
            |at: usize| rest[at..].split_once('=').map(|(_, v)| v.split(',').next().unwrap_or("")).and_then(number);
        if let (Some(origin), Some(length)) = (value(o), value(l)) {
            regions.push(Region { name: name.to_string(), origin, length });
        }
    }
    regions
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    process::exit(1);
}

fn kib(bytes: u64) -> String {
    format!("{bytes} B ({:.1} KiB)", bytes as f64 / 1024.0)
}

/// Does all of the above for the board crate whose build script calls it.
pub fn configure(board: &str, layout: &Layout) {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rerun-if-env-changed=MODEL_BLOB");

    // The settings the firmware prints as `host` arguments must reach host unchanged.
    if let Err(e) = settings::check_round_trip() {
        fail(&e);
    }

    // 1. The blob.
    let blob_path = match env::var_os("MODEL_BLOB") {
        Some(p) => {
            let p = PathBuf::from(p);
            // A relative MODEL_BLOB is taken relative to the board crate's directory.
            if p.is_absolute() {
                p
            } else {
                manifest_dir.join(p)
            }
        }
        None => manifest_dir.join("../..").join(layout.default_blob),
    };
    println!("cargo:rerun-if-changed={}", blob_path.display());
    let blob_path = fs::canonicalize(&blob_path).unwrap_or_else(|e| {
        fail(&format!(
            "model blob {} not found ({e}).\n  Set MODEL_BLOB to a blob made by host-tools, e.g. from the repository root:\n    \
             cargo run --release -p host-tools -- convert tests/fixtures/tiny -o /tmp/tiny.blob\n    \
             MODEL_BLOB=/tmp/tiny.blob cargo run --release",
            blob_path.display()
        ))
    });
    let bytes = fs::read(&blob_path).unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", blob_path.display())));

    // 2. Validate it with the runtime (which needs a 16-byte aligned buffer).
    let mut aligned = vec![0u128; bytes.len().div_ceil(16)];
    // SAFETY: `aligned` owns at least bytes.len() bytes; u8 has no alignment or validity needs.
    let blob: &mut [u8] = unsafe { std::slice::from_raw_parts_mut(aligned.as_mut_ptr().cast::<u8>(), bytes.len()) };
    blob.copy_from_slice(&bytes);
    let model = Model::from_blob(blob)
        .unwrap_or_else(|e| fail(&format!("{} is not a valid model blob: {e}", blob_path.display())));
    let cfg = *model.config();

    // 3. Sizes, checked against memory.x.
    let capacity = settings::capacity(cfg.n_ctx());
    let sizes = SessionSizes::with_kv(&cfg, capacity, settings::PREFILL_BATCH, settings::KV_DTYPE);
    let memory_x_path = manifest_dir.join("memory.x");
    let memory_x = fs::read_to_string(&memory_x_path)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", memory_x_path.display())));
    let regions = parse_memory_x(&memory_x);
    let region = |name: &str| -> Region {
        regions
            .iter()
            .find(|r| r.name == name)
            .cloned()
            .unwrap_or_else(|| fail(&format!("memory.x has no region {name}")))
    };
    let model_region = region(layout.model_region);
    let blob_len = bytes.len() as u64;
    if blob_len + layout.model_reserve as u64 > model_region.length {
        fail(&format!(
            "{board}: the model blob does not fit: {} + {} reserved for code and constants = {} > {} region {}.\n  {}\n  \
             Use a smaller blob (e.g. --dtype q4), or a board with more flash.",
            kib(blob_len),
            kib(layout.model_reserve as u64),
            kib(blob_len + layout.model_reserve as u64),
            layout.model_region,
            kib(model_region.length),
            blob_path.display()
        ));
    }
    let buffer_region = region(layout.buffer_region);
    let (arena_bytes, kv_bytes) = (sizes.arena_bytes() as u64, sizes.kv_bytes() as u64);
    let window_bytes = 4 * capacity as u64;
    let needed = arena_bytes + kv_bytes + window_bytes + layout.buffer_reserve as u64;
    if needed > buffer_region.length {
        // the local layers hold rings of min(capacity, window) positions
        let locals = cfg.local_layers.count();
        let positions = match locals {
            0 => format!("{} layers x {capacity} ctx", cfg.n_layer),
            n => format!(
                "({} global layers x {capacity} ctx + {n} local x {})",
                cfg.n_layer as usize - n,
                cfg.layer_capacity(cfg.local_layers.last().unwrap_or(0), capacity)
            ),
        };
        fail(&format!(
            "{board}: the model does not fit in RAM: arena {} + KV cache {} ({} KV, 2 x {positions} x {} embd) \
             + token window {} + {} reserved for stack and statics = {} > {} region {}.\n  \
             Use a smaller model or lower settings::CTX_MAX.",
            kib(arena_bytes),
            kib(kv_bytes),
            settings::kv_dtype_arg(),
            cfg.n_embd,
            kib(window_bytes),
            kib(layout.buffer_reserve as u64),
            kib(needed),
            layout.buffer_region,
            kib(buffer_region.length)
        ));
    }

    // 4. Outputs.
    let mut consts = String::new();
    let _ = writeln!(consts, "// Generated by build.rs from {} (firmware_common::build).", blob_path.display());
    let _ = writeln!(
        consts,
        "// Model: {} layers, n_embd {}, n_head {}, vocab {}, n_ctx {}, {} weights.",
        cfg.n_layer,
        cfg.n_embd,
        cfg.n_head,
        cfg.vocab_size,
        cfg.n_ctx,
        model.weight_dtype().name()
    );
    let _ = writeln!(consts, "/// Bytes of the model blob (`include_bytes!(env!(\"MODEL_BLOB_PATH\"))`).");
    let _ = writeln!(consts, "const BLOB_LEN: usize = {};", bytes.len());
    let _ = writeln!(consts, "/// KV-cache capacity in tokens: min(settings::CTX_MAX, n_ctx).");
    let _ = writeln!(consts, "const CAPACITY: usize = {capacity};");
    let _ = writeln!(consts, "/// f32 elements of the activation arena ({arena_bytes} B): SessionSizes::new(&config, CAPACITY, 1).arena_len.");
    let _ = writeln!(consts, "const ARENA_LEN: usize = {};", sizes.arena_len);
    let _ = writeln!(
        consts,
        "/// f32 elements of the KV cache ({kv_bytes} B): SessionSizes::new(&config, CAPACITY, 1).kv_len."
    );
    let _ = writeln!(consts, "const KV_LEN: usize = {};", sizes.kv_len);
    write(&out_dir.join("consts.rs"), consts.as_bytes());
    write(&out_dir.join("memory.x"), memory_x.as_bytes());
    println!("cargo:rustc-link-search={}", out_dir.display());
    println!("cargo:rustc-env=MODEL_BLOB_PATH={}", blob_path.display());
}

fn write(path: &Path, bytes: &[u8]) {
    // Only when changed, so the linker does not relink for nothing.
    if fs::read(path).ok().as_deref() != Some(bytes) {
        fs::write(path, bytes).unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", path.display())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_memory_x() {
        let text = "MEMORY\n{\n  /* code */\n  FLASH : ORIGIN = 0x00000000, LENGTH = 4M\n  RAM (rwx) : ORIGIN = 0x20000000, LENGTH = 512K /* dtcm */\n  X : ORIGIN = 4096, LENGTH = 100\n}\n_stack_start = ORIGIN(RAM) + LENGTH(RAM);\n";
        let r = parse_memory_x(text);
        assert_eq!(
            r,
            vec![
                Region { name: "FLASH".into(), origin: 0, length: 4 << 20 },
                Region { name: "RAM".into(), origin: 0x2000_0000, length: 512 << 10 },
                Region { name: "X".into(), origin: 4096, length: 100 },
            ]
        );
    }
}
