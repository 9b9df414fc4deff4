#!/usr/bin/env bash
# Determinism across CPU architectures: builds the runtime's unit tests and `host` for 64-bit
# Arm (aarch64-unknown-linux-gnu, where NEON is baseline and the portable kernels vectorise to
# it), runs the tests under qemu-user, and requires `host`'s output on the shipped blobs (f32,
# q8, q4; f32 and int8 KV cache; 200 tokens, text and ids) to equal the x86-64 build's byte for byte.
#
# Needs: gcc-aarch64-linux-gnu, qemu-user (Debian), `rustup target add aarch64-unknown-linux-gnu`
# (.ci/run installs them). Not a speed check: qemu-user emulates, and there is no aarch64
# machine here.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
A64_TARGET_DIR="${A64_TARGET_DIR:-target/aarch64-check}"

echo "-- runtime unit tests on $TARGET (qemu-user)"
CARGO_TARGET_DIR="$A64_TARGET_DIR" cargo test -q --release -p runtime --features std --lib --target "$TARGET"

echo "-- host on $TARGET == host on x86-64"
CARGO_TARGET_DIR="$A64_TARGET_DIR" cargo build -q --release -p host --target "$TARGET"
cargo build -q --release -p host
x86=target/release/host
a64="$A64_TARGET_DIR/$TARGET/release/host"
status=0
for blob in model.blob model-q8.blob model-q4.blob; do
  for kv in f32 int8; do
    args=(--model "models/default/$blob" --kv-dtype "$kv" -n 200 --print-ids)
    want="$("$x86" "${args[@]}" 2>/dev/null)"
    got="$(qemu-aarch64 -L /usr/aarch64-linux-gnu "$a64" "${args[@]}" 2>/dev/null)"
    if [ "$want" = "$got" ]; then
      echo "ok: $blob, $kv KV: identical output ($(printf '%s' "$got" | wc -c) bytes)"
    else
      echo "FAIL: $blob, $kv KV: aarch64 output differs from x86-64"
      diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") | head -5
      status=1
    fi
  done
done
exit $status
