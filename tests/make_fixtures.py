#!/usr/bin/env python3
"""Build the GPT-2, GPT-Neo and Llama parity fixtures under tests/fixtures/<case>/.

Every fixture is a small, randomly initialised GPT-2 (GPT2LMHeadModel), GPT-Neo
(GPTNeoForCausalLM) or Llama (LlamaForCausalLM) checkpoint in Hugging Face layout plus
reference outputs computed with Hugging Face transformers:

    tests/fixtures/<case>/config.json
    tests/fixtures/<case>/model.safetensors
    tests/fixtures/<case>/generation_config.json   (only where save_pretrained writes it)
    tests/fixtures/<case>/logits.npy               float32 [n_positions, vocab_size]
    tests/fixtures/<case>/reference.json           input ids, greedy continuation, ...
    tests/fixtures/<case>/trace_hidden_states.npy  (cases in TRACES) float32 [n_layer+1, T, C]
    tests/fixtures/<case>/trace_attentions.npy     (cases in TRACES) float32 [n_layer, n_head, T, T]

The script is deterministic: all randomness comes from fixed seeds, torch runs
single-threaded with deterministic algorithms, and a second run writes
byte-identical files. See tests/fixtures/README.md for the formats.

Usage (from the repository root):

    python3 -m venv .venv
    .venv/bin/pip install -r tests/requirements.txt
    .venv/bin/python tests/make_fixtures.py            # writes tests/fixtures/<case>/
    .venv/bin/python tests/make_fixtures.py --out DIR  # writes DIR/<case>/ instead
    .venv/bin/python tests/make_fixtures.py --only tiny odd

Only the case directories listed in CASES are (re)written; everything else under
the output directory (e.g. tests/fixtures/gpt2-tokenizer/) is left alone.
"""

import argparse
import copy
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import safetensors
import safetensors.torch
import torch
import transformers
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, GPTNeoConfig, GPTNeoForCausalLM,
                          LlamaConfig, LlamaForCausalLM)
from transformers.activations import ACT2FN

PROMPT_LEN = 5
# Greedy ids must be unambiguous for an f32 re-implementation: every step's
# top-1/top-2 logit gap must be at least this large (the brief asks for > 1e-3).
MIN_MARGIN_REQUIRED = 5e-2
ATTN_IMPL = "eager"  # reference attention; sdpa is only compared against

