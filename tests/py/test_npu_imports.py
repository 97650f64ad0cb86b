"""Every import and attribute access the npu engine path makes into megatron, MindSpeed and
Megatron-Bridge exists in each documented Ascend stack, as the facts table read from the pinned
sources records it (verl_lite/config/generated/ascend_facts.json: the names each module defines at
Megatron-LM core_v0.16.1 / core_v0.18.0, MindSpeed core_r0.16.0 / core_r0.18.0, Megatron-Bridge
de93536e / v0.5.0).

What is checked is collected from verl_lite's source by AST, not listed by hand: the modules reachable
from the MindSpeed engines (verl_lite.engine.megatron.mindspeed) through verl_lite's own imports, and in
them every `import x.y`, `from x.y import z`, `importlib.import_module("x.y")` and `alias.attr` (an
alias bound to one of those modules or classes) whose root is megatron, mindspeed, mindspeed_bridge or
fla. A name the table lacks fails the test with its file and line (verl_lite's own Gated DeltaNet layer
included on core_r0.18.0, where it is refused before it runs: every name it uses exists there too).
Packages no reachable source shows (MindSpeed-Bridge)
are accepted only as the table's unverified entries.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

from verl_lite.config.generated import ascend_facts

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "verl_lite"
START = "verl_lite.engine.megatron.mindspeed"
TRACKED = ("megatron", "mindspeed", "mindspeed_bridge", "fla")
# what no source in the table covers, and the unverified entry that says what verl_lite assumes there
UNVERIFIED_ROOTS = {"mindspeed_bridge": "MindSpeed-Bridge"}


@dataclass(frozen=True)
class Use:
    path: str  # repository-relative file
    line: int
    module: str  # the dotted module the name is looked up in
    name: Optional[str]  # None: the module itself must exist
    owner_class: Optional[str] = None  # the name is an attribute of this class of `module`


def _module_file(dotted: str) -> Optional[Path]:
    base = ROOT / dotted.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _resolve_relative(current: str, node: ast.ImportFrom) -> Optional[str]:
    if node.level == 0:
        return node.module
    parts = current.split(".")
    base = parts[: len(parts) - node.level + (1 if _module_file(current) and _module_file(current).name == "__init__.py" else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def reachable_modules() -> List[str]:
    """verl_lite modules reachable from the MindSpeed engines through verl_lite imports (any depth)."""
    seen: Set[str] = set()
    todo = [START]
    while todo:
        name = todo.pop()
        if name in seen or _module_file(name) is None:
            continue
        seen.add(name)
        tree = ast.parse(_module_file(name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = _resolve_relative(name, node)
                if module and module.split(".")[0] == "verl_lite":
                    todo.append(module)
                    todo.extend(f"{module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                todo.extend(a.name for a in node.names if a.name.split(".")[0] == "verl_lite")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value.startswith("verl_lite.") and ":" in node.value):
                todo.append(node.value.partition(":")[0])  # the registry's lazy "module:Class" entries
    return sorted(seen)


def uses_in(module: str) -> List[Use]:
    """The tracked imports and attribute accesses of one verl_lite module."""
    path = _module_file(module)
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    uses: List[Use] = []
    aliases: Dict[str, Tuple[str, Optional[str]]] = {}  # local name -> (module, class or None)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in TRACKED:
                    uses.append(Use(rel, node.lineno, a.name, None))
                    aliases[a.asname or a.name] = (a.name if a.asname else a.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] in TRACKED:
            uses.append(Use(rel, node.lineno, node.module, None))
            for a in node.names:
                uses.append(Use(rel, node.lineno, node.module, a.name))
                # `from x import y`: y is a submodule or a name of x; as an alias both resolve below
                aliases[a.asname or a.name] = (f"{node.module}.{a.name}", a.name if a.name[:1].isupper() else None)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and node.args[0].value.split(".")[0] in TRACKED):
            uses.append(Use(rel, node.lineno, node.args[0].value, None))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            target, cls = aliases[node.value.id]
            if cls:  # an attribute of an imported class: Class.member
                uses.append(Use(rel, node.lineno, target.rsplit(".", 1)[0], node.attr, owner_class=cls))
            else:
                uses.append(Use(rel, node.lineno, target, node.attr))
    return uses


def all_uses() -> List[Use]:
    return [use for module in reachable_modules() for use in uses_in(module)]


def _class_has(modules: Dict[str, dict], module: str, cls: str, member: str, depth: int = 0) -> bool:
    entry = modules.get(module, {}).get("classes", {}).get(cls)
    if entry is None or depth > 5:
        return entry is None  # a class the table does not describe (imported from elsewhere): not checked
    if member in entry["members"]:
        return True
    # inherited: look up bases the same module defines or imports from a module in the table
    for base in entry["bases"]:
        name = base.split(".")[-1]
        for other, info in modules.items():
            if name in info.get("classes", {}) and _class_has(modules, other, name, member, depth + 1):
                return True
    return False


def missing(stack: str, uses: List[Use]) -> List[str]:
    """What `uses` needs that the table does not show at `stack`, as 'file:line: what'."""
    facts = ascend_facts.stack(stack)
    modules = facts["modules"]
    problems = []
    for use in uses:
        root = use.module.split(".")[0]
        if root in UNVERIFIED_ROOTS:
            assert any(u["part"].startswith(UNVERIFIED_ROOTS[root]) for u in ascend_facts.unverified("core_r0.18.0"))
            continue
        where = f"{use.path}:{use.line}"
        if use.module not in modules:
            parent, _, leaf = use.module.rpartition(".")
            if use.name is None and parent in modules and leaf in modules[parent]["names"]:
                continue  # a submodule its parent lists
            if root == "fla":  # the fla names exist on npu only as MindSpeed's (or MegatronAdaptor's) stand-ins
                stand_ins = facts["mindspeed"]["fla_stand_ins"]
                if stack != "core_r0.18.0" and not any(t.startswith(use.module) for t in stand_ins):
                    problems.append(f"{where}: {use.module} (MindSpeed {stack} stands in no such fla module)")
                continue
            problems.append(f"{where}: module {use.module} is not in the table at {stack} (regenerate it with "
                            f"tools/gen_ascend_facts.py if verl_lite newly imports it)")
            continue
        if use.name is None:
            continue
        info = modules[use.module]
        if use.owner_class:
            if not _class_has(modules, use.module, use.owner_class, use.name):
                problems.append(f"{where}: {use.module}.{use.owner_class}.{use.name} does not exist at {stack}")
        elif use.name not in info["names"] and f"{use.module}.{use.name}" not in modules:
            problems.append(f"{where}: {use.module}.{use.name} does not exist at {stack}")
    return sorted(set(problems))


def test_the_collector_finds_the_engine_path_and_its_megatron_and_mindspeed_uses():
    modules = reachable_modules()
    assert {"verl_lite.engine.megatron.engine", "verl_lite.engine.megatron.gdn", "verl_lite.engine.megatron.batch",
            "verl_lite.engine.megatron.bridges.select", "verl_lite.decisions.ascend_stack",
            "verl_lite.engine.megatron.bridges.qwen3_5",  # through the registry's "module:Class" strings
            "verl_lite.engine.megatron.bridges.qwen3_vl"} <= set(modules)
    found = {(u.module, u.name) for u in all_uses()}
    assert ("mindspeed.megatron_adaptor", None) in found  # importlib.import_module("mindspeed.megatron_adaptor")
    assert ("megatron.core.parallel_state", None) in found or ("megatron.core", "parallel_state") in found
    assert len(found) > 100, len(found)


def test_the_check_fails_for_a_name_the_stack_lacks():
    fake = [Use("x.py", 1, "megatron.core.parallel_state", "no_such_function"),
            Use("x.py", 2, "mindspeed.te.pytorch.fp8.reuse", None)]
    assert missing("core_r0.16.0", fake) == [
        "x.py:1: megatron.core.parallel_state.no_such_function does not exist at core_r0.16.0",
        "x.py:2: module mindspeed.te.pytorch.fp8.reuse is not in the table at core_r0.16.0 (regenerate it with "
        "tools/gen_ascend_facts.py if verl_lite newly imports it)"]


@pytest.mark.parametrize("stack", ascend_facts.STACKS)
def test_every_import_and_attribute_of_the_npu_engine_path_exists_in_the_stack(stack):
    assert missing(stack, all_uses()) == []
