#!/usr/bin/env bash
# The memory planner's verdicts for llama2.c's stories shapes (host-tools random --preset
# stories260k | stories15m | stories42m: LlamaForCausalLM checkpoints of the real models' shapes
# with random weights and a SentencePiece tokenizer of their vocabulary size) on every board
# `host-tools plan` knows, at f32, q8 and q4, with the full vocabulary and pruned to the story text
# models/stories/stories.txt (convert --keep-vocab). Prints a Markdown table (the one in
# README.md). A cell is "fits" with the largest context whose RAM fits, or what does not fit.
#
# Usage: scripts/stories-plan.sh [WORKDIR] [PRESET...]   (default: a temporary directory, all three)
# Needs only cargo; a few minutes after the release build (stories42m's f32 blobs are 170 MB).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
WORK="${1:-}"
shift || true
PRESETS=("$@")
[ ${#PRESETS[@]} -gt 0 ] || PRESETS=(stories260k stories15m stories42m)
if [ -z "$WORK" ]; then WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT; fi
mkdir -p "$WORK"
HT=(${HOST_TOOLS:-cargo run --release -q -p host-tools --})
KEEP=models/stories/stories.txt
mapfile -t BOARDS < <("${HT[@]}" plan --list-boards | awk 'NF && $1 !~ /^(board|-)/ {print $1}')

header="| model | weights | vocabulary | parameters | blob bytes |"
rule="|---|---|---|---:|---:|"
for b in "${BOARDS[@]}"; do header+=" $b |"; rule+="---|"; done
echo "$header"
echo "$rule"
for preset in "${PRESETS[@]}"; do
  dir="$WORK/$preset"
  [ -f "$dir/model.safetensors" ] || "${HT[@]}" random -o "$dir" --preset "$preset" --seed 1 >/dev/null 2>&1
  for dtype in f32 q8 q4; do
    for vocab in full pruned; do
      blob="$WORK/$preset-$vocab-$dtype.blob"
      prune=()
      [ "$vocab" = pruned ] && prune=(--keep-vocab "$KEEP")
      "${HT[@]}" convert "$dir" --dtype "$dtype" "${prune[@]}" -o "$blob" 2>/dev/null
      info="$("${HT[@]}" inspect "$blob")"
      kept="$(sed -n 's/^  vocab_size \([0-9]*\) .*/\1/p' <<< "$info")"
      params="$(sed -n 's/^  parameters *\([0-9]*\).*/\1/p' <<< "$info" | head -n 1 | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta')"
      row="| $preset | $dtype | $kept $([ "$vocab" = full ] && echo "(full)" || echo "(pruned)") | ${params:-?} | $(stat -c %s "$blob" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta') |"
      for board in "${BOARDS[@]}"; do
        report="$("${HT[@]}" plan "$blob" --board "$board" || true)"
        flash="$(sed -n 's/^flash: //p' <<< "$report")"
        ram="$(sed -n 's/^RAM: //p' <<< "$report")"
        ctx="$(sed -n 's/^largest context that fits: \([0-9]*\).*/\1/p' <<< "$report")"
        cell=""
        # "does not fit by N B" or "does not fit by N B in REGION"
        short() { sed 's/^does not fit by \([0-9,]*\) B\( in \(.*\)\)\{0,1\}$/\1 B\2/' <<< "$1"; }
        case "$flash" in fits*) ;; *) cell+="flash short $(short "$flash")";; esac
        case "$ram" in fits*) ;; *) cell+="${cell:+; }RAM short $(short "$ram")";; esac
        [ -n "$cell" ] && cell="**no**: $cell" || cell="fits (ctx ${ctx:-?})"
        row+=" $cell |"
      done
      echo "$row"
    done
  done
done
