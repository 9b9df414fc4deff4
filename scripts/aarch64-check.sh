#!/usr/bin/env bash
# Determinism across CPU architectures: builds the runtime's unit tests and `host` for 64-bit
# Arm (aarch64-unknown-linux-gnu, where NEON is baseline and the portable kernels vectorise to
# it; q8/q4 `linear` takes the SDOT kernels, runtime/src/kernels/aarch64.rs), runs the tests
# under qemu-user, and requires `host`'s output on the shipped blobs (f32, q8, q4; f32 and int8
# KV cache; 200 tokens, text and ids) and on a Llama blob (the `llama_gqa` fixture with its
# SentencePiece tokenizer, converted here to q8 and q4: RoPE, grouped-query attention, the gated
# MLP) to equal the x86-64 build's byte for byte.
#
# The emulated CPU is `-cpu max`, which has SDOT (dotprod); GPT2_MCU_EXPECT_SDOT=1 makes the
# SDOT test fail instead of skipping if it were missing. The shipped q8/q4 blobs' 448-wide
# matrices (group 32) run on the SDOT kernels in `host` too; `GPT2_MCU_NO_SDOT=1` runs the
# portable kernels instead (checked once below as well).
#
# Needs: gcc-aarch64-linux-gnu, qemu-user (Debian), `rustup target add aarch64-unknown-linux-gnu`
# (.ci/run installs them). Not a speed check: qemu-user emulates, and there is no aarch64
# machine here.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
QEMU=(qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu max)
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="${QEMU[*]}"
A64_TARGET_DIR="${A64_TARGET_DIR:-target/aarch64-check}"

echo "-- runtime unit tests on $TARGET (qemu-user)"
export GPT2_MCU_EXPECT_SDOT=1
CARGO_TARGET_DIR="$A64_TARGET_DIR" cargo test -q --release -p runtime --features std --lib --target "$TARGET"
# the SDOT test again, to show what it ran on
CARGO_TARGET_DIR="$A64_TARGET_DIR" cargo test -q --release -p runtime --features std --lib --target "$TARGET" \
  -- sdot_linear_is_bit_identical_to_portable --show-output 2>&1 | grep "aarch64 dotprod"

echo "-- host on $TARGET == host on x86-64"
CARGO_TARGET_DIR="$A64_TARGET_DIR" cargo build -q --release -p host --target "$TARGET"
cargo build -q --release -p host
x86="${CARGO_TARGET_DIR:-target}/release/host"
a64="$A64_TARGET_DIR/$TARGET/release/host"
status=0
# compare BLOB KV [ENV...]: host on aarch64 (with ENV) == host on x86-64
compare() {
  local blob=$1 kv=$2 want got
  shift 2
  local path="models/default/$blob" extra=()
  if [ -f "$blob" ]; then path="$blob"; extra=(--prompt "Once upon a time" --ignore-eos --context-shift); fi
  local args=(--model "$path" "${extra[@]}" --kv-dtype "$kv" -n 200 --print-ids)
  want="$("$x86" "${args[@]}" 2>/dev/null)"
  got="$(env "$@" "${QEMU[@]}" "$a64" "${args[@]}" 2>/dev/null)"
  if [ "$want" = "$got" ]; then
    echo "ok: $blob, $kv KV${*:+, $*}: identical output ($(printf '%s' "$got" | wc -c) bytes)"
  else
    echo "FAIL: $blob, $kv KV${*:+, $*}: aarch64 output differs from x86-64"
    diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") | head -5
    status=1
  fi
}
for blob in model.blob model-q8.blob model-q4.blob; do
  for kv in f32 int8; do
    compare "$blob" "$kv"
  done
done
# the portable q8/q4 kernels on aarch64 (as on a CPU without SDOT)
compare model-q8.blob int8 GPT2_MCU_NO_SDOT=1
compare model-q4.blob int8 GPT2_MCU_NO_SDOT=1
# a Llama blob: 48 positions, so the 200 tokens shift the context (keeping BOS) several times
LLAMA_DIR="$(mktemp -d)"
trap 'rm -rf "$LLAMA_DIR"' EXIT
for dtype in q8 q4; do
  cargo run -q --release -p host-tools -- convert tests/fixtures/llama_gqa --dtype "$dtype" -o "$LLAMA_DIR/llama-$dtype.blob" 2>/dev/null
  for kv in f32 int8; do
    compare "$LLAMA_DIR/llama-$dtype.blob" "$kv"
  done
done
compare "$LLAMA_DIR/llama-q8.blob" int8 GPT2_MCU_NO_SDOT=1
exit $status
