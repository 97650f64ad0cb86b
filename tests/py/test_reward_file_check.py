"""`check --training` loads the custom reward file in a child process (preflight/reward_file.py): each
way a reward file fails is reported by name before Ray starts; a good file and an `async def` pass; a
file that hangs is stopped at the timeout; the check's own interpreter is not touched by the file."""

from __future__ import annotations

import sys
import textwrap
import types

import pytest

from verl_lite.config import compose_config
from verl_lite.preflight import reward_file
from verl_lite.preflight import run as preflight


def check(tmp_path, source: str, name: str = "compute_score", timeout_s: float = reward_file.TIMEOUT_S):
    path = tmp_path / "reward.py"
    path.write_text(textwrap.dedent(source))
    cfg = types.SimpleNamespace(custom_reward_function=types.SimpleNamespace(path=str(path), name=name))
    return reward_file.reward_file_problems(cfg, timeout_s=timeout_s), path


def test_a_good_file_passes(tmp_path):
    found, _ = check(tmp_path, """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return 1.0
    """)
    assert found == []


def test_an_async_def_and_kwargs_pass(tmp_path):
    found, _ = check(tmp_path, """
        print("the file may print")
        async def compute_score(data_source, solution_str, **kwargs):
            return 1.0
    """)
    assert found == []


def test_a_callable_object_with_the_keywords_passes(tmp_path):
    found, _ = check(tmp_path, """
        class Scorer:
            def __call__(self, data_source, solution_str, ground_truth, extra_info):
                return 0.0
        compute_score = Scorer()
    """)
    assert found == []


def test_a_missing_file_is_reported(tmp_path):
    cfg = types.SimpleNamespace(custom_reward_function=types.SimpleNamespace(path=str(tmp_path / "no.py"),
                                                                            name="compute_score"))
    assert reward_file.reward_file_problems(cfg) == [f"custom_reward_function.path: {tmp_path}/no.py does not exist"]


def test_an_exception_while_importing_names_its_type_message_and_line(tmp_path):
    (found,), path = check(tmp_path, """
        import os
        LIMIT = int(os.environ.get("NOT_SET_ANYWHERE_X", "many"))
        def compute_score(**kwargs):
            return 0.0
    """)
    assert found.startswith(f"custom_reward_function.path: importing {path} raised ValueError: invalid literal")
    assert "at line 3 (`LIMIT = int(os.environ.get(\"NOT_SET_ANYWHERE_X\", \"many\"))`)" in found


def test_a_syntax_error_names_the_line(tmp_path):
    (found,), _ = check(tmp_path, "def compute_score(:\n    pass\n")
    assert "raised SyntaxError" in found and "at line 1 (`def compute_score(:`)" in found


def test_a_missing_module_is_named(tmp_path):
    (found,), _ = check(tmp_path, "import no_such_package_anywhere_xyz\n")
    assert "raised ModuleNotFoundError: No module named 'no_such_package_anywhere_xyz' at line 1" in found
    assert "pip install --no-deps verl" not in found


@pytest.mark.parametrize("line,instead", [
    ("from verl.utils.reward_score import gsm8k", "`from verl_lite.reward import gsm8k`"),
    ("from verl.utils.reward_score import math_reward", "`from verl_lite.reward import math as math_reward`"),
    ("from verl.utils.reward_score import default_compute_score",
     "`from verl_lite.reward import default_compute_score`"),
    ("from verl.utils.reward_score.gsm8k import compute_score as gsm8k_score",
     "`from verl_lite.reward.gsm8k import compute_score as gsm8k_score`"),
    ("import verl.utils.reward_score.math_reward as m", "`import verl_lite.reward.math as m`"),
])
def test_an_import_from_verl_names_the_verl_lite_equivalent(tmp_path, line, instead):
    (found,), _ = check(tmp_path, f"{line}\n\ndef compute_score(**kwargs):\n    return 0.0\n")
    assert "raised ModuleNotFoundError: No module named 'verl' at line 1" in found
    assert f"verl_lite has the same scorer: write {instead}" in found
    assert "pip install --no-deps verl" in found


