#!/usr/bin/env python3
"""Builds tests/fixtures/sp_tokenizer/: SentencePiece BPE tokenizers and the ids that the
`sentencepiece` package and Hugging Face `tokenizers` give on a set of test strings, for the
runtime's exact-parity tests (tests/tests/sentencepiece_parity.rs). See tests/fixtures/README.md.

    .venv/bin/python tests/make_sp_fixtures.py            # from the repository root

Deterministic: a second run gives byte-identical files. Needs sentencepiece, tokenizers,
transformers and protobuf (tests/requirements.txt) and, for the `trained` case, cargo (it runs
`host-tools train-tokenizer`, this project's own trainer).
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import sentencepiece as spm
import tokenizers
import transformers
from tokenizers import normalizers, pre_tokenizers
from tokenizers.models import BPE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPACE = "\u2581"

TOKENIZER_CONFIG = {
    "tokenizer_class": "LlamaTokenizer",
    "add_bos_token": True,
    "add_eos_token": False,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "clean_up_tokenization_spaces": False,
    "legacy": False,
    "model_max_length": 1000000,
}


def test_strings():
    """The strings every tokenizer is checked on: hand-picked cases, then random Unicode."""
    s = [
        "",
        " ",
        "  ",
        "   ",
        "a",
        "Hello world",
        "Hello, world! How are you today?",
        "To be, or not to be, that is the question:",
        " leading space",
        "trailing space ",
        "double  space",
        "triple   space",
        "  two leading and two trailing  ",
        "line one\nline two\n\nline four",
        "tab\tseparated\tvalues",
        "\n",
        "\t \t",
        "\r\n",
        "0",
        "12345",
        "3.14159 2024-06-01 1,000,000",
        "The year 1616 and the number 98765432109876543210.",
        "x1 y22 z333",
        "café naïve résumé",
        "Ñandú über straße",
        "e\u0301 a\u0300 o\u0308 (combining marks)",
        "Ångström ÿ",
        "안녕하세요, 세계",
        "나는 밥을 먹었다.",
        "中文字符测试",
        "日本語のテキスト",
        "Привет, мир",
        "Γειά σου Κόσμε",
        "مرحبا بالعالم",
        "😀",
        "👍🏽 thumbs",
        "👨\u200d👩\u200d👧 family",
        "🇰🇷🇺🇸 flags",
        "emoji😀in😀text",
        SPACE,
        SPACE + SPACE,
        "a" + SPACE + "b",
        SPACE + "x",
        " " + SPACE + " ",
        "<s>",
        "</s>",
        "<unk>",
        "<s>Hello</s>",
        "<0x41>",
        "\x00",
        "a\x00b",
        "\x01\x02\x1b[0m\x7f",
        "\u00a0non-breaking\u00a0space",
        "\u3000ideographic\u3000space",
        "\ufeffBOM",
        "zero\u200bwidth",
        "\U0010FFFF\U000E0001",
        "KING HENRY. Once more unto the breach, dear friends, once more;\n"
        "Or close the wall up with our English dead.\n"
        "In peace there's nothing so becomes a man\n"
        "As modest stillness and humility:\n"
        "But when the blast of war blows in our ears,\n"
        "Then imitate the action of the tiger;   Stiffen the sinews, summon up the blood.",
    ]
    # Random Unicode, fixed seed: a few thousand characters from many blocks.
    rng = random.Random(20240601)
    ranges = [
        (0x20, 0x7E), (0x09, 0x0D), (0x00, 0x1F), (0xA0, 0xFF), (0x100, 0x24F), (0x300, 0x36F),
        (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F),
        (0x1100, 0x11FF), (0x2000, 0x206F), (0x2190, 0x21FF), (0x2500, 0x259F), (0x3000, 0x303F),
        (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xF8FF), (0xFE00, 0xFE0F),
        (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x1F1E6, 0x1F1FF), (0x10000, 0x10FFFF),
    ]
    for _ in range(30):
        n = rng.randint(1, 200)
        chars = []
        for _ in range(n):
            if rng.random() < 0.35:
                chars.append(rng.choice("    eta" + SPACE))
            else:
                lo, hi = rng.choice(ranges)
                c = rng.randint(lo, hi)
                if 0xD800 <= c <= 0xDFFF:
                    c = 0xFFFD
                chars.append(chr(c))
        s.append("".join(chars))
    return s


def train(out_dir, text_path, **options):
    """Trains a sentencepiece BPE model on the lines of text_path into out_dir/tokenizer.model."""
    with open(text_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.model"), "wb") as model:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, model_type="bpe",
            normalization_rule_name="identity", num_threads=1, minloglevel=2, **options)


def hf_tokenizer_json(model_dir, out_dir):
    """What transformers converts the tokenizer.model into (tokenizer.json), saved in out_dir."""
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        os.makedirs(out_dir, exist_ok=True)
        shutil.copy(os.path.join(tmp, "tokenizer.json"), os.path.join(out_dir, "tokenizer.json"))
    write_json(os.path.join(out_dir, "tokenizer_config.json"), TOKENIZER_CONFIG)


def legacy_tokenizer_json(hf_dir, out_dir):
    """The same tokenizer in Llama 2's (and TinyLlama's) layout: a Prepend("▁") + Replace(" ", "▁")
    normalizer instead of the Metaspace pre-tokenizer."""
    tok = tokenizers.Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])
    tok.pre_tokenizer = None
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))


def write_json(path, value, compact=False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(value, f, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
        else:
            json.dump(value, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")


def sp_cases(model_path, strings):
    """sentencepiece's ids for each string (in the order of `strings`) and its decodes."""
    sp = spm.SentencePieceProcessor(model_file=model_path)
    cases = []
    for s in strings:
        ids = sp.encode(s)
        cases.append({"ids": ids, "decoded": sp.decode(ids),
                      "decoded_with_bos": sp.decode([sp.bos_id()] + ids)})
    return sp, cases


