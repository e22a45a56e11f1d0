"""The recipes and data grpokit ships: installed with the package, found by name.

A shipped recipe is named by its folder and file stem, as `grpokit recipes` lists it:
`grpokit train smollm2/arithmetic_grpo` is `grpokit train <this folder>/smollm2/arithmetic_grpo.yaml`.
A file path always wins over a name. In a checkout, `recipes/` and `data/` at the repository root are links
to this folder, so the paths the documentation uses work there too.

Relative paths inside a recipe (a task's data file, a launch config) are read from the current directory
first; a path that is not there but is shipped (`data/word_problems.jsonl`, `recipes/accelerate/zero3.yaml`)
is read from here, so a shipped recipe runs from any directory.

>>> "smollm2/arithmetic_grpo" in names()
True
>>> find("smollm2/arithmetic_grpo.yaml") == find("smollm2/arithmetic_grpo") == SHIPPED / "smollm2/arithmetic_grpo.yaml"
True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpokit.errors import RecipeError
from grpokit.registry import did_you_mean

SHIPPED = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ShippedRecipe:
    name: str  # folder/stem
    path: Path
    summary: str  # the first comment line of the file


def shipped() -> list[ShippedRecipe]:
    """Every shipped recipe, sorted by name (launch configs and data are not recipes)."""
    found = []
    for path in sorted(SHIPPED.glob("*/*.yaml")):
        if is_launch_config(path):
            continue
        found.append(ShippedRecipe(f"{path.parent.name}/{path.stem}", path, _first_comment(path)))
    return found


def launch_configs() -> list[Path]:
    return [path for path in sorted(SHIPPED.glob("*/*.yaml")) if is_launch_config(path)]


def is_launch_config(path: Path) -> bool:
    """accelerate launch configs live in `accelerate/` or are named `accelerate*.yaml` beside their recipe."""
    return path.parent.name == "accelerate" or path.name.startswith("accelerate")


def names() -> list[str]:
    return [recipe.name for recipe in shipped()]


def _first_comment(path: Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text:
            break
        lines.append(text)
        if text.endswith(".") or text.endswith(":"):
            break
    return " ".join(lines).rstrip(":")


def find(name: str) -> Path:
    """The shipped recipe called `name` (`smollm2/arithmetic_grpo`, with or without `.yaml`, or a path that
    ends in one, such as `recipes/smollm2/arithmetic_grpo.yaml`); RecipeError naming the closest otherwise."""
    stem = name[: -len(".yaml")] if name.endswith(".yaml") else name
    stem = stem.removeprefix("recipes/")
    path = SHIPPED / f"{stem}.yaml"
    if stem.count("/") == 1 and path.is_file() and not is_launch_config(path):
        return path
    known = names()
    raise RecipeError(
        f"recipe file not found: {name}, and no shipped recipe has that name.{did_you_mean(stem, known)} "
        f"Shipped recipes ({len(known)}): `grpokit recipes` lists them; or give the path of your own .yaml file"
    )


def locate(path: str | Path) -> Path:
    """A relative path a recipe names, from the current directory if it is there, else the shipped copy if
    there is one, else unchanged (the caller's error names it as written)."""
    path = Path(path)
    if path.is_absolute() or path.exists():
        return path
    for candidate in (SHIPPED / path, SHIPPED / _without_recipes_folder(path)):
        if candidate.exists():
            return candidate
    return path


def _without_recipes_folder(path: Path) -> Path:
    return Path(*path.parts[1:]) if path.parts and path.parts[0] == "recipes" else path
