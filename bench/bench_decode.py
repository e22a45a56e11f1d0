"""Rollout decoding: grpokit's decoder (`grpokit.kernels.decode`) against transformers' forward, same sampler.

The model is the embedded one as the default recipe's warm-up leaves it (`bench_step.warm_model`: a run's
warm-up adapter with `--warm`, else trained here once), merged. Two shapes, each timed `--repeats` times with the two
engines alternated:

- rollout: the default recipe's GRPO batch (prompts x num_generations: 8 x 8), T=1, at most 64 tokens,
  stopping at `</answer>` (natural lengths: the warm-up model answers in ~40 tokens), on the rollout copy's
  precision;
- evaluation: 50 held-out prompts, greedy, at most 64 tokens (the recipe's `eval.batch_size`), in fp32
  as evaluation's merged copy.

Per shape it prints tokens per second (drawn tokens / wall time of `sample`, prefill included), the share
of a ceiling (the rows x 576 x 1536 GEMM timed in this run, the fastest of 30 products, in the faster
precision for the rollout and in fp32 for evaluation, over 2 x parameters FLOPs per token), the share of a
second one (% stream: a decoding step's matmuls alone over the model's own weights at the shape's rows,
which on a CPU must stream every weight from memory once a step), and whether both engines drew the same
tokens in the first round (greedy in fp32: they should; sampled: the logits differ in the last bits, and
so, after a while, do the draws). Rows busy: the tokens drawn over rows x decoding steps (the longest
answer's length): a row that has finished draws nothing while the batch decodes on, which both ceilings,
taken at the shape's full rows, do not count.
Both engines run under the recipe's `train_pass.return_freed_memory` (glibc's fixed thresholds, as
`grpokit train` sets them: a fresh allocation over 1 MB costs its page faults), as a run's rollouts do.
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

    import grpokit.kernels.decode as decode
    from grpokit.kernels.precision import cpu_bf16_speedup, cpu_name, default_bf16, matmul_gflops
    from grpokit.models.load import load_model
    from grpokit.recipe.load import load_recipe
    from grpokit.recipe.stages import stage_recipe
    from grpokit.rollout.sampler import SamplingSettings, sample
    from grpokit.tasks import build_task
    from grpokit.tasks.base import render_prompt, tokenize_prompts

    recipe = load_recipe(RECIPE)
    from grpokit.kernels.memory import follow_recipe

    returned = follow_recipe(recipe.train_pass)  # as `grpokit train` runs the recipe
    grpo = stage_recipe(recipe, next(s for s in recipe.stages if s.kind == "grpo"))
    model, tokenizer = load_model(str(warm_model(recipe, out, args.warm)))
    from grpokit.kernels.attention import use_grouped_attention

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
    eval_rows = prompt_ids("test", recipe.eval.batch_size)
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
        busy: dict[str, list[float]] = {e: [] for e in engines}  # drawn tokens / (rows x decoding steps)
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
                    busy[engine].append(tokens[engine][-1] / (len(got) * max(len(r) for r in got)))
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
                "rows_busy": statistics.mean(busy[engine]),
            }
            for engine in engines
        }
        results[shape]["same_tokens_first_round"] = drawn["transformers"] == drawn["grpokit"]

    width = {shape: len(rows) for shape, (_, rows, _) in shapes.items()}
    gemm = {
        d: {n: matmul_gflops(n, d, repeats=30, best=True) for n in set(width.values())} for d in ("float32", "bfloat16")
    }
    params = sum(p.numel() for p in model.parameters())
    # Each shape's ceiling at its own rows: the rollout in the machine's faster precision, evaluation in fp32.
    ceiling = {
        "rollout": max(g[width["rollout"]] for g in gemm.values()) * 1e9 / (2 * params),
        "evaluation": gemm["float32"][width["evaluation"]] * 1e9 / (2 * params),
    }
    # The second ceiling: one decoding step's matmuls alone over the model's own weights (every layer's fused
    # q/k/v, o, gate/up and down, then the LM head), in sequence at the shape's rows. The GEMM-rate ceiling
    # reruns one MLP-sized GEMM whose weight stays in cache; a decoding step streams all ~270 MB of a bf16
    # SmolLM2-135M through the cores, which at 64 rows takes longer than its FLOPs at the GEMM rate.
    streaming = {shape: weight_streaming_tok_s(runner, len(rows)) for shape, (runner, rows, _) in shapes.items()}
    cpu = cpu_name()
    print(
        f"\nCPU: {cpu}; bf16 / fp32 matmul speed {cpu_bf16_speedup():.2f}x; rollouts in {dtype}, evaluation in fp32; "
        f"{torch.get_num_threads()} threads; the recipe's return_freed_memory: {returned}"
    )
    print(
        f"ceiling: rollout {ceiling['rollout']:.0f} tok/s ({width['rollout']} rows, faster precision), "
        f"evaluation {ceiling['evaluation']:.0f} ({width['evaluation']} rows, fp32) "
        f"(2 x {params / 1e6:.1f}M FLOPs per token); a step's matmuls alone on the model's weights: rollout "
        f"{streaming['rollout']:.0f} tok/s, evaluation {streaming['evaluation']:.0f} (% stream)"
    )
    print(
        f"{'shape':<11} {'engine':<13} {'rows':>4} {'tokens':>6} {'median s':>8} {'tok/s':>6} {'% ceil':>6} "
        f"{'% stream':>8} {'rows busy':>9} {'speed-up':>8}"
    )
    for shape, r in results.items():
        for engine in engines:
            e = r[engine]
            speedup = e["tok_s"] / r["transformers"]["tok_s"]
            print(
                f"{shape:<11} {engine:<13} {e['rows']:>4} {e['tokens_per_call']:>6.0f} {e['seconds']:>8.2f} "
                f"{e['tok_s']:>6.0f} {100 * e['tok_s'] / ceiling[shape]:>5.0f}% "
                f"{100 * e['tok_s'] / streaming[shape]:>7.0f}% {100 * e['rows_busy']:>8.0f}% {speedup:>7.2f}x"
            )
        print(f"{shape:<11} same tokens in the first round: {r['same_tokens_first_round']}")
    path = out / "results_decode.json"
    record = {"cpu": cpu, "rollout_dtype": str(dtype), "threads": torch.get_num_threads(), "gemm_gflops": gemm}
    record |= {"ceiling_tok_s": ceiling, "weight_streaming_tok_s": streaming, "results": results}
    record |= {"repeats": args.repeats, "return_freed_memory": returned}
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written: {path}")
    return 0


def weight_streaming_tok_s(model, rows: int, repeats: int = 10) -> float:
    """Tokens per second of a decoding step's matmuls alone at `rows` rows: each layer's projections (q/k/v
    and gate/up fused, as `grpokit.kernels.decode` runs them) and the LM head, on the model's own weights in its
    own dtype, one after another, after 3 warm-ups."""
    import time

    import torch

    from grpokit.kernels.decode import fused

    layers = []
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        layers.append(
            (
                fused((attn.q_proj, attn.k_proj, attn.v_proj))[0],
                attn.o_proj.weight,
                fused((mlp.gate_proj, mlp.up_proj))[0],
                mlp.down_proj.weight,
            )
        )
    head = model.lm_head.weight
    dtype, width = head.dtype, layers[0][3].size(1)
    x = torch.randn(rows, head.size(1), dtype=dtype)
    h = torch.randn(rows, width, dtype=dtype)
    attention = torch.randn(rows, layers[0][1].size(1), dtype=dtype)

    def step() -> None:
        linear = torch.nn.functional.linear
        with torch.no_grad():
            for qkv, o, gate_up, down in layers:
                linear(x, qkv)
                linear(attention, o)
                linear(x, gate_up)
                linear(h, down)
            linear(x, head)

    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return rows * repeats / (time.perf_counter() - start)


if __name__ == "__main__":
    sys.exit(main())
