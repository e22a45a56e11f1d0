"""Multi-stage recipes: stages run in order on the policy the last one left, each evaluated; resume inside any."""

import json
import re

import pytest
import torch

from grpokit.errors import RecipeError, TrainingInterrupted
from grpokit.recipe.load import build_recipe
from grpokit.stages import pipeline as train
from tests.conftest import tiny_recipe
from tests.runs.test_resume import SignalAt


def staged(tiny_model_dir, out, **extra):
    raw = tiny_recipe(tiny_model_dir, out, **extra)
    raw["stages"] = [
        {"name": "warmup", "kind": "sft", "steps": 2},
        # A format stage on an easier task, then correctness with a KL term to the policy as it starts.
        {"name": "format", "steps": 2, "rewards": [{"name": "tag_count"}], "task_params": {"max_value": 5}},
        {"name": "answers", "steps": 2, "learning_rate": 5e-3, "grpo": {"beta": 0.5}},
    ]
    return raw


def rows_of(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_stages_run_in_order_each_with_its_own_rewards_and_evaluation(tiny_model_dir, tmp_path):
    run_dir = train.main(build_recipe(staged(tiny_model_dir, tmp_path)))
    stages = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert [(s["name"], s["kind"]) for s in stages] == [
        ("before", "eval"),
        ("warmup", "sft"),
        ("format", "grpo"),
        ("answers", "grpo"),
    ]
    assert stages[3]["gain"] == stages[3]["accuracy"] - stages[2]["accuracy"]
    for name in ("warmup", "format", "answers"):
        assert (run_dir / name / "adapter" / "adapter_config.json").is_file(), name
        assert (run_dir / f"eval_{name}.json").is_file(), name
    rows = rows_of(run_dir)
    logged = {r["stage"] for r in rows}
    assert logged == {"warmup", "format", "answers"}
    assert all("rewards/tag_count/mean" in r for r in rows if r["stage"] == "format" and "reward" in r)
    answers = [r for r in rows if r["stage"] == "answers" and "reward" in r]
    assert answers and all("rewards/correctness/mean" in r for r in answers)
    # The KL reference of a stage is the policy as it starts: KL is 0 at its first step.
    assert answers[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    recipe = json.loads(json.dumps(build_recipe(staged(tiny_model_dir, tmp_path)).to_dict()))
    assert recipe["stages"][1]["task_params"] == {"max_value": 5}
    assert not (run_dir / "adapter" / "ref").exists()  # TRL's reference copy is not part of the result
    # The report lays the stages on one axis: GRPO steps count on across the two GRPO stages.
    from grpokit.report.page import timeline

    assert [(x, label) for x, label, _ in timeline(run_dir)] == [
        (0, "before"),
        (0, "warmup"),
        (2, "format"),
        (4, "answers"),
    ]
    page = (run_dir / "report.html").read_text()
    assert all(f"<td>{name}</td>" in page for name in ("warmup", "format", "answers")) and "GRPO added" in page


def test_a_stage_trains_on_its_own_task_params_and_is_evaluated_on_the_recipes(tiny_model_dir, tmp_path):
    """The R1-zero recipe's first stage trains on `a + b` and `a * b`; every stage is evaluated on the
    recipe's own held-out `a + b * c`."""
    import re
    from pathlib import Path

    from transformers import TrainerCallback

    def operators(text):
        (expression,) = re.findall(r"What is ([-0-9 +*]+)\?", text)
        return len(re.findall(r" [-+*] ", expression))

    prompts = {}

    class Prompts(TrainerCallback):
        def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
            prompts[Path(args.output_dir).name] = [str(row["prompt"]) for row in train_dataloader.dataset]

    raw = tiny_recipe(tiny_model_dir, tmp_path)
    raw["stages"] = [
        {"name": "easy", "steps": 1, "task_params": {"operands": 2, "all_operators": False}},
        {"name": "full", "steps": 1},
    ]
    run_dir = train.main(build_recipe(raw), callbacks=[Prompts()])
    assert {operators(p) for p in prompts["easy"]} == {1}
    assert {operators(p) for p in prompts["full"]} == {2}
    for name in ("before", "easy", "full"):
        samples = json.loads((run_dir / f"eval_{name}.json").read_text())["samples"]
        assert samples and {operators(s["question"]) for s in samples} == {2}, name


@pytest.mark.parametrize("at", [1, 2])  # mid-stage, and after its last step before its evaluation
def test_resume_continues_inside_a_later_stage(tiny_model_dir, tmp_path, at):
    import torch

    from tests.runs.test_resume import adapter_weights

    straight = train.main(build_recipe(staged(tiny_model_dir, tmp_path / "straight", output={"save_every": 1})))
    recipe = build_recipe(staged(tiny_model_dir, tmp_path / "halted", output={"save_every": 1}))

    class SecondGrpoStage(SignalAt):
        def on_step_begin(self, args, state, control, **kwargs):
            if "answers" in args.output_dir:
                super().on_step_begin(args, state, control, **kwargs)

    with pytest.raises(TrainingInterrupted, match="stage answers"):
        train.main(recipe, callbacks=[SecondGrpoStage(at)])
    (run_dir,) = (tmp_path / "halted" / "tiny").iterdir()
    before = (run_dir / "eval_before.json").stat().st_mtime
    assert [s["name"] for s in json.loads((run_dir / "stages.json").read_text())] == ["before", "warmup", "format"]
    resumed = train.main(recipe, resume=run_dir)
    assert (run_dir / "eval_before.json").stat().st_mtime == before  # finished stages are not redone
    stages = json.loads((resumed / "summary.json").read_text())["stages"]
    assert [s["name"] for s in stages] == ["before", "warmup", "format", "answers"]
    a, b = adapter_weights(straight), adapter_weights(resumed)
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6), name
    steps = [r["step"] for r in rows_of(run_dir) if r["stage"] == "answers" and "reward" in r]
    assert steps == [1, 2], [(r["step"], sorted(r)[:3]) for r in rows_of(run_dir) if r["stage"] == "answers"]


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([{"name": "a", "max_minutes": 0}], "stage 'a': max_minutes=0.0; use a positive number of minutes"),
        ([{"name": "a", "max_minutes": -5}], "max_minutes=-5.0"),
        ([{"name": "a", "max_minutes": float("inf")}], "max_minutes=inf"),
        ([{"name": "a", "max_minutes": "ten"}], "max_minutes='ten' should be float"),
        ([{"name": "a", "max_run_minutes": 0}], "stage 'a': max_run_minutes=0.0; use a positive number of minutes"),
        ([{"name": "a", "max_run_minutes": float("nan")}], "max_run_minutes=nan"),
        ([{"name": "a", "kind": "sft", "eval_every": -1}], "stage 'a': eval_every=-1"),
        ([{"name": "a"}, {"name": "a"}], "stage names must differ"),
        ([{"name": "a", "kind": "ppo"}], "kind='ppo'"),
        ([{"name": "before"}], "stage name 'before'"),
        ([{"name": "a", "task_params": {"max_value": -99}}], "stage 'a'"),
        ([{"name": "a", "rewards": [{"name": "nope"}]}], "unknown reward 'nope'"),
        ([{"name": "a", "kind": "sft", "rewards": [{"name": "format"}]}, {"name": "b"}], "sft stage"),
        ([{"name": "a", "grpo": {"learnin_rate": 1}}], "grpo.learnin_rate"),
    ],
)
def test_bad_stages_fail_when_the_recipe_loads(tiny_model_dir, tmp_path, stages, message):
    raw = tiny_recipe(tiny_model_dir, tmp_path)
    raw["stages"] = stages
    with pytest.raises(RecipeError, match=message):
        build_recipe(raw)


