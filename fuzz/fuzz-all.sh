#!/usr/bin/env bash
# A bounded fuzz pass over every cargo-fuzz target (what .ci/run runs): builds them all once
# (nightly, AddressSanitizer, debug assertions), then runs each for SECONDS (default 30) from the
# committed seeds (corpus/<target>/, read only) into a scratch corpus, and prints each target's
# execution count and coverage. A crash, a sanitizer report or a leak fails the pass: the
# target's log tail and the crashing input (fuzz/artifacts/<target>/) are printed.
#
# Usage: fuzz/fuzz-all.sh [SECONDS]
#   CARGO_TARGET_DIR   build and scratch directory (default: target-fuzz/ at the repository root)
# Needs: rustup's nightly toolchain, cargo-fuzz (cargo install cargo-fuzz).
set -euo pipefail
cd "$(dirname "$0")"

SECONDS_EACH="${1:-30}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/../target-fuzz}"
mapfile -t TARGETS < <(cargo +nightly fuzz list)
[ ${#TARGETS[@]} -gt 0 ] || { echo "error: no fuzz targets found" >&2; exit 1; }
echo "targets: ${TARGETS[*]} (${SECONDS_EACH} s each)"
mkdir -p "$CARGO_TARGET_DIR"
if ! cargo +nightly fuzz build > "$CARGO_TARGET_DIR/fuzz-build.log" 2>&1; then
  tail -n 40 "$CARGO_TARGET_DIR/fuzz-build.log"
  echo "fuzz pass: the targets do not build"
  exit 1
fi

FAILED=0
printf '%-18s %10s %8s %s\n' target runs exec/s "coverage (edges / features)"
for t in "${TARGETS[@]}"; do
  scratch="$CARGO_TARGET_DIR/corpus/$t"
  mkdir -p "$scratch" "corpus/$t"
  log="$CARGO_TARGET_DIR/fuzz-$t.log"
  extra=()
  # merging inside one piece is quadratic in its length (see REPORT.md): long inputs only slow it
  [ "$t" = tokenizer_encode ] && extra=(-max_len=1024)
  if cargo +nightly fuzz run "$t" "$scratch" "corpus/$t" -- -max_total_time="$SECONDS_EACH" ${extra[@]+"${extra[@]}"} > "$log" 2>&1; then
    runs="$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)"
    secs="$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log" | tail -n 1)"
    cov="$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -n 1 | awk '{print $2 " / " $4}')"
    printf '%-18s %10s %8s %s\n' "$t" "${runs:-?}" "$(( ${runs:-0} / (${secs:-1} > 0 ? ${secs:-1} : 1) ))" "${cov:-?}"
  else
    FAILED=1
    echo "FAIL: $t"
    tail -n 40 "$log" | sed 's/^/  | /'
    ls -1t "artifacts/$t" 2>/dev/null | head -n 3 | sed "s|^|  crashing input: fuzz/artifacts/$t/|"
  fi
done
if [ $FAILED -ne 0 ]; then
  echo "fuzz pass: FAILED"
  exit 1
fi
echo "fuzz pass: no crash"
