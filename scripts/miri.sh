#!/usr/bin/env bash
# Runs the runtime's unit tests and doc tests under Miri, the Rust interpreter that checks every
# memory access for undefined behaviour: out-of-bounds and misaligned reads, use of
# uninitialised memory, invalid casts (bytemuck views of the blob and the KV cache), integer
# overflow (debug assertions are on), and the `unsafe` AVX2 code of the desktop build.
#
#   scripts/miri.sh            # about 6 minutes on 2 cores
#   scripts/miri.sh --all      # also the slow statistical tests (hours under Miri)
#   scripts/miri.sh --32bit    # also a pass on a 32-bit target (usize = u32, as on Cortex-M)
#
# Needs nightly with the miri and rust-src components (installed below if missing).
#
# Two things differ from `cargo test -p runtime`:
# - libm is built with `force-soft-floats`: its x86 `sqrtf` is inline assembly, which Miri
#   cannot run. The portable code computes the same correctly rounded results.
# - The tests in SLOW are skipped by default: they draw tens of thousands of samples or sort
#   GPT-2-sized logit vectors, and each takes from minutes to hours under Miri (they run
#   natively in `cargo test`). Miri runs every other runtime test, and those already execute
#   every sampler path (greedy, top-k, top-p with and without the histogram, penalty).
set -euo pipefail
cd "$(dirname "$0")/.."

all=0
bits32=0
for arg in "$@"; do
  case "$arg" in
    --all) all=1 ;;
    --32bit) bits32=1 ;;
    *) echo "usage: $0 [--all] [--32bit]"; exit 2 ;;
  esac
done

if ! cargo +nightly miri --version >/dev/null 2>&1; then
  rustup +nightly component add miri rust-src
fi

SLOW=(
  sampler::tests::top_p_matches_brute_force_sort_on_gpt2_sized_logits
  sampler::tests::top_k_matches_brute_force_sort_on_gpt2_sized_logits
  sampler::tests::top_p_matches_renormalised_softmax_chi_square
  sampler::tests::top_k_matches_renormalised_softmax_chi_square
  sampler::tests::top_k_then_top_p_chi_square
  sampler::tests::temperature_matches_softmax_chi_square
  sampler::tests::top_p_one_and_k_beyond_vocab_keep_everything
  sampler::tests::same_seed_same_stream_different_seed_different_stream
  sampler::tests::infinite_logits_share_all_the_mass
  sampler::tests::huge_temperature_is_uniform
  sampler::tests::token_streams_for_seed_42_are_pinned
  tokenizer::utf8_stream::tests::all_byte_pairs_split_anywhere_match_from_utf8_lossy
  # 0.3M-MAC matrices (the size at which linear_par starts threads) times dtypes and counts
  kernels::tests::linear_par_is_bit_identical_to_one_thread
)
skip=()
if (( ! all )); then
  for t in "${SLOW[@]}"; do skip+=(--skip "$t"); done
fi

features=(--features libm/force-soft-floats)
echo "== Miri, $(rustc +nightly --version), runtime unit tests (${#SLOW[@]} slow ones skipped unless --all)"
cargo +nightly miri test -p runtime --lib "${features[@]}" -- --exact "${skip[@]}"
echo "== Miri, runtime doc tests"
cargo +nightly miri test -p runtime --doc "${features[@]}"

# The desktop build (`std` feature) dispatches `linear` to AVX2 / AVX-512 code at run time. Under
# Miri a CPU feature counts as present only when enabled at compile time, so this pass enables
# AVX2 and runs the kernel tests, which compare the unsafe SIMD dots with the portable ones.
# (The AVX-512 code cannot be interpreted: Miri lacks most AVX-512 and F16C intrinsics.)
echo "== Miri, kernels with the std feature and AVX2 (the unsafe SIMD path)"
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+avx2" \
  cargo +nightly miri test -p runtime --lib --features std,libm/force-soft-floats -- kernels:: --skip linear_par

if (( bits32 )); then
  # armv7 Linux: 32-bit usize like the Cortex-M boards, and no NEON so libm has no assembly.
  echo "== Miri on armv7-unknown-linux-gnueabihf (32-bit)"
  cargo +nightly miri test -p runtime --lib --target armv7-unknown-linux-gnueabihf "${features[@]}" -- --exact "${skip[@]}"
fi
