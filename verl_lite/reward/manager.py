"""Score responses: route each sample to its rule reward and turn failures into errors that point at
the function and the sample.

`default_compute_score` dispatches on the parquet row's `data_source` as verl's does (GSM8K, MATH,
DAPO, PRIME/NuminaMath, Geometry3K and Search-R1 datasets, plus verl_lite's synthetic tasks; not
the code datasets, whose scorers run the generated code); `has_default_scorer` says whether it can
score a data_source, so data can be checked before training, and `no_default_scorer_reason` says
why not. `RewardManager` applies a score function (the default or
`custom_reward_function.path/name`) to a batch and checks what it returns. Imports no torch: the
driver scores without loading models.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import math
import numbers
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from verl_lite.reward import geo3k, gsm8k, math_dapo, prime_math, qa_em
from verl_lite.reward import math as math_reward
from verl_lite.reward.custom import load_custom_reward_fn

# The data_source names the default reward scores, as verl's default_compute_score routes them
# ("gsm8k" alone is verl_lite's own short name), and the prefixes: verl's "aime*" (DAPO) and the
# synthetic tasks.
GSM8K_SOURCES = ("openai/gsm8k", "gsm8k")
MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")
DAPO_SOURCES = ("math_dapo", "math", "math_dapo_reasoning")
DAPO_PREFIX = "aime"
PRIME_MATH_SOURCES = ("numina_aops_forum", "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc",
                      "numina_cn_k12", "numina_olympiads")
GEO3K_SOURCES = ("hiyouga/geometry3k",)
SEARCH_R1_SOURCES = ("searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                     "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle")
# verl scores these by running the generated code (sandbox_fusion or prime_code); verl_lite does not.
CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")
SYNTHETIC_PREFIX = "verl_lite/"
_RULE_REWARDS: Dict[str, Callable[[str, Any], Any]] = {
    **dict.fromkeys(GSM8K_SOURCES, gsm8k.compute_score),
    **dict.fromkeys(MATH_SOURCES, math_reward.compute_score),
    **dict.fromkeys(DAPO_SOURCES, math_dapo.compute_score),
    **dict.fromkeys(PRIME_MATH_SOURCES, prime_math.compute_score),
    **dict.fromkeys(GEO3K_SOURCES, geo3k.compute_score),
    **dict.fromkeys(SEARCH_R1_SOURCES, qa_em.compute_score),
}
SUPPORTED_SOURCES = (", ".join(_RULE_REWARDS) + f", {DAPO_PREFIX}* (DAPO), {SYNTHETIC_PREFIX}* (synthetic tasks)")
CODE_SCORER_HINT = (
    "verl scores it by running the generated code (sandbox_fusion, or prime_code in-process); verl_lite "
    "does not execute model output. Plug in a sandboxed scorer: set custom_reward_function.path to a "
    "Python file and custom_reward_function.name to its function "
    "compute_score(data_source, solution_str, ground_truth, extra_info) that runs the code in your sandbox "
    "and returns a number (or a dict with a 'score')"
)
_PREVIEW_CHARS = 80


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something that is not a finite number."""


def _rule_for(data_source: Any) -> Optional[Callable[[str, Any], Any]]:
    if not isinstance(data_source, str):
        return None
    rule = _RULE_REWARDS.get(data_source)
    if rule is None and data_source.startswith(DAPO_PREFIX):
        return math_dapo.compute_score
    return rule


def has_default_scorer(data_source: Any) -> bool:
    """Whether `default_compute_score` can score rows of this `data_source` (see SUPPORTED_SOURCES;
    False for the code datasets, see CODE_SOURCES)."""
    return _rule_for(data_source) is not None or (isinstance(data_source, str)
                                                  and data_source.startswith(SYNTHETIC_PREFIX))


def no_default_scorer_reason(data_source: Any) -> str:
    """Why `default_compute_score` cannot score `data_source`, and what to do instead."""
    if data_source in CODE_SOURCES:
        return f"data_source {data_source!r} is a code dataset: {CODE_SCORER_HINT}"
    return (f"no rule reward for data_source {data_source!r}; supported: {SUPPORTED_SOURCES}. "
            "For other data, write a reward function and set custom_reward_function.path (and .name)")


