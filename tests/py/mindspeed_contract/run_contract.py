"""The contract run: verl_lite's npu engine set-up through the REAL MindSpeed Python source on CPU, with only
the device layer doubled (device_layer/: torch_npu, fla_npu, Triton-Ascend, torchair), and the same
scenarios through the MindSpeed double of the stack (tests/py/mindspeed_double/<stack>), side by side.

    python tests/py/mindspeed_contract/run_contract.py --stack core_r0.16.0 --mindspeed DIR [--json OUT]

DIR: a checkout of Ascend/MindSpeed at the stack's pinned commit (the facts table's), or a clone of the
repository (bare or not), from which that commit is exported to a temporary directory. Each scenario
runs in a fresh process (MindSpeed's patches belong to the process). MindSpeed's own Python
requirements (scipy, einops) must be installed beside the project.

Scenarios (each reports JSON; the table at the end compares the real source's answers with the double's):
- import: `import mindspeed.megatron_adaptor`: what the fla names are (with fla_npu present), how many
  patches were applied;
- import_no_fla_npu: the same with flash-linear-attention-npu absent;
- swap: `repatch({"use_naive_l2norm": True})` (as verl's NPU Qwen3.5 scripts set it): the class megatron's
  GatedDeltaNet name holds; then `repatch({})`: megatron's again;
- engine_dense / engine_moe: the MindSpeed engine (internals on CPU) builds the tiny Qwen3.5 dense / MoE
  with use_naive_l2norm, runs a forward and three training steps (forward, backward, MindSpeed's AdamW);
  the log-probs are compared with transformers' (computed in a process of their own: in a process with
  MindSpeed, transformers' Qwen3.5 takes MindSpeed's kernels behind the fla names, and MindSpeed's patch
  loop, which asks every module for the patched name, imports transformers' lazy modules, torchvision's
  image processors among them, which CPU installs lack);
- engine_default: the default plan (megatron's GatedDeltaNet stays, verl_lite's layer with the "fla" name):
  where the forward's kernel call lands (MindSpeed's AscendC entry, whose kernels the device layer does not
  run: the scenario reports the function and the kernel it stopped at).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
TESTS = HERE.parent
DEVICE_LAYER = HERE / "device_layer"
SCENARIOS = ("import", "import_no_fla_npu", "swap", "engine_dense", "engine_moe", "engine_default")
# core_r0.18.0: MegatronAdaptor is not reachable (its stand-in, the double's, is on sys.path: unverified) and
# TransformerEngineNPU neither, which stops MindSpeed's import (the `import` scenario reports where); the GDN
# and CP features' registration runs on its own (`register`), with megatron-core 0.18 (Python >= 3.12)
STACK_SCENARIOS = {"core_r0.16.0": SCENARIOS, "core_r0.18.0": ("import", "register")}
ADAPTOR_STAND_IN = TESTS / "mindspeed_double" / "core_r0.18.0" / "megatron_adaptor"
MODELS = {"engine_dense": "tiny-qwen3_5", "engine_moe": "tiny-qwen3_5-moe", "engine_default": "tiny-qwen3_5"}
B, T, R = 3, 12, 4


# ------------------------------------------------------------------------------ in the scenario's process


def _load_order(real: bool, hide_fla_npu: bool) -> None:
    """The device layer first on sys.path (real source). Where a triton is installed (torch's compiler and
    megatron-core 0.18's own kernels import it), it stays, made as tolerant as Triton-Ascend
    (`tolerate_triton_ascend_kernels`); without one, the Triton-Ascend double serves MindSpeed's kernels."""
    if hide_fla_npu:
        sys.modules["fla_npu"] = None
    if not real:
        return
    sys.path.insert(0, str(DEVICE_LAYER))
    import _opaque

    _opaque.install()
    import importlib.util

    installed = [p for p in sys.path[1:] if os.path.isdir(os.path.join(p or ".", "triton"))]
    if installed:
        sys.path.insert(0, installed[0])  # the installed triton wins over the double
        import triton

        tolerate_triton_ascend_kernels(triton)
        sys.path.remove(installed[0])
    elif importlib.util.find_spec("triton") is None:
        raise SystemExit("run_contract: no triton found (not even the device layer's)")


def tolerate_triton_ascend_kernels(triton) -> None:
    """MindSpeed's kernels are written for Triton-Ascend, whose autotuner takes key names that are not
    kernel arguments (ops/triton/cumsum.py:17-22 keys on 'BT'); upstream triton refuses them at definition
    ("key contains names that are not kernel arguments"). Keep only the names the kernel has, and give
    triton.language the Triton-Ascend names MindSpeed's kernels bind (insert_slice, extract_slice).
    A launch on CPU still fails in triton's driver: no MindSpeed kernel runs."""
    real = triton.autotune

    def autotune(configs, key, *args, **kwargs):
        def decorate(fn):
            names = set(getattr(fn, "arg_names", ()) or ())
            return real(configs, [k for k in key if k in names] if names else key, *args, **kwargs)(fn)
        return decorate

    triton.autotune = autotune
    for name in ("insert_slice", "extract_slice"):
        if not hasattr(triton.language, name):
            setattr(triton.language, name, None)


def _batch():
    sys.path.insert(0, str(TESTS))
    from megatron_world import padded_batch

    batch = padded_batch(B, T, R, left_pad={0: 5, 2: 2}, ended_early=(1,), seed=0)
    batch["input_ids"][batch["attention_mask"] == 0] = 7  # a padding token whose embedding is not zero
    return batch


def _hf_log_probs(path: str, batch, seed: int = 3):
    """transformers' response log-probs, before MindSpeed stands in the fla names (which its Qwen3.5 takes)."""
    from megatron_world import hf_response_log_probs

    return hf_response_log_probs(path, seed, batch)


def _name(obj: Any) -> Optional[str]:
    return None if obj is None else f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', repr(obj))}"


def _fla_names() -> Dict[str, Optional[str]]:
    import importlib

    out = {}
    for target in ("fla.ops.gated_delta_rule.chunk_gated_delta_rule", "fla.modules.l2norm.l2norm",
                   "fla.modules.convolution.causal_conv1d"):
        module, _, name = target.rpartition(".")
        try:
            out[target] = _name(getattr(importlib.import_module(module), name, None))
        except ImportError:
            out[target] = None
    return out


def _engine(path: str, overrides: Dict[str, Any], stack: str, train: bool) -> Dict[str, Any]:
    import torch

    from megatron_world import megatron_sections, train_steps

    batch = _batch()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("CONTRACT_PORT", "29611"))
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    from verl_lite.engine.megatron import mindspeed as ms
    from verl_lite.registry import ENGINES

    ms.MindSpeedEngineMixin.internals_device = "cpu"
    model, actor = megatron_sections(path, init_seed=3, overrides=overrides)
    actor.optim.lr = 1e-2
    engine = ENGINES.load("language_model", "megatron", "npu")(model, actor, actor.optim, "npu", "actor")
    engine.initialize()
    chunk = getattr(engine.model[0], "module", engine.model[0])
    layers = [layer.self_attention for layer in chunk.decoder.layers
              if type(layer.self_attention).__name__ in ("GatedDeltaLayer", "GatedDeltaNet")]
    from megatron.core.ssm import gated_delta_net as gdn

    rec: Dict[str, Any] = {"stack": engine.stack.name, "gdn_layer": engine.tf_config.gdn_layer,
                           "kernel": engine.tf_config.gdn_kernel, "packed": engine.remove_padding,
                           "layer_classes": sorted({_name(type(m)) for m in layers}),
                           # what verl_lite's layer calls for the "fla" kernel: the names megatron's module bound
                           "megatron_binds": {n: _name(getattr(gdn, n, None)) for n in ("chunk_gated_delta_rule", "l2norm")}}
    try:
        log_probs = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
    except Exception as e:  # the default plan: the kernel behind the fla name is not run by the device layer
        frames = [f"mindspeed/{Path(f.filename).as_posix().split('/mindspeed/', 1)[-1]}:{f.lineno} {f.name}"
                  for f in traceback.extract_tb(e.__traceback__) if "/mindspeed/" in Path(f.filename).as_posix()]
        rec["forward_stopped"] = {"error": f"{type(e).__name__}: {e}", "mindspeed_frames": frames[-4:]}
        return rec
    rec["log_probs"] = log_probs.tolist()
    if train:
        rec["losses"] = train_steps(engine, batch)
    return rec


