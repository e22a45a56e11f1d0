"""`grpo.report_to`: the experiment trackers a run logs to, by transformers' integration names, checked at load.

A name transformers does not know fails with the known names; a tracker whose package is missing fails with
its pip command, both before any model loads. Every stage (sft and grpo) reports to the same trackers.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from grpokit.errors import RecipeError
from grpokit.registry import did_you_mean

# transformers' integration name -> (the modules its callback imports, the pip command that installs them).
# kubeflow reports through an environment variable, not a package: nothing to check.
TRACKER_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "azure_ml": (("azureml",), "pip install azureml-core"),
    "clearml": (("clearml",), "pip install clearml"),
    "codecarbon": (("codecarbon",), "pip install codecarbon"),
    "comet_ml": (("comet_ml",), "pip install comet-ml"),
    "dagshub": (("dagshub", "mlflow"), "pip install dagshub mlflow"),
    "dvclive": (("dvclive",), "pip install dvclive"),
    "flyte": (("flytekit",), "pip install flytekit flytekitplugins-deck-standard"),
    "kubeflow": ((), ""),
    "mlflow": (("mlflow",), "pip install mlflow"),
    "neptune": (("neptune",), "pip install neptune"),
    "swanlab": (("swanlab",), "pip install swanlab"),
    "tensorboard": (("tensorboard",), "pip install tensorboard"),
    "trackio": (("trackio",), "pip install trackio"),
    "wandb": (("wandb",), "pip install 'grpokit[wandb]' (or: pip install wandb)"),
}
WORDS = ("all", "none")  # transformers' own: every installed tracker, no tracker


def known_trackers() -> list[str]:
    """The integration names transformers reports to (its `INTEGRATION_TO_CALLBACK`)."""
    # slow import: transformers loads torch; a recipe module imports without it
    from transformers.integrations import INTEGRATION_TO_CALLBACK

    return sorted(INTEGRATION_TO_CALLBACK)


def default_report_to() -> list[str]:
    """TensorBoard when it is installed (it is a grpokit dependency); `grpo.report_to` picks others."""
    return ["tensorboard"] if importlib.util.find_spec("tensorboard") is not None else []


def report_to(grpo: dict[str, Any]) -> list[str] | str:
    """The trackers of a stage whose `grpo:` section is `grpo` (checked): the recipe's, else the default."""
    if "report_to" not in grpo or grpo["report_to"] is None:
        return default_report_to()
    value = grpo["report_to"]
    check_report_to(value)
    return value


def check_report_to(value: Any, source: str = "the recipe") -> None:
    """`value` is a tracker name, or a list of them, that transformers knows and whose package is installed;
    `all` and `none` stand alone. The message names the bad name and the fix."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise RecipeError(
            f"grpo.report_to={value!r} in {source}: give a tracker name or a list of them, e.g. "
            "report_to: [tensorboard, wandb] (or none)"
        )
    known = known_trackers()
    for name in names:
        if name in WORDS:
            if len(names) > 1:
                raise RecipeError(f"grpo.report_to={value!r} in {source}: {name!r} stands alone, not in a list")
            continue
        if name not in known:
            raise RecipeError(
                f"grpo.report_to: unknown tracker {name!r} in {source}{did_you_mean(name, [*known, *WORDS])} "
                f"(known: {', '.join(known)}; or all: every installed one, none: no tracker)"
            )
        modules, install = TRACKER_PACKAGES.get(name, ((name,), f"pip install {name}"))
        missing = [module for module in modules if importlib.util.find_spec(module) is None]
        if missing:
            raise RecipeError(
                f"grpo.report_to: tracker {name!r} is not installed (missing: {', '.join(missing)}); "
                f"install it with `{install}`, or remove it from grpo.report_to in {source}"
            )


def run_name(output_name: str | None, stage_dir: str | Path) -> str:
    """The name trackers give a run (W&B's, trackio's): the run folder's, `<output.name>/<timestamp>`, the same
    for every stage of the run (`stage_dir` is `<run folder>/<stage>`).

    >>> run_name("smollm2/arithmetic_grpo", "runs/smollm2/arithmetic_grpo/20261206-154417/grpo")
    'smollm2/arithmetic_grpo/20261206-154417'
    """
    return f"{output_name or 'run'}/{Path(stage_dir).absolute().parent.name}"
