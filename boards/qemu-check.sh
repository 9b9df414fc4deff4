#!/usr/bin/env bash
# Host == firmware check: builds and runs the Cortex-M firmwares under QEMU, runs the desktop
# emulator (`host`) with the same blob, prompt and settings, and requires the same stdout (the
# generated text and the ids line) byte for byte. Then compares each firmware with its expected
# transcript and size files in boards/expected/.
#
# Usage: boards/qemu-check.sh [--bless] [BOARD...]      (BOARD: qemu-m4, qemu-m55; default both)
#   MODEL_BLOB=path   the blob to check (default: models/default/model-q8.blob)
#   --bless           rewrite boards/expected/ from this run (only if host == firmware held)
#
# boards/expected/ holds, per board:
#   <board>.run   the firmware's stdout (what host prints too)            compared, must match
#   <board>.size  llvm-size -A of the ELF (allocated sections) and the     compared, must match
#                 sums of symbol sizes                                     (except link-order padding)
#   <board>.perf  instruction counts and stack high-water (stderr lines)  compared, report only
# and blob.sha256, the blob they were made with: with another blob only host == firmware is
# checked.
#
# Needs: qemu-system-arm (apt-get install qemu-system-arm), rustup targets thumbv7em-none-eabihf
# and thumbv8m.main-none-eabihf, rustup component llvm-tools. Exit status 0 = all checks passed.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
EXPECTED="$ROOT/boards/expected"
BLESS=0
BOARDS=()
for arg in "$@"; do
  case "$arg" in
    --bless) BLESS=1 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    qemu-m4|qemu-m55) BOARDS+=("$arg") ;;
    *) echo "error: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#BOARDS[@]} -gt 0 ] || BOARDS=(qemu-m4 qemu-m55)

BLOB="${MODEL_BLOB:-$ROOT/models/default/model-q8.blob}"
[ -f "$BLOB" ] || { echo "error: model blob $BLOB not found (set MODEL_BLOB)" >&2; exit 1; }
BLOB="$(cd "$(dirname "$BLOB")" && pwd)/$(basename "$BLOB")"
BLOB_SHA="$(sha256sum "$BLOB" | cut -d' ' -f1)"
command -v qemu-system-arm >/dev/null || { echo "error: qemu-system-arm not found (apt-get install qemu-system-arm)" >&2; exit 1; }
LLVM_SIZE="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-size"
LLVM_NM="$(dirname "$LLVM_SIZE")/llvm-nm"
[ -x "$LLVM_SIZE" ] || { echo "error: $LLVM_SIZE not found (rustup component add llvm-tools)" >&2; exit 1; }

# The firmware is built from a copy of the sources at one fixed path, so the code does not
# depend on where the repository is checked out: Cargo hashes a path dependency's location into
# its symbol names, and under LTO the symbol order can change inlining (a fresh clone in /tmp
# once built the M55 firmware 32 B larger, 3 instructions per token faster). Source paths that
# end up in .rodata (panic locations) are mapped to fixed names as well. (Cargo appends these
# flags to the rustflags in each board's .cargo/config.toml.)
#
# The copy is a mirror of this checkout, made so that cargo (which decides what to rebuild by
# modification times) never reuses a build of other sources: files whose content differs from
# the copy's are written anew (so their time is now), the others keep their time (no needless
# rebuild), and files this checkout does not have are removed (another checkout's
# src/bin/*.rs or src/lib.rs would otherwise be built as part of this board). Build directories
# (target*) are kept.
BUILD_ROOT="${FIRMWARE_BUILD_DIR:-/tmp/gpt2-mcu-firmware}"
mkdir -p "$BUILD_ROOT"
STAGE="$(mktemp -d)"
tar -C "$ROOT" --exclude=./.git --exclude=./target --exclude='./target-*' --exclude='./boards/*/target' \
    --exclude=./fuzz/target -cf - . | tar -C "$STAGE" -xf -
(cd "$STAGE" && find . -type f -print0) | while IFS= read -r -d '' f; do
  if ! cmp -s "$STAGE/$f" "$BUILD_ROOT/$f"; then
    mkdir -p "$(dirname "$BUILD_ROOT/$f")"
    cp --preserve=mode "$STAGE/$f" "$BUILD_ROOT/$f"
  fi
done
(cd "$BUILD_ROOT" && find . \( -name target -o -name 'target-*' \) -prune -o \( -type f -o -type l \) -print0) |
  while IFS= read -r -d '' f; do
    [ -e "$STAGE/$f" ] || rm -f "$BUILD_ROOT/$f"
  done
