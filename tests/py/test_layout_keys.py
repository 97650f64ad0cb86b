"""One layout object: outside `verl_lite/decisions/layout.py` and `verl_lite/config/`, no module of the
package names a parallel-layout key in code. A key is named in code where it is read or passed: an attribute
read (`megatron.tensor_model_parallel_size`, not a method call such as an engine's `data_parallel_size()`),
a keyword argument (`f(tensor_parallel_size=...)`), or a string that is the key itself or a dotted path ending
in it (`getattr(x, "nnodes")`, `plan["context_parallel_size"]`, `"trainer.nnodes"`). Messages that tell a
user which key to set stay free to name it (f-strings and sentences are not keys)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List

PACKAGE = Path(__file__).resolve().parents[2] / "verl_lite"
LAYOUT_MODULE = PACKAGE / "decisions" / "layout.py"
CONFIG = PACKAGE / "config"


def is_key(name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    return leaf.isidentifier() and (leaf.endswith("_parallel_size") or leaf in ("nnodes", "n_gpus_per_node"))


def named_keys(source: str) -> List[str]:
    tree = ast.parse(source)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    in_fstring = {id(value) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for value in node.values}
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in called and is_key(node.attr):
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.keyword) and node.arg and is_key(node.arg):
            found.append(f"{node.value.lineno}: {node.arg}=")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in in_fstring
              and id(node) not in docstrings and " " not in node.value and is_key(node.value)):
            found.append(f"{node.lineno}: {node.value!r}")
    return sorted(found, key=lambda entry: int(entry.split(":")[0]))


def test_only_the_layout_module_and_config_name_the_parallel_keys():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == LAYOUT_MODULE or CONFIG in path.parents:
            continue
        found = named_keys(path.read_text(encoding="utf-8"))
        offenders += [f"{path.relative_to(PACKAGE.parent)}:{line}" for line in found]
    assert offenders == [], "read the layout from verl_lite/decisions/layout.py instead:\n" + "\n".join(offenders)


def test_the_walk_finds_each_way_of_naming_a_key_and_lets_messages_and_methods_pass():
    source = '''
def f(cfg, engine, plan):
    a = cfg.trainer.nnodes
    b = getattr(cfg, "n_gpus_per_node")
    c = plan["context_parallel_size"]
    d = select(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size")
    llm(tensor_parallel_size=2)
    size = engine.data_parallel_size()
    raise ValueError(f"set {prefix}.tensor_model_parallel_size={a}")
    note = "set trainer.nnodes=2 or lower the sizes"
'''
    assert named_keys(source) == ["3: .nnodes", "4: 'n_gpus_per_node'", "5: 'context_parallel_size'",
                                  "6: 'actor_rollout_ref.rollout.tensor_model_parallel_size'",
                                  "7: tensor_parallel_size="]
