"""`make bench`: one GRPO step, grpokit vs plain TRL, on the embedded model; prints one table.

Two workloads, the same for every contender within one:

- `--workload recipe` (the headline, what a run really does): the default recipe's GRPO step on the model
  as its warm-up leaves it: the recipe's prompts, its sampling (T=1, at most 64 tokens, natural lengths),
  its rewards and its LoRA adapter; every contender gets the recipe's prompts per step and group size (8 x
  8 drawn in the default recipe, of which grpokit trains the 4 of each group whose rewards vary most, as
  the recipe's `dynamic_sampling.downsample_to` says). The warm-up is trained once by the recipe's own sft
  stage and cached in `<out>/warm-model` (or `--warm ADAPTER_DIR`, a run's saved warm-up adapter). Every
  contender starts from that model with a fresh LoRA adapter (B = 0, so the policy is the warm-up model).
  grpokit runs as the recipe configures it (`grpo_stage.trainer_options`, what `grpokit train` hands its
  trainer: dynamic sampling with its retries and guidance, row skipping, shared prefix, micro-batches;
  and `train_pass.return_freed_memory`, glibc's fixed thresholds, which cost page faults: they are set
  process-wide before the first grpokit contender, so the TRL contenders run first, without them);
  `grpokit-one-batch` without dynamic sampling does TRL's amount of sampling.
- `--workload forced`: SmolLM2-135M-Instruct, the arithmetic task's first 4 training prompts x 8
  completions, exactly 64 completion tokens each (`min_new_tokens` forces the length), strict format +
  correctness. On the untouched model every reward is 0, so grpokit's row skipping trains nothing: that
  step is reported as what it is, and `grpokit-no-skip` (every row trained) is the worst case.

Contenders:

- TRL defaults: `GRPOTrainer` as the reference scripts use it (bf16 on, activation checkpointing on);
- TRL hand-tuned for a CPU: float32, no checkpointing, beta 0;
- grpokit: `GrpoTrainer` with a recipe's settings (what `grpokit train` builds: its own rollouts on a
  bf16 copy of the policy, zero-advantage rows skipped, bf16 autocast where this CPU measures it
  faster); `grpokit-no-skip` trains on every row, which is what a run whose groups all disagree costs.

Per contender it times `--steps` GRPO steps and reports the mean of all but the first (warm-up), split
into generation (TRL's `_generate`), rewards (`_calculate_rewards`), other scoring (old/ref logprobs,
advantages) and the training pass (the rest of the step). The rollout ceiling comes from a GEMM of the
decode shape (rows x 576 x 1536, SmolLM2's MLP) timed in the same run in fp32 and bf16, the fastest of 30
products timed one by one (the faster precision is the machine's ceiling), divided by the model's FLOPs per
token (2 x parameters).

`--lora` gives every contender the default recipe's adapter (LoRA r=16 on all linear layers) instead
of the full fine-tune.

Results go to `<out>/results_<workload>[_lora].json` with the CPU, GEMM rates and every contender's
numbers. Run: `make bench` (or python bench/bench_step.py --workload recipe --steps 4 --only grpokit,trl-tuned).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROMPTS, GENERATIONS, TOKENS = 4, 8, 64
RECIPE = "recipes/smollm2/arithmetic_grpo.yaml"
SLOW_BF16 = 0.5  # bf16 / fp32 matmul speed below which TRL's bf16 defaults are left out unless asked for
CONTENDERS = {
    "recipe": "trl-defaults,trl-tuned,grpokit,grpokit-one-batch",
    "forced": "trl-defaults,trl-tuned,grpokit,grpokit-no-skip",
}


@dataclass
class Workload:
    name: str  # "recipe" or "forced"
    model: str  # "embedded" or a saved model folder
    max_tokens: int
    min_tokens: int  # forced length (0: natural lengths)
    temperature: float
    learning_rate: float
    recipe: Any = None  # the default recipe's GRPO stage as grpokit sees it (recipe workload)
    lora: bool = False
    rewards: list[tuple[str, float]] = field(default_factory=lambda: [("format", 1.0), ("correctness", 1.0)])
    task_params: dict[str, Any] = field(default_factory=dict)
    prompts: int = PROMPTS  # per step
    generations: int = GENERATIONS  # per prompt

    @property
    def rows(self) -> int:
        return self.prompts * self.generations


def recipe_workload(out: Path, warm: str | None) -> Workload:
    from grpokit.recipe.load import load_recipe
    from grpokit.recipe.stages import stage_recipe

    recipe = load_recipe(RECIPE)
    stage = next(s for s in recipe.stages if s.kind == "grpo")
    seen = stage_recipe(recipe, stage)
    generations = seen.grpo["num_generations"]
    return Workload(
        name="recipe",
        model=str(warm_model(recipe, out, warm)),
        max_tokens=seen.grpo["max_completion_length"],
        min_tokens=0,
        temperature=seen.grpo.get("temperature", 1.0),
        learning_rate=seen.grpo["learning_rate"],
        recipe=seen,
        lora=True,
        rewards=[(spec.name, spec.weight) for spec in seen.rewards],
        task_params=seen.task.params,
        prompts=seen.grpo["per_device_train_batch_size"] // generations,
        generations=generations,
    )


def warm_model(recipe: Any, out: Path, adapter: str | None) -> Path:
    """The embedded model as the recipe's warm-up (sft) stage leaves it, merged into plain weights: a run's
    saved adapter (`adapter`), else the stage trained here once and cached in `out/warm-model`."""
    folder = out / ("warm-model" if adapter is None else f"warm-model-{Path(adapter).name}")
    if (folder / "config.json").is_file():
        return folder
    from grpokit.models.load import load_model

    model, tokenizer = load_model("embedded")
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    else:
        from grpokit.recipe.stages import stage_recipe
        from grpokit.stages import sft as cold_start
        from grpokit.stages.pipeline import attach_lora

        stage = next(s for s in recipe.stages if s.kind == "sft")
        print(f"[bench] training the recipe's warm-up ({stage.steps} sft steps) once, into {folder}", flush=True)
        model = attach_lora(model, recipe)
        trainer = cold_start.build_trainer(
            model, tokenizer, stage_recipe(recipe, stage), out / "warm-train", callbacks=[]
        )
        trainer.args.save_strategy = "no"
        trainer.train()
        # Merged onto the base as shipped (fp32): under bf16 autocast training held the frozen base in bf16
        # (grpokit.models.load.hold_frozen_linears), and a merge there would round the deltas into bf16 weights.
        from peft import PeftModel

        trainer.model.save_pretrained(out / "warm-adapter")
        model = PeftModel.from_pretrained(load_model("embedded")[0], str(out / "warm-adapter"))
    model = model.merge_and_unload()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def contender_config(name: str, out: Path, work: Workload) -> Any:
    from trl import GRPOConfig

    common = dict(
        output_dir=str(out),
        use_cpu=True,
        per_device_train_batch_size=work.rows,
        num_generations=work.generations,
        max_completion_length=work.max_tokens,
        temperature=work.temperature,
        generation_kwargs={"min_new_tokens": work.min_tokens} if work.min_tokens else None,
        reward_weights=[w for _, w in work.rewards],
        learning_rate=work.learning_rate,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        disable_tqdm=True,
    )
    if name == "trl-defaults":  # TRL's own defaults: bf16 and activation checkpointing on
        return GRPOConfig(**common)
    if name == "trl-tuned":
        return GRPOConfig(**common, bf16=False, gradient_checkpointing=False, beta=0.0)
    if name.startswith("grpokit"):
        from grpokit.recipe.load import build_recipe
        from grpokit.recipe.trl_args import build_grpo_config

        if work.recipe is not None:  # the recipe's own GRPO settings, as `grpokit train` builds them
            grpo = {**work.recipe.grpo, "max_steps": 1, "report_to": [], "disable_tqdm": True, "seed": 0}
            output = dataclasses.replace(work.recipe.output, save_every=0)
            return build_grpo_config(dataclasses.replace(work.recipe, grpo=grpo, output=output), out)
        set_by_grpokit = ("output_dir", "use_cpu", "save_strategy", "report_to", "reward_weights")  # weights: rewards
        grpo = {k: v for k, v in common.items() if k not in set_by_grpokit}
        recipe = build_recipe(
            {
                "model": {"name": "embedded"},
                "lora": {"enabled": False},
                "rewards": [{"name": n, "weight": w} for n, w in work.rewards],
                # bf16 left to grpokit: on where this machine measures it faster (grpokit.kernels.precision).
                "grpo": {**grpo, "activation_checkpointing": False, "beta": 0.0},
                "output": {"save_every": 0},
            }
        )
        return build_grpo_config(recipe, out)
    raise ValueError(name)


def grpokit_kwargs(name: str, work: Workload, task: Any, tokenizer: Any, steps: int) -> dict[str, Any]:
    """What `grpokit train` hands GrpoTrainer for the recipe (retries and guidance included); the
    one-batch contender without dynamic sampling or down-sampling: TRL's amount of sampling."""
    if work.recipe is None:
        return {"skip_zero_advantage": name != "grpokit-no-skip"}
    from grpokit.stages.grpo import trainer_options

    recipe = work.recipe
    if name != "grpokit":
        off = dataclasses.replace(recipe.dynamic_sampling, enabled=False, downsample_to=None)
        recipe = dataclasses.replace(recipe, dynamic_sampling=off)
    options = trainer_options(recipe, task, tokenizer, steps)
    return {field.name: getattr(options, field.name) for field in dataclasses.fields(options)}


