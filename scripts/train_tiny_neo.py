#!/usr/bin/env python3
"""Train a GPT-Neo shaped like TinyStories-1M for a few minutes, so that ACCURACY.md's GPT-Neo
figures (q8/q4 and vocabulary pruning) come from a model whose output distribution means
something, instead of the near-flat one of random weights.

    /work/venv/bin/python scripts/train_tiny_neo.py --out /tmp/tiny-neo
    # 400 steps of 2 x 256 tokens: 11 min wall, 5.5 min CPU (user + sys) on 2 shared cores

Batch 8 (the first default) spent ~3 s of CPU per step on the 50257-wide logits and their
gradient (2048 x 50257 floats each way), 20+ minutes in all; batch 2 fits the 10-minute budget.

The model: GPTNeoForCausalLM with TinyStories-1M's config (8 layers, hidden 64, 16 heads,
alternating global/local attention with a window of 256, 2048 positions, tied head) and GPT-2's
tokenizer (tests/fixtures/gpt2-tokenizer; 50257 tokens, the one TinyStories uses). The data: the
text shipped in models/default/val.txt (Macbeth and Paradise Regained, public domain), split by
lines into a training part (the first 90%) and a held-out part (the rest), written beside the
checkpoint as train.txt and heldout.txt. Training: AdamW, 256-token windows (so the local
layers' window of 256 never cuts a context: at these lengths they attend like global ones),
cosine schedule, seeded. It is a small model on 50k tokens for a few hundred steps: it learns
the text's common words and little else. It only has to be better than flat.

Nothing is downloaded. Requirements: torch, transformers, tokenizers, safetensors (the versions
in tests/requirements.txt).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPTNeoConfig, GPTNeoForCausalLM

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = REPO / "tests" / "fixtures" / "gpt2-tokenizer"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="checkpoint directory to write")
    ap.add_argument("--text", type=Path, default=REPO / "models" / "default" / "val.txt")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    lines = args.text.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = len(lines) * 9 // 10
    train_text, held_text = "".join(lines[:cut]), "".join(lines[cut:])
    # GPT-2's byte-level BPE (tiktoken's r50k_base; the runtime's tokenizer matches it exactly)
    tok = Tokenizer(models.BPE.from_file(str(TOKENIZER / "vocab.json"), str(TOKENIZER / "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    train_ids = torch.tensor(tok.encode(train_text).ids, dtype=torch.long)
    held_ids = torch.tensor(tok.encode(held_text).ids, dtype=torch.long)
    print(f"train {len(train_ids)} tokens, held-out {len(held_ids)} tokens, {len(set(train_ids.tolist()))} distinct in train")

    config = GPTNeoConfig(
        vocab_size=50257, max_position_embeddings=2048, hidden_size=64, num_layers=8, num_heads=16,
        attention_types=[[["global", "local"], 4]], window_size=256, intermediate_size=None,
        activation_function="gelu_new", embed_dropout=0.0, attention_dropout=0.0, resid_dropout=0.0,
        bos_token_id=50256, eos_token_id=50256, tie_word_embeddings=True,
    )
    model = GPTNeoForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)

    def batch(ids: torch.Tensor, n: int) -> torch.Tensor:
        starts = torch.randint(0, len(ids) - args.seq - 1, (n,), generator=gen)
        return torch.stack([ids[s : s + args.seq] for s in starts.tolist()])

    @torch.no_grad()
    def held_loss() -> float:
        model.eval()
        losses = []
        for s in range(0, len(held_ids) - args.seq, args.seq):
            x = held_ids[s : s + args.seq].unsqueeze(0)
            losses.append(model(x, labels=x).loss.item())
        model.train()
        return sum(losses) / max(len(losses), 1)

    t0 = time.time()
    warmup = max(args.steps // 20, 1)
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        x = batch(train_ids, args.batch)
        loss = model(x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.3f}  lr {lr:.2e}  {time.time() - t0:.0f} s", flush=True)
    hl = held_loss()
    print(f"held-out loss {hl:.3f} nats/token (perplexity {math.exp(hl):.1f}), {time.time() - t0:.0f} s")

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    for f in ["vocab.json", "merges.txt"]:
        shutil.copy(TOKENIZER / f, args.out / f)
    (args.out / "train.txt").write_text(train_text, encoding="utf-8")
    (args.out / "heldout.txt").write_text(held_text, encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