@pytest.mark.parametrize("limit", ["max_minutes", "max_run_minutes"])
def test_a_time_budget_stops_sft_and_grpo_stages_after_the_step_it_ran_out(tiny_model_dir, tmp_path, limit):
    raw = tiny_recipe(tiny_model_dir, tmp_path, eval={"every": 1, "every_n": 2})
    # A budget any step exceeds: each stage stops after its first step of 5 (sft) and 3 (grpo).
    raw["stages"] = [
        {"name": "warmup", "kind": "sft", "steps": 5, limit: 1e-9},
        {"name": "grpo", "steps": 3, limit: 1e-9},
    ]
    run_dir = train.main(build_recipe(raw))
    rows = rows_of(run_dir)
    assert [r["step"] for r in rows if r["stage"] == "warmup" and "loss" in r] == [1]
    assert [r["step"] for r in rows if r["stage"] == "grpo" and "reward" in r] == [1]
    names = [s["name"] for s in json.loads((run_dir / "stages.json").read_text())]
    assert names == ["before", "warmup", "grpo"]  # each stopped stage is evaluated and the run goes on
    log = (run_dir / "train.log").read_text()
    which = "time budget" if limit == "max_minutes" else "run time limit"
    for stage in ("warmup", "grpo"):
        assert log.count(f"stage {stage}: {which} of 1e-09 min reached after step 1") == 1, stage
        # Each stage starts past a run time limit this small, and says so before its one step.
        late = rf"stage {stage} starts at minute [0-9.]+ of the run, past its max_run_minutes of 1e-09: it trains one"
        assert len(re.findall(late, log)) == (limit == "max_run_minutes"), stage
    # No periodic eval after the step the budget stopped at: the stage's own evaluation follows.
    assert not any("eval/accuracy" in r for r in rows)