def run_contender(name: str, steps: int, out: Path, work: Workload) -> dict[str, float]:
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer

    from grpokit.models.load import load_model
    from grpokit.rewards import make_reward, to_trl
    from grpokit.stages.trainer import GrpoOptions, GrpoTrainer
    from grpokit.tasks import build_task
    from grpokit.tasks.base import render_prompt

    torch.manual_seed(0)
    model, tokenizer = load_model(work.model)
    task = build_task("arithmetic", work.task_params)
    forced = work.name == "forced"  # forced: the same 4 prompts at every step; recipe: new ones, as a run draws them
    rows = task.dataset("train", work.prompts if forced else work.prompts * steps) * (steps if forced else 1)
    data = Dataset.from_list([{**r, "prompt": render_prompt(tokenizer, task.messages(r))} for r in rows])
    rewards = [to_trl(n, make_reward(n, task), timeout=None) for n, _ in work.rewards]
    cls = GrpoTrainer if name.startswith("grpokit") else GRPOTrainer
    kwargs = (
        {"options": GrpoOptions(**grpokit_kwargs(name, work, task, tokenizer, steps))} if cls is GrpoTrainer else {}
    )
    if work.lora:  # the default recipe's adapter, handed to each contender the same way (TRL wraps the model)
        from peft import LoraConfig

        kwargs["peft_config"] = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = cls(
        model=model,
        reward_funcs=rewards,
        args=contender_config(name, out, work),
        train_dataset=data,
        processing_class=tokenizer,
        **kwargs,
    )
    return time_steps(trainer, steps, grpokit=cls is GrpoTrainer)


