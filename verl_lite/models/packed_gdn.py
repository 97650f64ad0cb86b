"""Packed sequences (remove-padding) through transformers' Gated DeltaNet layers (Qwen3.5, Qwen3.5-MoE,
Qwen3-Next): each packed sequence gets its own causal conv history and recurrent state.

With no attention mask and no cache, transformers keeps packed sequences apart in its attention layers
by the position ids (`masking_utils.find_packed_sequence_indices`: a sequence starts wherever the
position ids do not step by +1), but its GDN layers run the packed row as one sequence: the causal
conv (kernel 4) reads the previous sequence's last 3 tokens, and the delta rule's recurrent state flows
from one sequence into the next. `split_gdn_by_sequence(model)` gives the GDN layers the same
boundaries, without copying transformers' layer:

- a forward pre-hook on each backbone (the module holding the decoder layers) finds the packed
  sequences from the position ids exactly as the attention masks do, with transformers' own function,
  and passes their lengths (`Segments`) as a keyword argument, which the backbone hands to each
  decoder layer and the decoder layer to its GDN layer;
- each GDN layer, given them, lays the packed row out as one right-padded row per sequence (every row
  starts with zero conv history and zero state; its padding comes after its last token, which a
  causal layer never reads back), runs transformers' forward over those rows, and returns the real
  tokens in packed order. Rows of similar length run together, one call per group
  (`length_groups`: a few groups of sorted lengths where they save more positions than a call costs).

Attention, MLP / MoE and norms run over the packed row as before. The lengths travel as an argument,
not as module state, so gradient checkpointing's recompute in backward sees them as well. The rows
cost at most (sequences x longest sequence) GDN positions, never more than the padded batch's (rows x
padded width), and need no `cu_seqlens` from the kernel, so the fla kernels on cuda take them as they
are. Not for sequence parallelism (Ulysses): a rank would hold part of a sequence. Not for images:
packed input with Qwen-VL's (3, B, T) rotary positions is refused (vision-language models run padded).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
from torch.nn.utils.rnn import pad_sequence

# The keyword argument that carries the packed sequences from the backbone to the GDN layers.
SEGMENTS_KWARG = "packed_gdn_segments"
GDN_CLASS_SUFFIX = "GatedDeltaNet"  # Qwen3_5GatedDeltaNet, Qwen3_5MoeGatedDeltaNet, Qwen3NextGatedDeltaNet
_DONE = "_packed_gdn_layers"  # on the model split_gdn_by_sequence was given: its GDN layer count
_HOOKED = "_packed_gdn_split"  # on each backbone hooked and each GDN forward wrapped


# What one more GDN call costs, in row positions: on CPU (tiny Qwen3.5, forward + backward, 1 thread) a
# call costs ~9 ms whatever its size and each position ~0.04 ms, so a call is worth ~220 positions;
# 256 rounds that up (fewer calls where in doubt).
GROUP_COST = 256


def length_groups(lengths: Sequence[int], group_cost: int = GROUP_COST) -> List[List[int]]:
    """The sequences (indices into `lengths`) split into groups of similar length, one GDN call each:
    the split of the sequences sorted by length that minimises the row positions (a group costs its
    size x its longest length) plus `group_cost` per group. One group is the plain one-row-per-sequence
    layout; more only where they save more positions than the extra calls cost."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    sizes = [lengths[i] for i in order]
    best = [0] + [None] * len(sizes)  # best[j]: the cheapest split of the j shortest sequences
    cut = [0] * (len(sizes) + 1)
    for j in range(1, len(sizes) + 1):
        best[j], cut[j] = min((best[i] + (j - i) * sizes[j - 1] + group_cost, i) for i in range(j))
    groups, j = [], len(sizes)
    while j:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


