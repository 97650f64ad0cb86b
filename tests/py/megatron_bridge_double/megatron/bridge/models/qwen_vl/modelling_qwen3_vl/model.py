"""Qwen3VLModel: the forward contract of Megatron-Bridge's vision-language model, read at Megatron-Bridge
de93536e (2026-03-10, the commit verl's Qwen3.5 NPU guide pins) in
src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/model.py; the same contract at tag v0.5.0's line
(03711a9d) for BSHD (its THD rotary positions changed, see the README). What the double reproduces:

- the signature and its order (l.236-258): `forward(input_ids, position_ids=None, attention_mask=None,
  labels=None, loss_mask=None, inference_params=None, packed_seq_params=None, extra_block_kwargs=None,
  pixel_values=None, pixel_values_videos=None, image_grid_thw=None, video_grid_thw=None, ...)`: the 4th
  positional parameter is `labels`, so a GPT-style `model(ids, pos, mask, packed_seq_params)` puts the
  packed params in `labels` (refused here: labels must be a tensor);
- `position_ids` is ignored (`position_ids = None`, l.289): the 3-D rotary positions always come from
  `get_rope_index(input_ids, image_grid_thw, video_grid_thw, attention_mask)` (l.454-465, rope.py), on every
  pipeline stage, so every stage needs the padded `[b, s]` input_ids and the mask;
- `attention_mask` is a `[b, s]` keep mask (1/True = token; "BSHD format, no matter use packed_seq or not",
  l.260-265); a mask of more than 2 dims is refused: get_rope_index collapses it with `.any(-1)`
  (rope.py:179-184), which reads a causal True=masked `[b, 1, s, s]` mask as "every position but the last
  is valid" (fixed for BSHD only after de93536e, fb8404c8b);
- with `packed_seq_params` it packs itself (l.376-421 embeddings and the vision mask, l.466-479 positions, then
  `attention_mask = None`) with `preprocess_packed_seqs(input_ids, attention_mask)` (utils.py:657-745:
  each sequence aligned to TP); the caller's `packed_seq_params` must describe exactly that packing (the
  double refuses one that disagrees; the real model would silently attend across the wrong boundaries);
  without `attention_mask` it packs with an int32 ones mask (l.377-378), which utils.py:710 reads as
  column indices: refused;
- the images: `pixel_values` [sum t*h*w, C*T*P*P] and `image_grid_thw` [n, 3] as keywords, placed at the
  `image_token_id` tokens (l.296-372); the tower runs on the first pipeline stage only (`pre_process`);
- the output (l.482-500 through Qwen3VLGPTModel = GPTModel's `_postprocess`, text_model.py:108-195):
  logits `[b, s, V/TP]` for BSHD, `[1, T, V/TP]` for THD; the per-token loss `[b, s]` with `labels`;
  the hidden states `[s, b, h]` on a stage that is not the last.

Where it differs, on purpose: the language model is verl_lite's own GPTModel chunk (`language_model`,
built by verl_lite's bridge, the vision tower and its DeepStack hooks on the first stage's chunk, its
interleaved 3-D rotary embedding), so the numbers are verl_lite's; packing packs the token ids and the
positions (the embedding is per token: the same as the real embed-then-pack); BSHD attention gets the
causal + padding mask built from the keep mask (the real model hands the keep mask to Transformer Engine's
causal attention, which on right-padded rows gives the same for the real tokens), and a mask that is not
right-padded is refused (left padding would leak under the real causal attention); videos, context
parallelism and inference are refused; Gated DeltaNet models refuse packed input as megatron-core 0.16's
GatedDeltaNet does (core_v0.16.1 ssm/gated_delta_net.py:295-297), which de93536e pins (0.16.0rc0) and
verl's NPU guide runs (0.16.0)."""

from typing import Any, Dict, Optional

import torch
from megatron.core.transformer import MegatronModule

from megatron.bridge._double import record
from megatron.bridge.models.qwen_vl.modelling_qwen3_vl.rope import get_rope_index
from megatron.bridge.models.qwen_vl.modelling_qwen3_vl.utils import preprocess_packed_seqs


def _field(hf: Dict[str, Any], name: str, default: Any = None) -> Any:
    value = hf.get(name)
    if value is None:
        value = (hf.get("text_config") or {}).get(name)
    return default if value is None else value


