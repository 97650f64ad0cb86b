"""Patch manager with MindSpeed's rules (mindspeed/patch_utils.py; the same at core_r0.16.0 and
core_r0.18.0 but for blank lines).

- One `Patch` per exact dotted name in `patches_info`; `apply_patches()` applies them in
  insertion order.
- A function whose name ends in "wrapper" or "decorator" is a wrapper: added once, applied in
  registration order (the last registered is outermost). Wrappers never raise.
- Any other function is a replacement; a second one on the same name without force_patch raises
  RuntimeError('the patch of <last segment> exist !') (identity is not compared).
- `remove_patches()` restores originals (modules without "mindspeed" in their name), resets every
  patch and clears the wrappers; the entries stay.
- A missing module raises ModuleNotFoundError, or with create_dummy every missing level is created as
  an empty module (`Patch.parse_path`, patch_utils.py:135-164), so `fla.ops.gated_delta_rule` exists
  after MindSpeed's pre-patch whether or not the fla package is installed.
"""

import importlib
import sys
from typing import Any, Callable, Dict, List, Optional

from mindspeed._double import record


def _holds(module: Any, name: str, value: Any) -> bool:
    """`hasattr(module, name) and getattr(module, name) is value`, as the real loop asks every module. Differs
    on purpose: an attribute lookup that raises something other than AttributeError (transformers' lazy
    modules import their torchvision image processors on lookup, and CPU test installs have no torchvision)
    counts as "no"; on the nodes the real loop would propagate it, where torchvision is installed."""
    try:
        return hasattr(module, name) and getattr(module, name) is value
    except Exception:
        return False


def _is_wrapper(func: Callable) -> bool:
    name = getattr(func, "__name__", "")
    return name.endswith("wrapper") or name.endswith("decorator")


def _dummy(name: str) -> Callable:
    def dummy_function(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"function {name} no exist")

    return dummy_function


class Patch:
    def __init__(self, orig_func_name: str, new_func: Optional[Callable], create_dummy: bool):
        self.full_name = orig_func_name
        self.orig_module_name, self.orig_func_name = orig_func_name.rsplit(".", 1)
        self.create_dummy = create_dummy
        self.patch_func: Optional[Callable] = None
        self.wrappers: List[Callable] = []
        self.original: Any = None
        self.final: Any = None
        self.owner: Any = None
        self.is_applied = False
        self.set_patch_func(new_func if new_func is not None else _dummy(orig_func_name))

    def set_patch_func(self, new_func: Callable, force_patch: bool = False) -> None:
        if _is_wrapper(new_func):
            if new_func not in self.wrappers:
                self.wrappers.append(new_func)
        else:
            if self.patch_func is not None and not force_patch:
                raise RuntimeError("the patch of {} exist !".format(self.orig_func_name))
            self.patch_func = new_func
        self.is_applied = False

    def _resolve_owner(self) -> Any:
        parts = self.orig_module_name.split(".")
        owner: Any = None
        for i in range(1, len(parts) + 1):
            path = ".".join(parts[:i])
            try:
                owner = importlib.import_module(path)
                continue
            except ModuleNotFoundError:
                pass
            if owner is not None and hasattr(owner, parts[i - 1]):  # a class (or attribute) of the module above
                for attr in parts[i - 1:]:
                    owner = getattr(owner, attr)
                return owner
            if not self.create_dummy:
                raise ModuleNotFoundError(f"No module named '{path}'")
            module = type(sys)(path)
            module.__file__ = "mindspeed.dummy_module.py"
            sys.modules[path] = module
            if owner is not None:
                setattr(owner, parts[i - 1], module)
            owner = module
        return owner

    def apply_patch(self) -> None:
        if self.is_applied:
            return
        self.owner = self._resolve_owner()
        if not hasattr(self.owner, self.orig_func_name):
            setattr(self.owner, self.orig_func_name, None)
        if self.original is None:
            self.original = self.owner.__dict__.get(self.orig_func_name, getattr(self.owner, self.orig_func_name))
        current = getattr(self.owner, self.orig_func_name)
        final = self.patch_func if self.patch_func is not None else self.original
        for wrapper in self.wrappers:
            final = wrapper(final)
        setattr(self.owner, self.orig_func_name, final)
        # every module holding the same object under that name is rebound too (patch_utils.py:126-130):
        # `from fla.ops.gated_delta_rule import chunk_gated_delta_rule` done earlier sees the patch. The real
        # code compares ids, so after remove_patches left a created name None, every module's None under that
        # name is rebound as well
        for module in list(sys.modules.values()):
            if module is not None and _holds(module, self.orig_func_name, current):
                setattr(module, self.orig_func_name, final)
        self.final = final
        self.is_applied = True
        record("patch_applied", name=self.full_name, replaced=self.patch_func is not None,
               wrappers=[w.__name__ for w in self.wrappers])

    def remove_patch(self) -> None:
        # restore every binding of the final function, in modules whose name lacks "mindspeed" (:95-108)
        if self.is_applied and self.owner is not None:
            for name, module in list(sys.modules.items()):
                if "mindspeed" in name or module is None:
                    continue
                if _holds(module, self.orig_func_name, self.final):
                    setattr(module, self.orig_func_name, self.original)
            if "mindspeed" not in self.orig_module_name and getattr(self.owner, self.orig_func_name, None) is self.final:
                setattr(self.owner, self.orig_func_name, self.original)
        self.patch_func = None
        self.wrappers = []
        self.is_applied = False


class MindSpeedPatchesManager:
    patches_info: Dict[str, Patch] = {}

    @staticmethod
    def register_patch(orig_func_name: str, new_func: Optional[Callable] = None, force_patch: bool = False,
                       create_dummy: bool = False) -> None:
        info = MindSpeedPatchesManager.patches_info
        if orig_func_name not in info:
            info[orig_func_name] = Patch(orig_func_name, new_func, create_dummy)
        else:
            info[orig_func_name].set_patch_func(new_func if new_func is not None else _dummy(orig_func_name),
                                                force_patch)

    @staticmethod
    def apply_patches() -> None:
        for patch in MindSpeedPatchesManager.patches_info.values():
            patch.apply_patch()

    @staticmethod
    def remove_patches() -> None:
        for patch in MindSpeedPatchesManager.patches_info.values():
            patch.remove_patch()
        record("patches_removed")