rm -rf "$STAGE"
REMAP="--remap-path-prefix=$BUILD_ROOT=/gpt2-mcu --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
export CARGO_TARGET_THUMBV7EM_NONE_EABIHF_RUSTFLAGS="$REMAP"
export CARGO_TARGET_THUMBV8M_MAIN_NONE_EABIHF_RUSTFLAGS="$REMAP"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

echo "== blob: $BLOB (sha256 ${BLOB_SHA:0:16}...)"
echo "== building host"
(cd "$ROOT" && cargo build --release -q -p host)

# The line of the firmware's stderr that starts with "$1: " (without that prefix).
field() { sed -n "s/^$1: //p" "$2" | head -n 1; }

# Compares file $2 with the expected file $1; prints a diff. Returns 1 when they differ.
compare() {
  if [ ! -f "$1" ]; then echo "  (no $(basename "$1") yet: run with --bless)"; return 1; fi
  if diff -u --label "expected $(basename "$1")" --label "this run" "$1" "$2" > "$WORK/diff"; then return 0; fi
  sed 's/^/  /' "$WORK/diff" | head -n 60
  return 1
}

# A size file without what depends on link order: section addresses, the padded sizes of .text
# and .rodata and the flash total built from them. The `symbols:` line (exact sums of function,
# constant and variable sizes) and every other section size are kept.
layout_free() {
  awk '$1 ~ /^\.(text|rodata)$/ { print $1; next }
       $1 ~ /^\./ { print $1, $2; next }
       /^flash:/ { sub(/code and constants [0-9]+ B/, "code and constants (see symbols)") }
       { print }' "$1"
}

# Where two comma-separated id lists first differ.
first_difference() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    n = split(a, x, ","); m = split(b, y, ",");
    for (i = 1; i <= (n > m ? n : m); i++) if (x[i] != y[i]) {
      printf "first difference at generated token %d: host %s, firmware %s\n", i - 1, (i <= n ? x[i] : "(none)"), (i <= m ? y[i] : "(none)"); exit }
  }'
}