def default_compute_score(data_source: str, solution_str: str, ground_truth: Any,
                          extra_info: Any = None) -> Union[float, Dict[str, Any]]:
    r"""The rule reward for `data_source`, routed as verl's `default_compute_score`: GSM8K
    (`#### answer`), MATH (last `\boxed{answer}`), DAPO (`Answer:` line, a dict with score 1.0 or
    -1.0, acc and pred), PRIME's NuminaMath grader, Geometry3K (mathruler, plus 0.1 for the format),
    Search-R1 (exact match of `<answer>`), or a verl_lite synthetic task. As verl, a dict is
    returned as it is and any other result as a float. The code datasets (CODE_SOURCES) raise
    NotImplementedError saying how to plug in a sandboxed scorer."""
    rule = _rule_for(data_source)
    if rule is not None:
        result = rule(solution_str, ground_truth)
        return result if isinstance(result, dict) else float(result)
    if has_default_scorer(data_source):
        # lazy: the data package is not needed to score GSM8K or MATH
        from verl_lite.data import synthetic, synthetic_images

        task = synthetic_images if data_source.startswith(synthetic_images.DATA_SOURCE_PREFIX) else synthetic
        return task.compute_score(data_source, solution_str, ground_truth, extra_info)
    raise NotImplementedError(no_default_scorer_reason(data_source))


def describe_fn(fn: Callable) -> str:
    """`module:name` for an importable function, `file:name` for one loaded from a file."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None)
    if module in sys.modules:
        return f"{module}:{name}"
    try:
        source = inspect.getsourcefile(target if inspect.isroutine(target) else type(target))
    except TypeError:
        source = None
    return f"{source or module}:{name}"


def _preview(text: Any) -> str:
    text = str(text)
    return repr(text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "...")


# How many awaited scores of one batch run at once (an `async def compute_score`, e.g. one that asks
# a sandbox or a judge service): enough to overlap their waits, few enough not to flood the service.
MAX_CONCURRENT_SCORES = 64


class RewardManager:
    """Scores a batch of responses, one call of `score_fn` per sample (verl's naive reward manager).

    `score_fn(data_source=, solution_str=, ground_truth=, extra_info=)` returns a number, or a
    dict whose "score" key is the number (other keys are extra information, as in verl). An
    `async def` score function (verl awaits those) is awaited, the samples of a batch concurrently,
    at most MAX_CONCURRENT_SCORES at a time.
    """

    def __init__(self, score_fn: Optional[Callable] = None):
        self.score_fn = score_fn if score_fn is not None else default_compute_score
        self.name = describe_fn(self.score_fn)

    @classmethod
    def from_custom(cls, path: Optional[str] = None, name: str = "compute_score") -> "RewardManager":
        """The manager for `custom_reward_function.path/name`; no path means the default rule rewards."""
        if not path:
            return cls()
        return cls(load_custom_reward_fn(path, name))

    def __call__(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Optional[Sequence[Any]] = None,
    ) -> List[float]:
        return [self._check(where, result) for where, result in self._results(data_sources, solution_strs,
                                                                                ground_truths, extra_infos)]

    def score(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Optional[Sequence[Any]] = None,
        response_lengths: Optional[Sequence[int]] = None,
    ) -> Tuple[List[float], Dict[str, List[Any]]]:
        """(one reward per response, verl's reward_extra_info: per-response lists of the other keys of
        the dicts the score function returned). `response_lengths` (tokens, EOS included) are what
        verl's DAPO manager penalises; the naive manager does not use them."""
        return self._collect(self._results(data_sources, solution_strs, ground_truths, extra_infos), response_lengths)

    def _collect(self, pairs: List[Tuple[str, Any]],
                 response_lengths: Optional[Sequence[int]]) -> Tuple[List[float], Dict[str, List[Any]]]:
        """The checked scores and the extra info of the (where, raw result) pairs."""
        scores: List[float] = []
        extra: Dict[str, List[Any]] = {}
        for i, (where, result) in enumerate(pairs):
            scores.append(self._check(where, result))
            if isinstance(result, dict):
                for key, value in result.items():
                    extra.setdefault(key, [None] * i).append(value)
            for values in extra.values():  # keys a sample's dict lacks stay aligned: None for it
                if len(values) < i + 1:
                    values.append(None)
        return scores, extra

    def _results(self, data_sources, solution_strs, ground_truths, extra_infos) -> List[Tuple[str, Any]]:
        """(where, raw result) per sample: what the score function returned, awaited where it is async."""
        n = len(solution_strs)
        if extra_infos is None:
            extra_infos = [None] * n
        lengths = {"data_sources": len(data_sources), "solution_strs": n, "ground_truths": len(ground_truths),
                   "extra_infos": len(extra_infos)}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"reward inputs differ in length: {lengths}; give one entry per response")
        wheres = [f"reward function {self.name} on sample {i} "
                  f"(data_source={data_sources[i]!r}, response={_preview(solution_strs[i])})" for i in range(n)]
        results = []
        for i in range(n):
            try:
                results.append(self.score_fn(data_source=data_sources[i], solution_str=solution_strs[i],
                                             ground_truth=ground_truths[i], extra_info=extra_infos[i]))
            except Exception as e:
                _close_awaitables(results)
                raise RewardFunctionError(f"{wheres[i]} raised {type(e).__name__}: {e}") from e
        if any(inspect.isawaitable(r) for r in results):
            results = _await_all(results, wheres)
        return list(zip(wheres, results))

    @staticmethod
    def _check(where: str, result: Any) -> float:
        if isinstance(result, dict):
            if "score" not in result:
                raise RewardFunctionError(f"{where} returned a dict without a 'score' key (keys: {sorted(result)})")
            result = result["score"]
        if isinstance(result, numbers.Real):
            value = float(result)
        elif hasattr(result, "__float__") and not isinstance(result, (str, bytes)):
            try:  # a 0-d tensor or array
                value = float(result)
            except (TypeError, ValueError):
                raise RewardFunctionError(f"{where} returned {type(result).__name__}, not a single number") from None
        else:
            raise RewardFunctionError(f"{where} returned {type(result).__name__} ({result!r:.40}), expected a number")
        if not math.isfinite(value):
            raise RewardFunctionError(f"{where} returned {value}; rewards must be finite (it would poison advantages)")
        return value


