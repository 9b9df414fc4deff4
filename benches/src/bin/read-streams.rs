//! How fast one core reads memory from k places at once: a buffer (2 MiB pages where the
//! kernel gives them) cut into k parts, a piece of each part in turn, through `host bench`'s own
//! probe (`host_tools::bandwidth`, AVX-512 loads where the CPU has them, else AVX2); and two
//! places close together, 32 B of each in turn, summed with AVX2 loads here. On a Zen 3 VM one
//! stream read 19-24 GB/s and two to four far apart 23-31, while two streams close together (the
//! two halves of each 1.5 KiB span: rows side by side) read at half the rate of one. This is why
//! f16 decode reads each matrix from several places (`for_fronts` in
//! `runtime/src/kernels/x86.rs`) and why `host bench`'s bandwidth line is the best of 1-4
//! streams (BENCHMARKS.md, run 20).
//!
//! ```sh
//! cargo run --release -p kernel-benches --bin read-streams [MB]
//! ```

#[cfg(target_arch = "x86_64")]
fn main() {
    use std::time::Instant;
    if !std::is_x86_feature_detected!("avx2") {
        println!("read-streams: this CPU has no AVX2");
        return;
    }
    let mb: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(256);
    let n = mb << 20;
    let mut buf = vec![0u8; n + (2 << 20)];
    let start = buf.as_ptr().align_offset(2 << 20);
    let bytes = &mut buf[start..start + n];
    #[cfg(target_os = "linux")]
    // SAFETY: the range lies inside `buf`, 2 MiB aligned; MADV_HUGEPAGE only advises.
    unsafe {
        libc::madvise(bytes.as_mut_ptr().cast(), n, libc::MADV_HUGEPAGE);
    }
    bytes.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    let bytes = &*bytes;
    // (places, bytes of each place in turn, the distance between two places: whole parts, or
    // the given one)
    let cases: [(usize, usize, Option<usize>); 12] =
        [(1, 2048, None), (2, 2048, None), (3, 2048, None), (4, 2048, None), (8, 2048, None), (2, 512, None), (2, 3072, None), (4, 3072, None), (2, 8192, None), (2, 32, Some(768)), (2, 32, Some(1536)), (2, 32, Some(65536))];
    println!("{mb} MiB, GB/s, best of 5 passes:");
    for (k, chunk, apart) in cases {
        let best = (0..5)
            .map(|_| {
                let t0 = Instant::now();
                let read = match apart {
                    None => host_tools::bandwidth::read_places(bytes, k, chunk),
                    Some(d) => {
                        // SAFETY: the CPU has AVX2 (checked above).
                        let (s, read) = unsafe { sum_close(bytes, k, d) };
                        std::hint::black_box(s);
                        read
                    }
                };
                read as f64 / t0.elapsed().as_secs_f64() / 1e9
            })
            .fold(0.0, f64::max);
        let how = match apart {
            Some(d) => format!("{k} places {d} B apart (each span of {} B read as {k} interleaved pieces)", k * d),
            None => format!("{k} place(s) {} MiB apart", (n / k) >> 20),
        };
        println!("  {how}, {chunk} B of each in turn: {best:.1}");
    }
}

/// Sums `bytes` read from k places close together: each span of k·d bytes as its k pieces of d
/// bytes side by side, 32 bytes of each piece in turn (as rows side by side are read). Returns
/// the sum and the bytes read.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_close(bytes: &[u8], k: usize, d: usize) -> (u64, usize) {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 2];
    let mut read = 0;
    for span in bytes.chunks_exact(k * d) {
        for (i, off) in (0..d / 32 * 32).step_by(32).enumerate() {
            for p in 0..k {
                let v = &span[p * d + off..p * d + off + 32];
                // SAFETY: v is 32 readable bytes.
                acc[i % 2] = _mm256_add_epi64(acc[i % 2], unsafe { _mm256_loadu_si256(v.as_ptr().cast()) });
            }
        }
        read += k * (d / 32 * 32);
    }
    let mut v = [0u64; 4];
    // SAFETY: v is 32 writable bytes.
    unsafe { _mm256_storeu_si256(v.as_mut_ptr().cast(), _mm256_add_epi64(acc[0], acc[1])) };
    (v.iter().fold(0, |s, &x| s.wrapping_add(x)), read)
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("read-streams: x86-64 only");
}
