//! Build script for the 16 MB flash / 8 MB PSRAM board (Pimoroni Pico Plus 2).
//!
//! What every board's build script does (`firmware_common::build::configure`): reads and
//! validates the blob (`$MODEL_BLOB`, default `models/default/model-q8.blob`), sizes the arena
//! and KV cache from its config, fails the build with the byte counts when the blob and a code
//! budget do not fit the flash or the buffers do not fit the PSRAM, writes `consts.rs` and
//! copies memory.x for the linker. What is particular to this board is only where things go.

use firmware_common::build::{configure, Layout};

fn main() {
    configure(
        "pico-plus2",
        &Layout {
            // The default model builds here too; the board is for the larger ones (a pruned
            // stories15M q8 is about 7 MB, the full one 17 MB: README's planner table).
            default_blob: "models/default/model-q8.blob",
            // The blob sits with the code in the 16 MB flash: keep 256 KiB for the vector table,
            // code and constants (about 250 KB measured on the QEMU M4 firmware).
            model_region: "FLASH",
            model_reserve: 256 * 1024,
            // Arena, KV cache and token window are the only statics in PSRAM: the stack and the
            // other statics stay in SRAM.
            buffer_region: "PSRAM",
            buffer_reserve: 0,
        },
    );
}
