"""Extract the training command lines of verl's documentation at the pinned commit into
tests/py/verl_corpus/docs_runs.json, each with the page and line it stands on and verl's verdict.

Which lines: every code block of docs/**/*.md and *.rst that calls a training entry point
(extract.TRAINING_ENTRIES, and the one-step-off page's `async_main_ppo`, which is not in verl's tree).
Each block runs as a script from the unpacked checkout, through extract.py's recorder (extract.prepared,
extract._run_script: the same stubs, so each `$VAR` expands to the block's own value and `$HOME` is
/home/user); a variable the block uses but never sets gets the value in BLOCK_ENV, with why.

What a user copying the block means, not what bash makes of a paste (each edit is listed in the
record's `edits`):
- the block's variable assignments run (those inside an `if` too), then each training command itself:
  what launches it elsewhere (`ray job submit ... --`, `srun`, `docker exec`, a SkyPilot YAML around
  it, a `$ ` prompt) is left out, other commands (`ray start`, downloads) are not run;
- a comment line inside a continued command (`\\` then `# actor and rollout ...`) is dropped: bash
  would end the command there (docs/advance/one_step_off.md);
- a placeholder line (`...`, `[other config overrides...]`) and a trailing ` ...` are dropped;
- a redirect of the output (`> $LOG_FILE 2>&1 &`) is dropped;
- `python3 verl.x.y` (the Prometheus page's typo for `-m`) is run as `python3 -m verl.x.y`.

    python tests/py/verl_corpus/docs_extract.py /path/to/verl/clone   # rewrites docs_runs.json

tests/py/test_verl_docs_corpus.py reads the committed file (CI cannot reach GitHub).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract  # noqa: E402  (tests/py/verl_corpus/extract.py)

OUT = extract.HERE / "docs_runs.json"
ENTRIES = {**extract.TRAINING_ENTRIES,
           # docs/advance/one_step_off.md names a module verl's tree does not have (its entry is main_ppo)
           "verl.experimental.one_step_off_policy.async_main_ppo": (None, None)}
CALL = re.compile(r"python3?\s+(?:-m\s+)?(" + "|".join(re.escape(e) for e in ENTRIES) + r")\b")
ASSIGN = re.compile(r"^\s*(?:export\s+)?[A-Za-z_]\w*=")
# `NAME=value command ...`: a variable for one command, not an assignment
PREFIX = re.compile(r"^\s*[A-Za-z_]\w*=[^\s'\"$(]*\s+[A-Za-z./]")
PLACEHOLDER = re.compile(r"^\s*(?:\.\.\.|\[[^\]]*\.\.\.\])\s*\\?\s*$")
# variables a block uses without setting them: the value each gets here, and why
BLOCK_ENV = {
    # the page's cluster layout, which its text asks the user to set
    # the Slurm job's allocation (srun sets it), one node of 8 GPUs as the page's example job asks
    "docs/start/multinode.rst": {"SLURM_GPUS_PER_NODE": "8", "SLURM_NNODES": "2"},
    "docs/advance/fully_async.md": {"NNODES_TRAIN": "1", "NNODES_ROLLOUT": "1", "NGPUS_PER_NODE": "8",
                                    "use_dynamic_bsz": "True"},
}


def md_blocks(text: str) -> list:
    """(first line number, lines) of each fenced code block of a Markdown page."""
    blocks, lines, start, fence = [], text.splitlines(), None, None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if start is None and stripped.startswith(("```", "~~~")):
            start, fence = i + 1, stripped[:3]
        elif start is not None and stripped.startswith(fence):
            blocks.append((start + 1, lines[start:i]))
            start = None
    return blocks


def rst_blocks(text: str) -> list:
    """(first line number, lines) of each literal block of an RST page (`.. code-block::`, `.. code::`,
    `::`), dedented."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not (re.match(r"\s*\.\. code(?:-block)?::", line) or line.rstrip().endswith("::")):
            continue
        indent = len(line) - len(line.lstrip())
        while i < len(lines) and re.match(r"\s+:\w+:", lines[i]):  # the directive's options
            i += 1
        start, body = i, []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        width = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        blocks.append((start + 1, [b[width:] for b in body]))
    return blocks


