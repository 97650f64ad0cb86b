"""Extract every training run of verl's repository at one pinned commit into
tests/py/verl_corpus/runs.json, with verl's own verdict on each line set.

Which scripts: every shell script under `examples/` (SFT excepted), `verl/experimental/*/shell/`
and `tests/special_*/`, and the docs' quickstart (docs/start/quickstart.rst's first code block that
calls main_ppo; the Ascend and AMD quickstarts point at scripts already in that list). Each script
runs with its default environment, and once more with `DEVICE=npu` and with `DEVICE=npu
USE_MINDSPEED_BRIDGE=True` where it reads those variables.

How: the pinned commit is unpacked (`git archive`) and each script runs from it with `python3`,
`python` and `uv` replaced on PATH by a recorder that writes the argv of every `python -m <module>`
call, so each `$VAR` expands to the script's own default. `python3 -c ...` probes (`import torch_npu`)
fail as they do on a machine without the package; helper scripts (`python3 foo.py`) do nothing.
`date` prints a fixed stamp; `mkdir`, `hf`, `huggingface-cli`, `wget`, `pip`, `ray stop/start` do
nothing; `nvidia-smi -L` lists 8 GPUs; `HOME` is /home/user: the recorded lines are reproducible.
Nothing is trained and nothing is downloaded. A call of a training entry point (TRAINING_ENTRIES)
is a run; other modules (generation, model merging, SFT) are not.

verl's verdict: each run's line set is composed with Hydra against verl's own YAML at the same
commit (the entry point's config dir and config name, `--config-name`/`--config-path` as given;
hydra-core must be installed) and `verl_composes` records whether it composes, `verl_error` the
first line of Hydra's error when not.

    python tests/py/verl_corpus/extract.py /path/to/verl/clone   # rewrites runs.json

CI cannot reach GitHub, so the extracted lines are committed; tests/py/test_verl_corpus.py reads them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

VERL_COMMIT = "1dda039b9c6311889a9c9a26040677e1254814f9"  # "add MindSpeed-Bridge and Megatron backend support for Qwen3.5 GRPO training script (#7335)"
HERE = Path(__file__).resolve().parent
OUT = HERE / "runs.json"
# verl's training entry points -> (their Hydra config dir in verl's tree, their config name)
TRAINING_ENTRIES = {
    "verl.trainer.main_ppo": ("verl/trainer/config", "ppo_trainer"),
    "verl.experimental.fully_async_policy.fully_async_main": ("verl/experimental/fully_async_policy/config",
                                                              "fully_async_ppo_trainer"),
    "verl.experimental.one_step_off_policy.main_ppo": ("verl/experimental/one_step_off_policy/config",
                                                       "one_step_off_ppo_trainer"),
    # modules that are not in verl's tree at the pinned commit (the DAPO recipe moved out to
    # verl-recipe): verl itself cannot run these lines; kept, with verl's verdict saying so
    "recipe.dapo.main_dapo": (None, None),
    # the ReMax TransferQueue example calls a module that is not in verl's tree at the pinned commit
    "verl.trainer.main_ppo_sync": (None, None),
}
# where the recorded lines say verl's checkout is (the scripts run from a temp dir)
CHECKOUT = "/home/user/verl"
SCRIPT_ROOTS = ("examples/", "verl/experimental/", "tests/special_")
QUICKSTART = "docs/start/quickstart.rst"
NPU_VARIANTS = ({"DEVICE": "npu"}, {"DEVICE": "npu", "USE_MINDSPEED_BRIDGE": "True"})
# variables a script reads without a default of its own (under `set -u` it stops without them): the
# value each gets here, and why
SCRIPT_ENV = {
    # reads INFER_BACKEND in a name two lines before it defaults it to vllm
    "examples/grpo_trainer/run_qwen3_vl_30b_a3b_fsdp.sh": {"INFER_BACKEND": "vllm"},
    # the cluster's HDFS root (model paths below it)
    "examples/grpo_trainer/run_deepseek_v4_veomni.sh": {"HDFS_ROOT": "/home/user/hdfs", "DATA_ROOT": "/home/user/data"},
    "examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh": {"HDFS_ROOT": "/home/user/hdfs",
                                                                "DATA_ROOT": "/home/user/data"},
    # the checkpoint of the variant it trains (kimi_k2_6 by default)
    "examples/grpo_trainer/run_kimi_k2_6_glm5_1_megatron_lite.sh": {"MODEL_PATH": "/home/user/models/Kimi-K2.6"},
    # the data/model root the other verl scripts default to ${HOME}/verl
    "examples/grpo_trainer/run_nemotron_nano_v3_30b_a3b_megatron.sh": {"RAY_DATA_HOME": "/home/user/verl"},
    # the adapter to continue from (`${LORA_ADAPTER_PATH:?must set LORA_ADAPTER_PATH}`)
    "examples/tuning/lora/run_qwen3_8b_from_adapter_fsdp.sh": {"LORA_ADAPTER_PATH": "/home/user/lora_adapter"},
    # the CI switch for a randomly initialised model; False runs the real checkpoint path
    "tests/special_npu/run_qwen3_30b_grpo_mindspeed.sh": {"USE_DUMMY_MODEL": "False"},
    # writes `param_offload=${True}` (a variable named True) for True
    "verl/experimental/fully_async_policy/shell/run_qwen35_35b_a3b_math_dynamic_megatron.sh": {"True": "True"},
}
# scripts under those roots that hold no training run: skipped, and why (any other script that
# records no run stops the extraction)
NOT_RUNS = {
    "examples/grpo_trainer/run_deepseek_v4_megatron_lite.sh": "prints that the example moved out of verl and exits 1",
    "examples/generation/run_deepseek_llm_7b.sh": "generation only (main_generation_server)",
    "tests/special_distributed/run_all.sh": "torchrun unit tests of verl's distributed helpers",
    "tests/special_e2e/profiler_finish_hook_marker.sh": "a profiler hook that verl's e2e test calls, no run",
}
# `ulimit -n` beyond the hard limit stops a `set -e` script on a box that does not allow it
PRELUDE = "ulimit() { :; }\n"

RECORDER = r"""#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
if args == ["-"] or args[-1:] == ["-"]:   # a device probe read from stdin (verl's get_device_name())
    print(os.environ.get("VERL_CORPUS_DEVICE", "cuda"))
    sys.exit(0)
