#!/usr/bin/env python3
"""Builds tests/fixtures/llama2c/: llama2.c's files written from this repository's Llama
fixtures the way llama2.c's `export.py` and `tokenizer.py` write them, for the converter's
tests (tests/tests/llama2c.rs). See tests/fixtures/README.md.

    .venv/bin/python tests/make_llama2c_fixtures.py       # from the repository root
    .venv/bin/python tests/make_llama2c_fixtures.py --hf DIR --out OUT
                     # any LlamaForCausalLM folder (say `host-tools random --preset stories15m`)
                     # -> OUT/model_v{0,1,2}.bin and OUT/tokenizer.bin (no logits)

From tests/fixtures/llama_gqa (a random LlamaForCausalLM: 3 layers x 64, 8 heads on 2 key/value
heads, hidden 112, vocab 512, untied head) it writes:
- model_v0.bin: export.py's legacy layout (7 int32, negative vocab_size: unshared classifier;
  fp32 grouped by kind; freqs_cos / freqs_sin; the classifier);
- model_v1.bin: version 1 (256-byte "ak42" header; fp32 in version 1's order);
- model_v2.bin: version 2, Q8_0 in groups of 64 (the largest of 64, 32, ... dividing dim, as
  export.py chooses); w2's rows are 112 wide, so its groups cross rows;
- logits_v2.npy: transformers' logits (eager attention) on the version 2 weights dequantized as
  runq.c does (q * s in f32), for the reference's 48 input ids;
- tokenizer.bin from llama_gqa's tokenizer.model (512 pieces), and tok1000.bin from
  tests/fixtures/sp_tokenizer/model/tokenizer.model (1000 pieces), as tokenizer.py exports.

Hugging Face's q_proj / k_proj rows are in rotate-half order; llama2.c's are adjacent pairs. The
rows of each head are permuted to llama2.c's order (k_proj with its own number of heads, the
key/value heads) as llama2.c's export.py does when it loads a Hugging Face model.

Deterministic: a second run gives byte-identical files. Needs torch, transformers, safetensors,
sentencepiece and numpy.
"""

import argparse
import json
import os
import struct

import numpy as np
import sentencepiece as spm
import torch
import transformers
from safetensors.torch import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "fixtures", "llama_gqa")
OUT = os.path.join(ROOT, "tests", "fixtures", "llama2c")


