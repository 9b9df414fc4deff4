//! How fast this machine reads memory: the probe behind `host bench`'s decode bound, and the
//! far-apart cases of `kernel-benches`' `read-streams` (BENCHMARKS.md, runs 20-21). A sum over
//! the bytes with independent accumulators, AVX-512 loads and a software prefetch where the CPU
//! has them (as the kernels do), else AVX2 loads, else plain 64-bit adds; read from one place
//! or from k places far apart, a piece of each in turn, by one thread or several.

use std::time::Instant;

/// Read bandwidth of `threads` threads over `bytes` (the blob, so the working set is the
/// weights'), as decode reads with `--threads`: each thread a contiguous share of the blob (a
/// thread's rows of each matrix), all started at once, timed until the last one is done. The
/// median of `runs` passes of a sum over 64-byte blocks with independent accumulators, with
/// AVX-512 loads and a software prefetch where the CPU has them (as the kernels do), else AVX2
/// loads. Each thread reads from k = 1-4 places far apart at once (k = 1: its share in one
/// stream; else its share cut into k parts, [`PIECE`] bytes of each in turn), since one AMD Zen 3 core
/// reads faster from several places than from one (f16 decode reads so: `for_fronts` in the
/// runtime's `kernels/x86.rs`; BENCHMARKS.md run 20). Returns the best and the rate of each k.
/// Decode cannot stream weights faster than the best.
pub fn read_bandwidth(bytes: &[u8], runs: usize, threads: usize) -> (f64, [f64; 4]) {
    let threads = threads.max(1);
    let share = bytes.len() / threads;
    let mut by_k = [0.0; 4];
    for (k, r) in (1..).zip(by_k.iter_mut()) {
        let mut rates = Vec::with_capacity(runs);
        for _ in 0..runs {
            let (read, secs) = if threads == 1 {
                let t0 = Instant::now();
                let read = read_places(bytes, k, PIECE);
                (read, t0.elapsed().as_secs_f64())
            } else {
                // this thread reads share 0 and the others the rest; all meet at the barrier,
                // so the clock starts when every reader can read, and it stops when the last
                // is done (a clock on a thread of its own would share a core with a reader)
                let start = std::sync::Barrier::new(threads);
                std::thread::scope(|s| {
                    let readers: Vec<_> = (1..threads)
                        .map(|i| {
                            let (part, start) = (&bytes[i * share..(i + 1) * share], &start);
                            s.spawn(move || {
                                start.wait();
                                read_places(part, k, PIECE)
                            })
                        })
                        .collect();
                    start.wait();
                    let t0 = Instant::now();
                    let mine = read_places(&bytes[..share], k, PIECE);
                    let read = mine + readers.into_iter().map(|h| h.join().unwrap_or(0)).sum::<usize>();
                    (read, t0.elapsed().as_secs_f64())
                })
            };
            rates.push(read as f64 / secs);
        }
        *r = median(rates);
    }
    (by_k.iter().copied().fold(0.0, f64::max), by_k)
}

/// The bytes [`read_bandwidth`] reads of each place in turn.
pub const PIECE: usize = 2048;

