"""Opaque stand-ins for NPU-only packages whose names MindSpeed binds at import but whose code never
runs on the engines' path: torchair (graph-mode converters its op builders register,
op_builder/*_builder.py). Any attribute exists; calling one with a function or class returns it
(decorator use); any other call returns another stand-in."""

import importlib.abc
import importlib.machinery
import sys
import types


class Opaque:
    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type)):
            return args[0]
        return Opaque(self._name + "()")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Opaque(f"{self._name}.{attr}")

    def __mro_entries__(self, bases):
        return (object,)


class OpaqueModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        value = Opaque(f"{self.__name__}.{attr}")
        setattr(self, attr, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = tuple(roots)

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = OpaqueModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def install(roots=("torchair",)):
    sys.meta_path.insert(0, _Finder(roots))
