"""`grpokit export RUN OUT`: one plain transformers model folder from a run (LoRA merged in).

The folder loads with `transformers.pipeline("text-generation", model=OUT)` alone: merged safetensors weights,
tokenizer, generation config, and a chat template that renders the prompt training saw (the task's instruction
as the default system message, the recipe's `chat_template_kwargs` as the switches' defaults, the thought
opened when `task.prefill_think` did), so a plain chat call answers in the trained format.
`grpokit_export.json` records where it came from, tags included; README.md is the model card
(`grpokit.models.card`), built from what the run logged.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from grpokit.models.card import write_card
from grpokit.models.load import load_trained
from grpokit.recipe.load import load_recipe
from grpokit.tasks import get_task_class
from grpokit.tasks.base import render_prompt

log = logging.getLogger(__name__)

EXPORT_DIRNAME = "export"  # RUN/export: where `grpokit export` and `grpokit push` put a run when not told otherwise


def default_export_dir(run_dir: Path) -> Path:
    return Path(run_dir) / EXPORT_DIRNAME


def default_system_template(template: str, system_prompt: str) -> str:
    """Wrap a chat template so that a conversation without a system message gets `system_prompt`.

    >>> from jinja2 import Template
    >>> t = "{% for m in messages %}[{{ m.role }}: {{ m.content }}]{% endfor %}"
    >>> Template(default_system_template(t, "Think first.")).render(messages=[{"role": "user", "content": "hi"}])
    '[system: Think first.][user: hi]'
    """
    escaped = json.dumps(system_prompt)  # a valid Jinja string literal
    prefix = (
        "{%- if not messages or messages[0]['role'] != 'system' -%}"
        f"{{%- set messages = [{{'role': 'system', 'content': {escaped}}}] + messages -%}}"
        "{%- endif -%}"
    )
    return prefix + template


def default_switches(template: str, switches: dict[str, Any]) -> str:
    """Wrap a chat template so that its switches (`enable_thinking`, ...) default to the recipe's values,
    and a plain `apply_chat_template` call renders the prompt the model was trained on.

    >>> from jinja2 import Template
    >>> t = "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}hi"
    >>> wrapped = default_switches(t, {"enable_thinking": False})
    >>> Template(wrapped).render(), Template(wrapped).render(enable_thinking=True)
    ('<think></think>hi', 'hi')
    """
    prefix = ""
    for name, value in switches.items():
        if not name.isidentifier():
            raise ValueError(f"chat_template_kwargs key {name!r} is not a template variable name")
        literal = "none" if value is None else json.dumps(value)  # JSON scalars and lists are Jinja literals
        prefix += f"{{%- if {name} is not defined -%}}{{%- set {name} = {literal} -%}}{{%- endif -%}}"
    return prefix + template


def prefill_generation(template: str, prefill: str) -> str:
    """Wrap a chat template so that its generation prompt ends with `prefill` (the recipe's `task.prefill`).

    Appended after the template, outside any whitespace control, so everything else renders as before.

    >>> from jinja2 import Template
    >>> t = "{% for m in messages %}{{ m.content }}|{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
    >>> messages = [{"content": "hi"}]
    >>> wrapped = Template(prefill_generation(t, "<think>"))
    >>> wrapped.render(messages=messages, add_generation_prompt=True), wrapped.render(messages=messages)
    ('hi|A:<think>', 'hi|')
    """
    return template + f"{{% if add_generation_prompt %}}{{{{ {json.dumps(prefill)} }}}}{{% endif %}}"


def main(run_dir: str | Path, out: str | Path) -> Path:
    run_dir, out = Path(run_dir), Path(out)
    recipe_path = run_dir / "recipe.yaml"
    if not recipe_path.is_file():
        raise FileNotFoundError(f"{run_dir} has no recipe.yaml: export takes a grpokit run directory")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; choose a new folder (nothing was written)")
    recipe = load_recipe(recipe_path)
    model, tokenizer = load_trained(run_dir, recipe.model.name, recipe.model.dtype, recipe.model.revision)
    if hasattr(model, "merge_and_unload"):
        log.info("merging the LoRA adapter into the base weights")
        model = model.merge_and_unload()
    system_prompt = recipe.task.system_prompt or get_task_class(recipe.task.name).instruction(recipe.task.tags)
    template = default_switches(tokenizer.chat_template, recipe.chat_template_kwargs)
    conversation = [{"role": "system", "content": system_prompt}, {"role": "user", "content": "1 + 1"}]
    switches, prefill = recipe.chat_template_kwargs, recipe.task.prefill
    if render_prompt(tokenizer, conversation, switches, prefill) != render_prompt(tokenizer, conversation, switches):
        template = prefill_generation(template, prefill)  # grpokit opened the thought, not the template
    tokenizer.chat_template = default_system_template(template, system_prompt)
    tokenizer.padding_side = "left"
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    provenance = {
        "run": str(run_dir.resolve()),
        "base_model": recipe.model.name,
        "task": recipe.task.name,
        "system_prompt": system_prompt,
        "tags": {"think": recipe.task.tags.think, "answer": recipe.task.tags.answer},
        "prefill_think": recipe.task.prefill_think,
    }
    (out / "grpokit_export.json").write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    write_card(run_dir, out)
    log.info("exported to %s", out)
    return out
