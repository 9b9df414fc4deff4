//! Build script for the nRF52840-DK firmware.
//!
//! It does what every board's build script does (the shared code is
//! `firmware_common::build::configure`):
//! - reads the model blob (`$MODEL_BLOB`, default `models/default/model-q4.blob`; reruns when the
//!   variable or the file changes) and validates it with the runtime, CRC-32 included;
//! - sizes the static arena and KV cache from the blob's config
//!   (`runtime::SessionSizes::new(&config, capacity, 1)`, capacity = min(128, n_ctx)) and writes
//!   them to `$OUT_DIR/consts.rs`, which `src/main.rs` includes;
//! - fails the build, with the byte counts, when the blob and a code budget do not fit the 1 MB
//!   flash (the q8 blob does not: 1 018 459 B + 192 KiB > 1024 KiB), or the buffers and a stack
//!   budget do not fit the 256 KB of RAM;
//! - copies memory.x next to cortex-m-rt's `link.x` on the linker's search path.
//!
//! What is particular to this board is only where things go.

use firmware_common::build::{configure, Layout};

fn main() {
    configure(
        "nrf52840-dk",
        &Layout {
            // q4 (0.5 MB): the q8 blob alone is 97% of the flash.
            default_blob: "models/default/model-q4.blob",
            // The blob sits with the code in flash (memory.x: `.model > FLASH`): keep 192 KiB
            // for the vector table, code and constants (about 150 KB today).
            model_region: "FLASH",
            model_reserve: 192 * 1024,
            // Arena, KV cache and token window are statics in RAM, which they share with the
            // other statics and the stack: keep 32 KiB of it for those (the stack high-water
            // mark is under 6 KiB under QEMU).
            buffer_region: "RAM",
            buffer_reserve: 32 * 1024,
        },
    );
}
