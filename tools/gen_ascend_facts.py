"""Write verl_lite/config/generated/ascend_facts.json: what each documented Ascend stack offers the NPU
engines, read from the pinned sources of MindSpeed, Megatron-LM, MindSpeed-MM, Megatron-Bridge and
flash-linear-attention-npu (verl_lite/config/generated/ascend_facts.py loads it).

    python tools/gen_ascend_facts.py --mindspeed DIR --megatron-lm DIR --mindspeed-mm DIR \
        --megatron-bridge DIR --fla-npu DIR      # each DIR: a clone (bare or not) of that repository

Every fact is read with `git show <pinned commit>:<path>` and parsed (Python's ast), and carries the
file and line it was read from. Where a fact is an interpretation (the condition under which
MindSpeed swaps in its own GatedDeltaNet, the tensor layout a kernel takes), the interpretation is
written here once and checked against the source: the generator reads which arguments the source's
condition consults, or which shape its docstring states, and stops with an error when the source no
longer matches, so a new pin cannot silently keep an old fact. What no reachable source shows
(MegatronAdaptor, TransformerEngineNPU and MindSpeed-Bridge for the core_r0.18.0 stack) is listed
under "unverified" with what verl_lite assumes there.

`render` is the writer: tests/py/test_ascend_facts.py re-emits the committed table through it and
compares byte for byte; with the sources named in VERL_LITE_ASCEND_SOURCES (a directory holding the
clones as Ascend+MindSpeed, NVIDIA+Megatron-LM, ...), it also regenerates the table and compares.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

OUT = Path(__file__).resolve().parents[1] / "verl_lite" / "config" / "generated" / "ascend_facts.json"
ENGINE_DIR = Path(__file__).resolve().parents[1] / "verl_lite"

# The pinned commits (docs/ascend.md names them; verl's Qwen3.5 scripts name the releases).
PINS = {
    "mindspeed": {"repo": "Ascend/MindSpeed", "commits": {
        "core_r0.16.0": "e4772499f7eb9fa9a68919dd1eaddef00e915b2d",
        "core_r0.18.0": "4213c91313fe4de6da12794109515f6275572750",
        "master": "028de58ca629d035185b00ff7d1eb7eff4f7fd48"}},
    "megatron_lm": {"repo": "NVIDIA/Megatron-LM", "commits": {
        "core_v0.16.1": "55ac7082517c3878ae653c07c09c534b8aed49f6",
        "core_v0.18.0": "ba7b5ebce12af60627a80985792a1449ce45f46c"}},
    "mindspeed_mm": {"repo": "Ascend/MindSpeed-MM", "commits": {
        "master": "57069cd55a8ab16d5affe379a2e2c5f0a4d962b9"}},
    "megatron_bridge": {"repo": "NVIDIA-NeMo/Megatron-Bridge", "commits": {
        "de93536e": "de93536e9028ecf1e4dc28608dc80f336dcdfe59",
        "v0.5.0": None}},  # resolved from the tag in the clone
    "fla_npu": {"repo": "flashserve/flash-linear-attention-npu", "commits": {
        "17e24fdd": "17e24fdd"}},
}

# The two documented stacks (docs/ascend.md, verl's run_qwen3_5_35b_megatron.sh header).
STACKS = {
    "core_r0.16.0": {
        "title": "Megatron-LM 0.16 + MindSpeed core_r0.16.0 (+ Megatron-Bridge de93536e)",
        "mindspeed": "core_r0.16.0", "megatron_lm": "core_v0.16.1", "megatron_core": "0.16",
        "megatron_bridge": "de93536e",
        "launcher": "USE_MINDSPEED_BRIDGE=False (the default)",
    },
    "core_r0.18.0": {
        "title": ("Megatron-LM core_v0.18.0 + MindSpeed and MegatronAdaptor core_r0.18.0 + TransformerEngineNPU + "
                  "Megatron-Bridge v0.5.0 + MindSpeed-Bridge + flash-linear-attention-npu"),
        "mindspeed": "core_r0.18.0", "megatron_lm": "core_v0.18.0", "megatron_core": "0.18",
        "megatron_bridge": "v0.5.0",
        "launcher": "USE_MINDSPEED_BRIDGE=True",
    },
}

GDN_TARGET = "megatron.core.ssm.gated_delta_net.GatedDeltaNet"
FLA_TARGETS = ("fla.ops.gated_delta_rule.chunk_gated_delta_rule", "fla.modules.l2norm.l2norm",
               "fla.modules.convolution.causal_conv1d")
DPA_FORWARD = "megatron.core.transformer.dot_product_attention.DotProductAttention.forward"

# The GDN swap's conditions as verl_lite evaluates them (decisions/ascend_stack.py), with the MindSpeed
# arguments each reads. The generator checks that the source's condition reads exactly these.
GDN_SWAP_CONDITIONS = {
    "context_parallel": ("context_parallel_size",),
    "eod_packing": ("reset_position_ids", "reset_attention_mask"),
    "2d_tp_ring": ("tp_2d", "tp_y", "context_parallel_algo"),
    "naive_l2norm": ("use_naive_l2norm",),
}

# The GDN kernel entries verl_lite may call or meet on npu, by module and function.
KERNEL_ENTRIES = (
    "mindspeed.core.ssm.ops.flash_gated_delta_rule:flash_gated_delta_rule",
    "mindspeed.core.ssm.chunk_gated_delta_rule:chunk_gated_delta_rule",
    "mindspeed.core.ssm.chunk_gated_delta_rule:torch_chunk_gated_delta_rule",
    "mindspeed.core.ssm.npu_chunk_gated_delta_rule:chunk_gated_delta_rule",
    "mindspeed_mm.fsdp.ops.gdn.flash_gated_delta_rule:flash_gated_delta_rule",
)

# What the core_r0.18.0 stack's unreachable parts are assumed to do (no source could be read).
UNVERIFIED = [
    {"stack": "core_r0.18.0", "part": "MegatronAdaptor (gitcode Ascend/MegatronAdaptor, core_r0.17.0 branch)",
     "assumed": ("`import mindspeed` imports the top-level package `megatron_adaptor`, which creates stand-in fla "
                 "modules (torch-native chunk_gated_delta_rule, l2norm, causal_conv1d), maps torch.cuda to the NPU and "
                 "makes torch.compile / torch.jit.script safe; MindSpeed's GatedDeltaNet subclass then replaces the kernel "
                 "and l2norm (npu_enhancement.py's docstrings say so)")},
    {"stack": "core_r0.18.0", "part": "TransformerEngineNPU (gitcode Ascend/TransformerEngineNPU, main)",
     "assumed": ("installed as the module `transformer_engine`; MindSpeed's PTNorm builds transformer_engine.pytorch.RMSNorm "
                 "for every norm, and context parallelism needs transformer_impl='transformer_engine' "
                 "(TEDotProductAttention takes cp_comm_type)")},
    {"stack": "core_r0.18.0", "part": "MindSpeed-Bridge (master)",
     "assumed": ("`import mindspeed_bridge.models` registers Qwen3.5 dense and MoE bridges "
                 "(Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration) into Megatron-Bridge's AutoBridge; "
                 "its GatedDeltaNet reads use_triton_gdn (Triton fla when fla imports) and use_ascend_gdn (the AscendC "
                 "ops of flash-linear-attention-npu), else a torch rule; both attributes must exist on the config")},
    {"stack": "core_r0.18.0", "part": "FP8 weight reuse",
     "assumed": ("--fp8-reuse-quantized-weight is parsed by MindSpeed but implemented nowhere it ships "
                 "(mindspeed/te is absent); if TransformerEngineNPU implements it, its module path is unknown")},
    {"stack": "core_r0.18.0", "part": "MindSpeed's arguments on Megatron-Bridge's providers",
     "assumed": ("Megatron-Bridge v0.5's apply_overrides_and_finalize refuses an override the provider lacks "
                 "(src/megatron/bridge/models/model_provider.py:126-128), and MindSpeed 4213c913 wraps only "
                 "TransformerConfig.__init__ (npu_enhancement.py:174-190), which a provider dataclass's own generated "
                 "__init__ never calls (core_r0.16.0 also patches TransformerConfig.__init_subclass__, "
                 "megatron_basic.py:55, which gives every later subclass MindSpeed's arguments). verl and verl_lite "
                 "pass override_transformer_config to the provider, with use_flash_attn (which the repatch plan always "
                 "carries) and verl's use_naive_l2norm; assumed: MegatronAdaptor or MindSpeed-Bridge give the providers "
                 "MindSpeed's arguments as core_r0.16.0 does; if not, the build fails with `AttributeError: <Provider> "
                 "has no attribute 'use_flash_attn'`")},
]


class Clone:
    """One repository clone read at pinned commits with `git show` / `git ls-tree`."""

    def __init__(self, path: str):
        self.path = path
        self._cache: Dict[Tuple[str, str], Optional[str]] = {}
        self._trees: Dict[str, Set[str]] = {}

    def _git(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", self.path, *args], capture_output=True, text=True)

    def resolve(self, rev: str) -> str:
        out = self._git("rev-parse", "--verify", f"{rev}^{{commit}}")
        if out.returncode != 0:
            raise SystemExit(f"gen_ascend_facts: {self.path} has no commit {rev!r} (fetch it)")
        return out.stdout.strip()

    def files(self, commit: str) -> Set[str]:
        if commit not in self._trees:
            out = self._git("ls-tree", "-r", "--name-only", commit)
            if out.returncode != 0:
                raise SystemExit(f"gen_ascend_facts: git ls-tree {commit} failed in {self.path}: {out.stderr.strip()}")
            self._trees[commit] = set(out.stdout.split("\n")) - {""}
        return self._trees[commit]

    def text(self, commit: str, path: str) -> Optional[str]:
        key = (commit, path)
        if key not in self._cache:
            if path not in self.files(commit):
                self._cache[key] = None
            else:
                self._cache[key] = self._git("show", f"{commit}:{path}").stdout
        return self._cache[key]

    def need(self, commit: str, path: str) -> str:
        text = self.text(commit, path)
        if text is None:
            raise SystemExit(f"gen_ascend_facts: {path} is missing at {commit[:8]} in {self.path}")
        return text


def module_path(dotted: str, prefix: str = "") -> Tuple[str, str]:
    """The two files a dotted module may live in: [prefix]a/b.py and [prefix]a/b/__init__.py."""
    base = prefix + dotted.replace(".", "/")
    return base + ".py", base + "/__init__.py"


def module_text(clone: Clone, commit: str, dotted: str, prefix: str = "") -> Tuple[Optional[str], Optional[str]]:
    for path in module_path(dotted, prefix):
        text = clone.text(commit, path)
        if text is not None:
            return path, text
    return None, None


def cite(repo: str, commit: str, path: str, line: Optional[int] = None) -> str:
    return f"{repo}@{commit[:8]}:{path}" + (f":{line}" if line else "")


# ------------------------------------------------------------------------------ AST helpers


def top_level_names(tree: ast.Module) -> List[str]:
    """Names a module defines at its top level (functions, classes, assignments, imports), including
    inside top-level if / try blocks (optional imports)."""
    names: Set[str] = set()

    def visit(body: Sequence[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            names.add(sub.id)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name != "*":
                        names.add(alias.asname or alias.name)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(tree.body)
    return sorted(names)


def class_members(tree: ast.Module) -> Dict[str, Dict[str, Any]]:
    """For each top-level class: its bases (as written) and the names defined in its body."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    members.add(item.name)
                elif isinstance(item, ast.Assign):
                    members.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            out[node.name] = {"bases": [ast.unparse(b) for b in node.bases], "members": sorted(members)}
    return out