for BOARD in "${BOARDS[@]}"; do
  DIR="$BUILD_ROOT/boards/$BOARD"
  echo "== $BOARD: build"
  (cd "$DIR" && MODEL_BLOB="$BLOB" cargo build --release -q)
  echo "== $BOARD: run in QEMU"
  set +e
  (cd "$DIR" && MODEL_BLOB="$BLOB" cargo run --release -q > "$WORK/$BOARD.stdout" 2> "$WORK/$BOARD.stderr")
  RC=$?
  set -e
  sed 's/^/  | /' "$WORK/$BOARD.stderr"
  if [ $RC -ne 0 ]; then
    fail "$BOARD exited with status $RC$([ $RC -eq 124 ] && echo ' (timeout)')"
    continue
  fi

  # The same run on the host, with the arguments the firmware reports.
  PROMPT="$(field prompt "$WORK/$BOARD.stderr")"
  PROMPT_IDS="$(field 'prompt ids' "$WORK/$BOARD.stderr")"
  read -r -a HOST_ARGS <<< "$(field 'host args' "$WORK/$BOARD.stderr")"
  if grep -q '^model: .*tokenizer: yes' "$WORK/$BOARD.stderr"; then
    PROMPT_ARGS=(--prompt "$PROMPT")
  else
    PROMPT_ARGS=(--ids "$PROMPT_IDS")
  fi
  HOST_CMD=(cargo run --release -q -p host -- --model "$BLOB" "${PROMPT_ARGS[@]}" "${HOST_ARGS[@]}" --print-ids)
  echo "== $BOARD: host:$(printf ' %q' "${HOST_CMD[@]}")"
  (cd "$ROOT" && "${HOST_CMD[@]}" > "$WORK/host.stdout" 2> "$WORK/host.stderr") || {
    cat "$WORK/host.stderr"; fail "host failed"; continue; }

  if cmp -s "$WORK/host.stdout" "$WORK/$BOARD.stdout"; then
    echo "ok: host == $BOARD ($(tail -n 1 "$WORK/host.stdout" | tr ',' '\n' | grep -c .) tokens, identical stdout)"
  else
    fail "host and $BOARD differ"
    diff -u --label host --label "$BOARD" "$WORK/host.stdout" "$WORK/$BOARD.stdout" | sed 's/^/  /' | head -n 40
    first_difference "$(tail -n 1 "$WORK/host.stdout")" "$(tail -n 1 "$WORK/$BOARD.stdout")" | sed 's/^/  /'
    if [ "${PROMPT_ARGS[0]}" = --prompt ]; then
      HOST_IDS="$(cd "$ROOT" && cargo run --release -q -p host -- tokenize --model "$BLOB" --text "$PROMPT" 2>/dev/null | tail -n 1)"
      [ "$HOST_IDS" = "$PROMPT_IDS" ] && echo "  prompt ids agree: $PROMPT_IDS" \
        || echo "  prompt ids differ: host $HOST_IDS, firmware $PROMPT_IDS"
    fi
  fi

  # Transcript, sizes, measurements.
  cp "$WORK/$BOARD.stdout" "$WORK/$BOARD.run"
  ELF="$(ls "${CARGO_TARGET_DIR:-$DIR/target}"/thumbv*/release/"$BOARD")"
  # Allocated sections only (debug info never reaches the board), then the totals that matter.
  "$LLVM_SIZE" -A "$ELF" | awk '
    NR > 1 && NF && $1 !~ /^(\.(debug|comment|ARM|symtab|strtab|shstrtab)|Total)/ {
      print; size[$1] = $2 }
    END {
      printf "flash: code and constants %d B (.vector_table .text .rodata .data), model %d B (.model)\n",
        size[".vector_table"] + size[".text"] + size[".rodata"] + size[".data"], size[".model"]
      printf "ram: statics %d B (.data .bss .uninit .sram), stack: the rest of the stack region (see .perf)\n",
        size[".data"] + size[".bss"] + size[".uninit"] + size[".sram"] }' > "$WORK/$BOARD.size"
  # Sums of symbol sizes: the same code gives the same sums wherever the repository is checked
  # out, while the order of functions (and so the alignment padding inside .text and .rodata)
  # follows symbol hashes, which depend on the checkout path of the path dependencies.
  "$LLVM_NM" -S --radix=d "$ELF" | awk '
    NF >= 4 { n = $2 + 0; if ($3 ~ /^[tT]$/) code += n; else if ($3 ~ /^[rR]$/) consts += n; else if ($3 ~ /^[bBdD]$/) vars += n }
    END { printf "symbols: code %d B, constants %d B, variables %d B (sums of symbol sizes; independent of link order)\n", code, consts, vars }' >> "$WORK/$BOARD.size"
  sed -n '/^counter check:/p; /^---$/,$p' "$WORK/$BOARD.stderr" | grep -v '^---$' > "$WORK/$BOARD.perf"
  echo "== $BOARD: sizes (llvm-size -A)"
  sed 's/^/  /' "$WORK/$BOARD.size"

  if [ $BLESS -eq 1 ]; then
    if [ $FAILED -eq 0 ]; then
      mkdir -p "$EXPECTED"
      cp "$WORK/$BOARD.run" "$WORK/$BOARD.size" "$WORK/$BOARD.perf" "$EXPECTED/"
      echo "$BLOB_SHA  ${BLOB#"$ROOT"/}" > "$EXPECTED/blob.sha256"
      echo "blessed: boards/expected/$BOARD.{run,size,perf}"
    else
      echo "not blessing $BOARD: the checks above failed"
    fi
    continue
  fi
  if [ "$(cut -d' ' -f1 "$EXPECTED/blob.sha256" 2>/dev/null)" != "$BLOB_SHA" ]; then
    echo "skip: boards/expected/ was blessed with another blob ($(cat "$EXPECTED/blob.sha256" 2>/dev/null || echo none))"
    continue
  fi
  compare "$EXPECTED/$BOARD.run" "$WORK/$BOARD.run" && echo "ok: $BOARD.run matches" || fail "$BOARD.run differs from boards/expected/$BOARD.run (--bless to accept)"
  layout_free "$EXPECTED/$BOARD.size" > "$WORK/expected.layout-free"
  layout_free "$WORK/$BOARD.size" > "$WORK/$BOARD.layout-free"
  if compare "$WORK/expected.layout-free" "$WORK/$BOARD.layout-free"; then
    echo "ok: $BOARD.size matches (code, constants, variables, model, RAM)"
    diff -q "$EXPECTED/$BOARD.size" "$WORK/$BOARD.size" >/dev/null || echo "note: $BOARD.size differs only in link-order padding of .text/.rodata"
  else
    fail "$BOARD.size differs from boards/expected/$BOARD.size (--bless to accept)"
  fi
  compare "$EXPECTED/$BOARD.perf" "$WORK/$BOARD.perf" && echo "ok: $BOARD.perf matches" || echo "note: $BOARD.perf changed (not a failure; --bless to record)"
done

if [ $FAILED -ne 0 ]; then
  echo "qemu-check: FAILED"
  exit 1
fi
echo "qemu-check: all passed"