@dataclass(frozen=True)
class Segments:
    """The packed sequences of a (B, T) row layout: their lengths (row after row), the groups they run
    in (`length_groups`), each group's (rows, longest) mask of real tokens, and the permutation that
    puts the groups' tokens back in packed order."""

    lengths: Tuple[int, ...]
    groups: Tuple[Tuple[int, ...], ...]
    valid: Tuple[torch.Tensor, ...]
    to_packed: torch.Tensor

    def rows(self, x: torch.Tensor) -> List[torch.Tensor]:
        """(B, T, ...) packed -> per group (rows, longest, ...): one sequence a row, zeros after its end."""
        flat = x.reshape(-1, *x.shape[2:])
        if flat.shape[0] != sum(self.lengths):
            raise ValueError(
                f"packed GDN input holds {flat.shape[0]} tokens but its position ids describe "
                f"{sum(self.lengths)} ({len(self.lengths)} sequences); a sequence-parallel slice of a packed row "
                f"cannot be split per sequence here: run sequence parallelism padded (use_remove_padding=False)"
            )
        sequences = flat.split(list(self.lengths))
        return [pad_sequence([sequences[i] for i in group], batch_first=True) for group in self.groups]

    def packed(self, outputs: List[torch.Tensor], batch_shape: Tuple[int, int]) -> torch.Tensor:
        """Per group (rows, longest, ...) -> (B, T, ...): the real tokens, in packed order (inverts `rows`)."""
        tokens = torch.cat([y[valid] for y, valid in zip(outputs, self.valid)])
        return tokens[self.to_packed].reshape(*batch_shape, *tokens.shape[1:])


def sequence_lengths(position_ids: torch.Tensor) -> Optional[Tuple[int, ...]]:
    """Lengths of the packed sequences in (B, T) position ids, row after row, as transformers' attention
    masks delimit them; None when each row is a single sequence (nothing to split)."""
    from transformers.masking_utils import find_packed_sequence_indices

    index = find_packed_sequence_indices(position_ids)
    if index is None:
        return None
    rows, width = index.shape
    # a sequence never spans two rows: offset each row's indices so that rows never share one
    index = index + torch.arange(rows, device=index.device).unsqueeze(1) * (width + 1)
    _, counts = torch.unique_consecutive(index.reshape(-1), return_counts=True)
    return tuple(counts.tolist())


def segments_for(position_ids: torch.Tensor, group_cost: int = GROUP_COST) -> Optional[Segments]:
    lengths = sequence_lengths(position_ids)
    if lengths is None:
        return None
    device = position_ids.device
    groups = length_groups(lengths, group_cost)
    starts = [0]
    for n in lengths[:-1]:
        starts.append(starts[-1] + n)
    valid, order = [], []
    for group in groups:
        sizes = torch.tensor([lengths[i] for i in group], device=device)
        valid.append(torch.arange(int(sizes.max()), device=device).unsqueeze(0) < sizes.unsqueeze(1))
        order += [torch.arange(starts[i], starts[i] + lengths[i], device=device) for i in group]
    to_packed = torch.argsort(torch.cat(order))  # the groups' token order -> packed order
    return Segments(lengths, tuple(tuple(g) for g in groups), tuple(valid), to_packed)


def _text_position_ids(position_ids: Any, batch: int) -> Optional[torch.Tensor]:
    """The (B, T) position ids the attention masks are built from: Qwen3.5's text model also takes a
    (4, B, T) stack whose first row is the text positions (other 3-D forms carry no packing there)."""
    if not isinstance(position_ids, torch.Tensor):
        return None
    if position_ids.dim() == 3:
        if position_ids.shape[0] != 4:
            return None
        position_ids = position_ids[0]
    if position_ids.dim() != 2:
        return None
    return position_ids.expand(batch, -1) if position_ids.shape[0] != batch else position_ids


