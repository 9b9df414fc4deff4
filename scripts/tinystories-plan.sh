#!/usr/bin/env bash
# The memory planner's verdicts for GPT-Neo checkpoints shaped like TinyStories-1M and
# TinyStories-3M / TinyTalk (random weights: the sizes are the real models', the text they make
# is noise) on the Raspberry Pi Pico 2 and the nRF52840-DK, at f32, q8 and q4, with the full
# 50257-token vocabulary and pruned to the story text models/stories/stories.txt
# (convert --keep-vocab). Prints a Markdown table (the one in README.md and BENCHMARKS.md).
#
# Usage: scripts/tinystories-plan.sh [WORKDIR]     (default: a temporary directory, removed)
# Needs only cargo; takes about a minute after the release build.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
WORK="${1:-}"
if [ -z "$WORK" ]; then WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT; fi
mkdir -p "$WORK"
HT=(${HOST_TOOLS:-cargo run --release -q -p host-tools --})
KEEP=models/stories/stories.txt

echo "| model | weights | vocabulary | blob bytes | pico2 (4 MiB flash, 520 KiB RAM): flash, RAM at context 128 | nrf52840-dk (1 MiB flash, 256 KiB RAM): flash, RAM at context 128 |"
echo "|---|---|---|---:|---|---|"
for preset in tinystories-1m tinystories-3m; do
  dir="$WORK/$preset"
  # random writes GPT-2's tokenizer (vocab.json + merges.txt) beside the weights
  [ -f "$dir/model.safetensors" ] && [ -f "$dir/vocab.json" ] || "${HT[@]}" random -o "$dir" --preset "$preset" --seed 1 2>/dev/null
  for dtype in f32 q8 q4; do
    for vocab in full pruned; do
      blob="$WORK/$preset-$vocab-$dtype.blob"
      prune=()
      [ "$vocab" = pruned ] && prune=(--keep-vocab "$KEEP")
      "${HT[@]}" convert "$dir" --dtype "$dtype" "${prune[@]}" -o "$blob" 2>/dev/null
      kept="$("${HT[@]}" inspect "$blob" | sed -n 's/^  vocab_size \([0-9]*\) .*/\1/p')"
      verdicts=()
      for board in pico2 nrf52840-dk; do
        report="$("${HT[@]}" plan "$blob" --board "$board" || true)"
        flash="$(sed -n 's/^flash: //p' <<< "$report")"
        ram="$(sed -n 's/^RAM: //p' <<< "$report")"
        ctx="$(sed -n 's/^largest context that fits: \([0-9]*\).*/\1/p' <<< "$report")"
        short() { sed 's/^fits, headroom \(.*\) B$/fits (\1 B free)/; s/^does not fit by \(.*\) B$/**no** (\1 B short)/'; }
        verdicts+=("flash $(short <<< "$flash"), RAM $(short <<< "$ram"); RAM fits up to context ${ctx:-none}")
      done
      name="$preset"; [ "$preset" = tinystories-3m ] && name="tinystories-3m / tinytalk"
      printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$dtype" \
        "$([ "$vocab" = full ] && echo "50257 (full)" || echo "$kept (pruned)")" \
        "$(stat -c %s "$blob" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta')" "${verdicts[0]}" "${verdicts[1]}"
    done
  done
done
