"""Dropping zero-advantage rows before the training pass must not change the update."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpokit.errors import RecipeError
from grpokit.recipe.load import build_recipe
from grpokit.recipe.trl_args import build_grpo_config
from grpokit.stages.trainer import _select_rows, keep_mask, skipping_is_exact
from tests import skip_run
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
        ({"top_entropy_quantile": 0.2}, False),
        ({"entropy_coef": 0.01}, False),
    ],
)
def test_skipping_only_where_it_is_exact(tiny_model_dir, tmp_path, grpo, exact):
    raw = tiny_recipe(tiny_model_dir, tmp_path)
    raw["grpo"].update(grpo)
    assert skipping_is_exact(build_grpo_config(build_recipe(raw), tmp_path / "g")) is exact


@pytest.fixture(scope="module")
def full_pass(tiny_model_dir, tmp_path_factory) -> dict[str, torch.Tensor]:
    """LoRA weights after training on every row, one process."""
    return skip_run.train(tiny_model_dir, tmp_path_factory.mktemp("full"), skip=False)


def test_skipping_gives_the_same_weights(tiny_model_dir, tmp_path, full_pass):
    skipped = skip_run.train(tiny_model_dir, tmp_path, skip=True)
    moved = [n for n in skipped if "lora_B" in n and skipped[n].abs().sum() > 0]
    assert moved, "the run trained at all"
    for name in skipped:
        torch.testing.assert_close(skipped[name], full_pass[name], rtol=1e-4, atol=1e-6)


def test_two_processes_skipping_give_the_weights_of_one_training_every_row(tiny_model_dir, tmp_path, full_pass):
    """The same rows split over two gloo ranks, each skipping its own zero-advantage rows (and keeping as many
    rows as the other): the loss's normaliser and DDP's averaging must still give one process's update."""
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    command = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "tests.skip_run"]
    done = subprocess.run(
        [sys.executable, *command, str(tiny_model_dir), str(tmp_path), "skip"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    two = torch.load(tmp_path / "weights.pt")
    assert two.keys() == full_pass.keys()
    for name in two:
        torch.testing.assert_close(two[name], full_pass[name], rtol=1e-4, atol=1e-6)


def _format_reward(prompts, completions, **kwargs):
    return [float("<answer>" in c) for c in completions]


def _trainer(tiny_model_dir, tmp_path, model=None, reward_funcs=None, trainer_kwargs=None, **grpo):
    """A GrpoTrainer on the tiny model, or `model` with its tokenizer (full fine-tune), scored by
    `reward_funcs` (default: the format reward), with `grpo` keys on top of the tiny recipe."""
    from grpokit.models.load import load_model
    from grpokit.stages import pipeline as train
    from grpokit.stages.trainer import GrpoOptions, GrpoTrainer
    from grpokit.tasks import build_task

    raw = tiny_recipe(tiny_model_dir, tmp_path, rewards=[{"name": "format"}])
    raw["grpo"].update(grpo)
    recipe = build_recipe(raw)
    loaded, tokenizer = load_model(recipe.model.name)
    return GrpoTrainer(
        model=loaded if model is None else model,
        reward_funcs=reward_funcs or [_format_reward],
        args=build_grpo_config(recipe, tmp_path / "grpo"),
        train_dataset=train.build_train_dataset(build_task("arithmetic"), tokenizer, recipe),
        processing_class=tokenizer,
        options=GrpoOptions(stop_texts=("</answer>",), **(trainer_kwargs or {})),
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

    with caplog.at_level(logging.INFO, logger="grpokit.stages.trainer"):
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

    with caplog.at_level(logging.INFO, logger="grpokit.stages.trainer"):
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


@pytest.mark.parametrize(("grpo", "skips"), [({}, False), ({"router_aux_loss_coef": 0.0}, True)])
def test_a_router_auxiliary_loss_turns_the_skip_off(tiny_model_dir, tmp_path, grpo, skips):
    """A MoE model's load-balancing loss covers every row's routing: dropping rows would change it."""
    from transformers import AutoTokenizer, MixtralConfig, MixtralForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    # Shrunk like the tiny Llama: one layer, two experts, one per token; the default router_aux_loss_coef.
    config = MixtralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=2,
        num_experts_per_tok=1,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    trainer = _trainer(tiny_model_dir, tmp_path, model=MixtralForCausalLM(config), **grpo)
    assert trainer.aux_loss_enabled is not skips
    assert trainer.skip_zero_advantage is skips


def test_the_rollout_copy_frees_its_weights_for_the_training_pass_and_samples_the_same(
    tiny_model_dir, tmp_path, monkeypatch
):
    """Between rollouts the merged copy holds no weights (the training pass gets their memory); rewritten
    for the next rollout, it draws the same tokens, so the run learns exactly what a kept copy's would."""
    import transformers

    from grpokit.models.load import load_model
    from grpokit.rollout.sampler import RolloutCopy
    from grpokit.stages import pipeline as train

    def run(out, release: bool):
        if not release:
            monkeypatch.setattr(RolloutCopy, "release", lambda self: None)
        recipe = build_recipe(tiny_recipe(tiny_model_dir, out, rewards=[{"name": "format"}]))
        transformers.set_seed(0)
        model, _ = load_model(recipe.model.name)
        drawn, held = [], []

        def by_length(prompts, completions, **kwargs):  # rewards that differ within groups: rows train
            drawn.extend(completions)
            return [float(len(c) % 3) for c in completions]

        trainer = _trainer(tiny_model_dir, out, model=train.attach_lora(model, recipe), reward_funcs=[by_length])
        compute_loss = trainer.compute_loss

        def spy(*args, **kwargs):
            held.append(sum(p.numel() for p in trainer.rollout_copy.model.parameters()))
            return compute_loss(*args, **kwargs)

        trainer.compute_loss = spy
        trainer.train()
        weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
        return drawn, held, weights

    drawn, held, weights = run(tmp_path / "released", release=True)
    assert len(held) == 2 and set(held) == {0}, "no copy weights during either step's training pass"
    kept_drawn, kept_held, kept_weights = run(tmp_path / "kept", release=False)
    assert min(kept_held) > 0
    assert drawn == kept_drawn and len(drawn) == 16  # two steps of 2 prompts x 4
    assert any(not torch.equal(w, torch.zeros_like(w)) for n, w in weights.items() if "lora_B" in n)
    for name, value in kept_weights.items():
        assert torch.equal(weights[name], value), name


def test_the_heap_is_trimmed_between_a_steps_rollout_and_its_training_pass(tiny_model_dir, tmp_path, monkeypatch):
    """Each phase's freed memory leaves before the next phase allocates (grpokit.kernels.memory.trim): after the
    rollout, before the training pass, and after the training pass, before the next step's rollout."""
    from grpokit.kernels import memory

    events: list[str] = []
    monkeypatch.setattr(memory, "trim", lambda: events.append("trim") or True)

    def by_length(prompts, completions, **kwargs):
        events.append("rollout")
        return [float(len(c) % 3) for c in completions]

    trainer = _trainer(tiny_model_dir, tmp_path, reward_funcs=[by_length])
    compute_loss = trainer.compute_loss

    def spy(*args, **kwargs):
        events.append("loss")
        return compute_loss(*args, **kwargs)

    trainer.compute_loss = spy
    trainer.train()
    assert events == ["rollout", "trim", "loss", "trim"] * 2


@pytest.mark.parametrize("on", [False, True])
def test_the_ratio_is_taken_against_the_samplers_log_probabilities(tiny_model_dir, tmp_path, on):
    """train_pass.sampler_logprobs: the batch's old log-probabilities are the ones each token was drawn
    with, so TRL's ratio is pi_theta / pi_sampler; here the sampler is the policy (fp32), so they equal
    the policy's own teacher-forced log-probabilities. Off: none, and TRL's ratio is the policy over itself."""
    trainer = _trainer(
        tiny_model_dir, tmp_path, trainer_kwargs={"sampler_logprobs": on}, reward_funcs=[_by_length], temperature=0.7
    )
    trainer.model.train()
    prompts = trainer.train_dataset.select(range(2)).to_list()
    batch = trainer._score([p for p in prompts for _ in range(trainer.num_generations)])
    if not on:
        assert "old_per_token_logps" not in batch
        return
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        policy, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, batch["completion_ids"].size(1)
        )
    kept = batch["completion_mask"].bool()
    assert kept.sum() > 0
    assert torch.allclose(batch["old_per_token_logps"][kept], policy[kept], atol=1e-4)


def test_sampler_log_probabilities_are_refused_where_trl_keeps_its_own(tiny_model_dir, tmp_path, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="grpokit.stages.trainer"):
        trainer = _trainer(tiny_model_dir, tmp_path, trainer_kwargs={"sampler_logprobs": True}, num_iterations=2)
    assert not trainer.sampler_logprobs
    assert any("sampler_logprobs ignored" in r.getMessage() for r in caplog.records)


def _by_length(prompts, completions, **kwargs):
    return [float(len(c) % 3) for c in completions]


def test_running_out_of_memory_names_the_recipe_settings_that_help(tiny_model_dir, tmp_path, monkeypatch):
    """A GRPO step that runs out of GPU memory fails with the allocator's message and the settings that
    lower the peak (micro-batches of half the current rows; checkpointing; fewer rows); the first two are
    keys a resumed run accepts changed (tests/test_resume.py)."""
    from trl import GRPOTrainer

    def out_of_memory(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(GRPOTrainer, "training_step", out_of_memory)
    trainer = _trainer(tiny_model_dir, tmp_path, loss_type="dapo")
    with pytest.raises(torch.OutOfMemoryError) as caught:
        trainer.train()
    message = str(caught.value)
    assert message.startswith("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert "8 completion rows a step" in message and "all at once" in message
    assert "`train_pass.micro_batch_rows: 4`" in message and "groups of 4 kept whole" in message
    assert "`grpo.gradient_checkpointing: true`" in message and "--resume" in message
    halved = _trainer(tiny_model_dir, tmp_path, loss_type="dapo", trainer_kwargs={"micro_batch_rows": 4})
    with pytest.raises(torch.OutOfMemoryError, match="micro-batches of 4 rows") as caught:
        halved.train()
    assert "`train_pass.micro_batch_rows: 2`" in str(caught.value)


def _characters(prompts, completions, **kwargs):  # differs within nearly every group: every row trained
    return [float(len(c)) for c in completions]


def _weights(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def test_a_pass_out_of_memory_runs_again_in_smaller_micro_batches(tiny_model_dir, tmp_path, monkeypatch, caplog):
    """A pass that runs out of GPU memory (here: any loss over more than 2 rows at once, after its backward has
    added part of a gradient) runs again on the same rows, halving its micro-batches until it fits (8 -> 4 ->
    2 rows), and keeps that size: the rollouts are drawn once a step and the update is that of a run that
    never ran out (plain SGD, so the update is the gradient)."""
    import logging

    from trl import GRPOTrainer

    from grpokit.models.load import load_model
    from grpokit.stages.trainer import GrpoTrainer

    def settings() -> dict:  # fp32 weights on a GPU too ("auto" is bf16 there), so sums differ only in rounding
        model = load_model(str(tiny_model_dir), dtype="float32")[0]
        return {"model": model, "reward_funcs": [_characters], "loss_type": "dapo", "max_steps": 2, "optim": "sgd"}

    whole = _trainer(tiny_model_dir, tmp_path / "whole", **settings())
    initial = _weights(whole)
    whole.train()
    expected = {n: w - initial[n] for n, w in _weights(whole).items()}

    compute_loss, generate, rollouts = GRPOTrainer.compute_loss, GrpoTrainer._generate_and_score_completions, []

    def limited(self, model, inputs, *args, **kwargs):
        loss = compute_loss(self, model, inputs, *args, **kwargs)
        self._metrics["train"]["pass_rows"].append(float(inputs["completion_ids"].size(0)))  # as TRL logs entropy
        if inputs["completion_ids"].size(0) > 2:
            loss.backward()  # part of a gradient in the parameters, as a backward that ran out halfway leaves
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return loss

    def counted(self, inputs):
        rollouts.append(len(inputs))
        return generate(self, inputs)

    monkeypatch.setattr(GRPOTrainer, "compute_loss", limited)
    monkeypatch.setattr(GrpoTrainer, "_generate_and_score_completions", counted)
    retried = _trainer(tiny_model_dir, tmp_path / "retried", **settings())
    with caplog.at_level(logging.WARNING, logger="grpokit.stages.trainer"):
        retried.train()
    assert len(rollouts) == 2  # one rollout a step: the retries trained the same rows
    assert retried.micro_batch_rows == 2
    halvings = [r.getMessage() for r in caplog.records if "out of GPU memory" in r.getMessage()]
    assert len(halvings) == 2 and "micro-batches of 4 rows" in halvings[0] and "of 2 rows" in halvings[1]
    assert any(d.abs().sum() > 0 for d in expected.values()), "the run trained at all"
    # What the passes logged: only the passes that finished (2 rows each), not the failed attempts (8, 4).
    assert [row["pass_rows"] for row in retried.state.log_history if "pass_rows" in row] == [2.0, 2.0]
    for name, weight in _weights(retried).items():
        torch.testing.assert_close(weight - initial[name], expected[name], rtol=1e-4, atol=1e-8)


def test_a_resumed_run_keeps_the_micro_batches_it_backed_off_to(tiny_model_dir, tmp_path, monkeypatch, caplog):
    """The size learned after running out of memory is saved with each checkpoint: resumed, the run trains in
    it from its first step (no failed pass to find it again), unless the recipe's own setting changed since."""
    import logging

    from trl import GRPOTrainer

    compute_loss, attempts = GRPOTrainer.compute_loss, []

    def limited(self, model, inputs, *args, **kwargs):
        attempts.append(inputs["completion_ids"].size(0))
        if inputs["completion_ids"].size(0) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return compute_loss(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "compute_loss", limited)

    def run(max_steps: int, **trainer_kwargs):  # rewards that differ within groups: every row is trained
        return _trainer(
            tiny_model_dir,
            tmp_path,
            reward_funcs=[_characters],
            trainer_kwargs=trainer_kwargs,
            loss_type="dapo",
            max_steps=max_steps,
        )

    first = run(1)
    first.train()
    assert first.micro_batch_rows == 2 and attempts[:2] == [8, 4]
    checkpoint = tmp_path / "grpo" / "checkpoint-1"

    attempts.clear()
    caplog.clear()
    resumed = run(2)
    with caplog.at_level(logging.INFO, logger="grpokit.stages.trainer"):
        resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.micro_batch_rows == 2
    assert attempts and set(attempts) == {2}, "the resumed step ran out of memory again"
    assert not [r for r in caplog.records if "out of GPU memory on" in r.getMessage()]
    assert [r for r in caplog.records if "as the run had learned" in r.getMessage()]

    attempts.clear()  # the recipe now asks for 4 rows at a time: its setting, not the learned one
    changed = run(2, micro_batch_rows=4)  # as the recipe's train_pass.micro_batch_rows reaches the trainer
    changed.train(resume_from_checkpoint=str(checkpoint))
    assert attempts[0] == 4 and changed.micro_batch_rows == 2  # tried its 4, backed off again


def test_out_of_memory_is_not_retried_once_a_gradient_accumulates(tiny_model_dir, tmp_path, monkeypatch):
    """With gradient accumulation, a pass that runs out of memory after an earlier accumulation step has
    added its gradient cannot start again: it fails with the recipe settings that help."""
    from trl import GRPOTrainer

    compute_loss = GRPOTrainer.compute_loss

    def limited(self, model, inputs, *args, **kwargs):
        if self._step % 2 == 1:  # the second accumulation step of each optimizer step
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return compute_loss(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "compute_loss", limited)
    trainer = _trainer(tiny_model_dir, tmp_path, loss_type="dapo", gradient_accumulation_steps=2)
    with pytest.raises(torch.OutOfMemoryError, match="`train_pass.micro_batch_rows: 4`"):
        trainer.train()
    assert trainer.micro_batch_rows is None


def test_the_temperature_schedule_reaches_sampler_and_loss_alike(tiny_model_dir, tmp_path, monkeypatch):
    """rollout.final_temperature: grpo.temperature (1.0) until step 1, linear to 0.5 at step 3, then 0.5; each
    step's rollout is drawn at its temperature and the loss scores the policy at the same one."""
    from grpokit.kernels import prefix
    from grpokit.stages import trainer

    drawn, scored = [], []
    sample, logps = trainer.sample, prefix.logps_and_entropies

    def sampled(model, rows, settings, **kwargs):
        drawn.append(settings.temperature)
        return sample(model, rows, settings, **kwargs)

    def scored_at(*args, temperature, **kwargs):
        scored.append(temperature)
        return logps(*args, temperature=temperature, **kwargs)

    monkeypatch.setattr(trainer, "sample", sampled)
    monkeypatch.setattr(prefix, "logps_and_entropies", scored_at)
    run = _trainer(
        tiny_model_dir,
        tmp_path,
        reward_funcs=[_characters],
        max_steps=5,
        trainer_kwargs={"temperature_schedule": (0.5, 1, 3)},
    )
    run.train()
    assert drawn == [1.0, 1.0, 0.75, 0.5, 0.5]
    assert sorted(set(scored), reverse=True) == [1.0, 0.75, 0.5]  # every pass at a temperature drawn with
    assert [row["temperature"] for row in run.state.log_history if "temperature" in row] == [1.0, 1.0, 0.75, 0.5, 0.5]


def test_a_recipe_anneals_over_the_stage_unless_told_how_many_steps(tiny_model_dir, tmp_path):
    from grpokit.stages.grpo import _temperature_schedule

    raw = tiny_recipe(tiny_model_dir, tmp_path)
    assert _temperature_schedule(build_recipe(raw), 55) is None
    raw["rollout"] = {"final_temperature": 0.6}
    assert _temperature_schedule(build_recipe(raw), 55) == (0.6, 0, 55)
    raw["rollout"].update(temperature_from_step=10, temperature_steps=20)
    assert _temperature_schedule(build_recipe(raw), 55) == (0.6, 10, 20)
    raw["rollout"]["temperature_from_step"] = 20
    with pytest.raises(RecipeError, match="rollout.temperature_from_step=20"):
        build_recipe(raw)
    raw["rollout"]["final_temperature"] = 0
    with pytest.raises(RecipeError, match="rollout.final_temperature=0"):
        build_recipe(raw)
    raw["rollout"] = {"engine": "vllm"}  # vLLM is grpo.use_vllm; the rollout section was not checked before
    with pytest.raises(RecipeError, match="rollout.engine='vllm'; use grpokit or trl"):
        build_recipe(raw)


def test_entropy_is_logged_over_every_sampled_row_not_only_the_trained_ones(tiny_model_dir, tmp_path):
    """A uniform group's rows are not trained (the skip), but the policy drew them: the logged `entropy`
    (which the entropy-collapse warning reads) is the mean over every drawn token, TRL's over the trained
    rows moves to `entropy/trained`."""
    trainer = _trainer(tiny_model_dir, tmp_path, reward_funcs=[_uniform_first_prompt], temperature=0.7)
    assert trainer.skip_zero_advantage
    trainer.model.train()
    prompts = trainer.train_dataset.select(range(2)).to_list()
    drawn, score = [], trainer._score
    trainer._score = lambda rows: drawn.append(score(rows)) or drawn[-1]
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions([p for p in prompts for _ in range(trainer.num_generations)])
    (scored,) = drawn
    assert batch["advantages"].numel() < scored["advantages"].numel()  # the uniform group was dropped
    ids = torch.cat([scored["prompt_ids"], scored["completion_ids"]], dim=1)
    mask = torch.cat([scored["prompt_mask"], scored["completion_mask"]], dim=1)
    with torch.no_grad():
        _, entropies, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, scored["completion_ids"].size(1), compute_entropy=True
        )
    kept = scored["completion_mask"].bool()
    metrics = trainer._metrics["train"]
    assert metrics["entropy"] == [pytest.approx(entropies[kept].mean().item(), abs=1e-4)]
    trainer.current_gradient_accumulation_steps = 1  # what TRL's training step sets before the loss
    trainer.compute_loss(trainer.model, batch)
    assert len(metrics["entropy"]) == 1 and len(metrics["entropy/trained"]) == 1


def _uniform_first_prompt(prompts, completions, **kwargs):  # the first prompt's group uniform, the rest by length
    return [1.0 if p == prompts[0] else float(len(c)) for p, c in zip(prompts, completions, strict=True)]


@pytest.mark.parametrize(
    "setting", [{"trainer_kwargs": {"shared_prefix": False}}, {"activation_checkpointing": True}], ids=["trl", "ckpt"]
)
def test_trls_pass_scores_at_the_scheduled_temperature(tiny_model_dir, tmp_path, setting):
    """TRL's pass (shared_prefix off, or gradient checkpointing, where grpokit's refuses) divides the logits
    by the temperature its fused LM head was built with: after the schedule moved it to 0.5, the returned
    log-probabilities must be log_softmax(logits / 0.5), not those at grpo.temperature (1.0)."""
    from grpokit.models.load import load_model

    kwargs = {**setting.get("trainer_kwargs", {}), "temperature_schedule": (0.5, 0, 1)}
    grpo = {k: v for k, v in setting.items() if k != "trainer_kwargs"}
    model, _ = load_model(str(tiny_model_dir))
    if grpo:  # as a run's model is by the time the trainer is built (HF's Trainer turns it on in train())
        model.gradient_checkpointing_enable()
    trainer = _trainer(tiny_model_dir, tmp_path, model=model, trainer_kwargs=kwargs, **grpo)
    assert not trainer.shared_prefix  # TRL's pass
    trainer.state.global_step = 1
    trainer._schedule_temperature()
    assert trainer.temperature == 0.5
    trainer.model.train()
    ids = torch.tensor([[5, 9, 13, 2, 20, 21, 22, 30], [7, 3, 4, 6, 40, 41, 42, 43]])
    mask = torch.ones_like(ids)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, 4)
    with torch.no_grad():
        logits = trainer.model(input_ids=ids, attention_mask=mask).logits[:, -5:-1].float()
    expected = (logits / 0.5).log_softmax(-1).gather(-1, ids[:, -4:].unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(logps.detach(), expected, rtol=1e-4, atol=1e-4)
    assert logps.requires_grad


def test_a_temperature_schedule_is_refused_with_vllm(tiny_model_dir, tmp_path):
    raw = tiny_recipe(tiny_model_dir, tmp_path)
    raw["rollout"] = {"final_temperature": 0.6}
    raw["grpo"]["use_vllm"] = True
    with pytest.raises(RecipeError, match="rollout.final_temperature: vLLM samples at the temperature"):
        build_recipe(raw)


def test_micro_batches_with_an_entropy_bonus_give_the_whole_batchs_loss_and_gradient(tiny_model_dir, tmp_path):
    """TRL adds its entropy bonus as a mean over the tokens of each loss call: in micro-batches it was counted
    once per micro-batch (issue 52: -0.732 whole against -2.527, gradients 8% apart). Micro-batches are
    refused with it, and the out-of-memory back-off never switches them on."""
    from grpokit.models.load import load_model

    def build(out, rows):
        model = load_model(str(tiny_model_dir), dtype="float32")[0]
        extra = {"micro_batch_rows": rows} if rows else {}
        trainer = _trainer(
            tiny_model_dir, out, model=model, reward_funcs=[_characters], trainer_kwargs=extra, entropy_coef=0.1
        )
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # what TRL's training step sets before the loss
        return trainer

    whole, parts = build(tmp_path / "whole", None), build(tmp_path / "parts", 2)
    prompts = whole.train_dataset.select(range(2)).to_list()
    torch.manual_seed(0)
    batch = whole._generate_and_score_completions([p for p in prompts for _ in range(whole.num_generations)])
    assert batch["advantages"].numel() == 8 and parts._smaller_micro_batch(batch) is None
    results = []
    for trainer in (whole, parts):
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        results.append((loss.detach(), grads))
    (loss, grads), (parts_loss, parts_grads) = results
    torch.testing.assert_close(parts_loss, loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == parts_grads.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(parts_grads[name], grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rollout_engine": "trl"}, "rollouts do not run on grpokit's sampler"),
        ({"sampler_logprobs": True}, "sampler_logprobs already takes the loss's ratio against the sampler"),
        ({"importance_sampling_cap": 0.5}, "use a cap >= 1"),
    ],
)
def test_truncated_importance_sampling_is_refused_where_it_cannot_apply(tiny_model_dir, tmp_path, kwargs, message):
    """The cap needs the log-probabilities grpokit's sampler drew with, and is not a second correction on
    top of sampler_logprobs' ratio (vLLM: refused in the recipe, tests/test_config.py)."""
    with pytest.raises(ValueError, match=f"train_pass.importance_sampling_cap=.*{message}"):
        _trainer(tiny_model_dir, tmp_path, trainer_kwargs={"importance_sampling_cap": 2.0, **kwargs})


def test_a_training_step_measures_its_sampler_against_the_policy(tiny_model_dir, tmp_path):
    """In training, grpokit's sampler always returns its log-probabilities, and each step logs the
    sampler/policy gap over the tokens it trains; here the sampler is the fp32 policy itself, so the gap is
    rounding and the truncated importance weights are 1."""
    trainer = _trainer(
        tiny_model_dir, tmp_path, reward_funcs=[_characters], trainer_kwargs={"importance_sampling_cap": 2.0}
    )
    trainer.model.train()
    prompts = trainer.train_dataset.select(range(2)).to_list()
    batch = trainer._score([p for p in prompts for _ in range(trainer.num_generations)])
    assert batch["sampling_per_token_logps"].shape == batch["completion_ids"].shape
    assert "old_per_token_logps" not in batch  # the ratio stays TRL's on-policy one
    trainer.train()
    logged = [row for row in trainer.state.log_history if "sampling/sampling_logp_difference/mean" in row]
    assert len(logged) == trainer.args.max_steps
    for row in logged:
        assert 0 <= row["sampling/sampling_logp_difference/mean"] <= row["sampling/sampling_logp_difference/max"]
        assert row["sampling/sampling_logp_difference/max"] < 1e-3
        assert row["sampling/importance_sampling_ratio/mean"] == pytest.approx(1.0, abs=1e-3)