def imported_names(tree: ast.AST) -> Dict[str, str]:
    """name -> "module:attr" (or "module" for `import x`) of every import in the tree, absolute ones."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}:{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                out[alias.asname or alias.name] = alias.name
    return out


def module_imports(tree: ast.Module) -> List[str]:
    """The absolute modules a module imports at its top level (not inside functions)."""
    mods: List[str] = []

    def visit(body: Sequence[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                mods.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods.append(node.module)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    return mods


def function_node(tree: ast.AST, name: str) -> Optional[ast.FunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def signature(fn: ast.FunctionDef) -> List[str]:
    a = fn.args
    return [x.arg for x in a.posonlyargs + a.args] + ([f"*{a.vararg.arg}"] if a.vararg else []) + \
        [x.arg for x in a.kwonlyargs] + ([f"**{a.kwarg.arg}"] if a.kwarg else [])


def parents(tree: ast.AST) -> Dict[ast.AST, ast.AST]:
    out = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[child] = node
    return out


def register_patch_calls(tree: ast.AST) -> List[Dict[str, Any]]:
    """Every `<x>.register_patch('<target>', <replacement>, ...)` with a literal target: the target, the
    replacement as written, force_patch / create_dummy, the line, the enclosing function, and the
    chain of enclosing if-tests and try blocks up to that function."""
    up = parents(tree)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register_patch" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            continue
        kwargs = {k.arg: ast.unparse(k.value) for k in node.keywords if k.arg}
        tests, in_try, in_except, fn = [], None, None, None
        child, parent = node, up.get(node)
        while parent is not None:
            if isinstance(parent, ast.If):
                test = ast.unparse(parent.test)
                tests.append(test if child in parent.body else f"not ({test})")
            elif isinstance(parent, ast.Try) and child in parent.body and in_try is None:
                in_try = parent
            elif isinstance(parent, ast.ExceptHandler) and in_except is None:
                in_except = up.get(parent)
            elif isinstance(parent, ast.For):
                tests.append(f"for {ast.unparse(parent.target)} in {ast.unparse(parent.iter)}")
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fn = parent
                break
            child, parent = parent, up.get(parent)
        out.append({
            "target": node.args[0].value,
            "replacement": ast.unparse(node.args[1]) if len(node.args) > 1 else kwargs.get("new_func"),
            "force_patch": kwargs.get("force_patch", "False") == "True",
            "create_dummy": kwargs.get("create_dummy", "False") == "True",
            "line": node.lineno, "function": fn, "tests": tests[::-1],
            "try": in_try, "except_of": in_except,
        })
    return out


def args_read(fn: ast.AST, args_name: str = "args") -> Set[str]:
    """The attributes a function reads from its `args`: `getattr(args, 'x', ...)` and `args.x`."""
    names = set()
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id == args_name
                and isinstance(node.args[1], ast.Constant)):
            names.add(node.args[1].value)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == args_name:
            names.add(node.attr)
    return names


def resolve_name(fn: Optional[ast.AST], tree: ast.AST, name: str) -> Optional[str]:
    """Where `name` (a replacement as written) is imported from: "module:attr", looking in the enclosing
    function first, then the module."""
    root = name.split(".")[0]
    for scope in ([fn] if fn is not None else []) + [tree]:
        found = imported_names(scope).get(root)
        if found:
            return found if "." not in name else f"{found}{name[len(root):]}"
    return None


def argparse_options(tree: ast.AST) -> Dict[str, Dict[str, Any]]:
    """`add_argument('--opt', ...)` calls: option -> {choices, default, action, line} (literals only)."""
    out = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("--")):
            entry: Dict[str, Any] = {"line": node.lineno}
            for k in node.keywords:
                if k.arg in ("choices", "default", "action"):
                    try:
                        entry[k.arg] = ast.literal_eval(k.value)
                    except ValueError:
                        entry[k.arg] = ast.unparse(k.value)
            out[node.args[0].value] = entry
    return out


def added_choice(tree: ast.AST, option: str) -> Optional[Dict[str, Any]]:
    """A feature adding a value to another feature's option: `self.add_parser_argument_choices_value(parser,
    '--opt', 'value')` (MindSpeed's feature.py) -> {choices: [value], line}."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_parser_argument_choices_value" and len(node.args) >= 3
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == option
                and isinstance(node.args[2], ast.Constant)):
            return {"choices": [node.args[2].value], "line": node.lineno}
    return None


def dict_literal(tree: ast.AST, name: str) -> Optional[Tuple[Dict[str, Any], int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                return ast.literal_eval(node.value), node.lineno
            except ValueError:
                return None
    return None


# ------------------------------------------------------------------------------ MindSpeed facts


def feature_files(clone: Clone, commit: str) -> List[str]:
    return sorted(p for p in clone.files(commit) if p.startswith("mindspeed/features_manager/") and p.endswith(".py"))


def patches_of(clone: Clone, commit: str, target_prefix: Sequence[str], repo: str) -> List[Dict[str, Any]]:
    """Every register_patch of a target starting with one of `target_prefix`, in mindspeed/features_manager."""
    found = []
    for path in feature_files(clone, commit):
        text = clone.need(commit, path)
        if not any(p in text for p in target_prefix):
            continue
        tree = ast.parse(text)
        for call in register_patch_calls(tree):
            if call["target"].startswith(tuple(target_prefix)):
                call["path"] = path
                call["tree"] = tree
                call["cite"] = cite(repo, commit, path, call["line"])
                found.append(call)
    return found


def fla_stand_ins(clone: Clone, commit: str, repo: str) -> Dict[str, Any]:
    """The fla functions MindSpeed replaces or creates (create_dummy) before megatron imports them, and
    what with: per target, the replacement when `fla_npu` imports and when it does not."""
    out: Dict[str, Any] = {}
    for call in patches_of(clone, commit, ("fla.",), repo):
        replacement = resolve_name(call["function"], call["tree"], call["replacement"])
        guarded = call["try"] is not None and "fla_npu" in ast.unparse(call["try"]).split("except")[0] \
            and any(isinstance(n, ast.Import) and n.names[0].name == "fla_npu" for n in call["try"].body)
        fallback = call["except_of"] is not None and any(
            isinstance(n, ast.Import) and n.names[0].name == "fla_npu" for n in call["except_of"].body)
        when = "with fla_npu" if guarded else ("without fla_npu" if fallback else "always")
        entry = out.setdefault(call["target"], {})
        entry[when] = {"replacement": replacement, "create_dummy": call["create_dummy"], "source": call["cite"]}
    return out


def gdn_swap(clone: Clone, commit: str, repo: str) -> Optional[Dict[str, Any]]:
    calls = patches_of(clone, commit, (GDN_TARGET,), repo)
    calls = [c for c in calls if c["target"] == GDN_TARGET]
    if not calls:
        return None
    if len(calls) > 1:
        raise SystemExit(f"gen_ascend_facts: {len(calls)} GatedDeltaNet swaps at {commit[:8]}: {[c['cite'] for c in calls]}")
    call = calls[0]
    replacement = resolve_name(call["function"], call["tree"], call["replacement"])
    conditions: List[str] = []
    if call["tests"]:
        read = args_read(call["function"])
        expected = {a for names in GDN_SWAP_CONDITIONS.values() for a in names}
        if read != expected:
            raise SystemExit(
                f"gen_ascend_facts: the GatedDeltaNet swap at {call['cite']} now reads {sorted(read)}; verl_lite "
                f"evaluates {sorted(expected)} (GDN_SWAP_CONDITIONS): read the new condition and update both")
        conditions = sorted(GDN_SWAP_CONDITIONS)
    # the swapped-in class: its own class or a subclass of megatron's
    module, _, cls = replacement.partition(":")
    path, text = module_text(clone, commit, module)
    if text is None:
        raise SystemExit(f"gen_ascend_facts: {replacement} (the GDN replacement) has no source at {commit[:8]}")
    tree = ast.parse(text)
    info = class_members(tree)[cls]
    imports = imported_names(tree)
    megatron_base = any(imports.get(b.split(".")[0], "").startswith("megatron.core.ssm.gated_delta_net:GatedDeltaNet")
                        for b in info["bases"])
    kernel = kernel_binding(tree, imports)
    return {
        "target": GDN_TARGET, "replacement": replacement, "force_patch": call["force_patch"],
        "always": not call["tests"], "when_any": conditions, "condition_source": " and ".join(call["tests"]),
        "subclass_of_megatron": megatron_base, "bases": info["bases"],
        "overrides": info["members"], "kernel": kernel,
        "source": call["cite"], "class_source": cite(repo, commit, path),
    }


def kernel_binding(tree: ast.Module, imports: Dict[str, str]) -> Dict[str, Any]:
    """Where the swapped-in GDN class takes its kernel and l2norm: the imports its module binds (by the
    imported function's own name, whatever it is bound as), or a definition in the module."""
    out = {}
    by_attr = {target.partition(":")[2]: target for target in imports.values() if ":" in target}
    defined = top_level_names(tree)
    for name in ("chunk_gated_delta_rule", "torch_chunk_gated_delta_rule", "l2norm", "causal_conv1d", "naive_l2norm"):
        if name in by_attr:
            out[name] = by_attr[name]
        elif name in defined:
            out[name] = "defined in the module"
    text = ast.unparse(tree)
    out["reads_use_naive_l2norm"] = "use_naive_l2norm" in text
    out["deterministic_uses_torch_rule"] = "deterministic_mode" in text and "torch_chunk_gated_delta_rule" in text
    return out


# The q layout a kernel's docstring states: "q (torch.Tensor):\n queries of shape `[B, T, H, K]`" (fla's
# form) or "q: ``[B, T, H, K]``".
# A third form lists "q, k: [B, H, T, K]" (MindSpeed-MM's port).
LAYOUT_RE = re.compile(r"^\s*q\b[^\n]*?(?:\n[^\n]*?)?`*\[(?P<shape>[A-Z], ?[A-Z], ?[A-Z], ?[A-Z])\]`*", re.M)


def kernel_entry(clone: Clone, commit: str, entry: str, repo: str) -> Optional[Dict[str, Any]]:
    module, _, fn_name = entry.partition(":")
    path, text = module_text(clone, commit, module)
    if text is None:
        return None
    tree = ast.parse(text)
    fn = function_node(tree, fn_name)
    if fn is None:
        return None
    doc = ast.get_docstring(fn) or ""
    shape = LAYOUT_RE.search(doc)
    # the entry's checks, with those of the module's helpers it calls (0.18's _validate_inputs)
    helpers = {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    body = "\n".join([ast.unparse(fn)] + [ast.unparse(h) for h in (function_node(tree, n) for n in sorted(helpers)) if h])
    needs = sorted({m.split(".")[0] for m in module_imports(tree)} & {"fla_npu", "torch_npu", "triton"})
    return {
        "module": module, "function": fn_name, "signature": signature(fn),
        "qkv_layout": shape.group("shape").replace(" ", "") if shape else None,
        "rejects_float32": "float32" in body and "does not support" in body,
        "cu_seqlens_needs_batch_1": "batch size is expected to be 1" in body,
        "needs": needs, "source": cite(repo, commit, path, fn.lineno),
    }


def cp_algorithms(clone: Clone, commit: str, repo: str) -> Dict[str, Any]:
    algos: Dict[str, str] = {}
    default = None
    sources = []
    comm = None
    for path in feature_files(clone, commit):
        text = clone.need(commit, path)
        if "--context-parallel-algo" not in text and "_CP_ALGO_TO_COMM_TYPE" not in text:
            continue
        tree = ast.parse(text)
        option = argparse_options(tree).get("--context-parallel-algo") or added_choice(tree, "--context-parallel-algo")
        if option:
            choices = option.get("choices")
            if isinstance(choices, str) and "_CP_ALGO_TO_COMM_TYPE" in choices:
                found = dict_literal(tree, "_CP_ALGO_TO_COMM_TYPE")
                if found:
                    comm, line = found
                    choices = list(comm)
            if isinstance(choices, (list, tuple)):
                for algo in choices:
                    algos.setdefault(algo, cite(repo, commit, path, option["line"]))
            if "default" in option and "context_parallel_feature" in path:
                default = option["default"]
            sources.append(cite(repo, commit, path, option["line"]))
        elif comm is None:
            found = dict_literal(tree, "_CP_ALGO_TO_COMM_TYPE")
            if found:
                comm = found[0]
    # the features that refuse an algorithm outright (0.18 retires the adaptive ones)
    retired = []
    cp_feature = clone.text(commit, "mindspeed/features_manager/context_parallel/context_parallel_feature.py") or ""
    for algo in ("adaptive_cp_algo", "hybrid_adaptive_cp_algo"):
        if algo in cp_feature and algo not in algos and re.search(rf"{algo}.*\n.*raise|raise.*{algo}", cp_feature):
            retired.append(algo)
    kvallgather_te = bool(re.search(r"kvallgather_cp_algo[\s\S]{0,400}transformer_impl\s*==\s*'transformer_engine'",
                                    cp_feature))
    every_cp_needs_te = "UNSUPPORTED_CP" in (clone.text(commit, "mindspeed/core/context_parallel/model_parallel_utils.py") or "")
    # the ring groups: 0.16 wraps initialize_model_parallel when CP > 1 (so the repatch must come first)
    wrap = [c for c in patches_of(clone, commit, ("megatron.core.parallel_state.initialize_model_parallel",), repo)
            if c["target"] == "megatron.core.parallel_state.initialize_model_parallel" and "context_parallel" in c["path"]]
    return {"algorithms": sorted(algos), "default": default, "to_cp_comm_type": comm, "retired": retired,
            "kvallgather_needs_transformer_engine": kvallgather_te,
            "every_cp_needs_transformer_engine": every_cp_needs_te,
            "wraps_initialize_model_parallel": wrap[0]["cite"] if wrap else None,
            "sources": sorted(set(sources))}


def feature_flags(clone: Clone, commit: str) -> Dict[str, str]:
    """Every `--flag` MindSpeed's features register -> the file:line."""
    out = {}
    for path in feature_files(clone, commit):
        text = clone.need(commit, path)
        if "add_argument" not in text:
            continue
        for option, entry in argparse_options(ast.parse(text)).items():
            out.setdefault(option, f"{path}:{entry['line']}")
    return out


def mindspeed_facts(clone: Clone, name: str, commit: str) -> Dict[str, Any]:
    repo = PINS["mindspeed"]["repo"]
    init_path, init_text = "mindspeed/__init__.py", clone.text(commit, "mindspeed/__init__.py") or ""
    init_imports = module_imports(ast.parse(init_text)) if init_text else []
    adaptor = clone.need(commit, "mindspeed/megatron_adaptor.py")
    adaptor_tree = ast.parse(adaptor)
    repatch = function_node(adaptor_tree, "repatch")
    flags = feature_flags(clone, commit)
    reuse_path, reuse = module_text(clone, commit, "mindspeed.te.pytorch.fp8.reuse")
    fa = [c for c in patches_of(clone, commit, (DPA_FORWARD,), repo) if c["target"] == DPA_FORWARD]
    fa_impl = [c for c in fa if "forward_impl" in (c["replacement"] or "")]
    bi_flag = flags.get("--use-flash-attn-npu-batch-invariant")
    bi_text = clone.text(commit, "mindspeed/features_manager/batch_invariant/batch_invariant.py") or ""
    facts = {
        "commit": commit,
        "import": {
            "package_imports": [m for m in init_imports],
            "needs_external_megatron_adaptor": "megatron_adaptor" in init_imports,
            "adaptor_imports_transfer_to_npu": "torch_npu.contrib" in module_imports(adaptor_tree),
            "source": cite(repo, commit, init_path),
        },
        "repatch": {"exists": repatch is not None, "signature": signature(repatch) if repatch else None,
                    "source": cite(repo, commit, "mindspeed/megatron_adaptor.py", repatch.lineno if repatch else None)},
        "fla_stand_ins": fla_stand_ins(clone, commit, repo),
        "gdn_swap": gdn_swap(clone, commit, repo),
        "kernels": {e: k for e in KERNEL_ENTRIES if e.startswith("mindspeed.")
                    for k in [kernel_entry(clone, commit, e, repo)] if k},
        "naive_l2norm_flag": flags.get("--use-naive-l2norm"),
        "context_parallel": cp_algorithms(clone, commit, repo),
        "batch_invariant": None if not bi_flag else {
            "flags": sorted(f for f in ("--use-batch-invariant-ops", "--use-flash-attn-npu-batch-invariant") if f in flags),
            "flash_attention_needs": "flash_attn_npu" if "flash_attn_npu" in bi_text else None,
            "ops_need": "batch_invariant_ops" if "batch_invariant_ops" in bi_text else None,
            "source": f"{repo}@{commit[:8]}:{bi_flag}"},
        "fp8_reuse": {
            "flag": flags.get("--fp8-reuse-quantized-weight"),
            "module": "mindspeed.te.pytorch.fp8.reuse" if reuse is not None else None,
            "names": [n for n in ("clear_weight_quantization_reuse_cache", "set_weight_release_enabled")
                      if reuse is not None and n in top_level_names(ast.parse(reuse))],
            "source": cite(repo, commit, reuse_path) if reuse_path else None},
        "flash_attention": {
            "replaces_dot_product_attention_forward": bool(fa_impl),
            "only_when": fa_impl[0]["tests"] if fa_impl else None,
            "source": fa_impl[0]["cite"] if fa_impl else None},
        "fsdp_package": any(p.startswith("mindspeed/fsdp/") for p in clone.files(commit)),
    }
    return facts


# ------------------------------------------------------------------------------ other repositories


def mindspeed_mm_facts(clone: Clone, commit: str) -> Dict[str, Any]:
    repo = PINS["mindspeed_mm"]["repo"]
    entry = kernel_entry(clone, commit, KERNEL_ENTRIES[-1], repo)
    ops_init = clone.need(commit, "mindspeed_mm/fsdp/ops/__init__.py")
    pkg_init = clone.need(commit, "mindspeed_mm/__init__.py")
    return {
        "commit": commit,
        "kernel": entry,
        "ops_package_imports": module_imports(ast.parse(ops_init)),
        "package_init_imports": sorted(set(re.findall(r"^\s*(?:import|from)\s+([\w\.]+)", pkg_init, re.M))),
        "package_init_guard": "NON_MEGATRON" if "NON_MEGATRON" in pkg_init else None,
        "source": cite(repo, commit, "mindspeed_mm/fsdp/ops/__init__.py"),
    }


def fla_npu_facts(clone: Clone, commit: str) -> Dict[str, Any]:
    repo = PINS["fla_npu"]["repo"]
    setup = clone.need(commit, "setup.py")
    packages = sorted(set(re.findall(r'include=\["(\w+)"', setup)))
    example = kernel_entry(clone, commit, "examples.flash_gated_delta_rule:flash_gated_delta_rule", repo)
    return {"commit": commit, "installs_packages": packages,
            "python_entry_is_an_example": example is not None,
            "example_entry": example, "source": cite(repo, commit, "setup.py")}


# The megatron / Megatron-Bridge / MindSpeed modules whose names the AST check needs: every module the
# NPU engine path of verl_lite imports from those packages (found by scanning verl_lite's source).
TRACKED_ROOTS = ("megatron", "mindspeed", "mindspeed_bridge", "mindspeed_mm", "torch_npu", "fla", "fla_npu")


def engine_modules_used() -> Set[str]:
    """Absolute modules under TRACKED_ROOTS that verl_lite's source imports (at any depth)."""
    mods: Set[str] = set()
    for path in sorted(ENGINE_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] in TRACKED_ROOTS:
                    mods.add(node.module)
                    for alias in node.names:  # `from megatron.core import parallel_state`: a module too
                        mods.add(f"{node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in TRACKED_ROOTS:
                        mods.add(alias.name)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str) and node.args[0].value.split(".")[0] in TRACKED_ROOTS):
                mods.add(node.args[0].value)
    return mods


def module_table(clone: Clone, commit: str, modules: Iterable[str], roots: Tuple[str, ...],
                 prefix: str = "") -> Dict[str, Any]:
    """dotted module -> {names, classes: {cls: {bases, members}}} for those that exist at `commit`
    (a name that is a submodule is listed as a name of its parent too). `prefix`: where the
    package sits in the repository (Megatron-Bridge's src/)."""
    out: Dict[str, Any] = {}
    files = clone.files(commit)
    for dotted in sorted(modules):
        if dotted.split(".")[0] not in roots:
            continue
        path, text = module_text(clone, commit, dotted, prefix)
        if text is None:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError as e:  # a release needing a newer Python than this tool's
            out[dotted] = {"names": [], "classes": {}, "unparsed": f"{type(e).__name__}: {e}"}
            continue
        names = set(top_level_names(tree))
        package_dir = prefix + dotted.replace(".", "/") + "/"
        if path.endswith("__init__.py"):
            names.update(p[len(package_dir):].split("/")[0].removesuffix(".py")
                         for p in files if p.startswith(package_dir) and (p.endswith(".py") or "/" in p[len(package_dir):]))
        out[dotted] = {"names": sorted(n for n in names if n and n != "__init__"), "classes": class_members(tree)}
    return out


# Megatron-Bridge modules whose classes the external-bridge path calls into (AutoBridge, the providers,
# the vision-language model class whose forward convention the engine follows).
MEGATRON_BRIDGE_MODULES = {
    "megatron.bridge",
    "megatron.bridge.models.conversion.auto_bridge",
    "megatron.bridge.models.gpt_provider",
    "megatron.bridge.models.model_provider",
    "megatron.bridge.models.qwen_vl.modelling_qwen3_vl.model",
}


# ------------------------------------------------------------------------------ the table


def build(paths: Dict[str, str]) -> Dict[str, Any]:
    clones = {name: Clone(path) for name, path in paths.items()}
    ms, mlm = clones["mindspeed"], clones["megatron_lm"]
    commits = {repo: {k: (clones[repo].resolve(v or k)) for k, v in PINS[repo]["commits"].items()} for repo in PINS}
    used = engine_modules_used()
    mindspeed = {name: mindspeed_facts(ms, name, c) for name, c in commits["mindspeed"].items()}
    stacks = {}
    for name, stack in STACKS.items():
        ms_commit = commits["mindspeed"][stack["mindspeed"]]
        mlm_commit = commits["megatron_lm"][stack["megatron_lm"]]
        mb_commit = commits["megatron_bridge"][stack["megatron_bridge"]]
        modules = {}
        modules.update(module_table(mlm, mlm_commit, used | {"megatron.core.ssm.gated_delta_net"}, ("megatron",)))
        ms_facts = mindspeed[stack["mindspeed"]]
        swapped_in = {ms_facts["gdn_swap"]["replacement"].partition(":")[0]} if ms_facts["gdn_swap"] else set()
        stand_ins = {v["replacement"].partition(":")[0] for target in ms_facts["fla_stand_ins"].values()
                     for v in target.values()}
        modules.update(module_table(ms, ms_commit, used | set(e.split(":")[0] for e in KERNEL_ENTRIES) | swapped_in
                                    | stand_ins | {"mindspeed.megatron_adaptor", "mindspeed.te.pytorch.fp8.reuse",
                                                   "mindspeed.ops.triton.l2norm", "mindspeed.args_utils",
                                                   "mindspeed.patch_utils"}, ("mindspeed",)))
        modules.update(module_table(clones["megatron_bridge"], mb_commit,
                                    {m for m in used if m.startswith("megatron.bridge")} | MEGATRON_BRIDGE_MODULES,
                                    ("megatron",), prefix="src/"))
        stacks[name] = dict(stack, commits={
            "mindspeed": ms_commit, "megatron_lm": mlm_commit, "megatron_bridge": mb_commit},
            mindspeed=mindspeed[stack["mindspeed"]], modules=modules)
    return {
        "generated_by": "tools/gen_ascend_facts.py",
        "pins": {repo: {"repo": PINS[repo]["repo"], "commits": commits[repo]} for repo in PINS},
        "stacks": stacks,
        "mindspeed_master": mindspeed["master"],
        "mindspeed_mm": mindspeed_mm_facts(clones["mindspeed_mm"], commits["mindspeed_mm"]["master"]),
        "fla_npu": fla_npu_facts(clones["fla_npu"], commits["fla_npu"]["17e24fdd"]),
        "unverified": UNVERIFIED,
    }


def render(table: Dict[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


SOURCE_DIRS = {"mindspeed": "Ascend+MindSpeed", "megatron_lm": "NVIDIA+Megatron-LM",
               "mindspeed_mm": "Ascend+MindSpeed-MM", "megatron_bridge": "NVIDIA-NeMo+Megatron-Bridge",
               "fla_npu": "flashserve+flash-linear-attention-npu"}


def source_paths(root: Optional[str] = None, given: Optional[Dict[str, Optional[str]]] = None) -> Dict[str, str]:
    """Each repository's clone: given on the command line, else `<root>/<owner+name>[/repo]`."""
    out = {}
    for name, folder in SOURCE_DIRS.items():
        path = (given or {}).get(name)
        if not path and root:
            for candidate in (os.path.join(root, folder, "repo"), os.path.join(root, folder)):
                if os.path.isdir(candidate):
                    path = candidate
                    break
        if not path:
            raise SystemExit(f"gen_ascend_facts: no clone of {PINS[name]['repo']} (pass --{name.replace('_', '-')} DIR, "
                             f"or VERL_LITE_ASCEND_SOURCES=DIR holding {folder}/)")
        out[name] = path
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in SOURCE_DIRS:
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, help=f"a clone of {PINS[name]['repo']}")
    parser.add_argument("--sources", default=os.environ.get("VERL_LITE_ASCEND_SOURCES"),
                        help="a directory holding the clones as owner+name/ (default $VERL_LITE_ASCEND_SOURCES)")
    parser.add_argument("--out", default=str(OUT))
    ns = parser.parse_args(argv)
    paths = source_paths(ns.sources, {k: getattr(ns, k) for k in SOURCE_DIRS})
    table = build(paths)
    Path(ns.out).write_text(render(table), encoding="utf-8")
    print(f"wrote {ns.out}: stacks {', '.join(table['stacks'])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
