"""Rollout decoding: grpokit's decoder (`grpokit.decode`) against transformers' forward, same sampler.

The model is the embedded one as the default recipe's warm-up leaves it (`bench_step.warm_model`: a run's
warm-up adapter with `--warm`, else trained here once), merged. Two shapes, each timed `--repeats` times with the two
engines alternated:

- rollout: the default recipe's GRPO batch (prompts x num_generations: 8 x 8), T=1, at most 64 tokens,
  stopping at `</answer>` (natural lengths: the warm-up model answers in ~40 tokens), on the rollout copy's
  precision;
- evaluation: 50 held-out prompts, greedy, at most 64 tokens (the recipe's `eval.batch_size`), in fp32
  as evaluation's merged copy.

Per shape it prints tokens per second (drawn tokens / wall time of `sample`, prefill included), the share
of a ceiling (the rows x 576 x 1536 GEMM timed in this run, in the faster precision for the rollout and in
fp32 for evaluation, over 2 x parameters FLOPs per token), and whether both engines drew the same tokens in
the first round (greedy in fp32: they should; sampled: the logits differ in the last bits, and so, after a
while, do the draws).
Results go to `<out>/results_decode.json`. Run: `python bench/bench_decode.py [--warm RUN/warmup/adapter]`.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", help="a run's warm-up adapter folder (default: train the recipe's warm-up once)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench/out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch
    from bench_step import RECIPE, warm_model

    import grpokit.decode as decode
    from grpokit.config import load_recipe, stage_recipe
    from grpokit.models import load_model
    from grpokit.precision import cpu_bf16_speedup, cpu_name, default_bf16, matmul_gflops
    from grpokit.rollout import SamplingSettings, sample
    from grpokit.tasks import build_task
    from grpokit.tasks.base import render_prompt, tokenize_prompts

    recipe = load_recipe(RECIPE)
    grpo = stage_recipe(recipe, next(s for s in recipe.stages if s.kind == "grpo"))
    model, tokenizer = load_model(str(warm_model(recipe, out, args.warm)))
    from grpokit.attention import use_grouped_attention

    dtype = torch.bfloat16 if default_bf16() else torch.float32
    evaluated = model.float().eval().requires_grad_(False)  # evaluation decodes a merged fp32 copy
    model = copy.deepcopy(evaluated).to(dtype)  # rollouts: the training precision
    use_grouped_attention(model)
    use_grouped_attention(evaluated)
    task = build_task(grpo.task.name, grpo.task.params)

    def prompt_ids(split: str, n: int) -> list[list[int]]:
        return tokenize_prompts(tokenizer, [render_prompt(tokenizer, task.messages(r)) for r in task.dataset(split, n)])

    generations = grpo.grpo["num_generations"]
    train_rows = [
        ids
        for ids in prompt_ids("train", grpo.grpo["per_device_train_batch_size"] // generations)
        for _ in range(generations)
    ]
    eval_rows = prompt_ids("eval", recipe.eval.batch_size)
    eos = [tokenizer.eos_token_id]
    shapes = {
        "rollout": (model, train_rows, SamplingSettings(max_new_tokens=64, temperature=1.0, stop_texts=("</answer>",))),
        "evaluation": (evaluated, eval_rows, SamplingSettings(max_new_tokens=64, top_k=1, stop_texts=("</answer>",))),
    }
    engines = {"transformers": lambda m: "off", "grpokit": decode.refusal}
    real_refusal = decode.refusal
    results: dict[str, dict] = {}
    for shape, (runner, rows, settings) in shapes.items():
        times: dict[str, list[float]] = {e: [] for e in engines}
        tokens: dict[str, list[int]] = {e: [] for e in engines}
        drawn: dict[str, list] = {}
        for repeat in range(args.repeats + 1):  # the first round warms both up and is not counted
            for engine, refusal in engines.items():
                decode.refusal = refusal
                torch.manual_seed(repeat)
                start = time.perf_counter()
                got = sample(runner, rows, settings, eos_ids=eos, pad_id=tokenizer.pad_token_id, tokenizer=tokenizer)
                elapsed = time.perf_counter() - start
                decode.refusal = real_refusal
                if repeat:
                    times[engine].append(elapsed)
                    tokens[engine].append(sum(len(r) for r in got))
                drawn.setdefault(engine, got)
            print(
                f"[bench] {shape} round {repeat}: "
                + ", ".join(f"{e} {times[e][-1]:.2f} s" for e in engines if times[e]),
                flush=True,
            )
        results[shape] = {
            engine: {
                "seconds": statistics.median(times[engine]),
                "tok_s": sum(tokens[engine]) / sum(times[engine]),
                "tokens_per_call": statistics.mean(tokens[engine]),
                "rows": len(rows),
            }
            for engine in engines
        }
        results[shape]["same_tokens_first_round"] = drawn["transformers"] == drawn["grpokit"]

    width = {shape: len(rows) for shape, (_, rows, _) in shapes.items()}
    gemm = {d: {n: matmul_gflops(n, d, repeats=30) for n in set(width.values())} for d in ("float32", "bfloat16")}
    params = sum(p.numel() for p in model.parameters())
    # Each shape's ceiling at its own rows: the rollout in the machine's faster precision, evaluation in fp32.
    ceiling = {
        "rollout": max(g[width["rollout"]] for g in gemm.values()) * 1e9 / (2 * params),
        "evaluation": gemm["float32"][width["evaluation"]] * 1e9 / (2 * params),
    }
    cpu = cpu_name()
    print(
        f"\nCPU: {cpu}; bf16 / fp32 matmul speed {cpu_bf16_speedup():.2f}x; rollouts in {dtype}, evaluation in fp32; "
        f"{torch.get_num_threads()} threads"
    )
    print(
        f"ceiling: rollout {ceiling['rollout']:.0f} tok/s ({width['rollout']} rows, faster precision), "
        f"evaluation {ceiling['evaluation']:.0f} ({width['evaluation']} rows, fp32) "
        f"(2 x {params / 1e6:.1f}M FLOPs per token)"
    )
    print(
        f"{'shape':<11} {'engine':<13} {'rows':>4} {'tokens':>6} {'median s':>8} {'tok/s':>6} {'% ceil':>6} "
        f"{'speed-up':>8}"
    )
    for shape, r in results.items():
        for engine in engines:
            e = r[engine]
            speedup = e["tok_s"] / r["transformers"]["tok_s"]
            print(
                f"{shape:<11} {engine:<13} {e['rows']:>4} {e['tokens_per_call']:>6.0f} {e['seconds']:>8.2f} "
                f"{e['tok_s']:>6.0f} {100 * e['tok_s'] / ceiling[shape]:>5.0f}% {speedup:>7.2f}x"
            )
        print(f"{shape:<11} same tokens in the first round: {r['same_tokens_first_round']}")
    path = out / "results_decode.json"
    record = {"cpu": cpu, "rollout_dtype": str(dtype), "threads": torch.get_num_threads(), "gemm_gflops": gemm}
    record |= {"ceiling_tok_s": ceiling, "results": results, "repeats": args.repeats}
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