if "-c" in args:          # `python3 -c 'import torch_npu'` and other probes: as on a box without them
    sys.exit(1)
if "-m" not in args:      # helper scripts (data preprocessing, ...): not the run
    sys.exit(0)
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
RAY = """#!/bin/sh
# `ray job submit ... -- python3 -m ...`: hand what follows `--` to the recorder; `ray stop/start`: nothing
while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done
[ $# -gt 0 ] || exit 0
shift
exec "$@"
"""
STUBS = {
    "date": "#!/bin/sh\necho 20260101_0000\n",
    "nvidia-smi": "#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo \"GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)\"; done\n",
    "tee": "#!/bin/sh\ncat >/dev/null\n",
    **{name: "#!/bin/sh\nexit 0\n" for name in ("mkdir", "hf", "huggingface-cli", "wget", "pip", "pip3", "sleep",
                                                 "modelscope", "git", "cp", "ln", "rm", "touch", "chmod")},
}


def _write_exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _show(verl: Path, path: str) -> str:
    return subprocess.run(["git", "-C", str(verl), "show", f"{VERL_COMMIT}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def _quickstart_text(verl: Path) -> str:
    """docs/start/quickstart.rst's first code block that calls main_ppo, as a script."""
    blocks = re.findall(r"\.\. code-block:: bash\n\n((?:[ \t]+.*\n|\n)+)", _show(verl, QUICKSTART))
    block = next(b for b in blocks if "verl.trainer.main_ppo" in b)
    return "\n".join(line[3:] if line.startswith("   ") else line.strip() for line in block.splitlines())


def scripts(verl: Path) -> list:
    """The paths of the shell scripts that may hold training runs, sorted."""
    listed = subprocess.run(["git", "-C", str(verl), "ls-tree", "-r", "--name-only", VERL_COMMIT], check=True,
                            capture_output=True, text=True).stdout.split()
    return sorted(p for p in listed if p.endswith(".sh") and p.startswith(SCRIPT_ROOTS)
                  and not p.startswith("examples/sft/") and "/sft/" not in p
                  and (not p.startswith("verl/experimental/") or "/shell/" in p))


def _variants(text: str) -> list:
    variants = [{}]
    if re.search(r"\$\{?DEVICE\b", text):
        variants.append(NPU_VARIANTS[0])
        if "USE_MINDSPEED_BRIDGE" in text:
            variants.append(NPU_VARIANTS[1])
    return variants


def _name(path: str, env: dict, index: int, count: int) -> str:
    name = path
    for prefix in ("examples/", "verl/experimental/", "tests/"):
        name = name.removeprefix(prefix)
    name = name.removesuffix(".sh").replace("/shell/", "/").replace(".rst", "")
    if env.get("USE_MINDSPEED_BRIDGE"):
        name += "@npu_bridge"
    elif env.get("DEVICE"):
        name += "@" + env["DEVICE"]
    return name + (f"#{index + 1}" if count > 1 else "")


def _device(path: str, env: dict, argv: list) -> str:
    """The device the run targets: its trainer.device line, else the environment's DEVICE=npu, else
    npu for Ascend scripts (by path or name), else verl's default (cuda)."""
    for line in argv:
        key, _, value = line.lstrip("+").partition("=")
        if key == "trainer.device" and value in ("cuda", "npu", "cpu"):
            return value
    if env.get("DEVICE") == "npu" or re.search(r"npu|ascend", path, re.IGNORECASE):
        return "npu"
    return "cuda"


def _run_script(tree: Path, stubs: Path, tmp: Path, path: str, text: str, env: dict,
                entries: dict = TRAINING_ENTRIES) -> tuple:
    """Run the script from its own place in the tree (some call scripts beside them); a docs page's
    code block runs from the checkout's root."""
    script = tree / (path if path.endswith(".sh") else "verl_corpus_block.sh")
    script.write_text(PRELUDE + text)
    record = tmp / "record.jsonl"
    record.unlink(missing_ok=True)
    run_env = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": "/home/user", "VERL_CORPUS_RECORD": str(record),
               "VERL_CORPUS_DEVICE": "npu" if env.get("DEVICE") == "npu" else "cuda", **SCRIPT_ENV.get(path, {}), **env}
    done = subprocess.run(["bash", str(script)], cwd=tree, env=run_env, capture_output=True, text=True, timeout=60)
    # a path the script builds from its own place ($(pwd)/verl/...) names the checkout, not this temp dir
    text = record.read_text().replace(str(tree), CHECKOUT) if record.exists() else ""
    calls = [json.loads(line) for line in text.splitlines()]
    return done, [c for c in calls if c["entry"] in entries]


def verl_verdict(tree: Path, entry: str, argv: list, entries: dict = TRAINING_ENTRIES) -> tuple:
    """(whether verl's Hydra composes the line set, the first line of its error)."""
    config_dir, config_name = entries[entry]
    if config_dir is None:
        return False, f"No module named '{entry.rsplit('.', 1)[0]}' (not in verl at the pinned commit)"
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides, i = [], 0
    while i < len(argv):
        line = argv[i]
        i += 1
        option, eq, value = line.partition("=")
        if option in ("--config-name", "-cn", "--config-path", "-cp"):
            if not eq:
                value, i = argv[i], i + 1
            if option in ("--config-name", "-cn"):
                config_name = value.removesuffix(".yaml")
            else:
                # relative to the directory of the module that declares @hydra.main, as Hydra reads it
                module_dir = Path(*entry.split(".")[:-1])
                config_dir = value if value.startswith("/") else str(module_dir / value)
            continue
        overrides.append(line)
    GlobalHydra.instance().clear()
    cwd = os.getcwd()
    os.chdir(tree)  # verl runs from its checkout (one_step_off's `file://verl/trainer/config` is relative to it)
    try:
        with initialize_config_dir(config_dir=str((tree / config_dir).resolve()), version_base=None):
            compose(config_name=config_name, overrides=overrides)
    except Exception as e:  # Hydra's errors: a key verl lacks, a bad override, a missing config
        return False, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    finally:
        os.chdir(cwd)
        GlobalHydra.instance().clear()
    return True, None


@contextlib.contextmanager
def prepared(verl: Path):
    """(the pinned commit unpacked, the directory of the stubs, a scratch dir) for _run_script."""
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        stubs = tmpdir / "bin"
        stubs.mkdir()
        for name in ("python3", "python"):
            _write_exe(stubs / name, RECORDER.replace("#!/usr/bin/env python3", f"#!{sys.executable}"))
        _write_exe(stubs / "uv", UV)
        _write_exe(stubs / "ray", RAY)
        for name, text in STUBS.items():
            _write_exe(stubs / name, text)
        # the scripts run from a checkout of the pinned commit (some read files next to them)
        tree = tmpdir / "verl"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(verl), "archive", VERL_COMMIT], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        # verl's experimental configs find ppo_trainer through `pkg://verl.trainer.config`, which
        # imports verl (torch and all): point them at the same directory on disk instead
        for yaml in tree.glob("verl/experimental/*/config/*.yaml"):
            yaml.write_text(yaml.read_text().replace("pkg://verl.trainer.config",
                                                     f"file://{(tree / 'verl/trainer/config').resolve()}"))
        yield tree, stubs, tmpdir


