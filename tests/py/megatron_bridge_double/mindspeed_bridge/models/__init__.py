"""`import mindspeed_bridge.models` registers MindSpeed-Bridge's Qwen3.5 bridges into Megatron-Bridge's
registry (MegatronModelBridge.register_bridge), replacing the registration of the same architecture
names. What is known of the real package (its sources are not in the stored index; read: its
`mindspeed_bridge/models/qwen_vl/__init__.py`, and a design note on its verl integration dated
2026-05-26): `qwen_vl/__init__.py` imports `Qwen3VLModel` from `.modelling_qwen3_vl.model` and the bridges
`Qwen35VLBridge` / `Qwen35VLMoEBridge` from `.qwen35_vl_bridge`, which register
`source="Qwen3_5(Moe)ForConditionalGeneration", target=Qwen3VLModel, provider=Qwen35VL(MoE)ModelProvider,
model_type="qwen3_5(_moe)"`; its providers carry `use_triton_gdn` / `use_ascend_gdn`, which its
GatedDeltaNet reads to pick the Triton, Ascend or torch rule.

The double's bridges keep the names Qwen35NpuBridge / Qwen35MoeNpuBridge and the provider Qwen35NpuProvider
(so a test tells them from Megatron-Bridge's own); the model they build is
`mindspeed_bridge.models.qwen_vl.modelling_qwen3_vl.model.Qwen3VLModel`, Megatron-Bridge's Qwen3VLModel
contract (the double's subclass of it).

Ordering guard (the double's, not a rule read from MindSpeed-Bridge, whose source is not reachable): the
engine imports this package after MindSpeed's repatch (the MindSpeed double's event log shows `repatch`),
the order MindSpeed asks of every module that binds megatron names (its adaptor patches megatron first);
importing earlier raises here so that a change of the engine's order fails a test. The real package may
well import earlier without an error, and bind unpatched megatron classes."""

import sys

_ms = sys.modules.get("mindspeed._double")
if _ms is None or "repatch" not in _ms.kinds():
    raise RuntimeError(
        "mindspeed_bridge.models imported before MindSpeed's repatch (the test double's guard of the engine's order): "
        "import mindspeed.megatron_adaptor and "
        "call repatch(...) first (the MindSpeed engines do it in device-mesh init), then import "
        "mindspeed_bridge.models, then build the model")

from megatron.bridge._double import record  # noqa: E402
from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge  # noqa: E402
from megatron.bridge.models.qwen_vl.qwen35_vl_provider import Qwen35VLModelProvider  # noqa: E402

from mindspeed_bridge.models.qwen_vl.modelling_qwen3_vl.model import Qwen3VLModel  # noqa: E402


class Qwen35NpuProvider(Qwen35VLModelProvider):
    EXTRA_FIELDS = ("use_triton_gdn", "use_ascend_gdn", "linear_attention_freq")
    MODEL_CLASS = Qwen3VLModel


@MegatronModelBridge.register_bridge(source="Qwen3_5ForConditionalGeneration", target=Qwen3VLModel,
                                     provider=Qwen35NpuProvider, model_type="qwen3_5")
class Qwen35NpuBridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3_5MoeForConditionalGeneration", target=Qwen3VLModel,
                                     provider=Qwen35NpuProvider, model_type="qwen3_5_moe")
class Qwen35MoeNpuBridge(MegatronModelBridge):
    pass


record("mindspeed_bridge_models_imported", after_repatch=True, mindspeed_events=list(_ms.kinds()))
