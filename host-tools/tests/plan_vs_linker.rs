//! The planner's numbers agree with the linker's: `host-tools plan` of the default q8 blob on
//! qemu-m4 and qemu-m55 must size the firmware's buffers and model section exactly as the
//! blessed firmware builds link them (`boards/expected/<board>.size`, `llvm-size -A` of the ELF),
//! and its estimates must cover what the blessed builds measured.

use std::collections::HashMap;
use std::path::PathBuf;

use host_tools::boards;
use host_tools::plan::{Plan, Target, CODE_BYTES, OTHER_STATICS_BYTES, STACK_BYTES};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Section sizes of a blessed `.size` file (`section size addr` rows).
fn sections(board: &str) -> HashMap<String, u64> {
    let path = root().join("boards/expected").join(format!("{board}.size"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (name, size) = (f.next()?, f.next()?);
            name.starts_with('.').then(|| Some((name.to_string(), size.parse().ok()?)))?
        })
        .collect()
}

/// Stack high-water of a blessed `.perf` file (`stack: high-water N B of M B`).
fn stack_high_water(board: &str) -> u64 {
    let path = root().join("boards/expected").join(format!("{board}.perf"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let line = text.lines().find_map(|l| l.strip_prefix("stack: high-water ")).expect("no stack line in .perf");
    line.split_whitespace().next().and_then(|n| n.parse().ok()).expect("stack high-water is not a number")
}

fn plan(board: &str) -> Plan {
    let blob = std::fs::read(root().join("models/default/model-q8.blob")).expect("the default q8 blob");
    // Defaults: the firmware's context and KV dtype, as the board build scripts use them.
    Plan::new(&blob, Target::board(boards::find(board).unwrap()), None, None).unwrap()
}

const HINT: &str = "if the firmware or the blob changed, re-bless with boards/qemu-check.sh --bless; \
                    otherwise the planner no longer sizes what the firmware declares";

#[test]
fn planner_buffers_equal_the_linked_buffer_section() {
    // qemu-m4 links ARENA, KV and WINDOW into `.uninit`, qemu-m55 into `.sram`; nothing else
    // goes there.
    for (board, section) in [("qemu-m4", ".uninit"), ("qemu-m55", ".sram")] {
        let p = plan(board);
        let linked = sections(board)[section];
        assert_eq!(
            p.run.arena() + p.run.kv() + p.run.window,
            linked,
            "{board}: planned arena {} + KV {} + window {} vs {section} {linked} B; {HINT}",
            p.run.arena(),
            p.run.kv(),
            p.run.window
        );
        assert_eq!(p.run.total(), linked);
    }
}

#[test]
fn planner_model_flash_equals_the_linked_model_section() {
    for board in ["qemu-m4", "qemu-m55"] {
        let p = plan(board);
        let linked = sections(board)[".model"];
        assert_eq!(p.model.placed, linked, "{board}: planned .model {} B (blob {} B) vs linked {linked} B; {HINT}", p.model.placed, p.model.blob);
    }
}

#[test]
fn estimates_cover_the_measured_firmware() {
    for board in ["qemu-m4", "qemu-m55"] {
        let s = sections(board);
        let code = [".vector_table", ".text", ".rodata", ".data"].iter().map(|n| s[*n]).sum::<u64>();
        assert!(code <= CODE_BYTES, "{board}: code and constants {code} B exceed the estimate {CODE_BYTES} B (raise plan::CODE_BYTES)");
        let statics = s[".data"] + s[".bss"];
        assert!(statics <= OTHER_STATICS_BYTES, "{board}: other statics {statics} B exceed the estimate {OTHER_STATICS_BYTES} B");
        let stack = stack_high_water(board);
        assert!(stack <= STACK_BYTES, "{board}: stack high-water {stack} B exceeds the estimate {STACK_BYTES} B");
    }
}