def extract(verl: Path) -> tuple:
    records, failures = [], []
    with prepared(verl) as (tree, stubs, tmpdir):
        sources = [(p, (tree / p).read_text()) for p in scripts(verl) if p not in NOT_RUNS]
        sources.append((QUICKSTART, _quickstart_text(verl)))
        for path, text in sources:
            seen = []
            for env in _variants(text):
                done, calls = _run_script(tree, stubs, tmpdir, path, text, env)
                if calls in seen:  # the variable changes nothing this script runs
                    continue
                seen.append(calls)
                if not calls:
                    if not env:
                        failures.append(f"{path}: exited {done.returncode} with no training run: "
                                        f"{done.stderr.strip()[-300:]}")
                    continue
                for index, call in enumerate(calls):
                    composes, error = verl_verdict(tree, call["entry"], call["argv"])
                    records.append({"name": _name(path, env, index, len(calls)), "script": path, "env": env,
                                    "device": _device(path, env, call["argv"]), "verl_commit": VERL_COMMIT,
                                    **call, "verl_composes": composes, "verl_error": error})
    return records, failures


def main(argv: list) -> int:
    if len(argv) != 1:
        print("usage: python tests/py/verl_corpus/extract.py <verl git clone>", file=sys.stderr)
        return 2
    records, failures = extract(Path(argv[0]))
    if failures:
        print("not extracted (add the variable to SCRIPT_ENV, or the script to NOT_RUNS with why):\n"
              + "\n".join(failures), file=sys.stderr)
        return 1
    OUT.write_text(json.dumps(records, indent=1) + "\n")
    composed = sum(r["verl_composes"] for r in records)
    print(f"{OUT}: {len(records)} runs ({composed} composed by verl's Hydra) from "
          f"{len({r['script'] for r in records})} scripts, {sum(len(r['argv']) for r in records)} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