def _register_018() -> Dict[str, Any]:
    """core_r0.18.0's GDN and CP features registered on MindSpeed's own patch manager (not applied)."""
    import argparse

    from mindspeed.features_manager import MindSpeedFeaturesManager as fm
    from mindspeed.patch_utils import MindSpeedPatchesManager as pm

    features = {type(f).__name__: f for f in fm.FEATURES_LIST}
    features["NpuEnhancementFeature"]._register_gdn_patch(pm)
    patch = pm.patches_info["megatron.core.ssm.gated_delta_net.GatedDeltaNet"]
    cls = patch.patch_func
    rec: Dict[str, Any] = {"gdn_swap": {"replacement": _name(cls), "bases": [_name(b) for b in cls.__bases__]}}
    cp = features["ContextParallelFeature"]
    cp.register_args(argparse.ArgumentParser())
    mapping = {}
    for algo in ("megatron_cp_algo", "ulysses_cp_algo", "kvallgather_cp_algo", "hybrid_cp_algo", "adaptive_cp_algo",
                 "hybrid_adaptive_cp_algo"):
        args = argparse.Namespace(
            context_parallel_size=2, context_parallel_algo=algo, cp_comm_type=None, transformer_impl="transformer_engine",
            seq_length=16, num_attention_heads=4, tensor_model_parallel_size=1, attention_mask_type="causal",
            reset_attention_mask=False, cp_window_size=1, use_cp_send_recv_overlap=False, ulysses_degree_in_cp=2,
            use_fused_ring_attention_update=False, hierarchical_context_parallel_sizes=None)
        try:
            cp.pre_validate_args(args)
            cp.validate_args(args)
            mapping[algo] = args.cp_comm_type[0] if isinstance(args.cp_comm_type, list) else args.cp_comm_type
        except Exception as e:
            mapping[algo] = f"refused ({type(e).__name__})"
    rec["cp_comm_type"] = mapping
    return rec


