#!/usr/bin/env bash
# Host == firmware for the serial console: pipes one scripted session into `host console` and
# into the console firmware of both QEMU boards (boards/console-qemu.sh), and requires the three
# transcripts to be identical byte for byte, except the one line that measures the machine
# (`stats: speed on ...`, masked). Then it walks the firmware's transcript along the script and
# requires each reply to a prompt outside chat mode to be exactly what `host --prompt LINE`
# prints after LINE with the settings in force (the host test `session_replies_equal_host_prompt`,
# built by `cargo test`).
#
# Usage: boards/console-check.sh [SESSION]    (default: boards/console-session.txt)
#   MODEL_BLOB=path   the blob (default: models/default/model-q8.blob, the QEMU boards' own)
#   KEEP=dir          keep the transcripts in dir
#
# The committed session has several prompts under changing settings, every command, chat turns,
# and each kind of bad line (empty, not UTF-8, longer than the line buffer, more tokens than the
# context, unknown command, bad values). Exit status 0 = all checks passed.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SESSION="${1:-$ROOT/boards/console-session.txt}"
[ -f "$SESSION" ] || { echo "error: session script $SESSION not found" >&2; exit 2; }
SESSION="$(cd "$(dirname "$SESSION")" && pwd)/$(basename "$SESSION")"
BLOB="${MODEL_BLOB:-$ROOT/models/default/model-q8.blob}"
BLOB="$(cd "$(dirname "$BLOB")" && pwd)/$(basename "$BLOB")"
export MODEL_BLOB="$BLOB"
WORK="${KEEP:-$(mktemp -d)}"
mkdir -p "$WORK"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

echo "== session: $SESSION ($(wc -c < "$SESSION") bytes, $(wc -l < "$SESSION") lines); blob: $BLOB"
(cd "$ROOT" && cargo build --release -q -p host)
HOST="${CARGO_TARGET_DIR:-$ROOT/target}/release/host"

echo "== host console"
set +e
"$HOST" console --model "$BLOB" < "$SESSION" > "$WORK/host.txt"
RC=$?
set -e
[ $RC -eq 0 ] || fail "host console exited with status $RC"

for BOARD in qemu-m4 qemu-m55; do
  echo "== $BOARD: boards/console-qemu.sh $BOARD"
  set +e
  timeout 900 "$ROOT/boards/console-qemu.sh" "$BOARD" < "$SESSION" > "$WORK/$BOARD.txt" 2> "$WORK/$BOARD.stderr"
  RC=$?
  set -e
  sed 's/^/  | /' "$WORK/$BOARD.stderr"
  [ $RC -eq 0 ] || fail "$BOARD exited with status $RC$([ $RC -eq 124 ] && echo ' (timeout)')"
done

# The speed line is the only one that may differ: its numbers measure the machine.
mask() { sed -E 's/^((> )?stats: speed on )[^:]*:.*$/\1(machine): (not compared)/' "$1"; }
mask "$WORK/host.txt" > "$WORK/host.masked"
echo "== transcripts ($(wc -c < "$WORK/host.txt") bytes, $(grep -c '^> ' "$WORK/host.txt") prompt markers from host console)"
grep -E '^(> )?stats: speed on ' "$WORK/host.txt" "$WORK/qemu-m4.txt" "$WORK/qemu-m55.txt" | sed "s|^$WORK/|  not compared: |"
for BOARD in qemu-m4 qemu-m55; do
  mask "$WORK/$BOARD.txt" > "$WORK/$BOARD.masked"
  if cmp -s "$WORK/host.masked" "$WORK/$BOARD.masked"; then
    echo "ok: host console == $BOARD"
  else
    fail "host console and $BOARD differ"
    diff -u --label "host console" --label "$BOARD" "$WORK/host.masked" "$WORK/$BOARD.masked" | sed 's/^/  /' | head -n 40
  fi
done

echo "== replies == host --prompt (walking the qemu-m4 transcript)"
if (cd "$ROOT" && CONSOLE_SESSION="$SESSION" CONSOLE_MODEL="$BLOB" CONSOLE_TRANSCRIPT="$WORK/qemu-m4.txt" \
      cargo test -q -p host --test console -- --exact session_replies_equal_host_prompt --nocapture 2>&1 |
      grep -vE '^(running [0-9]+ tests?|test result:.*|\.*)$' | sed 's/^/  /'; exit "${PIPESTATUS[0]}"); then
  echo "ok: every reply outside chat mode equals host --prompt"
else
  fail "a reply differs from host --prompt (see above)"
fi

if [ $FAILED -ne 0 ]; then
  echo "console-check: FAILED"
  exit 1
fi
echo "console-check: all passed"
