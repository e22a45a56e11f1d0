"""Dropping zero-advantage rows before the training pass must not change the update."""

import pytest
import torch

from grpokit.config import build_grpo_config, build_recipe
from grpokit.trainer import _select_rows, keep_mask, skipping_is_exact
from tests.conftest import tiny_recipe


def test_keep_mask_keeps_informative_rows_and_at_least_one():
    batch = {"advantages": torch.tensor([0.0, 0.5, -0.5, 0.0])}
    assert keep_mask(batch).tolist() == [False, True, True, False]
    assert keep_mask({"advantages": torch.zeros(4)}).tolist() == [True, False, False, False]


def test_select_rows_filters_per_row_values_only():
    batch = {
        "advantages": torch.tensor([0.0, 1.0, -1.0]),
        "completion_ids": torch.arange(6).view(3, 2),
        "num_items_in_batch": torch.tensor(42),
        "names": ["a", "b", "c"],
    }
    out = _select_rows(batch, keep_mask(batch))
    assert out["completion_ids"].tolist() == [[2, 3], [4, 5]]
    assert out["names"] == ["b", "c"]
    assert out["num_items_in_batch"].item() == 42  # the loss normaliser stays the whole batch's


@pytest.mark.parametrize(
    ("grpo", "exact"),
    [
        ({}, True),
        ({"beta": 0.04}, False),
        ({"loss_type": "grpo"}, False),
        ({"loss_type": "cispo"}, True),
        ({"steps_per_generation": 2}, False),
    ],
)
def test_skipping_only_where_it_is_exact(tiny_model_dir, tmp_path, grpo, exact):
    raw = tiny_recipe(tiny_model_dir, tmp_path)
    raw["grpo"].update(grpo)
    assert skipping_is_exact(build_grpo_config(build_recipe(raw), tmp_path / "g")) is exact


def _train(tiny_model_dir, tmp_path, skip: bool) -> dict[str, torch.Tensor]:
    import transformers

    from grpokit import train
    from grpokit.models import load_model
    from grpokit.tasks import build_task
    from grpokit.trainer import GrpoTrainer

    def half_uniform(prompts, completions, answer, **kwargs):
        # Prompts with an even answer: every completion gets 1 (a zero-advantage group); others: by length.
        return [1.0 if a % 2 == 0 else float(len(c) % 3) for c, a in zip(completions, answer, strict=True)]

    raw = tiny_recipe(tiny_model_dir, tmp_path / str(skip), rewards=[{"name": "format"}])  # one weight
    # 4 groups a step; one step, since later samples depend on float-order-level weight differences
    raw["grpo"].update({"per_device_train_batch_size": 16, "num_generations": 4, "max_steps": 1})
    # Plain SGD: an Adam step is nearly sign(gradient) and would hide a wrongly scaled loss.
    raw["grpo"].update({"optim": "sgd", "learning_rate": 1.0, "warmup_steps": 0})
    recipe = build_recipe(raw)
    transformers.set_seed(0)
    model, tokenizer = load_model(recipe.model.name)
    model = train.attach_lora(model, recipe)
    data = train.build_train_dataset(build_task("arithmetic"), tokenizer, recipe)
    trainer = GrpoTrainer(
        model=model,
        reward_funcs=[half_uniform],
        processing_class=tokenizer,
        args=build_grpo_config(recipe, tmp_path / f"g{skip}"),
        train_dataset=data,
        skip_zero_advantage=skip,
    )
    trainer.train()
    logged = [row for row in trainer.state.log_history if "rows_trained_frac" in row]
    if skip:
        assert any(row["rows_trained_frac"] < 1.0 for row in logged), "some rows were skipped"
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}


def test_skipping_gives_the_same_weights(tiny_model_dir, tmp_path):
    skipped = _train(tiny_model_dir, tmp_path, skip=True)
    full = _train(tiny_model_dir, tmp_path, skip=False)
    moved = [n for n in skipped if "lora_B" in n and skipped[n].abs().sum() > 0]
    assert moved, "the run trained at all"
    for name in skipped:
        torch.testing.assert_close(skipped[name], full[name], rtol=1e-4, atol=1e-6)