def scenario(name: str, stack: str) -> Dict[str, Any]:
    import importlib
    import importlib.util

    if stack == "core_r0.18.0":  # `import mindspeed` imports it first (mindspeed/__init__.py:3)
        spec = importlib.util.spec_from_file_location("megatron_adaptor", ADAPTOR_STAND_IN / "__init__.py")
        sys.modules["megatron_adaptor"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["megatron_adaptor"])
    if name == "register":
        return _register_018()
    if name.startswith("reference:"):  # transformers' log-probs, in a process without MindSpeed
        return {"log_probs": _hf_log_probs(name.split(":", 1)[1], _batch()).tolist()}
    if name in ("import", "import_no_fla_npu"):
        try:
            importlib.import_module("mindspeed.megatron_adaptor")
        except Exception as e:  # report the line that stops it
            frames = traceback.extract_tb(e.__traceback__)
            last = [f for f in frames if "/mindspeed/" in f.filename or "/megatron/" in f.filename]
            return {"import_stopped": f"{type(e).__name__}: {e}",
                    "at": [f"{f.filename.split('site-packages/')[-1].split('mindspeed-')[-1]}:{f.lineno}" for f in last[-3:]]}
        from mindspeed.patch_utils import MindSpeedPatchesManager as pm

        return {"fla": _fla_names(), "patches": len(pm.patches_info),
                "applied": sum(1 for p in pm.patches_info.values() if p.is_applied)}
    if name == "swap":
        adaptor = importlib.import_module("mindspeed.megatron_adaptor")
        from megatron.core.ssm import gated_delta_net as gdn

        before = _name(gdn.GatedDeltaNet)
        adaptor.repatch({"use_naive_l2norm": True})
        swapped = _name(gdn.GatedDeltaNet)
        adaptor.repatch({})  # repatch's keys persist: the swap stays
        kept = _name(gdn.GatedDeltaNet)
        adaptor.repatch({"use_naive_l2norm": False})
        return {"before": before, "use_naive_l2norm": swapped, "then_repatch_empty_dict": kept,
                "then_use_naive_l2norm_false": _name(gdn.GatedDeltaNet)}
    if name == "engine_dense":
        return _engine("tiny-qwen3_5", {"use_naive_l2norm": True}, stack, train=True)
    if name == "engine_moe":
        return _engine("tiny-qwen3_5-moe", {"use_naive_l2norm": True}, stack, train=True)
    if name == "engine_default":
        return _engine("tiny-qwen3_5", {}, stack, train=False)
    raise ValueError(f"unknown scenario {name!r}; one of {', '.join(SCENARIOS)}")


