"""Name -> constructor registry, as in timm: variants register themselves by decorator."""
_MODEL_ENTRYPOINTS = {}


def register_model(fn):
    """Register `fn` under its function name; `create_model(name)` calls it."""
    _MODEL_ENTRYPOINTS[fn.__name__] = fn
    return fn


def is_model(name):
    return name in _MODEL_ENTRYPOINTS


def model_entrypoint(name):
    if name not in _MODEL_ENTRYPOINTS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(list_models())}")
    return _MODEL_ENTRYPOINTS[name]


def list_models():
    return sorted(_MODEL_ENTRYPOINTS)