def normalise(lines: list) -> tuple:
    """(the block as the script a user means: its variable assignments, then each training command
    itself; (the block line of each command, the edits made to it), in order)."""
    lines = [re.sub(r"^(\s*)\$ ", r"\1", line) for line in lines]  # a `$ ` shell prompt
    out, edits, i = [], [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        match = CALL.search(line) or re.search(r"python3?\s+verl\.", line)
        if ASSIGN.match(line) and not match and not line.rstrip().endswith("\\") and not PREFIX.match(line):
            out.append(line.strip())
            continue
        if not match:
            continue
        # the command itself: launcher lines before it (`ray job submit ... --`, `srun`, `docker exec`,
        # `PYTHONUNBUFFERED=1`) are what runs it elsewhere, not what it asks for
        head, command_edits = line[match.start():], []
        if head.strip() != line.strip():
            command_edits.append(f"ran the command without its launcher: {line[:match.start()].strip()}")
        typo = re.sub(r"^(python3?\s+)(verl\.)", r"\1-m \2", head)
        if typo != head:
            command_edits.append(f"ran as -m: {head.strip()}")
        edits.append((i - 1, command_edits))
        command = [typo]
        while command[-1].rstrip().endswith("\\") and i < len(lines):
            line = lines[i]
            i += 1
            if line.lstrip().startswith("#"):
                command_edits.append(f"dropped a comment inside the command: {line.strip()}")
                continue
            if PLACEHOLDER.match(line):
                command_edits.append(f"dropped a placeholder: {line.strip()}")
                if not line.rstrip().endswith("\\"):
                    command[-1] = command[-1].rstrip()[:-1].rstrip()
                continue
            command.append(line)
        fixed = re.sub(r"\s+\.\.\.\s*$", "", command[-1])
        if fixed != command[-1]:
            command_edits.append(f"dropped a trailing placeholder: {command[-1].strip()}")
            command[-1] = fixed
        # `... > $LOG_FILE 2>&1 &`: where the output goes (into a directory nobody made here)
        fixed = re.sub(r"\s+(?:\d?>|&>|\|).*$|\s*&\s*$", "", command[-1])
        if fixed != command[-1]:
            command_edits.append(f"dropped where the output goes: {command[-1][len(fixed):].strip()}")
            command[-1] = fixed
        out += command
    return "\n".join(out) + "\n", edits


def doc_blocks(verl: Path) -> list:
    """(page, line number, block lines) of every docs code block that calls a training entry point."""
    listed = subprocess.run(["git", "-C", str(verl), "ls-tree", "-r", "--name-only", extract.VERL_COMMIT, "docs"],
                            check=True, capture_output=True, text=True).stdout.split()
    found = []
    for page in sorted(p for p in listed if p.endswith((".md", ".rst"))):
        text = extract._show(verl, page)
        for start, lines in (md_blocks if page.endswith(".md") else rst_blocks)(text):
            if any(CALL.search(line) for line in lines):
                found.append((page, start, lines))
    return found


def extract_docs(verl: Path) -> list:
    records = []
    with extract.prepared(verl) as (tree, stubs, tmpdir):
        for page, start, lines in doc_blocks(verl):
            script, edits = normalise(lines)
            _, calls = extract._run_script(tree, stubs, tmpdir, page, script, BLOCK_ENV.get(page, {}), ENTRIES)
            assert len(calls) == len(edits), f"{page}:{start}: {len(edits)} commands, {len(calls)} recorded"
            for call, (offset, call_edits) in zip(calls, edits):
                composes, error = extract.verl_verdict(tree, call["entry"], call["argv"], ENTRIES)
                line = start + offset
                name = page.removeprefix("docs/").rsplit(".", 1)[0] + f":{line}"
                records.append({"name": name, "script": f"{page}:{line}", "env": BLOCK_ENV.get(page, {}),
                                "device": extract._device(page, {}, call["argv"]), "verl_commit": extract.VERL_COMMIT,
                                **call, "edits": call_edits, "verl_composes": composes, "verl_error": error})
    return records


def main(argv: list) -> int:
    if len(argv) != 1:
        print("usage: python tests/py/verl_corpus/docs_extract.py <verl git clone>", file=sys.stderr)
        return 2
    records = extract_docs(Path(argv[0]))
    OUT.write_text(json.dumps(records, indent=1) + "\n")
    print(f"{OUT}: {len(records)} runs ({sum(r['verl_composes'] for r in records)} composed by verl's Hydra) "
          f"from {len({r['script'].split(':')[0] for r in records})} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
