"""triton.language as kernels' annotations and defaults see it at definition time: every name exists
(as a placeholder), nothing computes. `make_tensor_descriptor` exists (Triton >= 3.4's name, which
MindSpeed's ops/triton/utils.py needs one of)."""


class _Placeholder:
    def __init__(self, name):
        self.name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self.name}.{attr}")

    def __call__(self, *args, **kwargs):
        return _Placeholder(f"{self.name}()")

    def __repr__(self):
        return f"tl.{self.name}"


def __getattr__(name):
    if name.startswith("__") or name == "_experimental_make_tensor_descriptor":
        raise AttributeError(name)
    return _Placeholder(name)
