//! Build script for the mps2-an386 firmware.
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
        "qemu-m4",
        &Layout {
            default_blob: "models/default/model-q8.blob",
            // The blob sits with the code in the 4 MB code memory (memory.x: `.model > FLASH`):
            // keep 256 KiB of it for the code and constants (about 145 KB today).
            model_region: "FLASH",
            model_reserve: 256 * 1024,
            // Arena and KV cache are statics in the 4 MB data memory, which they share with the
            // other statics and the stack: keep 64 KiB of it for those.
            buffer_region: "RAM",
            buffer_reserve: 64 * 1024,
        },
    );
}
