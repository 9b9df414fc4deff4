#!/usr/bin/env bash
# Soak test: generate many tokens with --context-shift in the release build, twice with the same
# seed, and check that memory stays flat and the output is identical.
#
#   scripts/soak.sh                 # 100000 tokens (about a minute on the tiny fixture)
#   TOKENS=20000 scripts/soak.sh    # shorter
#   MODEL=path/to.blob scripts/soak.sh
#
# Model: $MODEL, else models/default/model.blob if it exists, else the tiny fixture converted
# with host-tools (n_ctx 32, so a context shift every 16 tokens). The prompt is token ids
# (the tiny fixture has no tokenizer). Reports, per run: VmRSS sampled every 0.2 s from
# /proc/<pid>/status (first sample, last sample, peak, quartiles), max RSS from
# /usr/bin/time -v (which includes loading the blob: the file is read, then copied into
# 16-byte aligned memory), wall time, and the sha256 of stdout. The runtime allocates nothing;
# the host CLI keeps the generated ids in a Vec for --print-ids (4 bytes per token) and joins
# them into one line at the end, which is the growth to expect. Exits non-zero if a run fails, if the two runs' outputs
# differ, or if RSS grew by more than $MAX_GROWTH_KB between the first and last samples.
set -euo pipefail
cd "$(dirname "$0")/.."

TOKENS="${TOKENS:-100000}"
SEED="${SEED:-7}"
IDS="${IDS:-1,2,3}"
MAX_GROWTH_KB="${MAX_GROWTH_KB:-4096}"
target_dir="${CARGO_TARGET_DIR:-target}"
work="$(mktemp -d "${TMPDIR:-/tmp}/soak.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "== build (release)"
cargo build --release -q -p host -p host-tools
host="$target_dir/release/host"

if [[ -n "${MODEL:-}" ]]; then
  model="$MODEL"
elif [[ -f models/default/model.blob ]]; then
  model=models/default/model.blob
else
  model="$work/tiny.blob"
  "$target_dir/release/host-tools" convert tests/fixtures/tiny -o "$model" >/dev/null
fi
echo "model: $model ($(stat -c %s "$model") bytes)"

# run N: generates $TOKENS tokens, samples VmRSS while it runs
run() {
  local n=$1
  /usr/bin/time -v -o "$work/time$n" "$host" --model "$model" --ids "$IDS" -n "$TOKENS" \
    --context-shift --seed "$SEED" --print-ids --ignore-eos >"$work/out$n" 2>"$work/err$n" &
  local tpid=$! pid=""
  for _ in $(seq 100); do
    pid="$(pgrep -P "$tpid" || true)"
    [[ -n "$pid" ]] && break
    sleep 0.01
  done
  : >"$work/rss$n"
  while [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; do
    awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null >>"$work/rss$n" || true
    sleep 0.2
  done
  if ! wait "$tpid"; then
    echo "run $n failed:"; cat "$work/err$n"; exit 1
  fi
  local first last peak maxrss wall sum ids
  first="$(head -n 1 "$work/rss$n")"
  last="$(tail -n 1 "$work/rss$n")"
  peak="$(sort -n "$work/rss$n" | tail -n 1)"
  maxrss="$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time$n")"
  wall="$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/time$n")"
  sum="$(sha256sum <"$work/out$n" | cut -d' ' -f1)"
  ids="$(tail -n 1 "$work/out$n" | tr ',' '\n' | grep -c .)"
  echo "run $n: $ids ids, wall $wall, VmRSS first ${first} kB, last ${last} kB, peak ${peak} kB" \
    "($(wc -l <"$work/rss$n") samples), max RSS (time -v) ${maxrss} kB, stdout sha256 $sum"
  echo "    VmRSS at 0/25/50/75/100 % of the run (kB): $(awk '{a[NR] = $1} END {
    for (q = 0; q <= 4; q++) { i = int(1 + (NR - 1) * q / 4); printf "%s%s", a[i], (q < 4 ? " " : "") } }' "$work/rss$n")"
  grep -E "^(stopped|prompt tokens|prefill|memory):" "$work/err$n" | sed 's/^/    /'
  if (( ids != TOKENS )); then echo "run $n printed $ids ids, expected $TOKENS"; exit 1; fi
  if (( last - first > MAX_GROWTH_KB )); then echo "run $n: RSS grew by $((last - first)) kB"; exit 1; fi
  eval "sum$n=$sum"
}

echo "== $TOKENS tokens, seed $SEED, prompt ids $IDS, --context-shift"
run 1
run 2
if [[ "$sum1" == "$sum2" ]]; then
  echo "identical output: yes"
else
  echo "identical output: NO"; exit 1
fi
