"""FP8 quantized-weight reuse cache (mindspeed/te/pytorch/fp8/reuse.py), without the kernels.

The cache holds quantized copies of weights between micro-batches. `clear_...(release_storage=True)`
frees the cached storages first (resize_(0)); it never restores BF16 weights. With weight release
enabled (default), quantization frees a weight's BF16 storage until the next optimizer step; a
model that never steps (ref) must turn it off or lose its weights.
"""

from typing import Any, Dict, List

from mindspeed._double import record

_CACHE: List[Any] = []
_COUNTERS: Dict[str, int] = {"hits": 0, "misses": 0}
_WEIGHT_RELEASE_ENABLED = True


def cache_quantized_weight(tensor: Any) -> None:
    """What a quantizing forward does (tests call it to fill the cache)."""
    _CACHE.append(tensor)
    _COUNTERS["misses"] += 1


def cached_count() -> int:
    return len(_CACHE)


def clear_weight_quantization_reuse_cache(release_storage: bool = False) -> None:
    if release_storage:
        for tensor in _CACHE:
            tensor.untyped_storage().resize_(0)
    _CACHE.clear()
    _COUNTERS.update(hits=0, misses=0)
    record("fp8_cache_cleared", release_storage=release_storage)


def set_weight_release_enabled(enabled: bool) -> None:
    global _WEIGHT_RELEASE_ENABLED
    _WEIGHT_RELEASE_ENABLED = bool(enabled)
    record("fp8_weight_release", enabled=bool(enabled))


def is_weight_release_enabled() -> bool:
    return _WEIGHT_RELEASE_ENABLED


def release_bf16_weight(tensor: Any) -> bool:
    """Free a weight's high-precision storage after quantization, if release is enabled."""
    if _WEIGHT_RELEASE_ENABLED:
        tensor.untyped_storage().resize_(0)
        return True
    return False
