"""Rollout decoding: grpokit's decoder (`grpokit.decode`) against transformers' forward, same sampler.

The model is the embedded one as the default recipe's warm-up leaves it (`bench_step.warm_model`: a run's
warm-up adapter with `--warm`, else trained here once), merged and held as the rollout copy holds it (bf16
where this CPU's bf16 matmuls are faster, else fp32). Two shapes, each timed `--repeats` times with the two
engines alternated:

- rollout: the default recipe's GRPO batch, 8 prompts x 4, T=1, at most 64 tokens, stopping at `</answer>`
  (natural lengths: the warm-up model answers in ~35 tokens);
- evaluation: 50 held-out prompts, greedy, at most 64 tokens (the recipe's `eval.batch_size`).

Per shape it prints tokens per second (drawn tokens / wall time of `sample`, prefill included), the share
of the rollout ceiling (the rows x 576 x 1536 GEMM in the faster precision, timed in this run, over 2 x
parameters FLOPs per token), and whether both engines drew the same tokens (greedy: they should, up to bf16
rounding; sampled: the same seed, rows leaving at different steps draw different random numbers).
Results go to `<out>/results_decode.json`. Run: `python bench/bench_decode.py [--warm RUN/warmup/adapter]`.
"""

from __future__ import annotations

import argparse
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
    dtype = torch.bfloat16 if default_bf16() else torch.float32
    model = model.to(dtype).eval().requires_grad_(False)
    from grpokit.attention import use_grouped_attention

    use_grouped_attention(model)
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
        "rollout": (train_rows, SamplingSettings(max_new_tokens=64, temperature=1.0, stop_texts=("</answer>",))),
        "evaluation": (eval_rows, SamplingSettings(max_new_tokens=64, top_k=1, stop_texts=("</answer>",))),
    }
    engines = {"transformers": lambda m: "off", "grpokit": decode.refusal}
    real_refusal = decode.refusal
    results: dict[str, dict] = {}
    for shape, (rows, settings) in shapes.items():
        times: dict[str, list[float]] = {e: [] for e in engines}
        tokens: dict[str, list[int]] = {e: [] for e in engines}
        drawn: dict[str, list] = {}
        for repeat in range(args.repeats + 1):  # the first round warms both up and is not counted
            for engine, refusal in engines.items():
                decode.refusal = refusal
                torch.manual_seed(repeat)
                start = time.perf_counter()
                got = sample(model, rows, settings, eos_ids=eos, pad_id=tokenizer.pad_token_id, tokenizer=tokenizer)
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

    gemm = {d: {n: matmul_gflops(n, d, repeats=30) for n in (32, 50)} for d in ("float32", "bfloat16")}
    params = sum(p.numel() for p in model.parameters())
    ceiling = {n: max(g[n] for g in gemm.values()) * 1e9 / (2 * params) for n in (32, 50)}
    cpu = cpu_name()
    print(
        f"\nCPU: {cpu}; bf16 / fp32 matmul speed {cpu_bf16_speedup():.2f}x; model in {dtype}; "
        f"{torch.get_num_threads()} threads"
    )
    print(
        f"rollout ceiling: {ceiling[32]:.0f} tok/s at 32 rows, {ceiling[50]:.0f} at 50 "
        f"(2 x {params / 1e6:.1f}M FLOPs per token)"
    )
    print(
        f"{'shape':<11} {'engine':<13} {'rows':>4} {'tokens':>6} {'median s':>8} {'tok/s':>6} {'% ceil':>6} "
        f"{'speed-up':>8}"
    )
    for shape, r in results.items():
        n = 32 if shape == "rollout" else 50
        for engine in engines:
            e = r[engine]
            speedup = e["tok_s"] / r["transformers"]["tok_s"]
            print(
                f"{shape:<11} {engine:<13} {e['rows']:>4} {e['tokens_per_call']:>6.0f} {e['seconds']:>8.2f} "
                f"{e['tok_s']:>6.0f} {100 * e['tok_s'] / ceiling[n]:>5.0f}% {speedup:>7.2f}x"
            )
        print(f"{shape:<11} same tokens in the first round: {r['same_tokens_first_round']}")
    path = out / "results_decode.json"
    record = {"cpu": cpu, "dtype": str(dtype), "threads": torch.get_num_threads(), "gemm_gflops": gemm}
    record |= {"ceiling_tok_s": ceiling, "results": results, "repeats": args.repeats}
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