def test_the_budget_counts_training_steps_not_the_evaluations_between_them(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from transformers import TrainerControl

    from grpokit.stages import callbacks

    now = [0.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: now[0])
    budget, metrics = callbacks.TimeBudget("grpo", minutes=1.0), callbacks.MetricsLog(tmp_path / "metrics.jsonl")
    hooks, control = [budget.callback(), metrics.callback()], TrainerControl()
    args = SimpleNamespace(device="cpu")
    state = SimpleNamespace(global_step=0, max_steps=5, is_world_process_zero=True)
    hooks[1].on_train_begin(args, state, control)
    for step in range(1, 6):
        for hook in hooks:
            hook.on_step_begin(args, state, control)
        now[0] += 25.0  # a 25 s step
        state.global_step = step
        for hook in hooks:
            hook.on_step_end(args, state, control)
        hooks[1].on_log(args, state, control, logs={"loss": 1.0})
        if control.should_training_stop:
            break
        now[0] += 100.0  # an evaluation between steps: wall time would pass the budget after step 2
    assert (budget.reached_at, state.global_step, budget.seconds) == (3, 3, 75.0)
    # metrics.jsonl logs the same clock, which bench/time_to_skill.py draws against.
    assert [json.loads(line)["train_seconds"] for line in (tmp_path / "metrics.jsonl").open()] == [25, 50, 75]


def test_the_run_time_limit_counts_the_evaluations_and_earlier_stages(monkeypatch):
    from types import SimpleNamespace

    from transformers import TrainerControl

    from grpokit.stages import callbacks

    now = [600.0]  # the run started at 0: loading, the first evaluation and a warm-up took 10 minutes
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: now[0])
    budget = callbacks.TimeBudget("grpo", run_minutes=15.0, run_started=0.0)
    hook, control = budget.callback(), TrainerControl()
    args, state = SimpleNamespace(device="cpu"), SimpleNamespace(global_step=0, is_world_process_zero=True)
    for step in range(1, 20):
        hook.on_step_begin(args, state, control)
        now[0] += 25.0
        state.global_step = step
        hook.on_step_end(args, state, control)
        if control.should_training_stop:
            break
        now[0] += 35.0  # an evaluation between steps counts against the run's limit
    # Step k ends at 565 + 60k s: step 5 at 865, step 6 at 925, the first end past minute 15 (900 s).
    assert (budget.reached_at, budget.seconds) == (6, 150.0)
    with pytest.raises(ValueError, match="run_started"):
        callbacks.TimeBudget("grpo", run_minutes=1.0)


def test_a_resumed_stage_logs_its_pace_from_the_resume(monkeypatch, tmp_path, caplog):
    from types import SimpleNamespace

    from transformers import TrainerControl

    from grpokit.stages import callbacks

    now = [0.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: now[0])
    hook, control = callbacks.MetricsLog(tmp_path / "metrics.jsonl").callback(), TrainerControl()
    args = SimpleNamespace(device="cpu")
    state = SimpleNamespace(global_step=110, max_steps=200, is_world_process_zero=True)  # from checkpoint-110
    hook.on_train_begin(args, state, control)
    for step in (111, 112):
        hook.on_step_begin(args, state, control)
        now[0] += 12.0
        state.global_step = step
        hook.on_step_end(args, state, control)
        with caplog.at_level("INFO", logger="grpokit.stages.pipeline"):
            hook.on_log(args, state, control, logs={"loss": 1.0})
    # 12 s a step and 88 steps left; counted from step 0 it read 0.2 s/step and an ETA of 0.3 min.
    assert "train step 112/200 (12.0 s/step, ETA 17.6 min)" in caplog.text


