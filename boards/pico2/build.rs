//! Build script for the Raspberry Pi Pico 2 firmware.
//!
//! It does what every board's build script does (the shared code is
//! `firmware_common::build::configure`):
//! - reads the model blob (`$MODEL_BLOB`, default `models/default/model-q8.blob`; reruns when the
//!   variable or the file changes) and validates it with the runtime, CRC-32 included;
//! - sizes the static arena and KV cache from the blob's config
//!   (`runtime::SessionSizes::new(&config, capacity, 1)`, capacity = min(128, n_ctx)) and writes
//!   them to `$OUT_DIR/consts.rs`, which `src/main.rs` includes;
//! - fails the build, with the byte counts, when the blob and a code budget do not fit the
//!   flash, or the buffers and a stack budget do not fit the SRAM;
//! - copies memory.x next to cortex-m-rt's `link.x` on the linker's search path.
//!
//! What is particular to this board is only where things go.

use firmware_common::build::{configure, Layout};

fn main() {
    configure(
        "pico2",
        &Layout {
            // q8: 1.0 MB of the 4 MB flash.
            default_blob: "models/default/model-q8.blob",
            // The blob sits with the code in flash (memory.x: `.model > FLASH`): keep 256 KiB
            // for the vector table, code and constants (about 150 KB today).
            model_region: "FLASH",
            model_reserve: 256 * 1024,
            // Arena, KV cache and token window are statics in SRAM, which they share with the
            // other statics and the stack: keep 64 KiB of it for those.
            buffer_region: "RAM",
            buffer_reserve: 64 * 1024,
        },
    );
}