def time_steps(trainer: Any, steps: int, grpokit: bool) -> dict[str, float]:
    """Train `steps` GRPO steps and time them: the mean of all but the first (warm-up), split into
    generation, rewards, other scoring and the training pass (the rest of the step). On a GPU each clock
    reading waits for the queued kernels first, so a span holds its own work."""
    import torch
    from transformers import TrainerCallback

    from grpokit.kernels.precision import clock as clock_on

    def clock() -> float:
        return clock_on("cuda" if torch.cuda.is_available() else "cpu")

    trainer.args.max_steps = steps

    spans: dict[str, list[float]] = {"generate": [], "rewards": [], "score": [], "tokens": []}
    per_step: list[dict[str, float]] = []

    def timed(method: str, key: str) -> None:
        original = getattr(trainer, method)

        def wrapper(*args: Any, **kw: Any) -> Any:
            start = clock()
            try:
                result = original(*args, **kw)
            finally:
                spans[key].append(clock() - start)
            if method == "_generate":  # (prompt_ids, completion_ids, ...): tokens drawn
                spans["tokens"].append(sum(len(c) for c in result[1]))
            return result

        setattr(trainer, method, wrapper)

    timed("_generate", "generate")
    timed("_calculate_rewards", "rewards")
    timed("_score" if grpokit else "_generate_and_score_completions", "score")

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.start = clock()
            self.marks = {key: len(v) for key, v in spans.items()}

        def on_step_end(self, args, state, control, **kw):
            row = {key: sum(v[self.marks[key] :]) for key, v in spans.items()}
            per_step.append({**row, "step": clock() - self.start})

    trainer.add_callback(StepClock())
    trainer.train()
    kept = per_step[1:] if steps > 1 else per_step  # the first step warms caches up

    def mean(key: str) -> float:
        return statistics.mean(r[key] for r in kept)

    def logged(key: str, default: float) -> float:
        values = [h[key] for h in trainer.state.log_history[1 if steps > 1 else 0 :] if key in h]
        return statistics.mean(values) if values else default

    step, generate, rewards_s, score = mean("step"), mean("generate"), mean("rewards"), mean("score")
    return {
        "step_s": step,
        "generate_s": generate,
        "rewards_s": rewards_s,
        "other_scoring_s": score - generate - rewards_s,
        "train_pass_s": step - score,
        "tokens_per_step": mean("tokens"),
        "rollout_tok_s": mean("tokens") / generate,
        "rows_trained": logged("rows_trained_frac", 1.0),
        "groups_agreeing": logged("frac_reward_zero_std", float("nan")),
        "accuracy_sampled": logged("rewards/correctness/mean", float("nan")),
        "steps_timed": len(kept),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("recipe", "forced"), default="recipe")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per contender (the first is warm-up)")
    parser.add_argument("--only", help="comma-separated contenders (default: all of the workload's)")
    parser.add_argument("--out", default="bench/out", help="scratch folder and results JSON")
    parser.add_argument("--lora", action="store_true", help="forced workload: LoRA r=16 instead of full fine-tune")
    parser.add_argument("--warm", help="recipe workload: a run's warm-up adapter folder instead of training one")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from grpokit.kernels.precision import cpu_bf16_speedup, cpu_name, matmul_gflops

    torch.set_num_threads(torch.get_num_threads())
    if args.workload == "recipe":
        work = recipe_workload(out, args.warm)
    else:
        work = Workload("forced", "embedded", TOKENS, TOKENS, 1.0, 1e-6, lora=args.lora)
    # The machine's ceiling is its faster precision: bf16 where the CPU has bf16 instructions.
    gemms = {
        dtype: {rows: matmul_gflops(rows, dtype, repeats=30, best=True) for rows in (work.rows, 256)}
        for dtype in ("float32", "bfloat16")
    }
    gflops = {rows: max(g[rows] for g in gemms.values()) for rows in (work.rows, 256)}
    params = 134_515_008
    ceiling = {rows: g * 1e9 / (2 * params) for rows, g in gflops.items()}
    results, skipped = {}, {}
    names = sorted((args.only or CONTENDERS[args.workload]).split(","), key=lambda n: n.startswith("grpokit"))
    returned = None  # whether glibc's thresholds were fixed for grpokit's contenders
    for name in names:
        if name.startswith("grpokit") and work.recipe is not None and returned is None:
            from grpokit.kernels.memory import follow_recipe

            # As `grpokit train` runs the recipe; process-wide from here on, so every TRL contender ran before.
            returned = follow_recipe(work.recipe.train_pass)
            print(f"[bench] the recipe's train_pass.return_freed_memory: thresholds fixed: {returned}", flush=True)
        if name == "trl-defaults" and cpu_bf16_speedup() < SLOW_BF16 and not args.only:
            # TRL's defaults train under bf16 autocast; here that is the slower precision by far.
            skipped[name] = f"bf16 matmuls run {cpu_bf16_speedup():.3f}x fp32 on this CPU: a step would take hours"
            print(f"[bench] {name}: not run: {skipped[name]} (run it with --only trl-defaults)", flush=True)
            continue
        print(f"[bench] {name}: {args.steps} steps, workload {work.name} ...", flush=True)
        results[name] = run_contender(name, args.steps, out / name, work)
        print(f"[bench] {name}: {json.dumps({k: round(v, 3) for k, v in results[name].items()})}", flush=True)

    rows = work.rows
    cpu = cpu_name()
    print(f"\nCPU: {cpu}; bf16 / fp32 matmul speed: {cpu_bf16_speedup():.2f}x")
    for dtype, g in gemms.items():
        print(f"GEMM {rows}x576x1536 {dtype}: {g[rows]:.0f} GFLOP/s (256 rows: {g[256]:.0f})")
    print(
        f"rollout ceiling (faster precision): {ceiling[rows]:.0f} tok/s at {rows} rows "
        f"(256 rows: {ceiling[256]:.0f} tok/s), for 2 x {params / 1e6:.1f}M FLOPs per token"
    )
    adapter = "LoRA r=16" if work.lora else "full fine-tune"
    print(f"workload: {work.name} ({work.model}, {adapter}, {work.prompts} prompts x {work.generations} per step)")
    print(format_table(results, ceiling[rows]))
    for name, why in skipped.items():
        print(f"{name}: not run ({why})")
    suffix = "_lora" if args.lora and work.name == "forced" else ""
    path = out / f"results_{work.name}{suffix}.json"
    record = {"cpu": cpu, "workload": work.name, "model": work.model, "lora": work.lora, "steps": args.steps}
    record |= {"prompts_per_step": work.prompts, "generations": work.generations}
    record["return_freed_memory"] = bool(returned)  # for grpokit's contenders
    record |= {"gemm_gflops": gemms, "ceiling_tok_s": ceiling, "results": results, "not_run": skipped}
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written: {path}")
    return 0


def format_table(results: dict[str, dict[str, float]], ceiling: float) -> str:
    head = (
        f"{'contender':<18} {'step s':>7} {'gen s':>6} {'reward s':>8} {'other s':>7} {'train s':>7} "
        f"{'tok/s':>6} {'% ceil':>6} {'agree':>5} {'rows':>5} {'vs defaults':>11} {'vs tuned':>8}"
    )
    lines = [head]
    for name, r in results.items():
        vs = {  # '-' where that contender was not run
            b: f"{r['step_s'] / results[b]['step_s']:.2f}x" if b in results else "-"
            for b in ("trl-defaults", "trl-tuned")
        }
        lines.append(
            f"{name:<18} {r['step_s']:>7.1f} {r['generate_s']:>6.1f} {r['rewards_s']:>8.2f} "
            f"{r['other_scoring_s']:>7.1f} {r['train_pass_s']:>7.1f} {r['rollout_tok_s']:>6.0f} "
            f"{100 * r['rollout_tok_s'] / ceiling:>5.0f}% {100 * r['groups_agreeing']:>4.0f}% "
            f"{100 * r['rows_trained']:>4.0f}% {vs['trl-defaults']:>11} {vs['trl-tuned']:>8}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
