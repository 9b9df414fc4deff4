//! Build script for the mps3-an547 firmware.
//!
//! It does what every board's build script does (the shared code is
//! `firmware_common::build::configure`):
//! - reads the model blob (`$MODEL_BLOB`, default `models/default/model-q8.blob`; reruns when the
//!   variable or the file changes) and validates it with the runtime, CRC-32 included;
//! - sizes the static arena and KV cache from the blob's config
//!   (`runtime::SessionSizes::new(&config, capacity, 1)`, capacity = min(128, n_ctx)) and writes
//!   them to `$OUT_DIR/consts.rs`, which `src/main.rs` includes;
//! - fails the build, with the byte counts, when the blob does not fit its memory.x region or the
//!   buffers do not fit theirs;
//! - copies memory.x next to cortex-m-rt's `link.x` on the linker's search path.
//!
//! What is particular to this board is only where things go.

use firmware_common::build::{configure, Layout};

fn main() {
    configure(
        "qemu-m55",
        &Layout {
            default_blob: "models/default/model-q8.blob",
            // The blob has the 8 MB QSPI flash to itself (memory.x: `.model > QSPI`).
            model_region: "QSPI",
            model_reserve: 0,
            // Arena, KV cache and token window have the 4 MB SSE-300 SRAM to themselves
            // (`.sram > SRAM`); the stack and the small statics are in DTCM.
            buffer_region: "SRAM",
            buffer_reserve: 0,
        },
    );
}
