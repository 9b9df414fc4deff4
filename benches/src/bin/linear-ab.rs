//! Two configurations of one `linear` product, alternated call by call in one process, so that
//! both see the same machine: on a VM whose speed moves from one second to the next (see
//! BENCHMARKS.md, run 12), separate runs of two binaries cannot settle a 10% difference, and
//! this can. Prints the best, lower quartile and median G multiply-accumulates per second.
//!
//! ```sh
//! cargo run --release -p kernel-benches --bin linear-ab -- 2304 768 64 300 f32 f16
//! # the AVX-512 f16 prefill with and without the scratch it widens rows into:
//! cargo run --release -p kernel-benches --bin linear-ab -- 2304 768 64 300 f16:0 f16
//! ```
//!
//! Arguments: rows, cols, tokens, calls per configuration, then two configurations
//! `DTYPE[:SCRATCH]` (f32, f16, q8 or q4, the last two in groups of 32; SCRATCH: f32 values of scratch, default 2^20).
//! `GPT2_MCU_NO_AVX512=1` times the AVX2 kernels on an AVX-512 CPU.

use half::f16;
use kernel_benches::{pseudo, Aligned};
use runtime::kernels::{linear, quantize_group_q4, quantize_group_q8};
use runtime::model::{Matrix, MatrixData};
use std::time::Instant;

fn main() {
    // `linear-ab … | head -1` ends quietly (as `host` does) instead of a panic in println!
    #[cfg(unix)]
    // SAFETY: before any other thread exists; SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: linear-ab ROWS COLS TOKENS CALLS DTYPE[:SCRATCH] DTYPE[:SCRATCH]";
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{usage}\n  f32, f16, q8 or q4 weights; SCRATCH: f32 values of scratch (default 2^20), e.g. f16:0\n  example: linear-ab 2304 768 64 300 f32 f16");
        return;
    }
    if args.len() != 6 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let num = |i: usize| -> usize {
        args[i].parse().unwrap_or_else(|_| {
            eprintln!("{usage}: {:?} is not a count", args[i]);
            std::process::exit(2)
        })
    };
    let (rows, cols, tokens, calls) = (num(0), num(1), num(2), num(3));
    // every buffer on a 64-byte boundary, as the blob's tensors and the arena are
    let w = Aligned::new(&pseudo(rows * cols, 1));
    let wh = Aligned::new(&w.iter().map(|&v| f16::from_f32(v)).collect::<Vec<f16>>());
    // q8 / q4 in groups of 32, quantized as the converter does
    let group = 32;
    let (mut q8, mut q4, mut s8, mut s4) = (vec![0i8; rows * cols], vec![0u8; rows * cols / 2], Vec::new(), Vec::new());
    for ((x, q), p) in w.chunks(group).zip(q8.chunks_mut(group)).zip(q4.chunks_mut(group / 2)) {
        s8.push(quantize_group_q8(x, q));
        s4.push(quantize_group_q4(x, p));
    }
    let (q8, q4, s8, s4) = (Aligned::new(&q8), Aligned::new(&q4), Aligned::new(&s8), Aligned::new(&s4));
    let x = Aligned::new(&pseudo(tokens * cols, 2));
    let configs: Vec<(String, Matrix<'_>, usize)> = args[4..]
        .iter()
        .map(|spec| {
            let (dtype, scratch) = spec.split_once(':').unwrap_or((spec, "1048576"));
            let data = match dtype {
                "f32" => MatrixData::F32(&w),
                "f16" => MatrixData::F16(&wh),
                "q8" => MatrixData::Q8 { values: &q8, scales: &s8, group },
                "q4" => MatrixData::Q4 { packed: &q4, scales: &s4, group },
                _ => {
                    eprintln!("{usage}: dtype {dtype:?} is not f32, f16, q8 or q4");
                    std::process::exit(2)
                }
            };
            let scratch = scratch.parse().unwrap_or_else(|_| {
                eprintln!("{usage}: scratch {scratch:?} is not a count");
                std::process::exit(2)
            });
            (spec.clone(), Matrix { rows, cols, data }, scratch)
        })
        .collect();
    let mut out = Aligned::new(&vec![0.0f32; tokens * rows]);
    let mut scratch = Aligned::new(&vec![0.0f32; configs.iter().map(|c| c.2).max().unwrap_or(0)]);
    let mut times = vec![Vec::with_capacity(calls); configs.len()];
    for call in 0..calls {
        // A then B, then B then A: neither always runs right after the other
        for k in 0..configs.len() {
            let k = if call % 2 == 0 { k } else { configs.len() - 1 - k };
            let (_, m, len) = &configs[k];
            let start = Instant::now();
            linear(&mut out, &x, m, &[], false, &mut scratch[..*len]);
            times[k].push(start.elapsed().as_secs_f64());
        }
    }
    let macs = (rows * cols * tokens) as f64;
    for ((spec, _, _), t) in configs.iter().zip(&mut times) {
        t.sort_by(f64::total_cmp);
        let g = |s: f64| macs / s / 1e9;
        println!("{rows} x {cols} x {tokens} {spec:>12}: best {:5.1}  q25 {:5.1}  median {:5.1} G MAC/s ({calls} calls)", g(t[0]), g(t[t.len() / 4]), g(t[t.len() / 2]));
    }
}