# ------------------------------------------------------------------------------ the driver


def _source_dir(arg: str, stack: str, tmp: str) -> str:
    """A directory holding `mindspeed/` at the stack's pinned commit."""
    from verl_lite.config.generated import ascend_facts

    commit = ascend_facts.stack(stack)["commits"]["mindspeed"]
    path = Path(arg)
    if (path / "mindspeed" / "megatron_adaptor.py").is_file():
        head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.returncode == 0 and head.stdout.strip() != commit:
            raise SystemExit(f"run_contract: {path} is at {head.stdout.strip()[:8]}, not {stack}'s {commit[:8]}: check "
                             f"out {commit}, or pass the repository and let the script export the commit")
        return str(path)
    out = Path(tmp) / f"mindspeed-{commit[:8]}"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(path), "archive", commit], capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"run_contract: {path} is neither a MindSpeed checkout nor a clone holding {commit[:8]} "
                         f"({archive.stderr.decode().strip()})")
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return str(out)


def _run(name: str, stack: str, root: str, real: bool, port: int) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, str(REPO), str(TESTS)]), CONTRACT_PORT=str(port),
               TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    args = [sys.executable, __file__, "--scenario", name, "--stack", stack] + (["--real"] if real else [])
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600, cwd=str(REPO))
    lines = [line for line in done.stdout.splitlines() if line.startswith("CONTRACT ")]
    if not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-12:]
        return {"failed": "\n".join(tail)}
    return json.loads(lines[-1][len("CONTRACT "):])


def _diffs(real: Dict[str, Any], double: Dict[str, Any], reference: List[List[float]]) -> None:
    """Max |log-prob difference| at the response tokens: each run against transformers', real against double."""
    import torch

    mask = _batch()["response_mask"].bool()
    ref = torch.tensor(reference)
    for rec in (real, double):
        if "log_probs" in rec:
            rec["log_prob_diff_vs_transformers"] = (torch.tensor(rec["log_probs"]) - ref)[mask].abs().max().item()
    if "log_probs" in real and "log_probs" in double:
        real["log_prob_diff_real_vs_double"] = double["log_prob_diff_real_vs_double"] = (
            torch.tensor(real["log_probs"]) - torch.tensor(double["log_probs"]))[mask].abs().max().item()


def compare(real: Dict[str, Any], double: Dict[str, Any]) -> List[str]:
    """Rows of the report: each scenario's answers from the real source and from the double."""
    rows = []
    for name in SCENARIOS:
        r, d = real.get(name, {}), double.get(name, {})
        keys = [k for k in sorted(set(r) | set(d)) if k not in ("log_probs",)]
        for key in keys:
            same = "same" if r.get(key) == d.get(key) else "DIFFERS"
            if key in ("log_prob_diff_vs_transformers", "losses", "patches", "applied", "log_prob_diff_real_vs_double"):
                same = "-"  # numbers of each, not a contract
            if key == "forward_stopped":
                same = "-"  # the real kernels are Triton / AscendC, which the device layer does not run
            rows.append(f"{name:16} {key:30} {same:8} real={json.dumps(r.get(key))[:160]} "
                        f"double={json.dumps(d.get(key))[:160]}")
    return rows