def _close_awaitables(results: List[Any]) -> None:
    for result in results:  # not awaited: close them, so no "never awaited" warning follows the error
        if inspect.iscoroutine(result):
            result.close()


def _await_all(results: List[Any], wheres: List[str]) -> List[Any]:
    """Await the awaitable results (plain values pass through), at most MAX_CONCURRENT_SCORES at once;
    the first failure is raised naming its sample."""
    async def gather() -> List[Any]:
        limit = asyncio.Semaphore(MAX_CONCURRENT_SCORES)

        async def one(i: int, result: Any) -> Any:
            if not inspect.isawaitable(result):
                return result
            async with limit:
                try:
                    return await result
                except Exception as e:
                    raise RewardFunctionError(f"{wheres[i]} raised {type(e).__name__}: {e}") from e

        return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(results))))

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop in this thread: the usual case (driver, Ray workers)
        return asyncio.run(gather())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:  # called from inside a running loop
        return pool.submit(asyncio.run, gather()).result()


def score_responses(tokenizer: Any, reward_fn: Any, batch: Dict[str, Any]):
    """Decode each response (up to EOS), score it, and put the score on its last token (the driver
    and the fully-async rollout workers score the same way).

    Returns (token-level scores (B, R), decoded texts, reward_extra_info: per-response lists by key,
    see RewardManager.score)."""
    import torch

    mask = batch["response_mask"]
    texts = [tokenizer.decode([t for t, keep in zip(r, m) if keep], skip_special_tokens=True)
             for r, m in zip(batch["responses"].tolist(), mask.tolist())]
    lengths = [int(n) for n in mask.sum(-1).tolist()]
    scores, extra = reward_fn.score(batch["data_source"], texts, batch["ground_truth"], batch["extra_info"], lengths)
    token_scores = torch.zeros(mask.shape, dtype=torch.float32)
    last = (mask.sum(-1) - 1).clamp(min=0)
    token_scores[torch.arange(mask.shape[0]), last] = torch.tensor(scores, dtype=torch.float32)
    return token_scores, texts, extra