def _pass_segments(signature: inspect.Signature) -> Callable:
    """The backbone's forward pre-hook: adds `SEGMENTS_KWARG` when the call is packed in the sense of
    transformers' masks (position ids given, no attention mask, no cache)."""

    def hook(module: Any, args: tuple, kwargs: dict):
        if kwargs.get(SEGMENTS_KWARG) is not None:
            return None
        bound = signature.bind_partial(*args, **kwargs).arguments
        if bound.get("attention_mask") is not None or bound.get("past_key_values") is not None:
            return None
        tokens = bound.get("input_ids") if bound.get("input_ids") is not None else bound.get("inputs_embeds")
        if tokens is None:
            return None
        given = bound.get("position_ids")
        if isinstance(given, torch.Tensor) and given.dim() == 3 and given.shape[0] != 4:
            # (3, B, T) rotary positions of images: they hold no text row to find the packed sequences in,
            # and a packed row without them would run its GDN layers as one sequence
            raise ValueError(
                f"{type(module).__name__}: packed (no attention mask) input with 3-D rotary positions "
                f"{tuple(given.shape)}: the packed sequences cannot be found for its Gated DeltaNet layers; "
                f"vision-language rows run padded (model.use_remove_padding=False)")
        position_ids = _text_position_ids(given, tokens.shape[0])
        segments = None if position_ids is None else segments_for(position_ids)
        if segments is None:
            return None
        return args, {**kwargs, SEGMENTS_KWARG: segments}

    return hook


def _per_sequence(forward: Callable) -> Callable:
    """A GDN layer's forward that runs each packed sequence as its own row when given `Segments`."""

    @functools.wraps(forward)
    def per_sequence_forward(hidden_states: torch.Tensor, cache_params: Any = None,
                             attention_mask: Optional[torch.Tensor] = None, **kwargs: Any) -> torch.Tensor:
        segments = kwargs.pop(SEGMENTS_KWARG, None)
        if segments is None:
            return forward(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
        if cache_params is not None or attention_mask is not None:
            raise ValueError("packed GDN input comes without a cache and without an attention mask "
                             "(transformers' packed path); got "
                             f"cache_params={type(cache_params).__name__}, attention_mask="
                             f"{None if attention_mask is None else tuple(attention_mask.shape)}")
        outputs = [forward(rows, cache_params=None, attention_mask=None, **kwargs)
                   for rows in segments.rows(hidden_states)]
        return segments.packed(outputs, tuple(hidden_states.shape[:2]))

    setattr(per_sequence_forward, _HOOKED, True)
    return per_sequence_forward


def gdn_layers(model: Any) -> list:
    return [m for m in model.modules() if type(m).__name__.endswith(GDN_CLASS_SUFFIX)]


def split_gdn_by_sequence(model: Any) -> int:
    """Make `model`'s transformers GDN layers keep packed sequences apart (module docstring); returns
    how many GDN layers it has (0: nothing to do). Idempotent. Raises when a GDN layer does not sit as
    `linear_attn` in a decoder layer of some backbone's `layers` (transformers' layout for these models),
    since the boundaries could not reach it."""
    done = getattr(model, _DONE, None)
    if done is not None:
        return done
    layers = gdn_layers(model)
    if layers:
        reached = set()
        for backbone in model.modules():
            decoder_layers = getattr(backbone, "layers", None)
            if not isinstance(decoder_layers, torch.nn.ModuleList):
                continue
            own = [id(layer.linear_attn) for layer in decoder_layers if hasattr(layer, "linear_attn")]
            if not own:
                continue
            reached.update(own)
            if not getattr(backbone, _HOOKED, False):  # a wrapper around an already split model
                backbone.register_forward_pre_hook(_pass_segments(inspect.signature(backbone.forward)),
                                                   with_kwargs=True)
                setattr(backbone, _HOOKED, True)
        missing = [type(m).__name__ for m in layers if id(m) not in reached]
        if missing:
            raise ValueError(
                f"{len(missing)} Gated DeltaNet layers ({missing[0]}) are not `linear_attn` of a decoder layer in a "
                f"`layers` list, so packed sequence boundaries cannot reach them; run this model padded "
                f"(use_remove_padding=False)"
            )
        for layer in layers:
            if not getattr(layer.forward, _HOOKED, False):
                layer.forward = _per_sequence(layer.forward)
    setattr(model, _DONE, len(layers))
    return len(layers)
