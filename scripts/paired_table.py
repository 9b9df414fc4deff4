#!/usr/bin/env python3
"""The tables BENCHMARKS.md shows, from the output of scripts/paired.sh (one or more rounds).

    scripts/paired.sh > run.txt; scripts/paired_table.py run.txt [more.txt ...]

Per dtype and thread count: ours (f16 KV cache, llama.cpp's default, so like for like) beside
llama.cpp's pp128 / tg32, the ratio, and ours against the bandwidth bound the same `host bench`
printed (weights + KV cache over its probe's read bandwidth: the best of 1-4 streams a thread,
read with as many threads as the run decodes with). Then the shipped model's f32 and q8 decode.
Runs under paired.sh's VARIANTS get rows of their own, named by their settings, each against the
same round's llama.cpp.

With one round: that round's figures. With several (each paired.sh output starts a round with
its `== <date>` line): per cell the range over the rounds and the median in brackets, the ratios
taken within each round.
"""
import re
import statistics
import sys


def parse(paths):
    """{(round, dtype, threads, variant): {'pp', 'tg', 'bound', 'lpp', 'ltg'}}, shipped decode."""
    rows, shipped, rnd, cur = {}, {}, 0, None
    for path in paths:
        for line in open(path):
            if line.startswith('== ') and ' done ' not in line:
                rnd, cur = rnd + 1, None
                continue
            m = re.match(r'-- ours (\w+), (\d) thread\(s\), (\w+) KV(?:, with (\S+))?', line)
            if m:
                cur = ('ours', m.group(1), int(m.group(2)), m.group(3), m.group(4) or '')
                continue
            m = re.match(r'-- llama\.cpp (\w+), (\d) thread', line)
            if m:
                d = {'q8_0': 'q8', 'q4_0': 'q4'}.get(m.group(1), m.group(1))
                cur = ('llama', d, int(m.group(2)), None, '')
                continue
            m = re.match(r'-- shipped model (\S+)\.blob', line)
            if m:
                cur = ('shipped', m.group(1), 1, None, '')
                continue
            if cur is None:
                continue
            kind, d, t, kv, variant = cur
            if kind == 'shipped':
                if (m := re.match(r'decode: +([\d.]+)', line)):
                    shipped.setdefault(d, []).append(float(m.group(1)))
                continue
            r = rows.setdefault((rnd, d, t, variant), {})
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
    return rows, shipped


def cell(xs, fmt):
    """One value, or 'min-max (median)' over several."""
    if not xs:
        return ''
    if len(xs) == 1:
        return fmt.format(xs[0])
    low = fmt.format(min(xs)).removesuffix('%')  # "74-76% (75%)", not "74%-76%"
    return f"{low}-{fmt.format(max(xs))} ({fmt.format(statistics.median(xs))})"


def main(paths):
    rows, shipped = parse(paths)
    rounds = sorted({k[0] for k in rows})
    variants = sorted({k[3] for k in rows})
    if len(rounds) > 1:
        print(f'{len(rounds)} rounds: range over the rounds (median)')
        print()
    print('| tok/s | prefill ours / llama.cpp | ratio | decode ours / llama.cpp | ratio | decode / bound |')
    print('|---|---:|---:|---:|---:|---:|')
    for t in (1, 2):
        for d in ('f32', 'f16', 'q8', 'q4'):
            for v in variants:
                got = []
                for n in rounds:
                    r, theirs = rows.get((n, d, t, v), {}), rows.get((n, d, t, ''), {})
                    if 'pp' in r and 'tg' in r and 'lpp' in theirs and 'ltg' in theirs:
                        got.append((r, theirs))
                if not got:
                    continue
                name = f"{d}, {t} thread{'s' if t > 1 else ''}" + (f", {v}" if v else '')
                pp = cell([r['pp'] for r, _ in got], '{:.0f}') + ' / ' + cell([o['lpp'] for _, o in got], '{:.0f}')
                tg = cell([r['tg'] for r, _ in got], '{:.1f}') + ' / ' + cell([o['ltg'] for _, o in got], '{:.1f}')
                pct = [100 * r['tg'] / r['bound'] for r, _ in got if 'bound' in r]
                bound = cell(pct, '{:.0f}%')
                print(f"| {name} | {pp} | {cell([r['pp'] / o['lpp'] for r, o in got], '{:.2f}')} "
                      f"| {tg} | {cell([r['tg'] / o['ltg'] for r, o in got], '{:.2f}')} | {bound} |")
    if shipped:
        print()
        print('shipped model decode, 1 thread: ' + ', '.join(f"{k} {cell(v, '{:,.0f}')} tok/s" for k, v in shipped.items()))


if __name__ == '__main__':
    main(sys.argv[1:])