def decode_cases(sp):
    """Id sequences around BOS, EOS, <unk> and byte pieces, and what sentencepiece decodes them to."""
    p = sp.piece_to_id
    word = next(i for i in range(sp.vocab_size()) if sp.id_to_piece(i).startswith(SPACE) and len(sp.id_to_piece(i)) > 2)
    inner = next(i for i in range(sp.vocab_size()) if sp.id_to_piece(i).isalpha() and len(sp.id_to_piece(i)) > 1)
    bos, eos, unk = sp.bos_id(), sp.eos_id(), sp.unk_id()
    b = lambda x: p("<0x%02X>" % x)
    seqs = [
        [word], [bos, word], [bos, bos, word], [eos, word], [word, inner], [inner, word],
        [bos, inner], [p(SPACE)], [bos, p(SPACE)], [bos, p(SPACE), word], [p(SPACE), p(SPACE)],
        [unk], [bos, unk], [unk, word], [b(0x20), word], [bos, b(0x20), word],
        [b(0xE4), b(0xB8), b(0x80), word], [bos, b(0xE4), b(0xB8), b(0x80), word],
        [b(0xF0), b(0x9F), b(0x98), b(0x80)], [word, b(0x0A), word],
    ]
    # Where sentencepiece and the runtime differ (documented in runtime::tokenizer::sentencepiece):
    # a control piece in the middle, and byte sequences that are not UTF-8.
    differ = [[word, bos, word], [word, eos, word], [b(0xE4), b(0xB8), word], [b(0xFF)]]
    return [{"ids": s, "decoded": sp.decode(s)} for s in seqs], [{"ids": s, "decoded": sp.decode(s)} for s in differ]


def hf_ids(json_path, strings):
    """Hugging Face `tokenizers` ids with special tokens read as text (as the runtime reads them)."""
    tok = tokenizers.Tokenizer.from_file(json_path)
    tok.encode_special_tokens = True
    return [tok.encode(s, add_special_tokens=False).ids for s in strings]