def compare_with_facts(real: Dict[str, Any], stack: str) -> List[str]:
    """core_r0.18.0: the registration against what the facts table (which the double reads) says."""
    from verl_lite.config.generated import ascend_facts

    facts = ascend_facts.stack(stack)["mindspeed"]
    rows = []
    reg = real.get("register", {})
    swap = reg.get("gdn_swap", {})
    expected = facts["gdn_swap"]["replacement"]
    rows.append(f"register gdn_swap.replacement {'same' if swap.get('replacement') == expected else 'DIFFERS'} "
                f"real={swap.get('replacement')} facts={expected}")
    subclass = any(b == "megatron.core.ssm.gated_delta_net:GatedDeltaNet" for b in swap.get("bases", []))
    rows.append(f"register gdn_swap.subclass_of_megatron {'same' if subclass == facts['gdn_swap']['subclass_of_megatron'] else 'DIFFERS'} "
                f"real={subclass} facts={facts['gdn_swap']['subclass_of_megatron']}")
    comm = facts["context_parallel"]["to_cp_comm_type"]
    for algo, got in sorted(reg.get("cp_comm_type", {}).items()):
        want = comm.get(algo) or ("refused" if algo in facts["context_parallel"]["retired"] else None)
        ok = got == want or (str(got).startswith("refused") and want == "refused")
        rows.append(f"register cp_comm_type[{algo}] {'same' if ok else 'DIFFERS'} real={got} facts={want}")
    imported = real.get("import", {})
    rows.append(f"import stopped at {imported.get('at')}: {imported.get('import_stopped')}")
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="core_r0.16.0")
    parser.add_argument("--mindspeed", default=os.environ.get("VERL_LITE_MINDSPEED_SRC"))
    parser.add_argument("--json")
    parser.add_argument("--scenario")
    parser.add_argument("--real", action="store_true")
    parser.add_argument("--only", nargs="*")
    ns = parser.parse_args(argv)
    if ns.scenario:  # inside the scenario's process
        _load_order(ns.real, hide_fla_npu=ns.scenario == "import_no_fla_npu")
        try:
            rec = scenario(ns.scenario, ns.stack)
        except Exception:
            rec = {"failed": traceback.format_exc().strip().splitlines()[-6:]}
        print("CONTRACT " + json.dumps(rec), flush=True)
        return 0
    if not ns.mindspeed:
        raise SystemExit("run_contract: name MindSpeed's source with --mindspeed DIR or VERL_LITE_MINDSPEED_SRC")
    sys.path.insert(0, str(REPO))
    results: Dict[str, Dict[str, Any]] = {"real": {}, "double": {}}
    with tempfile.TemporaryDirectory() as tmp:
        source = _source_dir(ns.mindspeed, ns.stack, tmp)
        double = str(TESTS / "mindspeed_double" / ns.stack)
        compare_double = ns.stack == "core_r0.16.0"  # core_r0.18.0 is compared with the facts table
        references = {}
        for i, name in enumerate(ns.only or STACK_SCENARIOS[ns.stack]):
            results["real"][name] = _run(name, ns.stack, source, True, 29611 + 2 * i)
            if compare_double:
                results["double"][name] = _run(name, ns.stack, double, False, 29612 + 2 * i)
            path = MODELS.get(name)
            if path and path not in references:
                references[path] = _run(f"reference:{path}", ns.stack, str(REPO), False, 29699)["log_probs"]
            if path:
                _diffs(results["real"][name], results["double"][name], references[path])
            print(f"{name}: real {'failed' if 'failed' in results['real'][name] else 'ran'}", file=sys.stderr)
    rows = compare(results["real"], results["double"]) if ns.stack == "core_r0.16.0" else \
        compare_with_facts(results["real"], ns.stack)
    print("\n".join(rows))
    if ns.json:
        Path(ns.json).write_text(json.dumps(dict(results, stack=ns.stack, rows=rows), indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
