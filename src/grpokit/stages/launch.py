"""Several processes on existing engines: torchrun (DDP; gloo on CPU) or `accelerate launch` with a config.

`grpokit train RECIPE --processes N` (or a recipe's `launch:` section) starts N copies of
`grpokit train` through `torch.distributed.run`, or through `accelerate launch --config_file` when the
recipe names a launch config (DDP, DeepSpeed ZeRO-2/3, FSDP2 in recipes/accelerate/). The launcher
creates the run directory once and hands it to every rank (GRPOKIT_RUN_DIR), so there is one run
directory; only rank 0 logs, evaluates, saves and reports. torchrun stops every rank when one fails
and prints that rank's error (max restarts 0), rather than leaving the others to hang.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from grpokit import shipped
from grpokit.errors import RecipeError

log = logging.getLogger(__name__)

RUN_DIR_ENV = "GRPOKIT_RUN_DIR"


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    return rank() == 0


def command(train_args: list[str], processes: int, config: str | None = None) -> list[str]:
    """The launch command for `grpokit train <train_args>` on `processes` processes.

    >>> command(["r.yaml"], 2)[:6]
    ['-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '2', '--max_restarts']
    """
    if config:
        config = str(shipped.locate(config))  # `recipes/accelerate/zero3.yaml` from any directory
        launcher = ["-m", "accelerate.commands.launch", "--config_file", config, "--num_processes", str(processes)]
        return [*launcher, "--module", "grpokit.cli", "train", *train_args]
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    return [*launcher, "--max_restarts", "0", "-m", "grpokit.cli", "train", *train_args]


def launch(train_args: list[str], processes: int, run_dir: Path, config: str | None = None) -> int:
    """Run the ranks to completion; the exit code is the launcher's (non-zero when any rank failed)."""
    if config and shutil.which("accelerate") is None and not _has_module("accelerate"):
        raise RuntimeError("a launch config needs accelerate: pip install accelerate")
    env = dict(os.environ)
    env[RUN_DIR_ENV] = str(run_dir)
    # Share the cores: N processes with all threads each would oversubscribe the CPU several-fold.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // processes)))
    if not _cuda_available():
        # Without it, accelerate on a CPU-only machine treats every rank as a lone process (world size 1).
        env["ACCELERATE_USE_CPU"] = "true"
    cmd = [sys.executable, *command(train_args, processes, config)]
    log.info("launching %d processes: %s", processes, " ".join(cmd))
    return subprocess.call(cmd, env=env)


def _cuda_available() -> bool:
    # slow import: torch, only to look for a GPU (the launcher's parent process trains nothing)
    import torch

    return torch.cuda.is_available()


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def rollout_server_command(recipe: Any, tensor_parallel: int = 1, data_parallel: int = 1) -> list[str]:
    """`trl vllm-serve` for the recipe's model, on the host/port its GRPO section points the trainer at."""
    grpo = recipe.grpo
    if not grpo.get("use_vllm") or grpo.get("vllm_mode", "server") != "server":
        raise RecipeError(
            f"{recipe.source} does not use a rollout server: set grpo.use_vllm: true and grpo.vllm_mode: server "
            "(or vllm_mode: colocate, which needs no server)"
        )
    if recipe.model.name == "embedded":
        raise RecipeError("serve-rollouts needs a hub id or model folder in model.name; vLLM serves it, not GGUF")
    trl = Path(sys.executable).with_name("trl")
    cmd = [str(trl) if trl.exists() else "trl", "vllm-serve", "--model", recipe.model.name]
    if recipe.model.revision:
        cmd += ["--revision", recipe.model.revision]
    cmd += ["--tensor_parallel_size", str(tensor_parallel), "--data_parallel_size", str(data_parallel)]
    cmd += ["--host", str(grpo.get("vllm_server_host", "0.0.0.0")), "--port", str(grpo.get("vllm_server_port", 8000))]
    if grpo.get("max_prompt_length") and grpo.get("max_completion_length"):
        cmd += ["--max_model_len", str(grpo["max_prompt_length"] + grpo["max_completion_length"])]
    return cmd


def serve_rollouts(recipe: Any, tensor_parallel: int, data_parallel: int, dry_run: bool) -> int:
    cmd = rollout_server_command(recipe, tensor_parallel, data_parallel)
    print(" ".join(cmd), flush=True)
    if dry_run:
        return 0
    if not _has_module("vllm"):
        raise RuntimeError("vLLM is not installed here: pip install vllm (it needs a CUDA GPU), then run this again")
    return subprocess.call(cmd)


def environment() -> list[str]:
    """What this machine offers and which launch configs it can run, as lines for `grpokit env`."""
    # slow import: torch, only for `grpokit env`
    import torch

    # slow import: transformers (through grpokit.models.load), only for `grpokit env`
    from grpokit.models.load import EMBEDDED, embedded_model_dir_if_ready

    lines = [f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPU cores"]
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(gpus))
    lines.append(f"GPUs: {gpus}" + (f" ({names})" if gpus else " (CPU only: --processes N uses gloo)"))
    for package in (
        "torch",
        "transformers",
        "trl",
        "peft",
        "accelerate",
        "datasets",
        "deepspeed",
        "vllm",
        "math-verify",
        "reasoning-gym",
    ):
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        lines.append(f"  {package:<14} {version}")
    ready = embedded_model_dir_if_ready()
    lines.append(
        f"{EMBEDDED} model: " + (f"converted at {ready}" if ready else "not converted yet (first use does it)")
    )
    lines.append("launch configs:")
    for path in shipped.launch_configs():
        name = f"recipes/{path.relative_to(shipped.SHIPPED)}"
        lines.append(f"  {name:<52} {_can_run(path, gpus)}")
    return lines


def _can_run(path: Path, gpus: int) -> str:
    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    kind, needed = config.get("distributed_type", "NO"), int(config.get("num_processes", 1))
    if kind == "DEEPSPEED" and not _has_module("deepspeed"):
        return "no: pip install deepspeed"
    if kind in ("MULTI_GPU", "DEEPSPEED", "FSDP") and gpus < 1:
        return f"no: needs GPUs ({needed} by default)"
    if gpus and gpus < needed:
        return f"with --num_processes <= {gpus} (config says {needed})"
    return "yes"
