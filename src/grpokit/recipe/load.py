"""Read a recipe: YAML (5e-4 is a float), `key.sub=value` overrides, then the schema and validation."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml

from grpokit import shipped
from grpokit.errors import RecipeError
from grpokit.recipe.schema import Recipe, build_section
from grpokit.recipe.stages import plan_stages, stage_recipe
from grpokit.recipe.trl_args import checkpoint_cadence
from grpokit.recipe.validate import validate_recipe
from grpokit.runs.records import default_name


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `5e-4` (no dot) as a string; recipes mean a float."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)$|^[-+]?[0-9][0-9_]*\.[0-9_]*$"),
    list("-+0123456789"),
)


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Read, override (`key.sub=value`), and fully validate a recipe: a YAML file, or the name of a shipped
    one (`smollm2/arithmetic_grpo`, as `grpokit recipes` lists them)."""
    path = Path(path)
    if not path.is_file():
        path = shipped.find(str(path))
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except UnicodeDecodeError as err:
        raise RecipeError(f"{path} is not UTF-8 text ({err}); save it as UTF-8") from err
    except yaml.YAMLError as err:
        raise RecipeError(f"{path} is not valid YAML: {err}") from err
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RecipeError(f"{path} must hold a mapping of sections (model, task, ...), not {type(raw).__name__}")
    for override in overrides or []:
        apply_override(raw, override)
    recipe = build_recipe(raw, source=str(path))
    if recipe.output.name is None:  # its folder too: same file names in two folders never mix
        recipe = dataclasses.replace(recipe, output=dataclasses.replace(recipe.output, name=default_name(path)))
    return recipe


def build_recipe(raw: dict[str, Any], source: str = "<memory>") -> Recipe:
    """The validated recipe from a mapping of sections; frozen: nothing after this writes into it."""
    recipe = dataclasses.replace(build_section(Recipe, {k: v for k, v in raw.items()}, ""), source=source)
    validate_recipe(recipe)
    return _read_trl_save_keys(recipe)


def _read_trl_save_keys(recipe: Recipe) -> Recipe:
    """The recipe with `output.save_every` and `output.keep` as TRL's own keys in each GRPO stage's `grpo:`
    set them (`checkpoint_cadence`), stage after stage, so checkpoints of every stage follow them."""
    save_every, keep = recipe.output.save_every, recipe.output.keep
    for stage in plan_stages(recipe):
        if stage.kind == "grpo":
            save_every, keep = checkpoint_cadence(stage_recipe(recipe, stage).grpo, save_every, keep)
    if (save_every, keep) == (recipe.output.save_every, recipe.output.keep):
        return recipe
    return dataclasses.replace(recipe, output=dataclasses.replace(recipe.output, save_every=save_every, keep=keep))


def apply_override(raw: dict[str, Any], override: str) -> None:
    """`grpo.learning_rate=1e-5`, `rewards.0.weight=2`: the value is parsed as YAML."""
    key, sep, value = override.partition("=")
    if not sep or not key:
        raise RecipeError(f"override {override!r} is not of the form key.sub=value")
    parts = key.strip().split(".")
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        node = node[_list_index(node, part, parts[: i + 1])] if isinstance(node, list) else node.setdefault(part, {})
        if not isinstance(node, dict | list):
            raise RecipeError(f"override {override!r}: {'.'.join(parts[: i + 1])} is not a section")
    leaf = parts[-1]
    parsed = yaml.load(value, Loader=_Loader) if value.strip() else ""
    if isinstance(node, list):
        node[_list_index(node, leaf, parts)] = parsed
    else:
        node[leaf] = parsed


def _list_index(node: list, part: str, parts: list[str]) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise RecipeError(f"override key {'.'.join(parts)}: {part!r} is not an index below {len(node)}")
    return int(part)