def _format_reward(prompts, completions, **kwargs):
    return [float("<answer>" in c) for c in completions]


def _trainer(tiny_model_dir, tmp_path, model=None, **grpo):
    """A GrpoTrainer on the tiny model, or `model` with its tokenizer (full fine-tune), with `grpo` keys on
    top of the tiny recipe."""
    from grpokit import train
    from grpokit.models import load_model
    from grpokit.tasks import build_task
    from grpokit.trainer import GrpoTrainer

    raw = tiny_recipe(tiny_model_dir, tmp_path, rewards=[{"name": "format"}])
    raw["grpo"].update(grpo)
    recipe = build_recipe(raw)
    loaded, tokenizer = load_model(recipe.model.name)
    return GrpoTrainer(
        model=loaded if model is None else model,
        reward_funcs=[_format_reward],
        args=build_grpo_config(recipe, tmp_path / "grpo"),
        train_dataset=train.build_train_dataset(build_task("arithmetic"), tokenizer, recipe),
        processing_class=tokenizer,
        stop_texts=("</answer>",),
    )


def _fallback_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "TRL's generation" in r.getMessage()]


@pytest.mark.parametrize(
    ("grpo", "named"),
    [
        ({"generation_kwargs": {"suppress_tokens": [5]}}, "suppress_tokens"),
        ({"generation_kwargs": {"bad_words_ids": [[5, 6]]}}, "bad_words_ids"),
        ({"generation_kwargs": {"no_repeat_ngram_size": 2}}, "no_repeat_ngram_size"),
        ({"generation_kwargs": {"typical_p": 0.9}}, "typical_p"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"min_p": 0.1}, "min_p"),
    ],
)
def test_a_setting_the_sampler_lacks_sends_rollouts_to_trl_with_one_log_line(
    tiny_model_dir, tmp_path, caplog, monkeypatch, grpo, named
):
    import logging

    from trl import GRPOTrainer

    with caplog.at_level(logging.INFO, logger="grpokit.trainer"):
        trainer = _trainer(tiny_model_dir, tmp_path, **grpo)
        calls = []
        monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", lambda self, *a, **k: calls.append(a) or ([], None))
        trainer._generate_single_turn([[5, 9, 13]] * 4, None, {}, 4)
        trainer._generate_single_turn([[5, 9, 13]] * 4, None, {}, 4)
    (line,) = _fallback_lines(caplog)  # once for the run, not once per rollout
    assert named in line and "</answer>" in line
    assert len(calls) == 2, "TRL's generation, which follows every setting, drew the completions"


def test_settings_the_sampler_follows_stay_on_it(tiny_model_dir, tmp_path, caplog):
    """Temperature, top-k/p, min_new_tokens and an eos_token_id override: no fallback, and the override ends rows."""
    import logging

    with caplog.at_level(logging.INFO, logger="grpokit.trainer"):
        greedy = _trainer(tiny_model_dir, tmp_path / "a", top_k=1, top_p=0.9, temperature=0.7)
        assert greedy._rollout_settings(None, {}) is not None
        prompt = [40, 50, 60, 70]  # the random tiny model repeats a token, then switches to another
        (free, *_), _ = greedy._generate_single_turn([prompt] * 2, None, {}, 2)
        stop_at = next(i for i in range(1, len(free)) if free[i] not in free[:i])
        stopper = _trainer(
            tiny_model_dir,
            tmp_path / "b",
            top_k=1,
            generation_kwargs={"eos_token_id": free[stop_at], "min_new_tokens": 1},
        )
        settings = stopper._rollout_settings(None, {})
        (row, *_), _ = stopper._generate_single_turn([prompt] * 2, None, {}, 2)
    assert _fallback_lines(caplog) == []
    assert settings.min_new_tokens == 1 and settings.top_k == 1
    assert row == free[: stop_at + 1], "the completion ends at the eos_token_id override"
