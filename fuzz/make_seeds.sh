#!/usr/bin/env bash
# Writes the committed seed corpus fuzz/corpus/<target>/ (small files). Run from anywhere after
# one `cargo +nightly fuzz build` (the raw blob and section seeds are copied from the base
# inputs that fuzz/build.rs converts from tests/fixtures). Deterministic: rerunning it gives the
# same files. The first byte of most seeds is the target's mode byte (see fuzz_targets/*.rs).
set -euo pipefail
cd "$(dirname "$0")"
target_dir="${CARGO_TARGET_DIR:-target}"
out_dir="$(dirname "$(ls -t "$target_dir"/*/release/build/runtime-fuzz-*/out/bases.rs | head -n 1)")"
c=corpus
mkdir -p $c/blob $c/tokenizer_encode $c/tokenizer_decode $c/tokenizer_section $c/sampler $c/console

# blob: raw mode (mode % 4 == 0), then edit mode on each of the 6 base blobs (mode = 4·base + 1)
printf '\x00' > $c/blob/raw-empty
{ printf '\x00GPT2MCU\x00\x01\x00\x00\x00'; head -c 20 /dev/zero; } > $c/blob/raw-preamble-only
{ printf '\x00'; cat "$out_dir/tok300-q4.blob"; } > $c/blob/raw-tok300-q4
for base in 0 1 2 3 4 5; do
  printf "\\x$(printf %02x $((4 * base + 1)))" > $c/blob/base-$base
done
# set one header byte, xor one data byte, then cut the blob at 3/4 of its length
printf '\x01\x00\x14\x00\x00\x82\x00\x40\x01\x00\xc0' > $c/blob/edit-and-truncate
# tokenizer section region of tok300-f16: xor a byte of the merge table
printf '\x0d\x83\x10\x00\x01' > $c/blob/edit-tokenizer

# tokenizer_encode: knob byte, then text
printf '\x00Hello, world!' > $c/tokenizer_encode/hello
printf '\x45 The quick brown fox jumps over the lazy dog.\n\n' > $c/tokenizer_encode/fox
printf "\\x80I'm sure we'll see they've done it, don't you? IT'S 's 'S" > $c/tokenizer_encode/contractions
printf '\x03naïve café — 日本語のテキスト 🙂🙃 ٣ ⅷ x² \u3000\u3000x' > $c/tokenizer_encode/unicode
printf '\xc1a   b\t\t\r\n  \n\n\n    end   ' > $c/tokenizer_encode/whitespace
printf '\x10<|endoftext|>3.14159 1,000,000 fn main() {}' > $c/tokenizer_encode/special
printf '\x21\xff\xfe\xc3\x28\xe2\x82\xf0\x9f\x98' > $c/tokenizer_encode/invalid-utf8
{ printf '\x00'; head -c 500 /dev/zero | tr '\0' 'a'; } > $c/tokenizer_encode/long-run

# tokenizer_decode: mode byte, then little-endian u32 ids
ids() { python3 -c 'import struct,sys; sys.stdout.buffer.write(bytes([int(sys.argv[1])]) + b"".join(struct.pack("<I", int(x)) for x in sys.argv[2:]))' "$@"; }
ids 0 15496 11 995 0 50256 > $c/tokenizer_decode/hello-eot
ids 0 4294967295 1 > $c/tokenizer_decode/huge-id
ids 1 50257 50258 100 > $c/tokenizer_decode/just-out-of-range
ids 2 157 227 239 > $c/tokenizer_decode/partial-utf8
ids 0 > $c/tokenizer_decode/empty

# tokenizer_section: raw valid sections, then edit mode on each base (mode 1: GPT-2, 5: 2-byte
# ids, 13: 4-byte ids)
{ printf '\x00'; cat "$out_dir/tok300.tok"; } > $c/tokenizer_section/raw-tok300
{ printf '\x00'; cat "$out_dir/tok300-w4.tok"; } > $c/tokenizer_section/raw-tok300-w4
printf '\x00GBPE\x01\x00\x02\x00' > $c/tokenizer_section/raw-header-only
printf '\x01' > $c/tokenizer_section/base-gpt2
printf '\x05' > $c/tokenizer_section/base-tok300
printf '\x0d' > $c/tokenizer_section/base-tok300-w4
printf '\x05\x00\x08\x00\x2d\x82\x40\x00\x01' > $c/tokenizer_section/edit-vocab-and-merge

# sampler: structured by `arbitrary`; deterministic pseudo-random bytes of a few lengths
python3 - "$c/sampler" <<'EOF'
import random, sys
r = random.Random(7)
for n in (16, 64, 200, 600, 2000):
    open(f"{sys.argv[1]}/random-{n}", "wb").write(bytes(r.randrange(256) for _ in range(n)))
EOF
# console: mode byte (bit 0: run the whole console too, bit 1: start in chat mode, bit 2: in
# terminal mode), then what the console receives
{ printf '\x00'; cat ../boards/console-session.txt; } > $c/console/session-lines
{ printf '\x01'; cat ../boards/console-session.txt; } > $c/console/session-full
printf '\x03/n 4\nHello.\nAnd you?\n/stats\n' > $c/console/chat
printf '\x05/n x\x7f2\rROMEO:\r/quit\r' > $c/console/terminal

echo "seed corpus: $(find $c -type f | wc -l) files, $(cat $c/*/* | wc -c) bytes"