def to_llama2c_rows(w, n_heads):
    """Rotate-half rows (j, j + D/2) of each head -> adjacent pairs (2j, 2j + 1)."""
    rows, cols = w.shape
    d = rows // n_heads
    return w.view(n_heads, 2, d // 2, cols).transpose(1, 2).reshape(rows, cols)


def load(src):
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = load_file(os.path.join(src, "model.safetensors"))
    L, H, Hkv = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    assert cfg["hidden_size"] == H * cfg.get("head_dim", cfg["hidden_size"] // H), "llama2.c needs head_dim = dim / n_heads"
    layer = lambda i, n: sd[f"model.layers.{i}.{n}"].float()
    w = {
        "tok": sd["model.embed_tokens.weight"].float(),
        "att_norm": [layer(i, "input_layernorm.weight") for i in range(L)],
        "ffn_norm": [layer(i, "post_attention_layernorm.weight") for i in range(L)],
        "wq": [to_llama2c_rows(layer(i, "self_attn.q_proj.weight"), H) for i in range(L)],
        "wk": [to_llama2c_rows(layer(i, "self_attn.k_proj.weight"), Hkv) for i in range(L)],
        "wv": [layer(i, "self_attn.v_proj.weight") for i in range(L)],
        "wo": [layer(i, "self_attn.o_proj.weight") for i in range(L)],
        "w1": [layer(i, "mlp.gate_proj.weight") for i in range(L)],
        "w2": [layer(i, "mlp.down_proj.weight") for i in range(L)],
        "w3": [layer(i, "mlp.up_proj.weight") for i in range(L)],
        "norm": sd["model.norm.weight"].float(),
        "out": sd["lm_head.weight"].float() if "lm_head.weight" in sd else sd["model.embed_tokens.weight"].float(),
    }
    shared = torch.equal(w["tok"], w["out"])
    p = dict(dim=cfg["hidden_size"], hidden=cfg["intermediate_size"], L=L, H=H, Hkv=Hkv,
             vocab=cfg["vocab_size"], seq=cfg["max_position_embeddings"], shared=shared)
    return cfg, w, p


def fp32(f, t):
    f.write(t.detach().contiguous().view(-1).to(torch.float32).numpy().tobytes())


def header_ints(p, vocab):
    return struct.pack("iiiiiii", p["dim"], p["hidden"], p["L"], p["H"], p["Hkv"], vocab, p["seq"])


def write_v0(path, w, p):
    with open(path, "wb") as f:
        f.write(header_ints(p, p["vocab"] if p["shared"] else -p["vocab"]))
        fp32(f, w["tok"])
        for key in ["att_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"]:
            for t in w[key]:
                fp32(f, t)
        fp32(f, w["norm"])
        # the RoPE tables export.py writes (model.freqs_cos / freqs_sin, seq_len x head_dim / 2)
        d = p["dim"] // p["H"]
        freqs = 1.0 / (10000.0 ** (torch.arange(0, d, 2)[: d // 2].float() / d))
        angles = torch.outer(torch.arange(p["seq"]).float(), freqs)
        fp32(f, torch.cos(angles))
        fp32(f, torch.sin(angles))
        if not p["shared"]:
            fp32(f, w["out"])


def v1_weights(w, p):
    out = [*w["att_norm"], *w["ffn_norm"], w["norm"], w["tok"], *w["wq"], *w["wk"], *w["wv"], *w["wo"],
           *w["w1"], *w["w2"], *w["w3"]]
    return out + ([] if p["shared"] else [w["out"]])


def write_v1(path, w, p):
    with open(path, "wb") as f:
        f.write(struct.pack("I", 0x616B3432))
        f.write(struct.pack("i", 1))
        f.write(header_ints(p, p["vocab"]))
        f.write(struct.pack("B", int(p["shared"])))
        f.write(b"\0" * (256 - f.tell()))
        for t in v1_weights(w, p):
            fp32(f, t)


def quantize_q80(t, group):
    """export.py's Q8_0: groups over the flattened tensor, scale = max|w| / 127, round."""
    assert t.numel() % group == 0
    g = t.float().reshape(-1, group)
    scale = g.abs().max(dim=1).values / 127.0
    q = torch.round(g / scale[:, None]).to(torch.int8)
    return q, scale


def write_v2(path, w, p):
    group = 64
    while p["dim"] % group != 0:
        group //= 2
    quantized = [w["tok"], *w["wq"], *w["wk"], *w["wv"], *w["wo"], *w["w1"], *w["w2"], *w["w3"]]
    if not p["shared"]:
        quantized.append(w["out"])
    deq = []
    with open(path, "wb") as f:
        f.write(struct.pack("I", 0x616B3432))
        f.write(struct.pack("i", 2))
        f.write(header_ints(p, p["vocab"]))
        f.write(struct.pack("B", int(p["shared"])))
        f.write(struct.pack("i", group))
        f.write(b"\0" * (256 - f.tell()))
        for t in [*w["att_norm"], *w["ffn_norm"], w["norm"]]:
            fp32(f, t)
        for t in quantized:
            q, s = quantize_q80(t, group)
            f.write(q.numpy().tobytes())
            fp32(f, s)
            # runq.c's dequantize: q[i] * s[i / GS], in f32
            deq.append((q.float() * s[:, None]).reshape(t.shape))
    return group, deq


def v2_logits(cfg, w, p, deq):
    """transformers on the version 2 weights as the runtime reads them (dequantized, rows back in
    rotate-half order)."""
    L = p["L"]
    it = iter(deq)
    tok = next(it)
    wq, wk, wv, wo, w1, w2, w3 = ([next(it) for _ in range(L)] for _ in range(7))
    out = tok if p["shared"] else next(it)
    from_pairs = lambda t, n: t.view(n, t.shape[0] // n // 2, 2, t.shape[1]).transpose(1, 2).reshape(t.shape)
    sd = {"model.embed_tokens.weight": tok, "model.norm.weight": w["norm"], "lm_head.weight": out}
    for i in range(L):
        sd[f"model.layers.{i}.input_layernorm.weight"] = w["att_norm"][i]
        sd[f"model.layers.{i}.post_attention_layernorm.weight"] = w["ffn_norm"][i]
        sd[f"model.layers.{i}.self_attn.q_proj.weight"] = from_pairs(wq[i], p["H"])
        sd[f"model.layers.{i}.self_attn.k_proj.weight"] = from_pairs(wk[i], p["Hkv"])
        sd[f"model.layers.{i}.self_attn.v_proj.weight"] = wv[i]
        sd[f"model.layers.{i}.self_attn.o_proj.weight"] = wo[i]
        sd[f"model.layers.{i}.mlp.gate_proj.weight"] = w1[i]
        sd[f"model.layers.{i}.mlp.down_proj.weight"] = w2[i]
        sd[f"model.layers.{i}.mlp.up_proj.weight"] = w3[i]
    config = transformers.LlamaConfig.from_pretrained(SRC)
    config._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(config).eval()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    ids = json.load(open(os.path.join(SRC, "reference.json")))["input_ids"]
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy().astype(np.float32)


def write_tokenizer_bin(model_path, out_path):
    """tokenizer.py's export: max_token_length, then per piece score (f32), length, bytes; ▁ as
    a space, BOS as "\\n<s>\\n", EOS as "\\n</s>\\n"."""
    sp = spm.SentencePieceProcessor(model_file=model_path)
    tokens, scores = [], []
    for i in range(sp.vocab_size()):
        t = sp.id_to_piece(i)
        if i == sp.bos_id():
            t = "\n<s>\n"
        elif i == sp.eos_id():
            t = "\n</s>\n"
        tokens.append(t.replace("\u2581", " ").encode("utf-8"))
        scores.append(sp.get_score(i))
    with open(out_path, "wb") as f:
        f.write(struct.pack("I", max(len(t) for t in tokens)))
        for b, s in zip(tokens, scores):
            f.write(struct.pack("fI", s, len(b)))
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hf", help="a LlamaForCausalLM folder (default: the llama_gqa fixture, with reference logits)")
    ap.add_argument("--out", help="output folder (default: tests/fixtures/llama2c)")
    args = ap.parse_args()
    if args.hf:
        out = args.out or "."
        os.makedirs(out, exist_ok=True)
        cfg, w, p = load(args.hf)
        write_v0(os.path.join(out, "model_v0.bin"), w, p)
        write_v1(os.path.join(out, "model_v1.bin"), w, p)
        write_v2(os.path.join(out, "model_v2.bin"), w, p)
        if os.path.exists(os.path.join(args.hf, "tokenizer.model")):
            write_tokenizer_bin(os.path.join(args.hf, "tokenizer.model"), os.path.join(out, "tokenizer.bin"))
        for name in sorted(os.listdir(out)):
            print(f"{name}: {os.path.getsize(os.path.join(out, name))} bytes")
        return
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)
    cfg, w, p = load(SRC)
    write_v0(os.path.join(OUT, "model_v0.bin"), w, p)
    write_v1(os.path.join(OUT, "model_v1.bin"), w, p)
    group, deq = write_v2(os.path.join(OUT, "model_v2.bin"), w, p)
    np.save(os.path.join(OUT, "logits_v2.npy"), v2_logits(cfg, w, p, deq))
    write_tokenizer_bin(os.path.join(SRC, "tokenizer.model"), os.path.join(OUT, "tokenizer.bin"))
    write_tokenizer_bin(os.path.join(ROOT, "tests", "fixtures", "sp_tokenizer", "model", "tokenizer.model"),
                        os.path.join(OUT, "tok1000.bin"))
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({
            "made_by": "tests/make_llama2c_fixtures.py",
            "source": "tests/fixtures/llama_gqa",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "shared_classifier": p["shared"],
            "v2_group_size": group,
            "logits_v2": {"file": "logits_v2.npy", "input_ids": "llama_gqa's reference input_ids", "attn_implementation": "eager"},
        }, f, indent=1)
        f.write("\n")
    for name in sorted(os.listdir(OUT)):
        print(f"{name}: {os.path.getsize(os.path.join(OUT, name))} bytes")


if __name__ == "__main__":
    main()
