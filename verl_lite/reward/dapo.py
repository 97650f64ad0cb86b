"""DAPO's reward manager (verl's `reward_manager=dapo`): the rule reward plus DAPO's overlong reward
shaping, a linear penalty on responses that run into the last `len` tokens before `max_resp_len`.

    penalty(L) = min(-(L - (max_resp_len - len)) / len * penalty_factor, 0)

L is the response's length in tokens (EOS included, as verl counts it from the attention mask): 0 up
to max_resp_len - len, then falling linearly to -penalty_factor at L = max_resp_len. As verl's
DAPORewardManager it records `acc` (= the score) for a score function that returns a number, every
key of a returned dict, and with overlong_buffer_cfg.log the per-response `overlong_reward` and
`overlong` (penalised or not). Settings: reward_model.reward_kwargs (verl: reward.reward_kwargs); what
verl's manager asserts of them (`settings.overlong_problems`) the preflight lists and the manager raises when
built.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from verl_lite.reward.manager import RewardManager
from verl_lite.reward.settings import overlong_problems


def overlong_penalty(length: int, max_resp_len: int, buffer_len: int, penalty_factor: float) -> float:
    """DAPO's overlong reward of a response of `length` tokens (<= 0; 0 before the buffer)."""
    expected_len = max_resp_len - buffer_len
    exceed_len = length - expected_len
    return min(-exceed_len / buffer_len * penalty_factor, 0)


def _record_acc(pairs: List[Tuple[str, Any]], scores: List[float], extra: Dict[str, List[Any]]) -> None:
    """verl's `acc` = the score, for each result that is a number (not a dict)."""
    if any(not isinstance(result, dict) for _, result in pairs):
        acc = extra.setdefault("acc", [None] * len(scores))
        for i, (_, result) in enumerate(pairs):
            if not isinstance(result, dict):
                acc[i] = scores[i]


class GDPORewardManager(RewardManager):
    """verl's GDPORewardManager (reward_manager=gdpo): the naive manager's scores, `acc` recorded for
    numeric results, and every key of a returned dict kept per response: the reward components
    algorithm.adv_estimator=gdpo reads by algorithm.gdpo_reward_keys. As verl's, it puts
    trainer.experiment_name into each sample's extra_info (verl's rlla.py score picks the chat format
    by it)."""

    def __init__(self, score_fn: Optional[Callable] = None, experiment_name: str = "default"):
        super().__init__(score_fn)
        self.experiment_name = experiment_name

    def _results(self, data_sources, solution_strs, ground_truths, extra_infos) -> List[Tuple[str, Any]]:
        infos = [None] * len(solution_strs) if extra_infos is None else extra_infos
        infos = [dict(info or {}, experiment_name=self.experiment_name) for info in infos]
        return super()._results(data_sources, solution_strs, ground_truths, infos)

    def _collect(self, pairs: List[Tuple[str, Any]],
                 response_lengths: Optional[Sequence[int]]) -> Tuple[List[float], Dict[str, List[Any]]]:
        scores, extra = super()._collect(pairs, response_lengths)
        _record_acc(pairs, scores, extra)
        return scores, extra


class DAPORewardManager(RewardManager):
    """verl's DAPORewardManager: the naive manager's scores, `acc` recorded for numeric results, plus
    the overlong penalty when overlong_buffer_cfg.enable."""

    def __init__(self, score_fn: Optional[Callable] = None, reward_kwargs: Any = None):
        super().__init__(score_fn)
        self.buffer = reward_kwargs.overlong_buffer_cfg if reward_kwargs is not None else None
        self.max_resp_len = reward_kwargs.max_resp_len if reward_kwargs is not None else None
        problems = overlong_problems(reward_kwargs) if reward_kwargs is not None else []
        if problems:
            raise ValueError("; ".join(problems))

    def _collect(self, pairs: List[Tuple[str, Any]],
                 response_lengths: Optional[Sequence[int]]) -> Tuple[List[float], Dict[str, List[Any]]]:
        scores, extra = super()._collect(pairs, response_lengths)
        _record_acc(pairs, scores, extra)  # verl: acc = the score of a number
        if self.buffer is None or not self.buffer.enable:
            return scores, extra
        if response_lengths is None or len(response_lengths) != len(scores):
            raise ValueError("the DAPO overlong penalty needs the length of each response (response_lengths)")
        penalties = [overlong_penalty(int(n), int(self.max_resp_len), int(self.buffer.len),
                                      float(self.buffer.penalty_factor)) for n in response_lengths]
        scores = [s + p for s, p in zip(scores, penalties)]
        if self.buffer.log:
            extra["overlong_reward"] = penalties
            extra["overlong"] = [p < 0 for p in penalties]
        return scores, extra
