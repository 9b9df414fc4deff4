#!/bin/bash
# Paired runs: this runtime's `host bench` beside llama.cpp's `llama-bench`, same checkpoint, one
# dtype at a time (ours with an f32 and an f16 KV cache, then llama.cpp), 1 and 2 threads, then the
# shipped model's f32 and q8 blobs. The figures of BENCHMARKS.md's CPU sections come from it.
# It only calls binaries that are already built; nothing of llama.cpp is in this repository.
#   HOST      the runtime's host binary        (default: this checkout's target/release/host;
#             build it with `cargo build --release -p host`)
#   LLAMA     llama.cpp's llama-bench          (default: `llama-bench` on PATH; BENCHMARKS.md
#             says which build: the llama-cpp-python 0.3.36 sdist's vendored copy, -DGGML_NATIVE=ON)
#   BLOBS     dir with gpt2-{f32,f16,q8,q4}.blob   (host-tools random --preset gpt2 --seed 1, then
#             host-tools convert --dtype f32|f16|q8|q4)
#   GGUFS     dir with gpt2-random-{f32,f16,q8_0,q4_0}.gguf (llama.cpp's convert_hf_to_gguf.py and
#             llama-quantize on the same checkpoint)
#   MODELS    the shipped model's folder (default: this checkout's models/default)
#   REPS      runs per measurement (default 5); THREADS (default "1 2")
#   VARIANTS  environment settings to run ours under besides the CPU table's own choice, each
#             one word (several settings joined by commas), e.g. on a Zen 4:
#               VARIANTS="GPT2_MCU_KERNELS=avx512 GPT2_MCU_KERNELS=avx2 GPT2_MCU_DECODE_FRONTS=1"
#             (default none); each runs with the f16 KV cache only, beside the table's run
# The load average is printed beside every measurement: the figures are only comparable in pairs.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HOST=${HOST:-$ROOT/target/release/host}
LLAMA=${LLAMA:-llama-bench}
BLOBS=${BLOBS:-/tmp}
GGUFS=${GGUFS:-/tmp}
MODELS=${MODELS:-$ROOT/models/default}
REPS=${REPS:-5}
THREADS=${THREADS:-1 2}
VARIANTS=${VARIANTS:-}
echo "== $(date -u '+%F %T UTC')  $(lscpu | sed -n 's/^Model name: *//p')  load: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in $THREADS; do
  for d in f32 f16 q8 q4; do
    g=$d; [ $d = q8 ] && g=q8_0; [ $d = q4 ] && g=q4_0
    for kv in f32 f16; do
      echo "-- ours $d, $t thread(s), $kv KV (load $(cut -d' ' -f1 /proc/loadavg))"
      "$HOST" bench --model "$BLOBS/gpt2-$d.blob" --prompt-len 128 -n 32 --runs "$REPS" --threads "$t" --kv-dtype $kv | grep -E '^(prefill|decode|memory|KV)'
    done
    for v in $VARIANTS; do
      echo "-- ours $d, $t thread(s), f16 KV, with $v (load $(cut -d' ' -f1 /proc/loadavg))"
      env $(echo "$v" | tr ',' ' ') "$HOST" bench --model "$BLOBS/gpt2-$d.blob" --prompt-len 128 -n 32 --runs "$REPS" --threads "$t" --kv-dtype f16 | grep -E '^(kernels|prefill|decode|memory|KV)'
    done
    echo "-- llama.cpp $g, $t thread(s) (load $(cut -d' ' -f1 /proc/loadavg))"
    "$LLAMA" -m "$GGUFS/gpt2-random-$g.gguf" -t "$t" -p 128 -n 32 -r "$REPS" 2>/dev/null | grep -E 'pp128|tg32'
  done
done
for m in model model-q8; do
  echo "-- shipped model $m.blob, 1 thread (load $(cut -d' ' -f1 /proc/loadavg))"
  "$HOST" bench --model "$MODELS/$m.blob" --prompt-len 64 -n 64 --runs "$REPS" | grep -E '^(prefill|decode)'
done
echo "== done $(date -u '+%T UTC'), load: $(cut -d' ' -f1-3 /proc/loadavg)"