def gpt2_digits_ids(strings):
    """GPT-2's byte-level BPE behind SmolLM's pre-tokenizer: every numeric character on its own
    (Digits(individual_digits=true)), then ByteLevel; ids from Hugging Face `tokenizers`."""
    d = os.path.join(ROOT, "tests", "fixtures", "gpt2-tokenizer")
    tok = tokenizers.Tokenizer(BPE.from_file(os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    return [tok.encode(s, add_special_tokens=False).ids for s in strings]


def ids_hash(ids):
    """A 64-bit digest of an id list: h = h * 31 + id (mod 2^64), from h = 0."""
    h = 0
    for i in ids:
        h = (h * 31 + i) % (1 << 64)
    return "%016x" % h


def whole_files(encode):
    """Count and digest of the ids of whole text files (each encoded as one string)."""
    out = {}
    for rel in ["models/default/val.txt", "models/stories/stories.txt"]:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            ids = encode(f.read())
        out[rel] = {"n": len(ids), "hash": ids_hash(ids)}
    return out


def completed_case(out, strings):
    """completed.json: this project's trainer when the text runs out of pairs. The tokenizer of
    `host-tools random --preset stories15m` (and stories42m): 32,000 pieces trained on
    models/stories/stories.txt + "\\n" + models/default/val.txt (host_tools::random::TOKENIZER_TEXT),
    about 16,400 of them by merging and the rest completed from two pieces each. The model is not
    committed (the test trains it again and checks its digest); sentencepiece's and transformers'
    ids on the test strings and whole files are."""
    with tempfile.TemporaryDirectory() as tmp:
        text = ""
        for i, rel in enumerate(["models/stories/stories.txt", "models/default/val.txt"]):
            with open(os.path.join(ROOT, rel), encoding="utf-8", newline="") as f:
                text += ("\n" if i else "") + f.read()
        text_path = os.path.join(tmp, "text.txt")
        with open(text_path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        model_dir = os.path.join(tmp, "completed")
        subprocess.run(["cargo", "run", "-q", "-p", "host-tools", "--", "train-tokenizer", "--text", text_path,
                        "--vocab-size", "32000", "-o", model_dir], cwd=ROOT, check=True)
        model_path = os.path.join(model_dir, "tokenizer.model")
        with open(model_path, "rb") as f:
            model_bytes = f.read()
        sp, encoded = sp_cases(model_path, strings)
        # LlamaTokenizer (sentencepiece) and AutoTokenizer (converted to a tokenizers BPE): BOS first
        slow = transformers.LlamaTokenizer.from_pretrained(model_dir) if hasattr(transformers, "LlamaTokenizer") else None
        auto = transformers.AutoTokenizer.from_pretrained(model_dir)
        case = {"vocab_size": sp.vocab_size(), "model_bytes": len(model_bytes), "model_hash": ids_hash(model_bytes),
                "encode": [e["ids"] for e in encoded], "files": whole_files(sp.encode),
                "auto_class": type(auto).__name__,
                "transformers_ids": [auto.encode(s, split_special_tokens=True) for s in strings]}
        if slow is not None:
            case["llama_tokenizer_class"] = type(slow).__name__
            case["llama_tokenizer_equals_auto"] = all(
                slow.encode(s, split_special_tokens=True) == t for s, t in zip(strings, case["transformers_ids"]))
    write_json(os.path.join(out, "completed.json"), case, compact=True)
    same = sum(t == [sp.bos_id()] + e for t, e in zip(case["transformers_ids"], case["encode"]))
    print(f"wrote completed.json: {case['vocab_size']} pieces; AutoTokenizer ({case['auto_class']}) gives "
          f"BOS + sentencepiece's ids on {same} of {len(strings)} strings")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "sp_tokenizer"))
    parser.add_argument("--completed-only", action="store_true",
                        help="only write completed.json (the 32,000-piece completed vocabulary)")
    args = parser.parse_args()
    out = args.out
    strings = test_strings()
    completed_case(out, strings)
    if args.completed_only:
        return
    val = os.path.join(ROOT, "models", "default", "val.txt")
    stories = os.path.join(ROOT, "models", "stories", "stories.txt")

    # 1. Llama's settings: byte fallback, split digits, identity, dummy prefix, spaces kept.
    model_dir = os.path.join(out, "model")
    train(model_dir, val, vocab_size=1000, byte_fallback=True, split_digits=True,
          remove_extra_whitespaces=False, add_dummy_prefix=True, allow_whitespace_only_pieces=True,
          character_coverage=0.995)
    write_json(os.path.join(model_dir, "tokenizer_config.json"), TOKENIZER_CONFIG)
    # 2. The tokenizer.json transformers converts it into (Metaspace), and Llama 2's layout.
    hf_tokenizer_json(model_dir, os.path.join(out, "hf"))
    legacy_tokenizer_json(os.path.join(out, "hf"), os.path.join(out, "hf_legacy"))
    # 3. Other normalizer settings: no byte fallback (runs of unknown characters -> one <unk>),
    #    remove_extra_whitespaces, on a small text.
    rew_dir = os.path.join(out, "no_fallback_rew")
    train(rew_dir, stories, vocab_size=400, byte_fallback=False, split_digits=True,
          remove_extra_whitespaces=True, add_dummy_prefix=True, character_coverage=0.99)
    # 4. This project's own trainer (host-tools train-tokenizer) on the stories text.
    trained_dir = os.path.join(out, "trained")
    subprocess.run(["cargo", "run", "-q", "-p", "host-tools", "--", "train-tokenizer", "--text", stories,
                    "--vocab-size", "600", "-o", trained_dir], cwd=ROOT, check=True)

    cases = {
        "versions": {"sentencepiece": spm.__version__, "tokenizers": tokenizers.__version__,
                     "transformers": transformers.__version__, "python": sys.version.split()[0]},
        "strings": strings,
    }
    for name, d in [("model", model_dir), ("no_fallback_rew", rew_dir), ("trained", trained_dir)]:
        sp, encoded = sp_cases(os.path.join(d, "tokenizer.model"), strings)
        decode, decode_differ = decode_cases(sp)
        cases[name] = {"vocab_size": sp.vocab_size(), "bos_id": sp.bos_id(), "eos_id": sp.eos_id(),
                       "unk_id": sp.unk_id(), "encode": encoded, "decode": decode,
                       "decode_differs": decode_differ, "files": whole_files(sp.encode)}
    for name in ["hf", "hf_legacy"]:
        path = os.path.join(out, name, "tokenizer.json")
        cases[name] = {"ids": hf_ids(path, strings), "files": whole_files(lambda t: hf_ids(path, [t])[0])}
    digit_strings = strings + ["2024-06-01: 3.14159, 1,000,000 and ²½٣ ①⅔ 12345678901234567890",
                               "abc123def 456 x7 Ⅻ 0.5e10"]
    cases["gpt2_digits"] = {"strings": digit_strings, "ids": gpt2_digits_ids(digit_strings)}
    # What transformers does with the tokenizer_config.json: BOS first, then the ids (the trained
    # model's tokenizer.model, loaded by AutoTokenizer; special tokens in the text read as text).
    auto = transformers.AutoTokenizer.from_pretrained(trained_dir)
    cases["trained"]["transformers_ids"] = [auto.encode(s, split_special_tokens=True) for s in strings]
    write_json(os.path.join(out, "cases.json"), cases, compact=True)

    mismatch = sum(a["ids"] != b for a, b in zip(cases["model"]["encode"], cases["hf_legacy"]["ids"]))
    meta = sum(a["ids"] != b for a, b in zip(cases["model"]["encode"], cases["hf"]["ids"]))
    print(f"wrote {out}: {len(strings)} strings; Hugging Face differs from sentencepiece on "
          f"{mismatch} (Llama 2 layout) and {meta} (Metaspace) of them")


if __name__ == "__main__":
    main()
