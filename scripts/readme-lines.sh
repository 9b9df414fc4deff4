#!/usr/bin/env bash
# Runs every command line of README.md's ```sh blocks as written, from the repository root, and
# says for each what it did: ran (and how long it took), ran with a substitution, or skipped and
# why. Issue 38: a fresh clone runs every README line without an edit, and CI shows it.
#
# Usage: scripts/readme-lines.sh [--firmware] [--list] [FILE]      (FILE: default README.md)
#   --firmware  also run the lines that build Cortex-M firmware and run it under QEMU (a few
#               minutes each); without it they are skipped, naming the CI step that builds and
#               runs the same firmware
#   --list      print what would run, with which substitution, and what is skipped; run nothing
#
# How a line runs: from the repository root in its own `bash -c` (a `cd` lasts one line, as the
# README means it: every line starts at the root), after the variable assignments of the lines
# before it (M=...), with pipefail, stdin from /dev/null (the interactive console reads the end
# of its input and exits), under a 10-minute timeout. It passes when it exits 0 (a line in
# EXPECT_FAIL: non-zero, as the README says it does) and prints no "panicked".
#
# Nothing is left behind, and nothing of anyone else's is touched: `/tmp/` in a line becomes a
# private temporary directory (removed at the end), so the lines never write into a /tmp/trace
# or /tmp/gpt2-random that someone keeps; files and directories the lines create in the checkout
# (outside target directories) are removed at the end. Tracked files must be unchanged (a line
# that edits the repository fails).
#
# The tables below are the whole policy: every line not in them runs exactly as written.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

FIRMWARE=0
LIST=0
FILE=README.md
for arg in "$@"; do
  case "$arg" in
    --firmware) FIRMWARE=1 ;;
    --list) LIST=1 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) FILE="$arg" ;;
  esac
done
[ -f "$FILE" ] || { echo "error: $FILE not found" >&2; exit 2; }

# ---- the policy ---------------------------------------------------------------------------------
# Each entry: a piece of text the line contains, a tab, what to do.

# Lines not run here, and why. "ci:" entries are run by .ci/run itself, verbatim (checked below).
SKIP=(
  $'cargo test\tci: the whole test suite, .ci/run\'s first step (half an hour on 2 cores)'
  $'boards/qemu-check.sh --bless\trewrites boards/expected/ (by hand, after an intended firmware change)'
  $'boards/qemu-check.sh\tci: both QEMU firmwares == host, .ci/run runs it'
  $'boards/qemu-digest.sh\tci: per-layer digests on both QEMU boards, .ci/run runs it'
  $'boards/console-check.sh\tci: the scripted console session, .ci/run runs it'
  $'scripts/update_board_readmes.py LOG\trewrites the board READMEs from the log of a --bless run'
  $'cd boards/pico2 \tflashes a Raspberry Pi Pico 2: needs the board, a debug probe and probe-rs (.ci/run builds this firmware)'
  $'cd boards/nrf52840-dk \tflashes an nRF52840-DK: needs the board and probe-rs (.ci/run builds this firmware)'
  $'cd boards/pico-plus2 \tflashes a Pimoroni Pico Plus 2: needs the board and probe-rs (.ci/run builds this firmware)'
  $'.venv/bin/pip install\tnetwork: installs torch and transformers from PyPI'
  $'.venv/bin/python tests/make_fixtures.py\tneeds the venv above (transformers), and rewrites tests/fixtures/'
)
# Lines that build firmware and run it under QEMU: run with --firmware, else skipped (CI builds
# and runs the same firmware through boards/qemu-check.sh, qemu-digest.sh and console-check.sh,
# from a copy of the sources at a fixed path).
FIRMWARE_LINES=(
  $'cd boards/qemu-m4 \ta Cortex-M4F build and a QEMU run (minutes); .ci/run: boards/qemu-check.sh and qemu-digest.sh build and run this firmware'
  $'cd boards/qemu-m55 \ta Cortex-M55 build and a QEMU run (minutes); .ci/run: boards/qemu-check.sh builds and runs this firmware'
  $'boards/console-qemu.sh\ta Cortex-M console build and a QEMU run (minutes); .ci/run: boards/console-check.sh builds and runs this firmware'
)
# Lines run with a piece replaced: from, tab, to, tab, why.
SUBST=(
  $'--preset gpt2 --seed 1\t--preset gpt2 --n-layer 1 --seed 1\tGPT-2 small is 500 MB of weights to write; one layer (its 50257 x 768 embedding kept) is the same command at a third of the disk'
  $'convert stories15M.bin --tokenizer tokenizer.bin\tconvert tests/fixtures/llama2c/model_v1.bin --tokenizer tests/fixtures/llama2c/tokenizer.bin\tllama2.c\'s stories15M.bin and tokenizer.bin are a download; the committed fixture is a file of the same format'
)
# Lines the README says fail: they must exit non-zero (and not panic).
EXPECT_FAIL=(
  $'--board nucleo-f446re --ctx 64\tthe README says the default q8 blob does not fit that board: plan exits 1'
)

lookup() { # lookup TABLE_NAME LINE -> prints the reason of the first entry the line contains
  local -n table="$1"
  local entry
  for entry in "${table[@]}"; do
    if [[ "$2" == *"${entry%%$'\t'*}"* ]]; then
      printf '%s' "${entry#*$'\t'}"
      return 0
    fi
  done
  return 1
}

