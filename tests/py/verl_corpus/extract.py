"""Extract the command lines of verl's own example runs into tests/py/verl_corpus/runs.json.

Each script is taken from one pinned verl commit (`git archive` of a local verl clone) and run
with `python3`, `python` and `uv` replaced on PATH by a recorder that writes its argv, so every
`$VAR` expands to the script's own default (the environment below gives only the device and the
switches the issue names). `date` prints a fixed stamp, `mkdir` and `hf` do nothing, `HOME` is
/home/user: the recorded lines are reproducible. Nothing is trained and nothing is downloaded.

    python tests/py/verl_corpus/extract.py /path/to/verl/clone   # rewrites runs.json

CI cannot reach GitHub, so the extracted lines are committed; tests/py/test_verl_corpus.py reads them.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

VERL_COMMIT = "1dda039b9c6311889a9c9a26040677e1254814f9"  # "add MindSpeed-Bridge and Megatron backend support for Qwen3.5 GRPO training script (#7335)"
HERE = Path(__file__).resolve().parent
OUT = HERE / "runs.json"
QWEN35 = {
    "35b": "examples/grpo_trainer/run_qwen3_5_35b_megatron.sh",
    "122b_a10b": "examples/grpo_trainer/run_qwen3_5_122b_a10b_megatron.sh",
    "397b": "examples/grpo_trainer/run_qwen3_5_397b_megatron.sh",
}

# name -> (path in verl, environment for the script, how to get the script text)
RUNS = []
for size, path in QWEN35.items():
    RUNS.append((f"qwen3_5_{size}_megatron_gpu", path, {"DEVICE": "gpu"}))
    RUNS.append((f"qwen3_5_{size}_megatron_npu", path, {"DEVICE": "npu"}))
    RUNS.append((f"qwen3_5_{size}_megatron_npu_bridge", path, {"DEVICE": "npu", "USE_MINDSPEED_BRIDGE": "True"}))
RUNS += [
    ("qwen3_8b_grpo_fsdp", "examples/grpo_trainer/run_qwen3_8b_fsdp.sh", {"DEVICE": "gpu"}),
    ("qwen3_8b_grpo_megatron", "examples/grpo_trainer/run_qwen3_8b_megatron.sh", {"DEVICE": "gpu"}),
    ("qwen2_5_32b_grpo_fsdp", "examples/grpo_trainer/run_qwen2_5_32b_fsdp.sh", {"DEVICE": "gpu"}),
    ("quickstart_ppo", "docs/start/quickstart.rst", {}),
    ("qwen3_8b_ppo_fsdp_gpu", "examples/ppo_trainer/run_qwen3_8b_fsdp.sh", {"DEVICE": "gpu"}),
    ("qwen3_8b_ppo_fsdp_npu", "examples/ascend_extras/ppo_trainer/run_qwen3_8b_fsdp.sh", {"DEVICE": "npu"}),
    ("qwen3_5_35b_fully_async_megatron", "verl/experimental/fully_async_policy/shell/grpo_qwen35_35b_megatron_async.sh", {}),
    ("qwen3_06b_grpo_mindspeed_npu_ci", "tests/special_npu/run_qwen3_06b_grpo_mindspeed.sh", {"DEVICE": "npu"}),
]

RECORDER = r"""#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
if "-m" not in args:      # `python3 -c 'import torch_npu'` and helper scripts: not the run
    sys.exit(1)
i = args.index("-m")
with open(os.environ["VERL_CORPUS_RECORD"], "a") as f:
    f.write(json.dumps({"entry": args[i + 1], "argv": args[i + 2:]}) + "\n")
"""
UV = """#!/bin/sh
# `uv run ... python3 -m ...`: drop uv's own options, hand the rest to the recorder
while [ $# -gt 0 ] && [ "$1" != python3 ] && [ "$1" != python ]; do shift; done
shift
exec "$(dirname "$0")/python3" "$@"
"""
DATE = "#!/bin/sh\necho 20260101_0000\n"
NOOP = "#!/bin/sh\nexit 0\n"


def _write_exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _script_text(verl: Path, path: str) -> str:
    text = subprocess.run(["git", "-C", str(verl), "show", f"{VERL_COMMIT}:{path}"], check=True,
                          capture_output=True, text=True).stdout
    if path.endswith(".rst"):  # the quickstart: its first code block that calls main_ppo
        blocks = re.findall(r"\.\. code-block:: bash\n\n((?:[ \t]+.*\n|\n)+)", text)
        block = next(b for b in blocks if "verl.trainer.main_ppo" in b)
        text = "\n".join(line[3:] if line.startswith("   ") else line.strip() for line in block.splitlines())
    return text


def extract(verl: Path) -> list:
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        stubs = tmpdir / "bin"
        stubs.mkdir()
        _write_exe(stubs / "python3", RECORDER.replace("#!/usr/bin/env python3", f"#!{sys.executable}"))
        _write_exe(stubs / "python", RECORDER.replace("#!/usr/bin/env python3", f"#!{sys.executable}"))
        _write_exe(stubs / "uv", UV)
        _write_exe(stubs / "date", DATE)
        _write_exe(stubs / "mkdir", NOOP)
        _write_exe(stubs / "hf", NOOP)  # the 122B script downloads its dataset first
        _write_exe(stubs / "tee", "#!/bin/sh\ncat >/dev/null\n")
        # the scripts run from a checkout of the pinned commit (some read files next to them)
        tree = tmpdir / "verl"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(verl), "archive", VERL_COMMIT, "examples", "tests/special_npu",
                                  "verl/experimental/fully_async_policy/shell"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        for name, path, env in RUNS:
            script = tmpdir / f"{name}.sh"
            script.write_text(_script_text(verl, path))
            record = tmpdir / f"{name}.jsonl"
            run_env = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": "/home/user", "VERL_CORPUS_RECORD": str(record), **env}
            done = subprocess.run(["bash", str(script)], cwd=tree, env=run_env, capture_output=True, text=True)
            lines = record.read_text().splitlines() if record.exists() else []
            if done.returncode != 0 or len(lines) != 1:
                raise RuntimeError(f"{name}: {path} exited {done.returncode} with {len(lines)} recorded runs:\n"
                                   f"{done.stderr[-2000:]}")
            recorded = json.loads(lines[0])
            records.append({"name": name, "script": path, "env": env, "verl_commit": VERL_COMMIT, **recorded})
    return records


def main(argv: list) -> int:
    if len(argv) != 1:
        print("usage: python tests/py/verl_corpus/extract.py <verl git clone>", file=sys.stderr)
        return 2
    records = extract(Path(argv[0]))
    OUT.write_text(json.dumps(records, indent=1) + "\n")
    print(f"{OUT}: {len(records)} runs, {sum(len(r['argv']) for r in records)} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
