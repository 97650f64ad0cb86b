"""docs/verl_keys.md lists every leaf key of verl's trainer configs with what verl_lite does with it
(`verl_names.classify`). These tests hold that list to what the composer really does: each key listed
as refused is refused by name with "not supported", and each key listed as read composes into the
schema (only its value may be refused, never the key)."""

from __future__ import annotations

import sys
from pathlib import Path

from verl_lite.config import verl_names
from verl_lite.config.compose import compose_config
from verl_lite.config.generated import verl_keys

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import gen_config_docs as docs  # noqa: E402
import gen_verl_keys  # noqa: E402


def test_the_generated_list_is_current_and_names_every_leaf_key():
    assert docs.main(["--check"]) == 0, "run python tools/gen_config_docs.py"
    text = docs.VERL_KEYS_PATH.read_text(encoding="utf-8")
    leaves = verl_names.leaf_keys()
    assert len(leaves) > 900 and all(f"| `{k}` |" in text for k in leaves)


def test_the_committed_verl_key_table_is_exactly_what_its_generator_writes():
    """CI cannot reach verl: the committed table is re-emitted through the generator's writer from its
    own parsed content and compared byte for byte (a hand edit, or a writer change without a
    regeneration, fails here). A full regeneration: python tools/gen_verl_keys.py /path/to/verl."""
    committed = Path(verl_keys.TABLE_PATH).read_text(encoding="utf-8")
    assert Path(verl_keys.TABLE_PATH) == gen_verl_keys.OUT
    assert verl_keys.VERL_COMMIT == gen_verl_keys.VERL_COMMIT
    assert gen_verl_keys.render(verl_keys.VERL_COMMIT, verl_keys.KEYS, verl_keys.OPEN, verl_keys.DEFAULTS) == committed


def test_every_key_listed_as_refused_is_refused_by_name():
    refused = [k for k in verl_names.leaf_keys() if verl_names.classify(k)[0] == "refused"]
    # 1, or 2 where 1 is a value verl_lite takes (config/generated/verl_accepted.json)
    value = {k: 2 if verl_names.same_as_verl_lite(k, 1) else 1 for k in refused}
    _, problems = compose_config([f"{k}={value[k]}" for k in refused])
    for key in refused:
        assert [p for p in problems if p.startswith(f"{key}={value[key]}: ") and "not supported" in p], key
    assert len(problems) == len(refused)  # one problem per line


def test_every_key_listed_as_read_reaches_the_schema_under_verls_name():
    lines = []
    for key in verl_names.leaf_keys():
        if verl_names.classify(key)[0] == "refused":
            continue
        value = verl_keys.DEFAULTS.get(key)
        if isinstance(value, (list, dict)) or (isinstance(value, str) and "${" in value):
            continue
        lines.append(f"{key}={'null' if value is None else repr(value) if isinstance(value, str) else value}")
    assert len(lines) > 150
    _, problems = compose_config(lines)
    wrong = [p for p in problems if "unknown key" in p or "no such setting" in p or "not supported by verl_lite" in p
             and p.split("=", 1)[0] not in PLAIN_VALUE_REFUSALS]
    assert not wrong, wrong


# keys read by verl_lite whose verl default value is refused by the composer with the reason
PLAIN_VALUE_REFUSALS = ()


def test_a_key_inside_an_aliased_section_is_refused_under_the_name_typed():
    _, problems = compose_config(["critic.fsdp.dtype=float16", "critic.fsdp.use_orig_params=True"])
    assert problems[0].startswith("critic.fsdp.dtype='float16': not supported by verl_lite on the torch engine")
    assert problems[1].startswith("critic.fsdp.use_orig_params=True: not supported by verl_lite: remove it")
