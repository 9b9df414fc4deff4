#!/usr/bin/env python3
"""The table BENCHMARKS.md shows, from the output of scripts/paired.sh (one run).

    scripts/paired.sh > run.txt; scripts/paired_table.py run.txt

Per dtype and thread count: ours (f16 KV cache, llama.cpp's default, so like for like) beside
llama.cpp's pp128 / tg32, the ratio, and ours against the bandwidth bound the same `host bench`
printed (weights + KV cache over its probe's read bandwidth: the best of 1-4 streams a thread,
read with as many threads as the run decodes with). Then the shipped model's f32 and q8 decode.
"""
import re
import sys


def main(path):
    rows, cur, shipped = {}, None, {}
    for line in open(path):
        m = re.match(r'-- ours (\w+), (\d) thread\(s\), (\w+) KV', line)
        if m:
            cur = ('ours', m.group(1), int(m.group(2)), m.group(3))
            continue
        m = re.match(r'-- llama\.cpp (\w+), (\d) thread', line)
        if m:
            d = {'q8_0': 'q8', 'q4_0': 'q4'}.get(m.group(1), m.group(1))
            cur = ('llama', d, int(m.group(2)), None)
            continue
        m = re.match(r'-- shipped model (\S+)\.blob', line)
        if m:
            cur = ('shipped', m.group(1), 1, None)
            continue
        if cur is None:
            continue
        kind, d, t, kv = cur
        r = rows.setdefault((d, t), {})
        if kind == 'ours' and kv == 'f16':
            if (m := re.match(r'prefill: ([\d.]+)', line)):
                r['pp'] = float(m.group(1))
            elif (m := re.match(r'decode: +([\d.]+)', line)):
                r['tg'] = float(m.group(1))
            elif (m := re.search(r'with the weights, decode bound ([\d.]+) tok/s', line)):
                r['bound'] = float(m.group(1))
        elif kind == 'llama':
            if (m := re.search(r'pp128 \| +([\d.]+)', line)):
                r['lpp'] = float(m.group(1))
            elif (m := re.search(r'tg32 \| +([\d.]+)', line)):
                r['ltg'] = float(m.group(1))
        elif kind == 'shipped':
            if (m := re.match(r'decode: +([\d.]+)', line)):
                shipped[d] = float(m.group(1))
    print('| tok/s | prefill ours / llama.cpp | ratio | decode ours / llama.cpp | ratio | decode / bound |')
    print('|---|---:|---:|---:|---:|---:|')
    for t in (1, 2):
        for d in ('f32', 'f16', 'q8', 'q4'):
            r = rows.get((d, t))
            if not r or 'pp' not in r or 'lpp' not in r:
                continue
            bound = f"{100 * r['tg'] / r['bound']:.0f}%" if 'bound' in r else ''
            print(f"| {d}, {t} thread{'s' if t > 1 else ''} | {r['pp']:.0f} / {r['lpp']:.0f} | {r['pp'] / r['lpp']:.2f} "
                  f"| {r['tg']:.1f} / {r['ltg']:.1f} | {r['tg'] / r['ltg']:.2f} | {bound} |")
    if shipped:
        print()
        print('shipped model decode, 1 thread: ' + ', '.join(f'{k} {v:,.0f} tok/s' for k, v in shipped.items()))


if __name__ == '__main__':
    main(sys.argv[1])
