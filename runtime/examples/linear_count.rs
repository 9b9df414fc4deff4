//! One program for counting the instructions of `kernels::linear` under an emulator
//! (`scripts/aarch64-count.sh`): builds a q8 or q4 matrix (group 32) and activations from a
//! fixed seed, calls `linear` once on a one-row matrix (so that the one-time CPU feature check
//! is done), then calls it on the matrix CALLS times. Counting a run with CALLS = 1 and one with
//! CALLS = 0 and subtracting leaves exactly one call.
//!
//! ```sh
//! linear_count q8|q4 ROWS COLS TOKENS CALLS     # prints a checksum of the output on stderr
//! ```
//! `GPT2_MCU_NO_SDOT=1` makes an aarch64 build take the portable kernel.

use std::io::Write;

use runtime::kernels::{linear, quant_scratch_len};
use runtime::model::{Matrix, MatrixData};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize| args.get(i).and_then(|a| a.parse::<usize>().ok());
    let (Some(dtype), Some(rows), Some(cols), Some(tokens), Some(calls)) = (args.get(1), num(2), num(3), num(4), num(5)) else {
        eprintln!("usage: linear_count q8|q4 ROWS COLS TOKENS CALLS");
        std::process::exit(2);
    };
    let group = 32;
    if rows == 0 || tokens == 0 || cols == 0 || cols % group != 0 || (dtype != "q8" && dtype != "q4") {
        eprintln!("ROWS and TOKENS ≥ 1, COLS a multiple of {group}, dtype q8 or q4");
        std::process::exit(2);
    }
    let mut seed = 12345u32;
    let mut next = move || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        seed >> 8
    };
    // the values the quantizers write (q8: −127..=127; q4: nibbles 1..=15, i.e. q + 8), and
    // positive scales: a random block of a prime length, repeated (copies cost little to
    // emulate; no kernel branches on the values)
    let values: Vec<i8> = repeat((0..4099).map(|_| ((next() % 255) as i32 - 127) as i8).collect(), rows * cols);
    let packed: Vec<u8> = repeat((0..4099).map(|_| (1 + next() % 15) as u8 | ((1 + next() % 15) as u8) << 4).collect(), rows * cols / 2);
    let scales: Vec<f32> = repeat((0..1031).map(|_| (1 + next() % 1000) as f32 / 65536.0).collect(), rows * cols / group);
    let x: Vec<f32> = (0..tokens * cols).map(|_| (next() % 20001) as f32 / 10000.0 - 1.0).collect();
    let bias: Vec<f32> = (0..rows).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect();
    let data = if dtype == "q8" { MatrixData::Q8 { values: &values, scales: &scales, group } } else { MatrixData::Q4 { packed: &packed, scales: &scales, group } };
    let w = Matrix { rows, cols, data };
    let mut out = vec![0.0f32; tokens * rows];
    let mut scratch = vec![0.0f32; tokens * quant_scratch_len(cols, group)];
    // warm-up: the first call asks the CPU (and the environment) which kernel to take
    linear(&mut out[..1], &x[..cols], &w.row_range(0, 1), &[], false, &mut scratch);
    for _ in 0..calls {
        linear(&mut out, &x, &w, &bias, false, &mut scratch);
    }
    // a checksum of the output bits, printed at the same cost whatever its value (branch-free
    // hex digits, one write), so that runs with different CALLS differ only by the calls
    let sum = out.iter().fold(0u32, |h, v| h.rotate_left(5) ^ v.to_bits());
    let mut line = *b"checksum 00000000\n";
    for (i, d) in line[9..17].iter_mut().enumerate() {
        *d = b"0123456789abcdef"[(sum >> (28 - 4 * i) & 15) as usize];
    }
    std::io::stderr().write_all(&line).ok();
}

/// `block` repeated (and cut) to `n` elements.
fn repeat<T: Copy>(block: Vec<T>, n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n + block.len());
    while v.len() < n {
        v.extend_from_slice(&block);
    }
    v.truncate(n);
    v
}
