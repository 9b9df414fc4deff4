#!/usr/bin/env bash
# Instructions per multiply-accumulate of one q8/q4 `kernels::linear` call on 64-bit Arm: the
# SDOT kernels (runtime/src/kernels/aarch64.rs) against the portable kernels (the same build
# with GPT2_MCU_NO_SDOT=1: plain Rust, auto-vectorised to NEON). EMULATED INSTRUCTION COUNTS
# under qemu-user, not timings: there is no aarch64 hardware here, and an instruction count
# says nothing of memory stalls, latencies or how many instructions a core issues per cycle.
#
#   scripts/aarch64-count.sh                        # the shapes of BENCHMARKS.md
#   scripts/aarch64-count.sh q8:768x768:1 q4:3072x768:8   # DTYPE:ROWSxCOLS:TOKENS ...
#
# How: `qemu-aarch64 -singlestep -d exec,nochain` makes every translation block one guest
# instruction and logs one "Trace" line each time one executes, so the lines of the log count
# the instructions the program executed. The program (runtime/examples/linear_count.rs) builds
# the matrix and activations, makes one warm-up call on a one-row matrix (the one-time CPU
# feature check), then calls `linear` CALLS times, then prints a checksum of the output at a
# cost that does not depend on its value; counting CALLS = 1 and CALLS = 0 and subtracting
# leaves one call (setup and exit cancel). Before the table, the method checks itself: the
# counts must be repeatable and a second call must cost exactly what the first did. Each row
# also checks that both kernels gave the same output bits (the checksum).
#
# Needs what scripts/aarch64-check.sh needs (qemu-user, gcc-aarch64-linux-gnu, the rustup
# target). Slow: qemu writes each logged instruction with its own system call (~0.4 M
# instructions/s here), and the portable kernel at 2304 × 768 × 64 tokens executes ~300 M
# (the default table took 25 minutes here).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
A64_TARGET_DIR="${A64_TARGET_DIR:-target/aarch64-check}"
CARGO_TARGET_DIR="$A64_TARGET_DIR" cargo build -q --release -p runtime --features std --example linear_count --target "$TARGET"
bin="$A64_TARGET_DIR/$TARGET/release/examples/linear_count"
QEMU=(qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu max)
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT

# count [ENV=VALUE...] -- ARGS: instructions the program executes with ARGS (its stderr, the
# checksum line, goes to $tmp)
count() {
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" "${QEMU[@]}" -singlestep -d exec,nochain -D /dev/stdout "$bin" "$@" 2>"$tmp" | grep -c '^Trace'
}

# one call of `linear` with ARGS (without CALLS), on the kernel ENV selects
one_call() {
  local a b
  a=$(count "$@" 0)
  b=$(count "$@" 1)
  echo $((b - a))
}

echo "-- the method: repeatable counts, and each call costs the same"
for env in GPT2_MCU_NO_SDOT=1 GPT2_MCU_NO_SDOT=0; do
  c0=$(count $env -- q4 64 128 3 0); c0b=$(count $env -- q4 64 128 3 0)
  c1=$(count $env -- q4 64 128 3 1); c2=$(count $env -- q4 64 128 3 2)
  echo "$env, q4 64x128, 3 tokens: 0 calls $c0 (again: $c0b), 1 call $c1, 2 calls $c2 instructions"
  if [ "$c0" != "$c0b" ] || [ $((c1 - c0)) != $((c2 - c1)) ] || [ $((c1 - c0)) -le 0 ]; then
    echo "FAIL: the counts are not exact here; the figures below would mean nothing"
    exit 1
  fi
  echo "ok: a call costs $((c1 - c0)) instructions, the next one $((c2 - c1))"
done

shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(q8:768x768:1 q4:768x768:1 q8:2304x768:1 q4:2304x768:1 q8:768x768:64 q4:768x768:64 q8:2304x768:64 q4:2304x768:64)
echo
echo "-- one linear call, emulated instructions (qemu-aarch64 $(qemu-aarch64 --version | sed -n '1s/.*version \([^ ]*\).*/\1/p'), -cpu max)"
echo "| weights | rows × cols | tokens | portable: instructions | per MAC | SDOT: instructions | per MAC | portable / SDOT |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for s in "${shapes[@]}"; do
  IFS=: read -r dtype dims tokens <<<"$s"
  rows=${dims%x*} cols=${dims#*x}
  args=("$dtype" "$rows" "$cols" "$tokens")
  portable=$(one_call GPT2_MCU_NO_SDOT=1 -- "${args[@]}")
  sum_portable=$(sed -n 's/.*checksum //p' "$tmp")
  sdot=$(one_call -- "${args[@]}")
  sum_sdot=$(sed -n 's/.*checksum //p' "$tmp")
  if [ "$sum_portable" != "$sum_sdot" ]; then
    echo "FAIL: $s: the kernels' outputs differ ($sum_portable vs $sum_sdot)"
    exit 1
  fi
  macs=$((rows * cols * tokens))
  awk -v d="$dtype" -v r="$rows" -v c="$cols" -v t="$tokens" -v p="$portable" -v s="$sdot" -v m="$macs" 'BEGIN {
    printf "| %s | %d × %d | %d | %d | %.3f | %d | %.3f | %.1f× |\n", d, r, c, t, p, p / m, s, s / m, p / s }'
done