/// Reads `bytes` from k places at once (k = 1: in one stream; else cut into k parts, `piece`
/// bytes of each in turn, a multiple of 256) and returns how many bytes it read. The CPU's
/// loads are chosen once, and the sum is inlined into the loop over the pieces, so a short
/// piece costs no call or check of its own.
pub fn read_places(bytes: &[u8], k: usize, piece: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { places_avx512(bytes, k, piece) };
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { places_avx2(bytes, k, piece) };
        }
    }
    places(bytes, k, piece, sum_plain)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn places_avx512(bytes: &[u8], k: usize, piece: usize) -> usize {
    places(bytes, k, piece, |b| sum_avx512(b))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn places_avx2(bytes: &[u8], k: usize, piece: usize) -> usize {
    places(bytes, k, piece, |b| sum_avx2(b))
}

/// [`read_places`] with the sum `sum`.
#[inline(always)]
fn places(bytes: &[u8], k: usize, piece: usize, sum: impl Fn(&[u8]) -> u64) -> usize {
    if k <= 1 {
        std::hint::black_box(sum(std::hint::black_box(bytes)));
        return bytes.len();
    }
    let piece = piece.max(1);
    let part = bytes.len() / k / piece * piece;
    let mut s = 0u64;
    for off in (0..part).step_by(piece) {
        for f in 0..k {
            s = s.wrapping_add(sum(std::hint::black_box(&bytes[f * part + off..f * part + off + piece])));
        }
    }
    std::hint::black_box(s);
    k * part
}

/// The sum of `bytes` as 64-bit words (wrapping), with plain loads (no AVX2).
fn sum_plain(bytes: &[u8]) -> u64 {
    let (blocks, _) = bytes.as_chunks::<64>();
    let mut acc = [0u64; 8];
    for b in blocks {
        for (a, w) in acc.iter_mut().zip(b.as_chunks::<8>().0) {
            *a = a.wrapping_add(u64::from_le_bytes(*w));
        }
    }
    acc.iter().fold(0, |s, &a| s.wrapping_add(a))
}

/// AVX2 (no AVX-512): one sequential stream of 256-bit loads and no software prefetch, as the
/// AVX2 decode kernels read (on Zen 3 a prefetch 8 KiB ahead made this loop slower: 21 against 29
/// GB/s, thread CPU time).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
fn sum_avx2(bytes: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let (blocks, _) = bytes.as_chunks::<128>();
    let mut acc = [_mm256_setzero_si256(); 4];
    for b in blocks {
        for (a, v) in acc.iter_mut().zip(b.as_chunks::<32>().0) {
            // SAFETY: v is 32 readable bytes.
            *a = _mm256_add_epi64(*a, unsafe { _mm256_loadu_si256(v.as_ptr().cast()) });
        }
    }
    let mut lanes = [0u64; 4];
    for a in acc {
        let mut v = [0u64; 4];
        // SAFETY: v is 32 writable bytes.
        unsafe { _mm256_storeu_si256(v.as_mut_ptr().cast(), a) };
        lanes.iter_mut().zip(v).for_each(|(l, v)| *l = l.wrapping_add(v));
    }
    lanes.iter().fold(0, |s, &l| s.wrapping_add(l))
}

/// AVX-512 loads, 256 bytes a step, and a software prefetch 8 KiB ahead.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
fn sum_avx512(bytes: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let (blocks, _) = bytes.as_chunks::<256>();
    let mut acc = [_mm512_setzero_si512(); 4];
    for b in blocks {
        _mm_prefetch::<_MM_HINT_T0>(b.as_ptr().wrapping_add(8192).cast());
        for (a, v) in acc.iter_mut().zip(b.as_chunks::<64>().0) {
            // SAFETY: v is 64 readable bytes.
            *a = _mm512_add_epi64(*a, unsafe { _mm512_loadu_si512(v.as_ptr().cast()) });
        }
    }
    acc.iter().fold(0, |s, &a| s.wrapping_add(_mm512_reduce_add_epi64(a) as u64))
}

/// The median of `v` (the upper one of an even count; 0 for none): `host bench`'s figures and
/// this probe's.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each place reads whole pieces of its part (the rest of the buffer is left out), one
    /// place the whole buffer; the probe measures every k, with one thread and with several.
    #[test]
    fn places_read_whole_pieces_and_the_probe_measures_every_count() {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        assert_eq!(read_places(&bytes, 1, PIECE), 100_000);
        assert_eq!(read_places(&bytes, 3, 256), 3 * (100_000 / 3 / 256 * 256));
        assert_eq!(read_places(&bytes, 4, PIECE), 4 * (100_000 / 4 / PIECE * PIECE));
        assert_eq!(read_places(&bytes[..1000], 2, PIECE), 0);
        for threads in [1, 2, 3] {
            let (best, by_k) = read_bandwidth(&bytes, 3, threads);
            assert!(by_k.iter().all(|&r| r > 0.0) && by_k.contains(&best), "{threads} threads: {best} {by_k:?}");
        }
    }
}
