"""What the kernels and the sampler read off a model: the transformers model inside peft's wrapper, and a
forward's KV cache. Attribute reads only, so any layer may import them without loading a model library."""

from __future__ import annotations

from typing import Any


def base_model(model: Any) -> Any:
    """The transformers model inside a peft wrapper (the model itself when there is none)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def cache_of(out: Any) -> Any:
    """The KV cache of a transformers forward's output, under its new name (`cache`) or its old one."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
