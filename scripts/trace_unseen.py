#!/usr/bin/env python3
"""`host trace` against transformers on checkpoints no test has seen.

The per-stage fixtures (tests/make_fixtures.py, TRACES) pin a few shapes; an outside check runs
`host trace` on others. This script builds random GPT-2 and GPT-Neo checkpoints of other shapes,
windows and layer patterns (only-local with window 3, window 1, window 256 over 300 positions,
global/local/local/global in bfloat16, n_embd 768, ...), saves them with transformers, converts
them with `host-tools convert`, runs the contract's command line

    host trace --model B --ids L [-n N] [--greedy] --out DIR

and compares DIR/hidden_states.npy and DIR/attentions.npy with transformers' output_hidden_states
/ output_attentions (attn_implementation="eager", float32) over the T tokens trace.json lists
(sampled ones too). For scale it also prints how far float32 torch itself is from float64 torch.
It exits 1 if any array is outside numpy.allclose(rtol=1e-4, atol=1e-5) or a zero differs.

Usage (from the repository root; ~1 minute; Python as in scripts/requirements.txt):

    cargo build --release -p host -p host-tools
    python scripts/trace_unseen.py [CASE ...] [--keep DIR]
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, GPTNeoConfig, GPTNeoForCausalLM

ROOT = Path(__file__).resolve().parent.parent
HOST_TOOLS, HOST = ROOT / "target/release/host-tools", ROOT / "target/release/host"
RTOL, ATOL = 1e-4, 1e-5

# name, arch, config overrides, storage dtype, prompt length, tokens generated, extra trace flags
CASES = [
    ("neo_local_w3", "neo", dict(num_layers=3, hidden_size=40, num_heads=5, intermediate_size=72, vocab_size=300,
        max_position_embeddings=64, attention_types=[[["local"], 3]], window_size=3), "float32", 40, 0, []),
    ("neo_local_w3_gen", "neo", dict(num_layers=3, hidden_size=40, num_heads=5, intermediate_size=72, vocab_size=300,
        max_position_embeddings=64, attention_types=[[["local"], 3]], window_size=3), "float32", 7, 33, []),
    ("neo_glg_w7_bf16", "neo", dict(num_layers=4, hidden_size=64, num_heads=4, vocab_size=512, max_position_embeddings=96,
        attention_types=[[["global", "local", "local", "global"], 1]], window_size=7, tie_word_embeddings=False,
        initializer_range=0.1), "bfloat16", 13, 40, ["--greedy"]),
    ("neo_ts1m_shape", "neo", dict(num_layers=8, hidden_size=64, num_heads=16, vocab_size=1000, max_position_embeddings=2048,
        attention_types=[[["global", "local"], 4]], window_size=256), "float32", 300, 20, []),
    ("neo_lg_w1", "neo", dict(num_layers=2, hidden_size=16, num_heads=2, vocab_size=50, max_position_embeddings=32,
        attention_types=[[["local", "global"], 1]], window_size=1, initializer_range=0.3), "float32", 20, 10, []),
    ("neo_wide_w256", "neo", dict(num_layers=2, hidden_size=768, num_heads=12, vocab_size=2000, max_position_embeddings=512,
        attention_types=[[["global", "local"], 1]], window_size=256), "float32", 290, 10, ["--greedy"]),
    ("gpt2_wide", "gpt2", dict(n_layer=2, n_embd=768, n_head=12, vocab_size=2000, n_positions=256), "float32", 60, 4, []),
    ("gpt2_a", "gpt2", dict(n_layer=3, n_embd=48, n_head=3, vocab_size=500, n_positions=64), "float32", 40, 0, []),
    ("gpt2_b", "gpt2", dict(n_layer=5, n_embd=60, n_head=6, n_inner=130, vocab_size=777, n_positions=80, activation_function="gelu",
        scale_attn_by_inverse_layer_idx=True, tie_word_embeddings=False, initializer_range=0.2), "float16", 9, 40, []),
]


def build(arch, cfg, seed):
    """A random checkpoint in eval mode, LayerNorms and biases moved off their init."""
    torch.manual_seed(seed)
    cfg = dict(cfg)
    v = cfg["vocab_size"]
    cfg.update(bos_token_id=v - 1, eos_token_id=v - 1)
    if arch == "neo":
        cfg.update(attention_dropout=0.0, resid_dropout=0.0, embed_dropout=0.0)
        m = GPTNeoForCausalLM(GPTNeoConfig(**cfg))
    else:
        cfg.update(attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
        m = GPT2LMHeadModel(GPT2Config(**cfg))
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "ln" in n or n.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return m.eval()


def run(model_dir, seq, dtype):
    m = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").to(dtype).eval()
    with torch.no_grad():
        o = m(input_ids=torch.tensor([seq]), use_cache=False, output_hidden_states=True, output_attentions=True)
    return torch.stack(o.hidden_states)[:, 0].numpy(), torch.stack(o.attentions)[:, 0].numpy(), m.config


def stats(ours, want):
    d = np.abs(ours.astype(np.float64) - want)
    big = np.abs(want) >= 1e-3
    rel = (d[big] / np.abs(want[big])).max() if big.any() else 0.0
    share = (d / (ATOL + RTOL * np.abs(want))).max()
    return f"max abs {d.max():.2e}, max rel where |ref| >= 1e-3 {rel:.2e}, {share:.2f} of the tolerance {ATOL:g} + {RTOL:g}|ref|"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", help=f"cases to run (default: all of {[c[0] for c in CASES]})")
    ap.add_argument("--keep", type=Path, help="write the checkpoints, blobs and traces here (default: a temporary directory)")
    args = ap.parse_args()
    for b in (HOST, HOST_TOOLS):
        if not b.exists():
            sys.exit(f"{b} is missing: run cargo build --release -p host -p host-tools")
    torch.set_num_threads(1)
    root = args.keep or Path(tempfile.mkdtemp(prefix="trace-unseen-"))
    fails = 0
    for i, (name, arch, cfg, dtype, plen, n, extra) in enumerate(CASES):
        if args.cases and name not in args.cases:
            continue
        d = root / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        build(arch, cfg, 100 + i).to(getattr(torch, dtype)).save_pretrained(d / "hf")
        subprocess.run([HOST_TOOLS, "convert", d / "hf", "-o", d / "model.blob"], check=True, capture_output=True)
        ids = torch.randint(0, cfg["vocab_size"], (plen,), generator=torch.Generator().manual_seed(7 + i)).tolist()
        cmd = [HOST, "trace", "--model", d / "model.blob", "--ids", ",".join(map(str, ids)), "-n", str(n), "--out", d / "trace", *extra]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            print(f"{name}: host trace failed: {r.stderr}")
            fails += 1
            continue
        seq = [t["id"] for t in json.loads((d / "trace" / "trace.json").read_text())["tokens"]]
        assert seq[:plen] == ids and len(seq) == plen + n
        hs, at, config = run(d / "hf", seq, torch.float32)
        hs64, at64, _ = run(d / "hf", seq, torch.float64)
        ours_hs, ours_at = np.load(d / "trace" / "hidden_states.npy"), np.load(d / "trace" / "attentions.npy")
        layers = getattr(config, "attention_layers", ["global"] * config.num_hidden_layers)
        print(f"{name} ({arch}, {dtype}, T = {len(seq)}: {plen} prompt + {n} generated{' ' + ' '.join(extra) if extra else ''}; "
              f"layers {','.join(layers)}, window {getattr(config, 'window_size', '-')})")
        ok = ours_hs.shape == hs.shape and ours_at.shape == at.shape
        if not ok:
            print(f"    shapes differ: {ours_hs.shape} / {hs.shape}, {ours_at.shape} / {at.shape}")
        else:
            zeros = np.array_equal(ours_at == 0, at == 0)
            print(f"    hidden_states: {stats(ours_hs, hs)}")
            print(f"    attentions:    {stats(ours_at, at)}; zero exactly where transformers' are: {zeros}")
            e = lambda a, b: np.abs(a.astype(np.float64) - b).max()
            print(f"    max abs from float64 torch: hidden_states ours {e(ours_hs, hs64):.2e}, float32 torch {e(hs, hs64):.2e}; "
                  f"attentions ours {e(ours_at, at64):.2e}, float32 torch {e(at, at64):.2e}")
            ok = zeros and np.allclose(ours_hs, hs, rtol=RTOL, atol=ATOL) and np.allclose(ours_at, at, rtol=RTOL, atol=ATOL)
        fails += not ok
    print(f"{fails} case(s) outside the tolerance" if fails else "every case within the tolerance")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
