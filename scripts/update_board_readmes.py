#!/usr/bin/env python3
"""Rewrite the board READMEs' model-dependent blocks after the default model changes: the QEMU
machines' stdout/stderr (qemu-m4, qemu-m55), the Pico 2's and nRF52840-DK's fixed run (text, ids,
blob size, prompt ids) and their console sessions (keeping each README's own speed line).

    cargo build --release -p host
    boards/qemu-check.sh --bless > /tmp/bless.log
    python3 scripts/update_board_readmes.py /tmp/bless.log

Then read `git diff boards/*/README.md`: the prose around the blocks is not touched."""
import re, subprocess, sys
from pathlib import Path

R = Path(__file__).resolve().parent.parent
HOST = R / "target/release/host"
log = Path(sys.argv[1]).read_text().splitlines()

# firmware stderr blocks from qemu-check's "  | " lines
blocks, cur = {}, None
for l in log:
    if l.startswith("  | "):
        t = l[4:]
        if t.startswith("gpt2-mcu firmware: "):
            cur = t.split()[2]
            blocks[cur] = []
        if cur:
            blocks[cur].append(t)
    else:
        cur = None
assert set(blocks) >= {"qemu-m4", "qemu-m55"}, blocks.keys()


def text_blocks(s):
    """(start, end) of each ```text block's body."""
    out = []
    for m in re.finditer(r"```text\n(.*?)```", s, re.S):
        out.append((m.start(1), m.end(1)))
    return out


def replace_block(s, after, index, body):
    base = s.index(after)
    bl = [b for b in text_blocks(s) if b[0] > base][index]
    return s[: bl[0]] + body.rstrip("\n") + "\n" + s[bl[1]:]


def field(lines, name):
    return next(l[len(name) + 2:] for l in lines if l.startswith(name + ": "))


m4 = blocks["qemu-m4"]
run_m4 = (R / "boards/expected/qemu-m4.run").read_text()
p = R / "boards/qemu-m4/README.md"
s = p.read_text()
s = replace_block(s, "## What it prints", 0, run_m4)
s = replace_block(s, "## What it prints", 1, "\n".join(m4))
p.write_text(s)

p = R / "boards/qemu-m55/README.md"
s = p.read_text()
s = replace_block(s, "## What it prints", 0, "\n".join(blocks["qemu-m55"]))
p.write_text(s)

prompt = field(m4, "prompt")
prompt_ids = field(m4, "prompt ids")
host_args = field(m4, "host args").split()


def host_run(blob):
    return subprocess.run([str(HOST), "--model", str(blob), "--prompt", prompt, *host_args, "--print-ids"],
                          capture_output=True, text=True, check=True, cwd=R).stdout


def console(blob):
    lines = ["ROMEO:", "/chat on", "Hello, who are you?", "/stats", "/quit"]
    out = subprocess.run([str(HOST), "console", "--model", str(blob)], input="".join(l + "\n" for l in lines),
                         capture_output=True, text=True, check=True, cwd=R).stdout
    parts = out.split("\n> ")
    assert len(parts) == len(lines) + 1, len(parts)
    res = parts[0]
    for l, part in zip(lines, parts[1:]):
        res += "\n> " + l + "\n" + part
    return res


for board, blob in (("pico2", "model-q8.blob"), ("nrf52840-dk", "model-q4.blob")):
    p = R / "boards" / board / "README.md"
    s = p.read_text()
    size = (R / "models/default" / blob).stat().st_size
    # console session: keep the README's own speed line
    base = s.index("A session (the typed lines")
    bl = [b for b in text_blocks(s) if b[0] > base][0]
    old = s[bl[0]:bl[1]]
    speed = next(l for l in old.splitlines() if l.startswith("stats: speed"))
    new = "\n".join(speed if l.startswith("stats: speed") else l for l in console(R / "models/default" / blob).splitlines())
    s = s[: bl[0]] + new.rstrip("\n") + "\n" + s[bl[1]:]
    # the fixed run: text and ids between "host args:" and "---"; blob size; prompt ids
    base = s.index("## What it prints")
    bl = [b for b in text_blocks(s) if b[0] > base][0]
    old = s[bl[0]:bl[1]]
    head, rest = old.split("\nhost args: ", 1)
    hargs, rest = rest.split("\n", 1)
    _, tail = rest.split("---\n", 1)
    head = re.sub(r"^prompt ids: .*$", "prompt ids: " + prompt_ids, head, flags=re.M)
    new = head + "\nhost args: " + hargs + "\n" + host_run(R / "models/default" / blob) + "---\n" + tail
    new = re.sub(r"blob: \d+ B", f"blob: {size} B", new)
    new = re.sub(r"CRC-32 of \d+ B", f"CRC-32 of {size} B", new)
    s = s[: bl[0]] + new + s[bl[1]:]
    p.write_text(s)
print("ok:", sorted(blocks))
