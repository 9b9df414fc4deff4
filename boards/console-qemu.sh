#!/usr/bin/env bash
# The serial console firmware under QEMU, with this script's stdin and stdout as the board's UART.
#
# Usage: boards/console-qemu.sh qemu-m4|qemu-m55
#   MODEL_BLOB=path   the blob to build in (default: the board's, models/default/model-q8.blob)
#
# - Builds boards/<board>'s `console` binary if needed (cargo build --release --bin console; the
#   build's messages go to stderr).
# - Runs it in QEMU (mps2-an386 / mps3-an547) with UART0 on stdin and stdout (-serial stdio),
#   semihosting only for the exit and for panic messages (on stderr), -icount shift=0 (so that
#   /stats counts instructions).
# - A UART has no end of input: when stdin ends, the script sends EOT (0x04, Ctrl-D), which ends
#   the console as /quit does. QEMU hands the UART a byte only when the firmware has taken the
#   previous one, so a script piped in all at once is read in full, in order.
# - Exits with the firmware's status: 0 after /quit or the end of the input, 1 when the blob does
#   not load or the firmware faults.
#
# From a terminal: the terminal edits and echoes a line, and sends it when you press Enter;
# Ctrl-D on an empty line ends the session.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-}" in
  qemu-m4) MACHINE=mps2-an386; CPU=cortex-m4; TARGET=thumbv7em-none-eabihf ;;
  qemu-m55) MACHINE=mps3-an547; CPU=cortex-m55; TARGET=thumbv8m.main-none-eabihf ;;
  -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: boards/console-qemu.sh qemu-m4|qemu-m55 (see --help)" >&2; exit 2 ;;
esac
BOARD="$1"
[ $# -eq 1 ] || { echo "error: one argument, the board (see --help)" >&2; exit 2; }
command -v qemu-system-arm >/dev/null || { echo "error: qemu-system-arm not found (apt-get install qemu-system-arm)" >&2; exit 1; }
if [ -n "${MODEL_BLOB:-}" ]; then
  MODEL_BLOB="$(cd "$(dirname "$MODEL_BLOB")" && pwd)/$(basename "$MODEL_BLOB")"
  export MODEL_BLOB
fi

# The build: quiet, and never on stdout (stdout is the UART).
(cd "$ROOT/boards/$BOARD" && cargo build --release -q --bin console) >&2
ELF="${CARGO_TARGET_DIR:-$ROOT/boards/$BOARD/target}/$TARGET/release/console"

QEMU=(qemu-system-arm -machine "$MACHINE" -cpu "$CPU" -display none -monitor none -serial stdio
      -semihosting-config enable=on,target=native -icount shift=0 -kernel "$ELF")

# QEMU's stdio backend makes its stdin and stdout non-blocking; its stdout goes through `cat` so
# that this never happens to the caller's terminal (a terminal's stdin and stdout share that flag).
set +e
if [ -t 0 ]; then
  # A terminal: forward each line as the terminal delivers it (QEMU would put the terminal in raw
  # mode if it read it itself), then EOT. The forwarder is a shell loop on its own open of the
  # terminal (a background job's stdin would be /dev/null), ended when QEMU ends (after /quit)
  # so that it does not wait for one more line.
  FIFO="$(mktemp -u)"
  mkfifo "$FIFO"
  trap 'rm -f "$FIFO"' EXIT
  TTY="$(tty)"
  ( while IFS= read -r line || [ -n "$line" ]; do printf '%s\n' "$line"; done; printf '\004' ) < "$TTY" > "$FIFO" &
  FEEDER=$!
  "${QEMU[@]}" < "$FIFO" | cat
  RC=${PIPESTATUS[0]}
  kill "$FEEDER" 2>/dev/null
  wait "$FEEDER" 2>/dev/null
else
  { cat; printf '\004'; } | "${QEMU[@]}" | cat
  RC=${PIPESTATUS[1]}
fi
exit "$RC"