# Each case: name, seed, GPT2Config (or, with "arch": "gpt_neo", GPTNeoConfig) overrides,
# storage dtype, key layout ("hf": save_pretrained; "hub": keys without `transformer.` plus the
# legacy mask buffers of older checkpoints).
CASES = [
    {
        "case": "tiny",
        "seed": 1010,
        "dtype": "float32",
        "layout": "hf",
        "config": dict(
            n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=32,
            activation_function="gelu_new", initializer_range=0.3,
        ),
    },
    {
        "case": "odd",
        "seed": 2073,
        "dtype": "float32",
        "layout": "hf",
        "config": dict(
            n_layer=3, n_embd=45, n_head=5, n_inner=100, vocab_size=1001, n_positions=48,
            activation_function="gelu", initializer_range=0.25,
        ),
    },
    {
        "case": "fp16",
        "seed": 3017,
        "dtype": "float16",
        "layout": "hf",
        "config": dict(
            n_layer=2, n_embd=48, n_head=4, vocab_size=256, n_positions=32,
            activation_function="gelu_pytorch_tanh", initializer_range=0.3,
        ),
    },
    {
        "case": "bf16",
        "seed": 4036,
        "dtype": "bfloat16",
        "layout": "hf",
        "config": dict(
            n_layer=2, n_embd=48, n_head=6, vocab_size=200, n_positions=32,
            activation_function="relu", initializer_range=0.3,
        ),
    },
    {
        "case": "hub_layout",
        "seed": 5031,
        "dtype": "float32",
        "layout": "hub",
        "config": dict(
            n_layer=2, n_embd=32, n_head=4, vocab_size=96, n_positions=32,
            activation_function="gelu_new", initializer_range=0.3,
        ),
    },
    {
        "case": "untied",
        "seed": 6025,
        "dtype": "float32",
        "layout": "hf",
        "config": dict(
            n_layer=2, n_embd=32, n_head=2, vocab_size=80, n_positions=32,
            activation_function="gelu_new", initializer_range=0.3,
            tie_word_embeddings=False, scale_attn_by_inverse_layer_idx=True,
        ),
    },
    # GPT-Neo: no q/k/v biases, no score scaling, local layers attending to the last
    # window_size positions. Every sequence is much longer than the window.
    {
        "case": "neo_alternating",
        "arch": "gpt_neo",
        "seed": 7051,
        "dtype": "float32",
        "layout": "hf",
        "config": dict(
            num_layers=4, hidden_size=32, num_heads=8, vocab_size=64, max_position_embeddings=64,
            attention_types=[[["global", "local"], 2]], window_size=8,
            activation_function="gelu_new", initializer_range=0.3,
        ),
    },
    {
        "case": "neo_local_fp16",
        "arch": "gpt_neo",
        "seed": 8063,
        "dtype": "float16",
        "layout": "hf",
        "config": dict(
            num_layers=3, hidden_size=48, num_heads=4, intermediate_size=80, vocab_size=128,
            max_position_embeddings=64, attention_types=[[["local"], 3]], window_size=5,
            activation_function="gelu_new", initializer_range=0.3,
        ),
    },
    {
        "case": "neo_hub_layout",
        "arch": "gpt_neo",
        "seed": 9017,
        "dtype": "bfloat16",
        "layout": "hub",
        "config": dict(
            num_layers=3, hidden_size=24, num_heads=6, vocab_size=96, max_position_embeddings=48,
            attention_types=[[["global", "local", "local"], 1]], window_size=16,
            activation_function="gelu_new", initializer_range=0.3, tie_word_embeddings=False,
        ),
    },
    # Llama: RMSNorm, RoPE (rotate-half pairing), a gated SiLU MLP, grouped-query attention.
    # Every sequence is longer than a head's rotation period at the fast frequencies.
    {
        # grouped-query attention (8 query heads on 2 key/value heads), a SentencePiece
        # tokenizer trained here (byte fallback, see LLAMA_TOKENIZER), untied head (Llama's default)
        "case": "llama_gqa",
        "arch": "llama",
        "seed": 10073,
        "dtype": "float32",
        "layout": "hf",
        "tokenizer": True,
        "config": dict(
            num_hidden_layers=3, hidden_size=64, num_attention_heads=8, num_key_value_heads=2,
            intermediate_size=112, vocab_size=512, max_position_embeddings=48,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rms_norm_eps=1e-5,
            initializer_range=0.3,
        ),
    },
    {
        # stored as bf16, untied head, an explicit head_dim (q and the attention output are
        # 4 · 16 = 64 wide in a 48-wide model), 2 key/value heads, RoPE θ 500000 (Llama 3's)
        "case": "llama_bf16_untied",
        "arch": "llama",
        "seed": 11092,
        "dtype": "bfloat16",
        "layout": "hf",
        "config": dict(
            num_hidden_layers=2, hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=80, vocab_size=200, max_position_embeddings=40,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, rms_norm_eps=1e-6,
            initializer_range=0.3, tie_word_embeddings=False,
        ),
    },
    {
        # multi-query attention (one key/value head), attention and MLP biases, a tied head,
        # RoPE θ 1000, stored as f16
        "case": "llama_mqa_bias",
        "arch": "llama",
        "seed": 12041,
        "dtype": "float16",
        "layout": "hf",
        "config": dict(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=1,
            intermediate_size=72, vocab_size=150, max_position_embeddings=40,
            rope_parameters={"rope_type": "default", "rope_theta": 1000.0}, rms_norm_eps=1e-5,
            attention_bias=True, mlp_bias=True, initializer_range=0.3, tie_word_embeddings=True,
        ),
    },
]

# The SentencePiece model trained for the Llama cases with "tokenizer": True: BPE with byte
# fallback, trained with the `sentencepiece` package on the repository's own text, as Llama 2's
# tokenizer is configured (identity normalisation, runs of spaces kept, a dummy-prefix space,
# digits split). Its vocabulary size is the case's vocab_size.
LLAMA_TOKENIZER = dict(
    model_type="bpe", byte_fallback=True, split_digits=True, normalization_rule_name="identity",
    remove_extra_whitespaces=False, add_dummy_prefix=True, allow_whitespace_only_pieces=True,
    character_coverage=0.9995, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
)
# trainer settings that do not change the model
LLAMA_TOKENIZER_QUIET = dict(num_threads=1, minloglevel=2)
LLAMA_TOKENIZER_TEXT = Path(__file__).resolve().parent.parent / "models" / "stories" / "stories.txt"