def test_the_named_equivalent_imports_in_verl_lite(tmp_path):
    (found,), _ = check(tmp_path, "from verl.utils.reward_score import gsm8k, math_reward, default_compute_score\n")
    fix = found.split("write `", 1)[1].split("`", 1)[0]
    fixed, _ = check(tmp_path, fix + "\ndef compute_score(**kw):\n    return gsm8k.compute_score('', '') + "
                     "math_reward.compute_score('', '') + default_compute_score('openai/gsm8k', '', '1')\n")
    assert fixed == []


def test_an_import_from_verl_with_no_equivalent_says_how_to_get_verl(tmp_path):
    (found,), _ = check(tmp_path, "from verl.utils.reward_score.prime_code import compute_score\n")
    assert "verl_lite has no module for verl.utils.reward_score.prime_code.compute_score" in found
    assert "install verl's package without its dependencies (pip install --no-deps verl), which provides it" in found


def test_a_missing_function_lists_the_callables_the_file_defines(tmp_path):
    (found,), _ = check(tmp_path, """
        def score(data_source, solution_str, ground_truth, extra_info): return 1.0
        def helper(): return 2
        VALUE = 3
    """)
    assert found.startswith("custom_reward_function.name='compute_score': custom reward function 'compute_score' "
                            "is not defined in")
    assert "callables the file defines: helper, score" in found


def test_a_name_that_is_not_callable_is_reported(tmp_path):
    (found,), _ = check(tmp_path, "compute_score = 0.5\n")
    assert "custom reward function 'compute_score' is not callable" in found


@pytest.mark.parametrize("signature,says", [
    ("(solution, answer)", "it takes no keyword data_source, solution_str, ground_truth, extra_info; it needs "
                           "solution, answer, which verl does not pass"),
    ("(data_source, solution_str, ground_truth)", "it takes no keyword extra_info"),
    ("(data_source, solution_str, ground_truth, /, extra_info=None)",
     "it takes no keyword data_source, solution_str, ground_truth"),
    ("(data_source, solution_str, ground_truth, extra_info, tokenizer)", "it needs tokenizer, which verl does not pass"),
])
def test_a_signature_that_cannot_take_verls_call_is_reported(tmp_path, signature, says):
    (found,), path = check(tmp_path, f"async def compute_score{signature}:\n    return 1.0\n")
    assert found.startswith(f"custom_reward_function.name='compute_score': async def compute_score{signature} in "
                            f"{path} cannot take verl's call {reward_file.VERL_CALL}")
    assert f"({says})" in found


def test_a_file_that_hangs_is_stopped_at_the_timeout(tmp_path):
    (found,), path = check(tmp_path, "import time\ntime.sleep(60)\n", timeout_s=1)
    assert found.startswith(f"custom_reward_function.path: loading {path} did not finish in 1 s")


def test_a_file_that_ends_the_process_is_reported(tmp_path):
    (found,), _ = check(tmp_path, "import sys\nsys.stderr.write('leaving now\\n')\nimport os\nos._exit(3)\n")
    assert "ended the process (exit code 3)" in found and "leaving now" in found


def test_the_file_runs_in_a_child_process_not_in_the_check(tmp_path):
    found, _ = check(tmp_path, """
        import sys
        sys.modules["verl_lite_reward_check_marker"] = sys
        def compute_score(**kwargs):
            return 0.0
    """)
    assert found == [] and "verl_lite_reward_check_marker" not in sys.modules


def test_check_training_reports_the_reward_file(tmp_path):
    train = tmp_path / "train.parquet"
    train.write_bytes(b"PAR1")
    reward = tmp_path / "reward.py"
    reward.write_text("def score(**kwargs):\n    return 0.0\n")
    cfg, problems = compose_config([f"data.train_files={train}", "data.val_files=null", "trainer.device=cpu",
                                    "algorithm.adv_estimator=grpo", f"trainer.default_local_dir={tmp_path}/ckpt",
                                    f"custom_reward_function.path={reward}"])
    assert problems == []
    found = preflight.collect_problems(cfg, for_training=True)
    assert [p for p in found if p.startswith("custom_reward_function.")] == [
        f"custom_reward_function.name='compute_score': custom reward function 'compute_score' is not defined in "
        f"{reward}; callables the file defines: score; set custom_reward_function.name to one of them"]
    assert not [p for p in preflight.collect_problems(cfg, for_training=False) if "custom_reward" in p]