def test_an_sft_stage_evaluates_every_n_steps_only_when_its_eval_every_asks(tiny_model_dir, tmp_path):
    raw = tiny_recipe(tiny_model_dir, tmp_path, eval={"every": 1, "every_n": 2})
    # sft stages only: a control without GRPO is a recipe of its own. eval.every is GRPO's cadence.
    raw["stages"] = [
        {"name": "warmup", "kind": "sft", "steps": 2},
        {"name": "more", "kind": "sft", "steps": 3, "eval_every": 1},
    ]
    run_dir = train.main(build_recipe(raw))
    rows = rows_of(run_dir)
    evals = [(r["stage"], r["step"]) for r in rows if "eval/accuracy" in r]
    assert evals == [("more", 1), ("more", 2)]  # the last step is the stage's own evaluation
    clock = [r["train_seconds"] for r in rows if r["stage"] == "more"]
    assert clock[0] > 0 and clock == sorted(clock)  # the stage's own training clock, from 0 at its start
    assert sorted(p.name for p in (run_dir / "evals").iterdir()) == ["more-step_00001.json", "more-step_00002.json"]
    assert json.loads((run_dir / "evals" / "more-step_00002.json").read_text())["n"] == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["name"] for s in summary["stages"]] == ["before", "warmup", "more"] and summary["grpo_gain"] is None


def test_a_later_sft_stage_draws_fresh_demonstrations(tiny_model_dir, tmp_path):
    import dataclasses

    from transformers import AutoTokenizer

    from grpokit.recipe.stages import stage_recipe
    from grpokit.stages.pipeline import demonstrations_before
    from grpokit.stages.sft import build_demonstrations, task_of

    raw = tiny_recipe(tiny_model_dir, tmp_path)
    raw["stages"] = [
        {"name": "warmup", "kind": "sft", "examples": 8},
        {"name": "more", "kind": "sft", "examples": 4},
        {"name": "grpo"},
    ]
    recipe = build_recipe(raw)
    warmup, more, grpo = recipe.stages
    assert [demonstrations_before(recipe, stage) for stage in (warmup, more, grpo)] == [0, 8, 12]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    seen = stage_recipe(recipe, more)
    twelve = dataclasses.replace(seen, cold_start=dataclasses.replace(seen.cold_start, examples=12))
    # The second stage's 4 are the ones after the warm-up's 8 in the same stream, none of them again.
    drawn = build_demonstrations(task_of(seen), tokenizer, seen, first=8)
    assert drawn == build_demonstrations(task_of(seen), tokenizer, twelve)[8:]


def test_sft_micro_batches_train_the_weights_of_whole_batches(tiny_model_dir, tmp_path):
    """cold_start.micro_batch: the same demonstrations per optimizer step in smaller passes (gradient
    accumulation, the loss normalised by the whole batch's tokens) give the whole batch's weights."""
    import transformers

    from grpokit.models.load import load_model
    from grpokit.stages import pipeline as train
    from grpokit.stages import sft as cold_start

    def adapter(micro_batch):
        raw = tiny_recipe(
            tiny_model_dir, tmp_path, cold_start={"examples": 8, "batch_size": 4, "micro_batch": micro_batch}
        )
        recipe = build_recipe(raw)
        transformers.set_seed(0)
        model, tokenizer = load_model(recipe.model.name)
        sft = cold_start.build_trainer(
            train.attach_lora(model, recipe), tokenizer, recipe, tmp_path / f"sft{micro_batch}"
        )
        assert sft.args.per_device_train_batch_size * sft.args.gradient_accumulation_steps == 4
        sft.train()
        return {n: p.detach().clone() for n, p in sft.model.named_parameters() if "lora_" in n}

    whole, micro = adapter(None), adapter(1)
    assert any(not torch.equal(w, torch.zeros_like(w)) for n, w in whole.items() if "lora_B" in n), "it trained"
    for name, value in whole.items():
        torch.testing.assert_close(micro[name], value, rtol=1e-4, atol=1e-6, msg=name)


def test_the_sft_stage_returns_freed_memory_once_per_optimizer_step(tiny_model_dir, tmp_path, monkeypatch):
    """The warm-up's freed activations go back to the system after each optimizer step (glibc's heap kept
    them: the default warm-up's peak 2.84 GB, 2.36 with the trim), not after each micro-batch (pages faulted
    in again every pass)."""
    from grpokit.kernels import memory
    from grpokit.models.load import load_model
    from grpokit.stages import sft as cold_start

    trims = []
    monkeypatch.setattr(memory, "trim", lambda: trims.append(1) or True)
    raw = tiny_recipe(
        tiny_model_dir, tmp_path, cold_start={"examples": 8, "steps": 3, "batch_size": 4, "micro_batch": 2}
    )
    recipe = build_recipe(raw)
    model, tokenizer = load_model(recipe.model.name)
    sft = cold_start.build_trainer(train.attach_lora(model, recipe), tokenizer, recipe, tmp_path / "sft")
    sft.train()
    assert sft.state.global_step == 3 and len(trims) == 3


