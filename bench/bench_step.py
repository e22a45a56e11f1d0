"""`make bench`: one GRPO step, grpokit vs plain TRL, on the embedded model; prints one table.

Same work for every contender: SmolLM2-135M-Instruct full fine-tune, the arithmetic task's first 4
training prompts x 8 completions, exactly 64 completion tokens each (`min_new_tokens` forces the
length), the seed's two rewards (strict format + correctness). Contenders:

- TRL defaults: `GRPOTrainer` as the reference scripts use it (bf16 on, activation checkpointing on);
- TRL hand-tuned for a CPU: float32, no checkpointing, beta 0;
- grpokit: `GrpoTrainer` with a recipe's settings (what `grpokit train` builds: its own rollouts on a
  bf16 copy of the policy, zero-advantage rows skipped, bf16 autocast where this CPU measures it
  faster); `grpokit-no-skip` trains on every row, which is what a run whose groups all disagree costs.

Per contender it times `--steps` GRPO steps and reports the mean of all but the first (warm-up), split
into generation (TRL's `_generate`), rewards (`_calculate_rewards`), other scoring (old/ref logprobs,
advantages) and the training pass (the rest of the step). The rollout ceiling comes from a GEMM of the
decode shape (rows x 576 x 1536, SmolLM2's MLP) timed in the same run in fp32 and bf16 (the faster one
is the machine's ceiling), divided by the model's FLOPs per token (2 x parameters).

`--lora` gives every contender the default recipe's adapter (LoRA r=16 on all linear layers) instead
of the full fine-tune.

Run: `make bench` (or python bench/bench_step.py --steps 3 --only grpokit,trl-tuned [--lora]).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

PROMPTS, GENERATIONS, TOKENS = 4, 8, 64


def contender_config(name: str, out: Path) -> Any:
    from trl import GRPOConfig

    common = dict(
        output_dir=str(out),
        use_cpu=True,
        per_device_train_batch_size=PROMPTS * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=TOKENS,
        generation_kwargs={"min_new_tokens": TOKENS},
        learning_rate=1e-6,
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
        from grpokit.config import build_grpo_config, build_recipe

        grpo = {k: v for k, v in common.items() if k not in ("output_dir", "use_cpu", "save_strategy", "report_to")}
        recipe = build_recipe(
            {
                "model": {"name": "embedded"},
                "lora": {"enabled": False},
                "rewards": [{"name": "format"}, {"name": "correctness"}],
                # bf16 left to grpokit: on where this machine measures it faster (grpokit.precision).
                "grpo": {**grpo, "activation_checkpointing": False, "beta": 0.0},
                "output": {"save_every": 0},
            }
        )
        return build_grpo_config(recipe, out)
    raise ValueError(name)


def run_contender(name: str, steps: int, out: Path, lora: bool = False) -> dict[str, float]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from grpokit.models import load_model
    from grpokit.rewards import make_reward, to_trl
    from grpokit.tasks import build_task
    from grpokit.tasks.base import render_prompt
    from grpokit.trainer import GrpoTrainer

    torch.manual_seed(0)
    model, tokenizer = load_model("embedded")
    task = build_task("arithmetic")
    rows = task.dataset("train", PROMPTS)
    data = Dataset.from_list([{**r, "prompt": render_prompt(tokenizer, task.messages(r))} for r in rows] * steps)
    rewards = [to_trl(n, make_reward(n, task), timeout=None) for n in ("format", "correctness")]
    cls = GrpoTrainer if name.startswith("grpokit") else GRPOTrainer
    kwargs = {"skip_zero_advantage": name != "grpokit-no-skip"} if cls is GrpoTrainer else {}
    if lora:  # the default recipe's adapter, handed to each contender the same way (TRL wraps the model)
        from peft import LoraConfig

        kwargs["peft_config"] = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = cls(
        model=model,
        reward_funcs=rewards,
        args=contender_config(name, out),
        train_dataset=data,
        processing_class=tokenizer,
        **kwargs,
    )
    trainer.args.max_steps = steps

    spans: dict[str, list[float]] = {"generate": [], "rewards": [], "score": [], "step": []}

    def timed(method: str, key: str) -> None:
        original = getattr(trainer, method)

        def wrapper(*args: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kw)
            finally:
                spans[key].append(time.perf_counter() - start)

        setattr(trainer, method, wrapper)

    timed("_generate", "generate")
    timed("_calculate_rewards", "rewards")
    timed("_generate_and_score_completions", "score")

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            spans["step"].append(time.perf_counter() - self.start)

    trainer.add_callback(StepClock())
    trainer.train()
    keep = slice(1, None) if steps > 1 else slice(None)  # the first step warms caches up

    def mean(key: str) -> float:
        return statistics.mean(spans[key][keep])

    step, generate, rewards_s, score = mean("step"), mean("generate"), mean("rewards"), mean("score")
    kept = [h.get("rows_trained_frac") for h in trainer.state.log_history if "rows_trained_frac" in h]
    return {
        "step_s": step,
        "generate_s": generate,
        "rewards_s": rewards_s,
        "other_scoring_s": score - generate - rewards_s,
        "train_pass_s": step - score,
        "rollout_tok_s": PROMPTS * GENERATIONS * TOKENS / generate,
        "rows_trained": statistics.mean(kept) if kept else 1.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per contender (the first is warm-up)")
    parser.add_argument("--only", default="trl-defaults,trl-tuned,grpokit,grpokit-no-skip")
    parser.add_argument("--out", default="bench/out", help="scratch folder and results.json")
    parser.add_argument("--lora", action="store_true", help="LoRA r=16 on all linear layers (the default recipe)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from grpokit.precision import cpu_bf16_speedup, matmul_gflops

    torch.set_num_threads(torch.get_num_threads())
    # The machine's ceiling is its faster precision: bf16 where the CPU has bf16 instructions.
    gemms = {
        dtype: {rows: matmul_gflops(rows, dtype, repeats=30) for rows in (PROMPTS * GENERATIONS, 256)}
        for dtype in ("float32", "bfloat16")
    }
    gflops = {rows: max(g[rows] for g in gemms.values()) for rows in (PROMPTS * GENERATIONS, 256)}
    params = 134_515_008
    ceiling = {rows: g * 1e9 / (2 * params) for rows, g in gflops.items()}
    results = {}
    for name in args.only.split(","):
        print(f"[bench] {name}: {args.steps} steps of {PROMPTS}x{GENERATIONS}x{TOKENS} tokens ...", flush=True)
        results[name] = run_contender(name, args.steps, out / name, args.lora)
        print(f"[bench] {name}: {json.dumps({k: round(v, 2) for k, v in results[name].items()})}", flush=True)

    rows = PROMPTS * GENERATIONS
    print(f"\nbf16 / fp32 matmul speed on this CPU: {cpu_bf16_speedup():.2f}x")
    for dtype, g in gemms.items():
        print(f"GEMM {rows}x576x1536 {dtype}: {g[rows]:.0f} GFLOP/s (256 rows: {g[256]:.0f})")
    print(
        f"rollout ceiling (faster precision): {ceiling[rows]:.0f} tok/s at {rows} rows "
        f"(256 rows: {ceiling[256]:.0f} tok/s), for 2 x {params / 1e6:.1f}M FLOPs per token"
    )
    head = (
        f"{'contender':<16} {'step s':>7} {'gen s':>6} {'reward s':>8} {'other s':>7} {'train s':>7} "
        f"{'tok/s':>6} {'% ceil':>6} {'rows':>5} {'vs defaults':>11} {'vs tuned':>8}"
    )
    print(head)
    for name, r in results.items():
        vs = {
            b: (r["step_s"] / results[b]["step_s"] if b in results else float("nan"))
            for b in ("trl-defaults", "trl-tuned")
        }
        share = 100 * r["rollout_tok_s"] / ceiling[rows]
        print(
            f"{name:<16} {r['step_s']:>7.1f} {r['generate_s']:>6.1f} {r['rewards_s']:>8.2f} "
            f"{r['other_scoring_s']:>7.1f} {r['train_pass_s']:>7.1f} {r['rollout_tok_s']:>6.0f} {share:>5.0f}% "
            f"{100 * r['rows_trained']:>4.0f}% {vs['trl-defaults']:>10.2f}x {vs['trl-tuned']:>7.2f}x"
        )
    (out / ("results_lora.json" if args.lora else "results.json")).write_text(
        json.dumps({"gemm_gflops": gemms, "ceiling_tok_s": ceiling, "lora": args.lora, "results": results}, indent=2)
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
