//! Kernel micro-benchmarks: `linear` (the matrix-vector / matrix-matrix product that is ~all of
//! a forward pass) for each weight dtype on GPT-2 124M's shapes, one token (decode) and 64
//! tokens (prefill), plus the single dot products. Throughput is reported in weight bytes
//! (decode) or multiply-accumulates (prefill) per second.
//!
//! ```sh
//! cargo bench -p kernel-benches                  # all
//! cargo bench -p kernel-benches -- 'linear/q8'   # a filter
//! ```
//!
//! The matrices are 3072 × 768 (GPT-2's `mlp.c_fc`): 9.4 MB in f32, larger than L2, so decode
//! streams them from memory as it does in the model.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::f16;
use kernel_benches::{pseudo, Aligned};
use runtime::kernels::{dot_f32, dot_i8, linear, quant_scratch_len, quantize_group_q4, quantize_group_q8};
use runtime::model::{Matrix, MatrixData};

const ROWS: usize = 3072;
const COLS: usize = 768;
const GROUP: usize = 32;

fn bench_linear(c: &mut Criterion) {
    // the weights and activations on 64-byte boundaries, as the blob's tensors and the arena are
    let w = Aligned::new(&pseudo(ROWS * COLS, 1));
    let wh = Aligned::new(&w.iter().map(|&v| f16::from_f32(v)).collect::<Vec<f16>>());
    let mut q8 = vec![0i8; ROWS * COLS];
    let s8: Vec<f32> = w.chunks(GROUP).zip(q8.chunks_mut(GROUP)).map(|(a, q)| quantize_group_q8(a, q)).collect();
    let mut q4 = vec![0u8; ROWS * COLS / 2];
    let s4: Vec<f32> = w.chunks(GROUP).zip(q4.chunks_mut(GROUP / 2)).map(|(a, q)| quantize_group_q4(a, q)).collect();
    let (q8, s8, q4, s4) = (Aligned::new(&q8), Aligned::new(&s8), Aligned::new(&q4), Aligned::new(&s4));
    let mats = [
        ("f32", Matrix { rows: ROWS, cols: COLS, data: MatrixData::F32(&w) }, ROWS * COLS * 4),
        ("f16", Matrix { rows: ROWS, cols: COLS, data: MatrixData::F16(&wh) }, ROWS * COLS * 2),
        ("q8", Matrix { rows: ROWS, cols: COLS, data: MatrixData::Q8 { values: &q8, scales: &s8, group: GROUP } }, ROWS * COLS * 9 / 8),
        ("q4", Matrix { rows: ROWS, cols: COLS, data: MatrixData::Q4 { packed: &q4, scales: &s4, group: GROUP } }, ROWS * COLS * 5 / 8),
    ];
    let mut g = c.benchmark_group("linear");
    g.sample_size(20);
    for tokens in [1usize, 64] {
        let x = Aligned::new(&pseudo(tokens * COLS, 2));
        let mut out = vec![0.0f32; tokens * ROWS];
        let mut scratch = vec![0.0f32; tokens * quant_scratch_len(COLS, GROUP)];
        for (name, m, bytes) in &mats {
            g.throughput(if tokens == 1 { Throughput::Bytes(*bytes as u64) } else { Throughput::Elements((ROWS * COLS * tokens) as u64) });
            g.bench_with_input(BenchmarkId::new(*name, format!("{ROWS}x{COLS}, {tokens} token(s)")), m, |b, m| {
                b.iter(|| linear(&mut out, &x, m, &[], false, &mut scratch))
            });
        }
    }
    g.finish();
}

fn bench_dots(c: &mut Criterion) {
    let a = pseudo(COLS, 3);
    let b = pseudo(COLS, 4);
    let ai: Vec<i8> = a.iter().map(|v| (v * 250.0) as i8).collect();
    let bi: Vec<i8> = b.iter().map(|v| (v * 250.0) as i8).collect();
    let mut g = c.benchmark_group("dot");
    g.throughput(Throughput::Elements(COLS as u64));
    g.bench_function("f32 portable, 768", |bch| bch.iter(|| dot_f32(std::hint::black_box(&a), std::hint::black_box(&b))));
    g.bench_function("i8 portable, 768", |bch| bch.iter(|| dot_i8(std::hint::black_box(&ai), std::hint::black_box(&bi))));
    g.finish();
}

criterion_group!(benches, bench_linear, bench_dots);
criterion_main!(benches);
