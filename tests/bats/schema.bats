#!/usr/bin/env bats
# Every override the scripts emit names a key of verl_lite/config/schema/: plain keys are
# dataclass fields, `+` keys are new keys inside an open dict (Hydra refuses `+` on a field).

load test_helper

@test "every override in the golden dry runs names a key that the config schema has" {
  command -v python3 >/dev/null || skip "python3 not found"
  run python3 - "$GOLDEN_DIR" <<'PY'
import dataclasses, pathlib, shlex, sys, typing
sys.path.insert(0, ".")
from verl_lite.config import schema

def check(key, plus):
    node = schema.VerlLiteConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(node)}
        if part not in fields:
            return f"{key}: no field {part!r} in {node.__name__}"
        hints = typing.get_type_hints(node)
        node = hints[part]
        if dataclasses.is_dataclass(node):
            continue
        rest = parts[i + 1:]
        if typing.get_origin(node) in (dict, typing.Dict) or node is dict:
            if not rest:
                return f"{key}: assigns a whole dict"
            return None if plus else f"{key}: new key inside an open dict needs '+'"
        if rest:
            return f"{key}: {part!r} is a leaf, cannot hold {'.'.join(rest)}"
        return f"{key}: '+' on an existing field fails in Hydra" if plus else None
    return f"{key}: names a whole section"

problems, seen = [], 0
for golden in sorted(pathlib.Path(sys.argv[1]).glob("*.txt")):
    words = shlex.split(golden.read_text().replace("\\\n", " "), comments=True)
    start = words.index("verl_lite.main") + 1
    for word in words[start:]:
        key = word.split("=", 1)[0]
        seen += 1
        problem = check(key.lstrip("+"), key.startswith("+"))
        if problem:
            problems.append(f"{golden.name}: {problem}")
print("\n".join(problems) if problems else f"checked {seen} overrides")
PY
  assert_success
  assert_output --regexp '^checked [0-9]+ overrides$'
}