# ---- the lines ---------------------------------------------------------------------------------
mapfile -t LINES < <(awk '/^```sh *$/ { inside = 1; next } /^```/ { inside = 0 } inside { print NR "\t" $0 }' "$FILE")
[ ${#LINES[@]} -gt 0 ] || { echo "error: no \`\`\`sh blocks in $FILE" >&2; exit 2; }

WORK="$(mktemp -d)"
SNAPSHOT_BEFORE="$WORK/files.before"
list_files() {
  find . \( -name target -o -name 'target-*' -o -name .git -o -name .venv \) -prune -o -print | sort
}
# the lines' /tmp/
PRIVATE_TMP="$WORK/tmp"
mkdir -p "$PRIVATE_TMP"
if [ "$LIST" = 0 ]; then
  list_files > "$SNAPSHOT_BEFORE"
  git status --porcelain --untracked-files=no > "$WORK/tracked.before"
fi
echo "(/tmp/ in the lines is $PRIVATE_TMP/ here, removed at the end)"

cleanup() {
  if [ "$LIST" = 0 ]; then
    list_files > "$WORK/files.after"
    # new entries whose parent is not new: removing them removes the rest
    comm -13 "$SNAPSHOT_BEFORE" "$WORK/files.after" | awk 'NR == 1 || index($0, prev "/") != 1 { print; prev = $0 }' |
      while IFS= read -r p; do rm -rf -- "$p"; done
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

: > "$WORK/env.sh" # the assignments so far (M=...)
ran=0 skipped=0 failed=0 substituted=0
FAILS=()
START=$SECONDS
for entry in "${LINES[@]}"; do
  lineno="${entry%%$'\t'*}"
  line="${entry#*$'\t'}"
  trimmed="${line#"${line%%[![:space:]]*}"}"
  [ -z "$trimmed" ] && continue
  [[ "$trimmed" == '#'* ]] && continue
  where="$FILE:$lineno"
  # the command without its trailing comment: what the tables match
  cmd="$(sed -E 's/[[:space:]]+#.*$//' <<< "$trimmed")"

  if reason="$(lookup SKIP "$cmd")"; then
    if [[ "$reason" == ci:* ]]; then
      if ! grep -qxF -- "$cmd" .ci/run; then
        echo "FAIL  $where  skipped as run by CI, but .ci/run has no line \`$cmd\`"
        failed=$((failed + 1)); FAILS+=("$where"); continue
      fi
    fi
    printf 'skip  %-16s %s\n      %s\n' "$where" "$trimmed" "why: $reason"
    skipped=$((skipped + 1)); continue
  fi
  if reason="$(lookup FIRMWARE_LINES "$cmd")" && [ "$FIRMWARE" = 0 ]; then
    printf 'skip  %-16s %s\n      %s\n' "$where" "$trimmed" "why: $reason (run them with --firmware)"
    skipped=$((skipped + 1)); continue
  fi

  run="${trimmed//\/tmp\//$PRIVATE_TMP/}"
  note=""
  for s in "${SUBST[@]}"; do
    from="${s%%$'\t'*}"; rest="${s#*$'\t'}"; to="${rest%%$'\t'*}"; why="${rest#*$'\t'}"
    if [[ "$run" == *"$from"* ]]; then
      run="${run/"$from"/"$to"}"
      note+="      substituted: \`$from\` -> \`$to\` ($why)"$'\n'
      substituted=$((substituted + 1))
    fi
  done
  expect_fail=""
  expect_fail="$(lookup EXPECT_FAIL "$cmd")" || expect_fail=""

  # a bare assignment (M=...) holds for the lines after it
  if [[ "$run" =~ ^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]]*([[:space:]]+#.*)?$ ]]; then
    echo "${run%%[[:space:]]#*}" >> "$WORK/env.sh"
  fi

  if [ "$LIST" = 1 ]; then
    printf 'run   %-16s %s\n%s' "$where" "$run" "$note"
    [ -n "$expect_fail" ] && echo "      expected to fail: $expect_fail"
    continue
  fi
  t0=$(date +%s%N)
  timeout 600 bash -c "set -o pipefail; cd \"$ROOT\"; source \"$WORK/env.sh\"; $run" < /dev/null > "$WORK/out" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  dt="$((ms / 1000)).$(( (ms % 1000) / 100 ))"
  ok=1
  if [ -n "$expect_fail" ]; then
    { [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; } || ok=0
  else
    [ "$rc" -eq 0 ] || ok=0
  fi
  grep -q 'panicked' "$WORK/out" && ok=0
  if [ "$ok" = 1 ]; then
    printf 'ok    %-16s %6ss  %s\n%s' "$where" "$dt" "$run" "$note"
    [ -n "$expect_fail" ] && echo "      exited $rc, as expected: $expect_fail"
    ran=$((ran + 1))
  else
    printf 'FAIL  %-16s %6ss  %s\n%s      exit status %s%s; its last output:\n' "$where" "$dt" "$run" "$note" "$rc" \
      "$([ -n "$expect_fail" ] && echo " (expected non-zero: $expect_fail)")"
    tail -n 20 "$WORK/out" | sed 's/^/      | /'
    failed=$((failed + 1)); FAILS+=("$where")
  fi
done

if [ "$LIST" = 1 ]; then exit 0; fi
# the checkout as it was: tracked files unchanged
git status --porcelain --untracked-files=no > "$WORK/tracked.after"
if ! cmp -s "$WORK/tracked.before" "$WORK/tracked.after"; then
  echo "FAIL  the lines changed tracked files:"
  diff "$WORK/tracked.before" "$WORK/tracked.after" | sed 's/^/      /'
  failed=$((failed + 1)); FAILS+=("tracked files")
fi
echo
echo "$FILE: $ran lines ran ($substituted substitutions), $skipped skipped, $failed failed, in $((SECONDS - START)) s"
if [ "$failed" -gt 0 ]; then
  echo "failed: ${FAILS[*]}"
  exit 1
fi