class Qwen3VLModel(MegatronModule):
    """Megatron-Bridge's Qwen3-VL / Qwen3.5 model around verl_lite's language-model chunk (see the module)."""

    def __init__(self, language_model: torch.nn.Module, hf_config: Dict[str, Any]) -> None:
        super().__init__(config=language_model.config)
        self.language_model = language_model
        self.vision_model = None  # the tower is the language model chunk's own (`language_model.vision`)
        self.pre_process = bool(language_model.pre_process)
        self.post_process = bool(language_model.post_process)
        self.add_encoder, self.add_decoder = self.pre_process, True
        self.image_token_id = int(_field(hf_config, "image_token_id", 151655))
        self.video_token_id = int(_field(hf_config, "video_token_id", 151656))
        self.vision_start_token_id = int(_field(hf_config, "vision_start_token_id", 151652))
        self.spatial_merge_size = int((hf_config.get("vision_config") or {}).get("spatial_merge_size", 2))
        self.square_merge_size = self.spatial_merge_size ** 2
        self.share_embeddings_and_output_weights = language_model.share_embeddings_and_output_weights

    def shared_embedding_or_output_weight(self) -> Any:
        return self.language_model.shared_embedding_or_output_weight()

    def set_input_tensor(self, input_tensor: Any) -> None:
        if not isinstance(input_tensor, list):
            input_tensor = [input_tensor]
        assert len(input_tensor) == 1, "input_tensor should only be length 1 for Qwen3VL"
        self.language_model.set_input_tensor(input_tensor[0])

    # -- the contract ----------------------------------------------------------------------------------

    def _check(self, input_ids: Any, attention_mask: Any, labels: Any, packed_seq_params: Any,
               pixel_values_videos: Any, video_grid_thw: Any, extra_block_kwargs: Any, kwargs: Dict[str, Any]) -> None:
        if kwargs:
            raise TypeError(f"Qwen3VLModel.forward() got unexpected keyword arguments {sorted(kwargs)} (the language "
                            f"model's forward takes none of them)")
        if extra_block_kwargs:
            raise NotImplementedError("the Qwen3VLModel double takes no extra_block_kwargs")
        if labels is not None and not isinstance(labels, torch.Tensor):
            raise TypeError(f"labels (the 4th positional parameter of Qwen3VLModel.forward, model.py:241) must be a "
                            f"tensor, got {type(labels).__name__}: pass packed_seq_params and the rest by keyword")
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.is_floating_point():
            raise TypeError("input_ids must be the padded [b, s] token ids, on every pipeline stage (get_rope_index "
                            f"reads them there, model.py:454-465), got {getattr(input_ids, 'shape', input_ids)!r}")
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise ValueError(
                    f"attention_mask must be the [b, s] keep mask (True = token), got shape "
                    f"{tuple(attention_mask.shape)}: "
                    f"get_rope_index collapses a mask of more dims with .any(-1) (rope.py:179-184), which reads a "
                    f"causal True=masked mask as all positions valid and gives wrong 3-D positions")
            if tuple(attention_mask.shape) != tuple(input_ids.shape):
                raise ValueError(f"attention_mask {tuple(attention_mask.shape)} and input_ids {tuple(input_ids.shape)} "
                                 f"differ in shape")
            keep = attention_mask.bool()
            if bool((keep[:, 1:] & ~keep[:, :-1]).any()):
                raise ValueError("attention_mask is not right-padded (a token follows padding in a row): the model's "
                                 "causal attention would let the padding reach the tokens after it")
        if packed_seq_params is not None:
            if attention_mask is None:
                raise ValueError("packed_seq_params without attention_mask: the model then packs with an int32 ones "
                                 "mask (model.py:377-378), which preprocess_packed_seqs reads as column indices "
                                 "(utils.py:710); pass the [b, s] bool keep mask")
            if attention_mask.dtype != torch.bool:
                raise TypeError(f"attention_mask must be bool with packed_seq_params (preprocess_packed_seqs indexes "
                                f"the row with it, utils.py:710), got {attention_mask.dtype}")
            if getattr(packed_seq_params, "qkv_format", None) != "thd":
                raise ValueError(f"packed_seq_params.qkv_format must be 'thd', got "
                                 f"{getattr(packed_seq_params, 'qkv_format', None)!r}")
            if getattr(self.config, "experimental_attention_variant", None) == "gated_delta_net":
                raise NotImplementedError("GDN does not support packed sequence for now.")  # gated_delta_net.py:297
        if pixel_values_videos is not None or video_grid_thw is not None:
            raise NotImplementedError("the Qwen3VLModel double's vision tower takes images only")

    @staticmethod
    def _check_packing(given: Any, expected: Any) -> None:
        def same(a: Any, b: Any) -> bool:
            return a is not None and b is not None and torch.equal(a.to(torch.int64).cpu(), b.to(torch.int64).cpu())

        problems = []
        for name in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
            value = getattr(given, name, None)
            if value is None and name.endswith("_padded"):
                continue
            if not same(value, getattr(expected, name)):
                problems.append(f"{name}={None if value is None else value.tolist()}")
        for name in ("max_seqlen_q", "max_seqlen_kv"):
            if int(getattr(given, name, 0) or 0) != int(getattr(expected, name)):
                problems.append(f"{name}={getattr(given, name, None)}")
        if problems:
            raise ValueError(f"packed_seq_params disagree with the model's own packing of the [b, s] input "
                             f"(preprocess_packed_seqs, utils.py:657-745: cu_seqlens {expected.cu_seqlens_q.tolist()}, "
                             f"max_seqlen {expected.max_seqlen_q}): {', '.join(problems)}")

    def forward(self, input_ids: torch.Tensor, position_ids: Optional[torch.Tensor] = None,
                attention_mask: Optional[torch.Tensor] = None, labels: Optional[torch.Tensor] = None,
                loss_mask: Optional[torch.Tensor] = None, inference_params: Any = None, packed_seq_params: Any = None,
                extra_block_kwargs: Optional[dict] = None, pixel_values: Optional[torch.Tensor] = None,
                pixel_values_videos: Optional[torch.Tensor] = None, image_grid_thw: Optional[torch.Tensor] = None,
                video_grid_thw: Optional[torch.Tensor] = None, image_input_mask: Optional[torch.Tensor] = None,
                video_input_mask: Optional[torch.Tensor] = None, cp_img_num: Any = None, images_padded: Any = None,
                inference_context: Any = None, runtime_gather_output: Any = None, **kwargs: Any) -> torch.Tensor:
        del inference_context, runtime_gather_output, image_input_mask, video_input_mask, cp_img_num, images_padded
        assert inference_params is None, "not support inference"  # model.py:281
        position_ids = None  # model.py:288-289: computed within the model
        self._check(input_ids, attention_mask, labels, packed_seq_params, pixel_values_videos, video_grid_thw,
                    extra_block_kwargs, kwargs)
        from megatron.core import parallel_state as mpu

        if mpu.get_context_parallel_world_size() > 1:
            raise NotImplementedError("the Qwen3VLModel double runs with context parallel size 1 only")
        record("qwen3_vl_forward", packed=packed_seq_params is not None, shape=tuple(input_ids.shape),
               images=0 if image_grid_thw is None else int(image_grid_thw.shape[0]), pre_process=self.pre_process,
               mask=attention_mask is not None)
        positions, _ = get_rope_index(self.spatial_merge_size, self.image_token_id, self.video_token_id,
                                      self.vision_start_token_id, input_ids, image_grid_thw=image_grid_thw,
                                      video_grid_thw=video_grid_thw, attention_mask=attention_mask)  # [3, b, s]
        inner = self.language_model
        inner.visual_inputs = ({"pixel_values": pixel_values, "image_grid_thw": image_grid_thw}
                               if pixel_values is not None and self.pre_process else None)
        extra = {} if loss_mask is None else {"loss_mask": loss_mask}
        if packed_seq_params is None:  # BSHD: [b, s] in, [b, s, V/TP] out
            from verl_lite.engine.megatron.batch import attention_mask_4d

            keep = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
            return inner(input_ids, positions.permute(1, 0, 2).contiguous(), attention_mask_4d(keep), labels=labels,
                         **extra)
        ids_thd, expected = preprocess_packed_seqs(input_ids, attention_mask)
        self._check_packing(packed_seq_params, expected)
        pos_thd = preprocess_packed_seqs(positions.permute(1, 2, 0).contiguous(), attention_mask)[0]  # [1, T, 3]
        return inner(ids_thd, pos_thd.permute(0, 2, 1).contiguous(), None, labels=labels,
                     packed_seq_params=packed_seq_params, **extra)
