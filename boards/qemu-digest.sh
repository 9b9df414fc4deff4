#!/usr/bin/env bash
# Per-layer digests, host == firmware layer by layer: builds the QEMU firmwares with feature
# `trace` (one `digest: pos P layer L resid_post crc32 XXXXXXXX` line per layer per token on
# stderr, a CRC-32 of the f32 bits of the residual stream after block L at position P), runs them,
# and requires exactly the lines `host trace --digest` prints for the same blob (the firmware's
# fixed run of boards/firmware-common/src/settings.rs: prompt, sampling, 48 tokens, context
# min(128, n_ctx), int8 KV cache, prefill batch 1). On a difference it names the first position
# and layer that differ: where the board parts from the desktop. Also requires the trace build's
# stdout to equal the plain firmware's transcript (observing changes no token).
#
# Usage: boards/qemu-digest.sh [BOARD...]      (BOARD: qemu-m4, qemu-m55; default both)
#   MODEL_BLOB=path   the blob (default: models/default/model-q8.blob)
# Run it as `flock /tmp/qemu-check.lock boards/qemu-digest.sh` when others build firmware too.
# It builds in its own copy of the tree ($FIRMWARE_TRACE_BUILD_DIR, default
# /tmp/gpt2-mcu-firmware-trace), never in qemu-check.sh's.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BOARDS=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    qemu-m4|qemu-m55) BOARDS+=("$arg") ;;
    *) echo "error: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#BOARDS[@]} -gt 0 ] || BOARDS=(qemu-m4 qemu-m55)

BLOB="${MODEL_BLOB:-$ROOT/models/default/model-q8.blob}"
[ -f "$BLOB" ] || { echo "error: model blob $BLOB not found (set MODEL_BLOB)" >&2; exit 1; }
BLOB="$(cd "$(dirname "$BLOB")" && pwd)/$(basename "$BLOB")"
command -v qemu-system-arm >/dev/null || { echo "error: qemu-system-arm not found (apt-get install qemu-system-arm)" >&2; exit 1; }

BUILD_ROOT="${FIRMWARE_TRACE_BUILD_DIR:-/tmp/gpt2-mcu-firmware-trace}"
mkdir -p "$BUILD_ROOT"
tar -C "$ROOT" --exclude=./.git --exclude=./target --exclude='./target-*' --exclude='./boards/*/target' \
    --exclude=./fuzz/target -cf - . | tar -C "$BUILD_ROOT" -xf -

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

echo "== host trace --digest --model $BLOB"
(cd "$ROOT" && cargo build --release -q -p host)
(cd "$ROOT" && cargo run --release -q -p host -- trace --digest --model "$BLOB" > "$WORK/host.digest" 2> "$WORK/host.stderr") || {
  cat "$WORK/host.stderr"; echo "FAIL: host trace --digest failed"; exit 1; }
sed 's/^/  /' "$WORK/host.stderr"
[ -s "$WORK/host.digest" ] || { echo "FAIL: host printed no digests"; exit 1; }

for BOARD in "${BOARDS[@]}"; do
  DIR="$BUILD_ROOT/boards/$BOARD"
  echo "== $BOARD: build with --features trace, run in QEMU"
  set +e
  (cd "$DIR" && MODEL_BLOB="$BLOB" cargo run --release -q --features trace > "$WORK/$BOARD.stdout" 2> "$WORK/$BOARD.stderr")
  RC=$?
  set -e
  if [ $RC -ne 0 ]; then
    sed 's/^/  | /' "$WORK/$BOARD.stderr" | tail -n 20
    fail "$BOARD (trace build) exited with status $RC"
    continue
  fi
  grep '^digest: ' "$WORK/$BOARD.stderr" > "$WORK/$BOARD.digest" || true
  if cmp -s "$WORK/host.digest" "$WORK/$BOARD.digest"; then
    echo "ok: host == $BOARD layer by layer ($(wc -l < "$WORK/host.digest") digests: every layer of every position)"
  else
    fail "host and $BOARD digests differ"
    # the first line that differs names the position and the layer
    awk 'NR == FNR { h[FNR] = $0; n = FNR; next }
         { b[FNR] = $0; m = FNR }
         END { for (i = 1; i <= (n > m ? n : m); i++) if (h[i] != b[i]) {
                 printf "  first difference, line %d:\n    host:     %s\n    firmware: %s\n", i, (i <= n ? h[i] : "(none)"), (i <= m ? b[i] : "(none)"); exit } }' \
      "$WORK/host.digest" "$WORK/$BOARD.digest"
    echo "  (the first differing position and layer is where $BOARD parts from the desktop; see README \"Where a board goes wrong\")"
  fi
  if [ -f "$ROOT/boards/expected/$BOARD.run" ] && [ "$(cut -d' ' -f1 "$ROOT/boards/expected/blob.sha256")" = "$(sha256sum "$BLOB" | cut -d' ' -f1)" ]; then
    if cmp -s "$ROOT/boards/expected/$BOARD.run" "$WORK/$BOARD.stdout"; then
      echo "ok: $BOARD trace build prints boards/expected/$BOARD.run (observing changed no token)"
    else
      fail "$BOARD trace build's stdout differs from boards/expected/$BOARD.run"
      diff -u "$ROOT/boards/expected/$BOARD.run" "$WORK/$BOARD.stdout" | head -n 20 | sed 's/^/  /'
    fi
  fi
done

if [ $FAILED -ne 0 ]; then
  echo "qemu-digest: FAILED"
  exit 1
fi
echo "qemu-digest: all passed"
