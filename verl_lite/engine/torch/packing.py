"""Remove-padding (verl's `use_remove_padding`) on the torch engine: a micro-batch's real tokens packed
into one row, the model run once over it, its outputs put back in the padded layout.

transformers tells packed sequences apart by their position ids (each sequence restarts at 0) when no
attention mask is given, and its attention masks keep them apart (block-causal). Its Gated DeltaNet
layers (Qwen3.5, Qwen3.5-MoE, Qwen3-Next) would run the packed row as one sequence, so `packed_forward`
first makes them take the same boundaries (`verl_lite.models.packed_gdn`: each sequence its own conv
history and recurrent state). Models with other linear-attention layers run padded (`packing_problem`
says why; an explicit True is refused). `decide` resolves model.use_remove_padding (null = auto:
packed wherever `packing_problem` is None; decisions/packing_mode.py).

Outputs are scattered back into a zero tensor of the padded shape, so the engine's slicing of the
response columns is the same as for a padded forward.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch

from verl_lite.decisions import packing_mode
from verl_lite.models import is_gdn_model, torch_packing_problem
from verl_lite.models.packed_gdn import split_gdn_by_sequence


def _as_dict(hf_config: Any) -> dict:
    return hf_config.to_dict() if hasattr(hf_config, "to_dict") else dict(hf_config or {})


def packing_problem(hf_config: Any) -> Optional[str]:
    """Why `hf_config`'s model cannot take packed sequences on the torch engine, or None if it can."""
    return torch_packing_problem(_as_dict(hf_config))


def decide(role: str, setting: Any, hf_config: Any, sequence_parallel: bool = False) -> bool:
    """Whether the torch engine packs for `setting` (True / False / None = auto) and this model (auto packs
    under Ulysses `sequence_parallel`); an explicit True for a model that cannot pack raises with the reason."""
    decision = packing_mode.decide_torch(setting, packing_problem(hf_config), is_gdn_model(_as_dict(hf_config)),
                                         sequence_parallel)
    if decision.refusal:
        raise ValueError(f"{role}: model.use_remove_padding=True is not supported here: {decision.refusal}")
    return decision.packed


def pack(input_ids: torch.Tensor, attention_mask: torch.Tensor,
         position_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(1, N) input ids and position ids of the real tokens, row after row, and the (B, T) bool mask
    that `unpack` needs. Position ids restart at 0 in each row (the rollout's cumulative mask count)."""
    mask = attention_mask.bool()
    return input_ids[mask].unsqueeze(0), position_ids[mask].unsqueeze(0), mask


def unpack(packed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(1, N, ...) outputs of a packed forward in the padded (B, T, ...) layout, zeros at padding."""
    out = packed.new_zeros(tuple(mask.shape) + tuple(packed.shape[2:]))
    out[mask] = packed[0]
    return out


def packed_forward(module: Any, batch: Dict[str, torch.Tensor], output: Union[str, Callable, None],
                   **kwargs: Any) -> torch.Tensor:
    """`module(...)`'s `output` for a packed batch, in the padded layout: `output` names the attribute
    ("logits"), or picks the tensor from the result (a callable), or None for a module returning a tensor.
    `kwargs` go to the model call as they are. A model with GDN layers gets them split per packed
    sequence on first use."""
    split_gdn(module)
    ids, pos, mask = pack(batch["input_ids"], batch["attention_mask"], batch["position_ids"])
    result = module(input_ids=ids, attention_mask=None, position_ids=pos, use_cache=False, **kwargs) if output else \
        module(input_ids=ids, attention_mask=None, position_ids=pos, **kwargs)
    if output is None:
        return unpack(result, mask)
    return unpack(output(result) if callable(output) else getattr(result, output), mask)


def split_gdn(module: Any) -> None:
    """Give `module`'s GDN layers the packed sequences' boundaries (once); raises for a GDN model in
    which none were found, rather than letting state flow between sequences."""
    if split_gdn_by_sequence(module) == 0 and is_gdn_model(_as_dict(getattr(module, "config", None))):
        raise ValueError(
            f"{type(module).__name__}: the config has Gated DeltaNet layers but no *GatedDeltaNet module was found "
            f"to split per packed sequence; set model.use_remove_padding=False")