# Per-stage references for `host trace` (tests/tests/trace_parity.rs): transformers'
# output_hidden_states and output_attentions (eager attention) over the greedy sequence of a
# case, its prompt followed by the first N greedy ids, so that `host trace --greedy -n N` from the
# prompt must produce those ids and those arrays. One line per case: name -> N. Any causal LM the
# case saves works (the checkpoint is reloaded with AutoModelForCausalLM), e.g. a GPT-Neo case.
# The GPT-Neo ones run well past their window, so the local layers' rings wrap several times
# (the attention rows of a local layer are zero outside the window, as transformers' mask).
TRACES = {
    "tiny": 7,
    "odd": 6,
    "untied": 7,
    "neo_alternating": 19,  # T = 24, window 8: global/local alternating, each ring wraps twice
    "neo_local_fp16": 12,  # T = 17, window 5: every layer local
    "neo_hub_layout": 20,  # T = 25, window 16: global, local, local in the hub's key layout
    "llama_gqa": 10,  # grouped-query attention, RoPE
    "llama_bf16_untied": 9,  # head_dim ≠ hidden_size / heads
}

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def setup_determinism():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


def is_neo(spec):
    return spec.get("arch") == "gpt_neo"


def is_llama(spec):
    return spec.get("arch") == "llama"


def model_class(spec):
    if is_llama(spec):
        return LlamaForCausalLM
    return GPTNeoForCausalLM if is_neo(spec) else GPT2LMHeadModel


def n_positions(config):
    return config.n_positions if config.model_type == "gpt2" else config.max_position_embeddings


def f32_rope(model):
    """A Llama model cast to f16/bf16 and back has its RoPE frequencies (a buffer) rounded too;
    the f32 model transformers loads from the checkpoint computes them in f32. Recompute them."""
    if model.config.model_type == "llama":
        model.model.rotary_emb = type(model.model.rotary_emb)(model.config)
    return model


