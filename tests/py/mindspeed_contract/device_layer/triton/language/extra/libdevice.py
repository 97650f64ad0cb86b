def __getattr__(name):
    from triton.language import _Placeholder

    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder(name)
