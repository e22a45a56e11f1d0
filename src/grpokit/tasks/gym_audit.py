"""Every reasoning-gym dataset audited by probes: what its own scorer pays, and what grpokit pays.

For each dataset, `grpokit.tasks.probes` scores its battery of universal answers on `PROBLEMS` generated
problems twice: with reasoning-gym's `score_answer` ("raw") and with grpokit's scoring path ("grpokit":
its own verifier for the datasets in `grpokit.tasks.gym_verifiers`, the screen then the scorer for the others).
A probe paid on more than one problem by grpokit's path refuses the dataset (`refusal`); `grpokit tasks`
shows each dataset's result. The result for the installed reasoning-gym ships as `gym_audit.json`
beside this module; regenerate it with `python -m grpokit.tasks.gym_audit` and the tests re-run the audit.

The probes are fixed text (constants, the gold's shape), so the raw scorers run here unconfined.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from grpokit.sandbox.scorers import gym_refusal
from grpokit.tasks.gym_verifiers import VERIFIERS, verify
from grpokit.tasks.probes import audit

PROBLEMS = 32
SEED = 0
AUDIT_FILE = Path(__file__).with_name("gym_audit.json")
# Datasets grpokit refuses whatever the probes say, and why.
REFUSED = {
    "composite": "a composite scores each part with that dataset's own scorer, past grpokit's verifiers; "
    "use one reasoning-gym dataset per task",
}

logger = logging.getLogger(__name__)


def grpokit_score(name: str, dataset: Any, answer: str, entry: dict[str, Any]) -> float:
    """The value grpokit's scoring path gives `answer` (before its threshold), computed in this process."""
    if name in VERIFIERS:
        return verify(name, answer, entry)
    if gym_refusal(name, answer) is not None:
        return 0.0
    return float(dataset.score_answer(answer, entry))


def audit_dataset(name: str, problems: int = PROBLEMS, seed: int = SEED) -> dict[str, Any]:
    """{"raw": {probe: problems paid}, "grpokit": {...}, "slow": {probe: seconds}} for one dataset, with
    its default config; {"error": ...} when it cannot be generated so."""
    # optional dependency: reasoning-gym
    import reasoning_gym

    if name in REFUSED:
        return {"error": REFUSED[name]}
    try:
        dataset = reasoning_gym.create_dataset(name, seed=seed, size=problems)
        entries = [dataset[i] for i in range(problems)]
    except Exception as err:  # reasoning-gym validates configs with asserts
        return {"error": f"its default config does not generate: {err or type(err).__name__}"}
    golds = [str(entry["answer"]) for entry in entries]
    raw = audit(lambda answer, i: dataset.score_answer(answer, entries[i]), golds, slow_seconds=None)
    ours = audit(lambda answer, i: grpokit_score(name, dataset, answer, entries[i]), golds)
    return {"raw": raw.universal(), "grpokit": ours.universal(), "slow": ours.slow}


def refusal(name: str) -> str | None:
    """Why grpokit refuses this dataset (a probe its scoring pays, or `REFUSED`), or None."""
    if name in REFUSED:
        return REFUSED[name]
    result = load_audit()["datasets"].get(name)
    if result is None:
        return None  # not in the audit: a dataset newer than it (`grpokit tasks` says so)
    if result.get("grpokit"):
        probe, paid = next(iter(result["grpokit"].items()))
        return (
            f"its scorer pays the universal answer {probe!r} on {paid} of {load_audit()['problems']} problems "
            "(grpokit.tasks.gym_audit), and grpokit has no verifier for it"
        )
    return None


def summary(name: str) -> str:
    """One line for `grpokit tasks`: the dataset's audit result."""
    if name in REFUSED:
        return f"refused: {REFUSED[name]}"
    result = load_audit()["datasets"].get(name)
    if result is None:
        return "not audited (newer than the audit)"
    if "error" in result:
        return f"not audited: {result['error']}"
    if result.get("grpokit"):
        return f"refused: {refusal(name)}"
    if result.get("raw"):
        paid = ", ".join(f"{probe!r} on {n}" for probe, n in result["raw"].items())
        return f"grpokit verifier (reasoning-gym's scorer pays {paid})"
    return "pays no probe"


@lru_cache(maxsize=1)
def load_audit() -> dict[str, Any]:
    return json.loads(AUDIT_FILE.read_text(encoding="utf-8"))


def main(names: list[str] | None = None) -> dict[str, Any]:
    """Audit `names` (all datasets by default) and write `gym_audit.json`."""
    # optional dependency: reasoning-gym
    from reasoning_gym.factory import DATASETS

    result = {
        "reasoning_gym": importlib.metadata.version("reasoning-gym"),
        "problems": PROBLEMS,
        "seed": SEED,
        "datasets": {},
    }
    for name in names or sorted(DATASETS):
        found = audit_dataset(name)
        logger.info("%s: %s", name, found)
        found.pop("slow", None)  # seconds depend on the machine: `grpokit rewards check` times a recipe's own
        result["datasets"][name] = found
    AUDIT_FILE.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