def build_llama_model(spec):
    """Random Llama in float32, eval mode, with every parameter non-trivial: RMSNorm gains
    around 1 and biases (where the config has them) perturbed, so a runtime that ignores one
    fails."""
    cfg = dict(spec["config"])
    cfg.update(attention_dropout=0.0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(spec["seed"])
    config = LlamaConfig(**cfg)
    config._attn_implementation = ATTN_IMPL
    model = LlamaForCausalLM(config)
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    r = cfg["initializer_range"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.5 * r * torch.randn(p.shape, generator=g))
    model.eval()
    return model


def build_model(spec):
    """Random GPT-2 / GPT-Neo / Llama in float32, eval mode, with every parameter non-trivial."""
    if is_llama(spec):
        return build_llama_model(spec)
    cfg = dict(spec["config"])
    v = cfg["vocab_size"]
    # the default 50256 is outside these tiny vocabularies
    cfg.update(bos_token_id=v - 1, eos_token_id=v - 1)
    if is_neo(spec):
        cfg.update(attention_dropout=0.0, resid_dropout=0.0, embed_dropout=0.0)
    else:
        cfg.update(attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    torch.manual_seed(spec["seed"])
    config = (GPTNeoConfig if is_neo(spec) else GPT2Config)(**cfg)
    config._attn_implementation = ATTN_IMPL
    model = model_class(spec)(config)
    # HF init leaves LayerNorm at weight=1/bias=0 and every Conv1D / Linear bias at 0;
    # perturb them so a runtime that ignores a bias or a LayerNorm gain fails.
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    r = cfg["initializer_range"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                if name.endswith(".weight"):
                    p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.5 * r * torch.randn(p.shape, generator=g))
    model.eval()
    return model


def forward_logits(model, ids):
    """Full forward pass without KV cache; returns float32 [T, vocab]."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float()


def greedy(model, prompt, n_new):
    """Repeated argmax over the full (uncached) forward pass."""
    ids = list(prompt)
    new, margins = [], []
    for _ in range(n_new):
        last = forward_logits(model, ids)[-1]
        top = torch.topk(last, 2)
        nxt = int(top.indices[0])
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(nxt)
        new.append(nxt)
    return new, margins


def greedy_cached(model, prompt, n_new):
    """Same greedy decode, incrementally with the KV cache (cross-check only)."""
    new = []
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        for _ in range(n_new):
            nxt = int(torch.argmax(out.logits[0, -1]))
            new.append(nxt)
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=out.past_key_values, use_cache=True)
    return new


# activation that a runtime might mistakenly use instead of the configured one
CONFUSABLE_ACT = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_new", "relu": "gelu"}


def sensitivity(model, ids, logits):
    """How far the logits move under plausible implementation mistakes.

    Tells the runtime's tests which tolerance still catches each mistake.
    """
    if model.config.model_type == "gpt_neo":
        return neo_sensitivity(model, ids, logits)
    if model.config.model_type == "llama":
        return llama_sensitivity(model, ids, logits)
    out = {}
    cfg = model.config
    alt = CONFUSABLE_ACT[cfg.activation_function]
    m = copy.deepcopy(model)
    for blk in m.transformer.h:
        blk.mlp.act = ACT2FN[alt]
    out[f"activation={alt}"] = max_abs(forward_logits(m, ids), logits)
    m = copy.deepcopy(model)
    hd = cfg.n_embd // cfg.n_head
    for i, blk in enumerate(m.transformer.h):
        blk.attn.scaling = hd ** -0.5 / (1.0 if cfg.scale_attn_by_inverse_layer_idx else float(i + 1))
    out[f"scale_attn_by_inverse_layer_idx={not cfg.scale_attn_by_inverse_layer_idx}"] = max_abs(
        forward_logits(m, ids), logits)
    if not cfg.tie_word_embeddings:
        m = copy.deepcopy(model)
        m.lm_head.weight = m.transformer.wte.weight
        out["lm_head=wte"] = max_abs(forward_logits(m, ids), logits)
    return out


def neo_mask(P, local, window):
    """GPTNeoSelfAttention's mask buffer: causal, and for a local layer only the last `window`."""
    bias = torch.tril(torch.ones((P, P), dtype=bool)).view(1, 1, P, P)
    if local:
        bias = torch.bitwise_xor(bias, torch.tril(bias, -window))
    return bias


def neo_sensitivity(model, ids, logits):
    """GPT-Neo's plausible mistakes: a window one too long or short, local layers run as
    global, the GPT-2 score scale 1/sqrt(head_dim), a dropped out_proj bias, the other GELU."""
    out = {}
    cfg = model.config
    P, w = cfg.max_position_embeddings, cfg.window_size
    hd = cfg.hidden_size // cfg.num_heads
    types = cfg.attention_layers

    def remasked(window=None, local=None):
        m = copy.deepcopy(model)
        for i, blk in enumerate(m.transformer.h):
            is_local = types[i] == "local" if local is None else local
            blk.attn.attention.bias.copy_(neo_mask(P, is_local, w if window is None else window))
        return max_abs(forward_logits(m, ids), logits)

    if "local" in types:
        out[f"window_size={w + 1}"] = remasked(window=w + 1)
        out[f"window_size={w - 1}"] = remasked(window=w - 1) if w > 1 else float("inf")
        out["local_layers=global"] = remasked(local=False)
    if "global" in types:
        out["global_layers=local"] = remasked(local=True)
    m = copy.deepcopy(model)
    with torch.no_grad():
        for blk in m.transformer.h:
            blk.attn.attention.q_proj.weight.mul_(hd ** -0.5)  # scores · 1/sqrt(D)
    out["scale=1/sqrt(head_dim)"] = max_abs(forward_logits(m, ids), logits)
    m = copy.deepcopy(model)
    with torch.no_grad():
        for blk in m.transformer.h:
            blk.attn.attention.out_proj.bias.zero_()
    out["out_proj.bias=0"] = max_abs(forward_logits(m, ids), logits)
    alt = CONFUSABLE_ACT[cfg.activation_function]
    m = copy.deepcopy(model)
    for blk in m.transformer.h:
        blk.mlp.act = ACT2FN[alt]
    out[f"activation={alt}"] = max_abs(forward_logits(m, ids), logits)
    if not cfg.tie_word_embeddings:
        m = copy.deepcopy(model)
        m.lm_head.weight = m.transformer.wte.weight
        out["lm_head=wte"] = max_abs(forward_logits(m, ids), logits)
    return out
def llama_sensitivity(model, ids, logits):
    """Llama's plausible mistakes: llama2.c's interleaved RoPE pairs instead of rotate-half,
    another θ, query heads mapped to key/value heads round-robin (h % H_kv) instead of in
    groups (h / (H / H_kv)), gate and up swapped, GELU for SiLU, LayerNorm-style centring in
    RMSNorm, a dropped bias, the head tied to the embedding when it is not."""
    out = {}
    cfg = model.config
    H, Hkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    group = H // Hkv

    def run(edit):
        m = copy.deepcopy(model)
        with torch.no_grad():
            edit(m)
        return max_abs(forward_logits(m, ids), logits)

    def interleave(w, heads):
        # rows of each head from [x0..x_{D/2-1} | x_{D/2}..] to pairs (x0, x_{D/2}), ...: the
        # rotate-half product then rotates what an interleaved implementation would
        shape = w.shape
        w = w.view(heads, 2, D // 2, *shape[1:]).transpose(1, 2).reshape(shape)
        return w

    def rope_interleaved(m):
        for blk in m.model.layers:
            a = blk.self_attn
            a.q_proj.weight.copy_(interleave(a.q_proj.weight, H))
            a.k_proj.weight.copy_(interleave(a.k_proj.weight, Hkv))
            if a.q_proj.bias is not None:
                a.q_proj.bias.copy_(interleave(a.q_proj.bias, H))
                a.k_proj.bias.copy_(interleave(a.k_proj.bias, Hkv))
    out["rope=interleaved"] = run(rope_interleaved)

    theta = cfg.rope_parameters["rope_theta"]
    other = 10000.0 if theta != 10000.0 else 500000.0
    m = copy.deepcopy(model)
    m.config.rope_parameters = dict(cfg.rope_parameters, rope_theta=other)
    m.model.rotary_emb = type(m.model.rotary_emb)(m.config)
    out[f"rope_theta={other:g}"] = max_abs(forward_logits(m, ids), logits)

    if 1 < Hkv < H:
        # query head h' reads key/value head h' % Hkv: the same as permuting the query heads
        perm = [h for kv in range(Hkv) for h in range(kv, H, Hkv)]
        order = torch.tensor([hp * D + i for hp in [perm.index(h) for h in range(H)] for i in range(D)])
        inverse = torch.argsort(order)

        def round_robin(m):
            for blk in m.model.layers:
                a = blk.self_attn
                a.q_proj.weight.copy_(a.q_proj.weight[inverse])
                if a.q_proj.bias is not None:
                    a.q_proj.bias.copy_(a.q_proj.bias[inverse])
                a.o_proj.weight.copy_(a.o_proj.weight[:, inverse])
        out["kv_head=h%n_kv_head"] = run(round_robin)

    def swap_gate_up(m):
        for blk in m.model.layers:
            g, u = blk.mlp.gate_proj.weight.clone(), blk.mlp.up_proj.weight.clone()
            blk.mlp.gate_proj.weight.copy_(u)
            blk.mlp.up_proj.weight.copy_(g)
    out["gate<->up"] = run(swap_gate_up)

    m = copy.deepcopy(model)
    for blk in m.model.layers:
        blk.mlp.act_fn = ACT2FN["gelu"]
    out["activation=gelu"] = max_abs(forward_logits(m, ids), logits)

    class Centred(torch.nn.Module):
        def __init__(self, norm):
            super().__init__()
            self.norm = norm

        def forward(self, x):
            return self.norm(x - x.mean(-1, keepdim=True))
    m = copy.deepcopy(model)
    for blk in m.model.layers:
        blk.input_layernorm = Centred(blk.input_layernorm)
    out["rms_norm=centred"] = max_abs(forward_logits(m, ids), logits)

    if cfg.attention_bias:
        out["o_proj.bias=0"] = run(lambda m: [blk.self_attn.o_proj.bias.zero_() for blk in m.model.layers])
    if cfg.mlp_bias:
        out["down_proj.bias=0"] = run(lambda m: [blk.mlp.down_proj.bias.zero_() for blk in m.model.layers])
    if not cfg.tie_word_embeddings:
        m = copy.deepcopy(model)
        m.lm_head.weight = m.model.embed_tokens.weight
        out["lm_head=wte"] = max_abs(forward_logits(m, ids), logits)
    return out


def llama_summary(config, spec):
    return {
        "model_type": config.model_type,
        "num_hidden_layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": config.head_dim,
        "intermediate_size": config.intermediate_size,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_position_embeddings,
        "rope_parameters": config.rope_parameters,
        "rms_norm_eps": config.rms_norm_eps,
        "attention_bias": config.attention_bias,
        "mlp_bias": config.mlp_bias,
        "hidden_act": config.hidden_act,
        "initializer_range": config.initializer_range,
        "tie_word_embeddings": config.tie_word_embeddings,
        "storage_dtype": spec["dtype"],
        "key_layout": spec["layout"],
    }


def train_llama_tokenizer(out, vocab_size):
    """Trains the SentencePiece model LLAMA_TOKENIZER describes into `out`: tokenizer.model and
    the tokenizer_config.json transformers' LlamaTokenizer needs. Returns a few encodings (ids
    without BOS, as `sp.encode` gives them) for the reference."""
    import io
    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(LLAMA_TOKENIZER_TEXT.read_text(encoding="utf-8").splitlines()),
        model_writer=model, vocab_size=vocab_size, **LLAMA_TOKENIZER, **LLAMA_TOKENIZER_QUIET)
    (out / "tokenizer.model").write_bytes(model.getvalue())
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": True,
        "model_max_length": 1 << 20, "clean_up_tokenization_spaces": False,
    }, indent=2) + "\n")
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    assert sp.vocab_size() == vocab_size
    texts = ["Once upon a time, there was a little girl.", "  two  spaces, 1234 digits", "café — 안녕 🙂"]
    return {t: sp.encode(t) for t in texts}


