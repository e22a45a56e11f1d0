"""bench/bench_step.py's grpokit contenders: the headline one is handed what `grpokit train` hands its
trainer for the default recipe, the one-batch one the same without dynamic sampling. Nothing is trained."""

import pytest

from grpokit.recipe.load import load_recipe
from grpokit.recipe.stages import stage_recipe
from grpokit.tasks import build_task
from tests.conftest import load_script

DYNAMIC = ("dynamic_max_extra", "dynamic_replay", "dynamic_retry", "dynamic_upfront", "downsample_to", "guide")


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/bench_step.py")


def test_the_grpokit_contender_runs_the_recipe_as_grpokit_train_does(bench):
    recipe = load_recipe(bench.RECIPE)
    seen = stage_recipe(recipe, next(s for s in recipe.stages if s.kind == "grpo"))
    work = bench.Workload("recipe", "embedded", 64, 0, 1.0, 3e-4, recipe=seen, lora=True)
    task = build_task(seen.task.name, seen.task.params)
    full = bench.grpokit_kwargs("grpokit", work, task, None, 4)
    dynamic = seen.dynamic_sampling
    assert full["dynamic_max_extra"] == dynamic.max_extra and full["downsample_to"] == dynamic.downsample_to
    assert full["dynamic_retry"] == dynamic.retry >= 1  # the default recipe retries failed prompts ...
    row = task.example("train", 0)
    assert full["guide"](row) == task.demonstration(row)  # ... with the task's demonstration in one row
    assert full["micro_batch_rows"] == seen.train_pass.micro_batch_rows and full["stop_texts"]

    one = bench.grpokit_kwargs("grpokit-one-batch", work, task, None, 4)
    assert [one[k] for k in DYNAMIC] == [None, 0, 0, False, None, None]  # TRL's amount of sampling
    assert {k: v for k, v in one.items() if k not in DYNAMIC} == {k: v for k, v in full.items() if k not in DYNAMIC}
