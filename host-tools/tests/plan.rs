//! `host-tools plan` on the default q8 blob: the verdicts, the largest context, the errors.

use std::path::PathBuf;

use host_tools::boards;
use host_tools::plan::{Plan, Target};
use runtime::KvDType;

fn blob() -> Vec<u8> {
    std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/default/model-q8.blob")).expect("the default q8 blob")
}

fn on(board: &str, ctx: Option<usize>, kv: Option<KvDType>) -> Plan {
    Plan::new(&blob(), Target::board(boards::find(board).unwrap()), ctx, kv).unwrap()
}

#[test]
fn defaults_are_the_firmwares() {
    let p = on("pico2", None, None);
    assert_eq!((p.ctx, p.kv_dtype, p.run.sizes.batch), (128, KvDType::I8, 1));
    assert!(p.fits());
    assert_eq!(p.largest_ctx, Some(128));
}

#[test]
fn largest_context_is_the_last_that_fits() {
    // 128 KiB of RAM holds the q8 model's buffers for some contexts below n_ctx, not all.
    let p = on("nucleo-f446re", Some(64), None);
    let largest = p.largest_ctx.expect("some context fits");
    assert!(largest > 64 && largest < 128, "{largest}");
    let fits = |ctx| Plan::new(&blob(), Target::custom(u64::MAX, 128 * 1024), Some(ctx), None).unwrap().fits();
    assert!(fits(largest));
    assert!(!fits(largest + 1));
    // The flash (1 MB blob in 512 KB) fails at every context.
    assert!(!p.fits());
    assert!(p.report("b").contains(&format!("largest context that fits: {largest} (of n_ctx 128, KV cache int8); flash does not fit at any context")));
}

#[test]
fn verdicts_and_the_one_line_error() {
    let p = on("nrf52840-dk", None, None);
    let r = p.report("model-q8.blob");
    assert!(r.contains("flash: does not fit by "), "{r}");
    assert!(r.contains("RAM: fits, headroom "), "{r}");
    let e = p.error_line().unwrap();
    assert!(e.starts_with("model does not fit nrf52840-dk: flash needs "), "{e}");
    assert!(e.contains("board has 1,048,576 B (short by "), "{e}");
    assert!(!e.contains('\n'));

    // An f32 KV cache at the full context does not fit 256 KiB of RAM.
    let p = Plan::new(&blob(), Target::custom(4 << 20, 256 * 1024), None, Some(KvDType::F32)).unwrap();
    let e = p.error_line().unwrap();
    assert!(e.starts_with("model does not fit custom: RAM needs 484,384 B, board has 262,144 B (short by 222,240 B); largest context that fits: "), "{e}");

    // Regions are named on boards with several.
    let p = Plan::new(&blob(), Target::board(boards::find("qemu-m55").unwrap()), None, None).unwrap();
    assert!(p.report("b").contains("RAM: fits, headroom 4,046,816 B in SRAM, 515,072 B in RAM"));
    assert!(p.error_line().is_none());
}

#[test]
fn no_context_fits_a_tiny_ram() {
    let p = Plan::new(&blob(), Target::custom(4 << 20, 16 * 1024), None, None).unwrap();
    assert_eq!(p.largest_ctx, None);
    assert!(p.report("b").contains("largest context that fits: none (RAM is "), "{}", p.report("b"));
}

#[test]
fn bad_context_and_bad_blob() {
    let e = Plan::new(&blob(), Target::custom(1, 1), Some(129), None).unwrap_err().to_string();
    assert_eq!(e, "--ctx 129 must be between 1 and the model's n_ctx (128)");
    assert!(Plan::new(&blob(), Target::custom(1, 1), Some(0), None).is_err());
    let mut bad = blob();
    bad[1000] ^= 1;
    assert!(Plan::new(&bad, Target::custom(1, 1), None, None).unwrap_err().to_string().contains("checksum"));
}