def record_trace(out, ids):
    """hidden_states [n_layer+1, T, C] and attentions [n_layer, n_head, T, T] of `ids`, from the
    checkpoint in `out` as transformers loads it (eager attention, float32), saved beside it."""
    model = f32_rope(AutoModelForCausalLM.from_pretrained(out, attn_implementation=ATTN_IMPL).float().eval())
    with torch.no_grad():
        o = model(input_ids=torch.tensor([ids]), use_cache=False, output_hidden_states=True, output_attentions=True)
    hidden = torch.stack(o.hidden_states)[:, 0].float().numpy()
    attn = torch.stack(o.attentions)[:, 0].float().numpy()
    n_layer = model.config.num_hidden_layers
    assert hidden.shape == (n_layer + 1, len(ids), model.config.hidden_size), hidden.shape
    assert attn.shape == (n_layer, model.config.num_attention_heads, len(ids), len(ids)), attn.shape
    # the convention the runtime follows: the last hidden state is taken after the final LayerNorm
    assert torch.equal(o.hidden_states[-1], model.base_model(input_ids=torch.tensor([ids]), use_cache=False).last_hidden_state)
    files = {"trace_hidden_states.npy": hidden, "trace_attentions.npy": attn}
    for name, a in files.items():
        np.save(out / name, np.ascontiguousarray(a, dtype=np.float32))
        os.chmod(out / name, 0o644)
    return {
        "ids": ids,
        "hidden_states": {"file": "trace_hidden_states.npy", "shape": list(hidden.shape)},
        "attentions": {"file": "trace_attentions.npy", "shape": list(attn.shape)},
        "made_with": f"model(input_ids, output_hidden_states=True, output_attentions=True), attn_implementation={ATTN_IMPL!r}",
    }


