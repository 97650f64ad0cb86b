"""Megatron-Bridge contract double (see ../../README.md). As the real package, importing it
imports `megatron.bridge.models`, which registers the built-in bridges, and exports AutoBridge."""

from megatron.bridge import models as _models  # registers the built-in bridges
from megatron.bridge._double import record
from megatron.bridge.models.conversion.auto_bridge import AutoBridge

del _models

record("megatron_bridge_imported")

__all__ = ["AutoBridge"]