def test_the_sft_loss_scores_only_demonstration_tokens_with_the_same_loss_and_gradients(tiny_model_dir, tmp_path):
    """On a CPU the sft stage's LM head runs on the labelled positions only (cold_start.compact_lm_head):
    the rows reaching the vocabulary are the demonstration tokens, not every position of the padded batch,
    and the loss, every adapter gradient and the logged entropy and token accuracy are those of TRL's
    every-position pass."""
    import trl.trainer.utils as trl_utils

    from grpokit.models.load import load_model
    from grpokit.stages import sft as cold_start

    recipe = build_recipe(tiny_recipe(tiny_model_dir, tmp_path, cold_start={"examples": 8, "batch_size": 8}))
    model, tokenizer = load_model(recipe.model.name)
    sft = cold_start.build_trainer(train.attach_lora(model, recipe), tokenizer, recipe, tmp_path / "sft")
    batch = sft._prepare_inputs(next(iter(sft.get_train_dataloader())))
    labelled = int((batch["labels"][:, 1:] != -100).sum())
    assert labelled < batch["labels"][:, 1:].numel(), "the batch has prompt and padding positions"

    rows = []
    kernel = trl_utils._ChunkedLogProbFunction.apply

    def counted(hidden, *args):
        rows.append(hidden.shape[0])
        return kernel(hidden, *args)

    def run(compact: bool):
        sft.model.zero_grad()
        sft._metrics["train"].clear()
        trl_utils._ChunkedLogProbFunction.apply = counted
        try:
            if compact:
                loss = sft.compute_loss(sft.model, dict(batch))
            else:  # TRL's own path, every position scored
                loss = super(type(sft), sft).compute_loss(sft.model, dict(batch))
        finally:
            trl_utils._ChunkedLogProbFunction.apply = kernel
        loss.backward()
        grads = {n: p.grad.clone() for n, p in sft.model.named_parameters() if p.grad is not None}
        logged = {k: sft._metrics["train"][k][-1] for k in ("entropy", "mean_token_accuracy")}
        return loss.detach(), grads, logged

    full_loss, full_grads, full_logged = run(compact=False)
    assert rows == [batch["labels"][:, 1:].numel()]
    rows.clear()
    loss, grads, logged = run(compact=True)
    assert rows == [labelled]
    torch.testing.assert_close(loss, full_loss, rtol=1e-5, atol=1e-7)
    assert full_grads and grads.keys() == full_grads.keys()
    for name, grad in full_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    assert logged == pytest.approx(full_logged, rel=1e-5)
    assert trl_utils._use_triton(torch.device("cpu")) is False, "TRL's switch is put back"


def test_a_micro_batch_that_does_not_divide_the_batch_is_refused(tiny_model_dir, tmp_path):
    raw = tiny_recipe(tiny_model_dir, tmp_path, cold_start={"enabled": True, "batch_size": 4, "micro_batch": 3})
    with pytest.raises(RecipeError, match=r"micro_batch=3 does not divide batch_size=4"):
        build_recipe(raw)


@pytest.mark.parametrize("bf16", [True, False])
def test_stages_under_bf16_autocast_train_on_a_base_held_in_bf16(tiny_model_dir, tmp_path, bf16):
    """Under bf16 autocast a LoRA policy's frozen linear weights are held in bf16 (autocast's own cast of
    them, kept once): every stage kind, the evaluations between them and the step evaluations run on it;
    in fp32 training they stay fp32. The saved adapter loads on the untouched base."""
    seen = {}
    attach = train.attach_lora

    def attach_and_look(model, recipe):
        policy = attach(model, recipe)
        seen["dtypes"] = {m.get_base_layer().weight.dtype for m in policy.modules() if hasattr(m, "lora_A")}
        return policy

    raw = staged(tiny_model_dir, tmp_path, grpo={"bf16": bf16}, eval={"every": 1, "every_n": 2})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train, "attach_lora", attach_and_look)
        run_dir = train.main(build_recipe(raw))

    assert seen["dtypes"] == {torch.bfloat16 if bf16 else torch.float32}
    stages = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert [s["name"] for s in stages] == ["before", "warmup", "format", "answers"]
    assert ("held in bf16" in (run_dir / "train.log").read_text()) is bf16
    rows = rows_of(run_dir)
    assert any("eval/accuracy" in r for r in rows if r["stage"] == "answers")
    from grpokit.models.load import load_trained

    model, _ = load_trained(run_dir, str(tiny_model_dir))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