def hub_state_dict(model, n_positions):
    """Rename to the original `gpt2` hub layout and add the legacy buffers."""
    sd = {}
    for k, t in model.state_dict().items():
        if k == "lm_head.weight":
            continue  # tied to wte; the hub checkpoint does not store it
        assert k.startswith("transformer."), k
        sd[k[len("transformer."):]] = t.detach().clone().contiguous()
    tril = torch.tril(torch.ones((n_positions, n_positions), dtype=torch.float32))
    for i in range(model.config.n_layer):
        sd[f"h.{i}.attn.bias"] = tril.view(1, 1, n_positions, n_positions).clone()
        sd[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4, dtype=torch.float32)
    return sd


def neo_hub_state_dict(model, n_positions):
    """Keys without `transformer.` (lm_head kept: the head is untied), plus the mask buffers
    older transformers versions saved with every GPT-Neo layer (bool `attn.attention.bias`
    [1, 1, P, P] and the scalar `attn.attention.masked_bias`)."""
    sd = {}
    for k, t in model.state_dict().items():
        name = k[len("transformer."):] if k.startswith("transformer.") else k
        sd[name] = t.detach().clone().contiguous()
    for i, kind in enumerate(model.config.attention_layers):
        sd[f"h.{i}.attn.attention.bias"] = neo_mask(n_positions, kind == "local", model.config.window_size).clone()
        sd[f"h.{i}.attn.attention.masked_bias"] = torch.tensor(-1e9, dtype=torch.float32)
    return sd


def hub_config_json(config):
    """config.json in the style of the original `gpt2` repo (legacy keys, n_ctx, n_inner: null)."""
    return {
        "activation_function": config.activation_function,
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": config.bos_token_id,
        "embd_pdrop": 0.1,
        "eos_token_id": config.eos_token_id,
        "initializer_range": config.initializer_range,
        "layer_norm_epsilon": config.layer_norm_epsilon,
        "model_type": "gpt2",
        "n_ctx": config.n_positions,
        "n_embd": config.n_embd,
        "n_head": config.n_head,
        "n_inner": None,
        "n_layer": config.n_layer,
        "n_positions": config.n_positions,
        "resid_pdrop": 0.1,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "vocab_size": config.vocab_size,
    }


def dump_json(obj):
    """Pretty JSON whose lists of numbers stay on one line."""
    def enc(o, ind):
        pad, pad1 = "  " * ind, "  " * (ind + 1)
        if isinstance(o, dict):
            if not o:
                return "{}"
            items = [f"{pad1}{json.dumps(k)}: {enc(v, ind + 1)}" for k, v in o.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(o, list) and all(not isinstance(x, (dict, list)) for x in o):
            return "[" + ", ".join(json.dumps(x) for x in o) + "]"
        if isinstance(o, list):
            return "[\n" + ",\n".join(pad1 + enc(x, ind + 1) for x in o) + "\n" + pad + "]"
        return json.dumps(o)
    return enc(obj, 0) + "\n"


def max_abs(a, b):
    return float((a.detach() - b.detach()).abs().max())


def gpt2_summary(config, spec):
    return {
        "n_layer": config.n_layer,
        "n_embd": config.n_embd,
        "n_head": config.n_head,
        "head_dim": config.n_embd // config.n_head,
        "n_inner": config.n_inner if config.n_inner is not None else 4 * config.n_embd,
        "n_inner_in_config": config.n_inner,
        "vocab_size": config.vocab_size,
        "n_positions": config.n_positions,
        "activation_function": config.activation_function,
        "layer_norm_epsilon": config.layer_norm_epsilon,
        "initializer_range": config.initializer_range,
        "tie_word_embeddings": config.tie_word_embeddings,
        "scale_attn_weights": config.scale_attn_weights,
        "scale_attn_by_inverse_layer_idx": config.scale_attn_by_inverse_layer_idx,
        "reorder_and_upcast_attn": config.reorder_and_upcast_attn,
        "storage_dtype": spec["dtype"],
        "key_layout": spec["layout"],
    }


def neo_summary(config, spec):
    return {
        "model_type": config.model_type,
        "num_layers": config.num_layers,
        "hidden_size": config.hidden_size,
        "num_heads": config.num_heads,
        "head_dim": config.hidden_size // config.num_heads,
        "intermediate_size": config.intermediate_size if config.intermediate_size is not None else 4 * config.hidden_size,
        "intermediate_size_in_config": config.intermediate_size,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_position_embeddings,
        "attention_layers": config.attention_layers,
        "window_size": config.window_size,
        "activation_function": config.activation_function,
        "layer_norm_epsilon": config.layer_norm_epsilon,
        "initializer_range": config.initializer_range,
        "tie_word_embeddings": config.tie_word_embeddings,
        "storage_dtype": spec["dtype"],
        "key_layout": spec["layout"],
    }


def make_case(spec, out_root):
    name = spec["case"]
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    model = build_model(spec)
    config = model.config
    T = n_positions(config)
    V = config.vocab_size
    dtype = DTYPES[spec["dtype"]]

    g = torch.Generator().manual_seed(spec["seed"] + 2)
    input_ids = torch.randint(0, V, (T,), generator=g).tolist()
    prompt = torch.randint(0, V, (PROMPT_LEN,), generator=g).tolist()

    # --- write the checkpoint -------------------------------------------------
    if spec["layout"] == "hub" and is_neo(spec):
        stored = model.to(dtype) if dtype != torch.float32 else model
        sd = neo_hub_state_dict(stored, T)
        safetensors.torch.save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
        stored.config.save_pretrained(out)
        model = stored.float() if dtype != torch.float32 else stored
        config = model.config
    elif spec["layout"] == "hub":
        assert dtype == torch.float32
        sd = hub_state_dict(model, T)
        safetensors.torch.save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
        (out / "config.json").write_text(json.dumps(hub_config_json(config), indent=2, sort_keys=True) + "\n")
    else:
        stored = model.to(dtype) if dtype != torch.float32 else model
        stored.save_pretrained(out)
        # the f32 model the runtime will see: f16/bf16-rounded weights, computed in f32
        model = f32_rope(stored.float()) if dtype != torch.float32 else stored
        config = model.config
    for f in out.iterdir():
        os.chmod(f, 0o644)  # save_pretrained writes model.safetensors as 0600

    # --- reference outputs (float32, eager attention, no cache) ---------------
    logits = forward_logits(model, input_ids)
    assert logits.shape == (T, V) and logits.dtype == torch.float32
    n_new = T - PROMPT_LEN
    new_ids, margins = greedy(model, prompt, n_new)
    min_margin = min(margins)

    # --- checks -----------------------------------------------------------------
    checks = {}
    reloaded = model_class(spec).from_pretrained(out, attn_implementation=ATTN_IMPL).eval()
    checks["reloaded_dtype"] = str(reloaded.dtype).replace("torch.", "")
    reloaded = f32_rope(reloaded.float())
    checks["reload_max_abs_diff"] = max_abs(forward_logits(reloaded, input_ids), logits)
    checks["reload_greedy_equal"] = greedy(reloaded, prompt, n_new)[0] == new_ids
    if spec["layout"] != "hub":
        # all stored tensors round-trip bit-exactly
        a, b = model.state_dict(), reloaded.state_dict()
        assert set(a) == set(b), (set(a) ^ set(b))
        assert all(torch.equal(a[k], b[k]) for k in a), name
    else:
        # the renamed tensors are exactly the model's, minus a tied lm_head
        with safetensors.safe_open(str(out / "model.safetensors"), "pt") as f:
            keys = set(f.keys())
        assert ("lm_head.weight" in keys) == (not config.tie_word_embeddings)
        assert not any(k.startswith("transformer.") for k in keys)
        sd = reloaded.state_dict()
        for k, t in model.state_dict().items():
            assert torch.equal(sd[k], t), k
    embeddings = reloaded.get_input_embeddings().weight
    if not config.tie_word_embeddings:
        lm = reloaded.lm_head.weight
        assert lm.data_ptr() != embeddings.data_ptr() and not torch.equal(lm, embeddings)
        checks["lm_head_vs_wte_max_abs"] = max_abs(lm, embeddings)
    else:
        assert reloaded.lm_head.weight.data_ptr() == embeddings.data_ptr()
    checks["kv_cache_greedy_equal"] = greedy_cached(model, prompt, n_new) == new_ids
    if not is_neo(spec):  # GPT-Neo has no sdpa attention in transformers
        sdpa = f32_rope(model_class(spec).from_pretrained(out, attn_implementation="sdpa").float().eval())
        checks["sdpa_vs_eager_max_abs_diff"] = max_abs(forward_logits(sdpa, input_ids), logits)
    sens = sensitivity(model, input_ids, logits)
    assert min(sens.values()) > 1e-3, (name, sens)

    assert checks["reload_max_abs_diff"] == 0.0, checks
    assert checks["reload_greedy_equal"] and checks["kv_cache_greedy_equal"], checks
    assert min_margin >= MIN_MARGIN_REQUIRED, (name, min_margin)

    # --- write the references ---------------------------------------------------
    np.save(out / "logits.npy", np.ascontiguousarray(logits.numpy(), dtype=np.float32))
    os.chmod(out / "logits.npy", 0o644)
    ref = {
        "case": name,
        "made_by": "tests/make_fixtures.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "seed": spec["seed"],
        "attn_implementation": ATTN_IMPL,
        "input_ids": input_ids,
        "greedy": {
            "prompt_ids": prompt,
            "new_ids": new_ids,
            "min_margin": min_margin,
            "margins": margins,
        },
        "config_summary": (llama_summary if is_llama(spec) else neo_summary if is_neo(spec) else gpt2_summary)(config, spec),
        "logits": {
            "file": "logits.npy",
            "shape": [T, V],
            "max_abs": float(logits.abs().max()),
            "std": float(logits.std()),
            "max_abs_change_if": sens,
        },
    }
    if name in TRACES:
        ref["trace"] = record_trace(out, prompt + new_ids[: TRACES[name]])
    if spec.get("tokenizer"):
        ref["tokenizer"] = {"model": "tokenizer.model", "trained_with": LLAMA_TOKENIZER,
                            "text": "models/stories/stories.txt", "sp_encode": train_llama_tokenizer(out, V)}
        for f in out.iterdir():
            os.chmod(f, 0o644)
    (out / "reference.json").write_text(dump_json(ref))
    os.chmod(out / "reference.json", 0o644)

    files = {f.name: f.stat().st_size for f in sorted(out.iterdir())}
    log(f"[{name}] min_margin={min_margin:.4g} checks={checks} sensitivity={sens} files={files}")
    return {"case": name, "min_margin": min_margin, "checks": checks, "files": files}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "fixtures")
    ap.add_argument("--only", nargs="*", help="case names to build (default: all)")
    args = ap.parse_args()
    setup_determinism()
    names = [c["case"] for c in CASES]
    for n in args.only or []:
        if n not in names:
            ap.error(f"unknown case {n!r}; known: {names}")
    args.out.mkdir(parents=True, exist_ok=True)
    total = 0
    for spec in CASES:
        if args.only and spec["case"] not in args.only:
            continue
        res = make_case(spec, args.out)
        total += sum(res["files"].values())
    log(f"total bytes written: {total}")


if __name__ == "__main__":
    main()
