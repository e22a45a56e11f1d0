"""The GRPO training pass alone, TRL's against grpokit's shared-prefix pass, on the default recipe's shapes.

Work: the embedded SmolLM2-135M-Instruct with the default recipe's adapter (LoRA r=16, all linear
layers), 4 arithmetic prompts x 8 completions (the recipe's rendered prompts, ~60 tokens), completions
of 26-42 tokens (the trained answers' ~34), every row trained (non-zero advantages). One pass is what
a GRPO step's loss costs: the policy's log-probabilities and entropies, the loss, and its backward.

Per contender (each in its own process, so peak memory is its own): median seconds per pass over
`--repeats` after one warm-up, the FLOPs of one pass counted by torch's FlopCounterMode (matmuls and
attention, forward and backward), the FLOP rate they give, that rate against the machine's GEMM peak
measured in the same run (the faster of fp32 and bf16 at 4096 rows, the fastest of 30 products timed one
by one: a short burst's mean swung 2.5x on this VM), and peak resident memory. Beside it, what the pass's
own matmuls allow: every product one pass dispatched (`precision.record_matmuls`), each timed alone at its
shape, layout and dtype (`precision.matmul_seconds`), and the rate they reach against the same peak: a pass
of small products cannot run nearer the peak than its products do alone.

Run: `make bench` runs it; alone: python bench/bench_train_pass.py [--repeats 5] [--group 8] [--full]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROMPTS = 4
# micro8/16: the loss in micro-batches of 8 or 16 rows; returned: train_pass.return_freed_memory on
# (grpokit-micro8-returned is the default recipe's pass)
CONTENDERS = (
    "trl",
    "grpokit",
    "grpokit-micro16",
    "grpokit-micro8",
    "grpokit-micro16-returned",
    "grpokit-micro8-returned",
)


def build_batch(tokenizer: Any, group: int, seed: int = 0) -> dict[str, Any]:
    import torch

    from grpokit.tasks import build_task
    from grpokit.tasks.base import render_prompt, tokenize_prompts

    task = build_task("arithmetic", {"operands": 3, "min_value": 1, "max_value": 10, "operators": ["+", "*"]})
    rows = task.dataset("train", PROMPTS)
    prompts = tokenize_prompts(tokenizer, [render_prompt(tokenizer, task.messages(r)) for r in rows])
    gen = torch.Generator().manual_seed(seed)
    width = max(len(p) for p in prompts)
    n = PROMPTS * group
    prompt_ids = torch.full((n, width), tokenizer.pad_token_id)
    prompt_mask = torch.zeros_like(prompt_ids)
    lengths = torch.randint(26, 43, (n,), generator=gen)
    completion_ids = torch.randint(100, 40000, (n, int(lengths.max())), generator=gen)
    completion_mask = (torch.arange(completion_ids.size(1)) < lengths.unsqueeze(1)).long()
    for i in range(n):
        p = torch.tensor(prompts[i // group])
        prompt_ids[i, width - len(p) :], prompt_mask[i, width - len(p) :] = p, 1
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(n, generator=gen),
        "num_items_in_batch": completion_mask.sum(),
    }


def run_one(name: str, repeats: int, group: int, full: bool, out: Path) -> dict[str, float]:
    import torch
    from datasets import Dataset
    from torch.utils.flop_counter import FlopCounterMode

    from grpokit.kernels.precision import matmul_seconds, record_matmuls
    from grpokit.models.load import load_model
    from grpokit.recipe.load import build_recipe
    from grpokit.recipe.trl_args import build_grpo_config
    from grpokit.stages.pipeline import attach_lora
    from grpokit.stages.trainer import GrpoOptions, GrpoTrainer

    if name.endswith("-returned"):  # train_pass.return_freed_memory
        from grpokit.kernels.memory import return_freed_memory

        return_freed_memory()
    torch.manual_seed(0)
    recipe = build_recipe(
        {
            "model": {"name": "embedded"},
            "lora": {"enabled": not full, "r": 16, "alpha": 32},
            "rewards": [{"name": "format"}],
            "grpo": {"num_generations": group, "per_device_train_batch_size": PROMPTS * group, "beta": 0.0},
            "output": {"save_every": 0},
        }
    )
    model, tokenizer = load_model("embedded")
    if not full:
        model = attach_lora(model, recipe)
    trainer = GrpoTrainer(
        model=model,
        reward_funcs=[lambda prompts, completions, **kw: [0.0] * len(completions)],
        args=build_grpo_config(recipe, out),
        train_dataset=Dataset.from_list([{"prompt": "x"}]),
        processing_class=tokenizer,
        options=GrpoOptions(
            shared_prefix=name.startswith("grpokit"),
            micro_batch_rows=int(name.split("micro")[1].split("-")[0]) if "micro" in name else None,
        ),
    )
    if name == "trl":  # TRL's pass on peft's LoRA layers and transformers' modules, not grpokit's fused ones
        from grpokit.kernels import fused_lora, fused_ops

        fused_lora.uninstall(trainer.model)
        fused_ops.uninstall(trainer.model)
    trainer.current_gradient_accumulation_steps = 1  # what Trainer.train sets
    trainer.model.train()
    batch = build_batch(tokenizer, group)

    def one_pass() -> None:
        trainer.model.zero_grad(set_to_none=True)
        trainer.compute_loss(trainer.model, batch).backward()

    one_pass()  # warm-up
    with FlopCounterMode(display=False) as counter:  # one pass counted two ways
        products = record_matmuls(one_pass)  # what the pass's own matmuls allow at their shapes
    matmul_s = matmul_seconds(products)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        one_pass()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    tokens = int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())
    return {
        "pass_s": seconds,
        "pass_s_min": min(times),
        "gflop": counter.get_total_flops() / 1e9,
        "gflops_per_s": counter.get_total_flops() / seconds / 1e9,
        "matmul_gflop": sum(p.flop * n for p, n in products.items()) / 1e9,
        "matmul_alone_s": matmul_s,
        "matmul_products": sum(products.values()),
        "tokens": tokens,
        "completion_tokens": int(batch["completion_mask"].sum()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "shared_prefix": bool(trainer.shared_prefix),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--group", type=int, default=8, help="completions per prompt")
    parser.add_argument("--full", action="store_true", help="full fine-tune instead of the default LoRA")
    parser.add_argument("--out", default="bench/out")
    parser.add_argument("--only", default=",".join(CONTENDERS))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one contender in this process, print JSON
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one:
        print(json.dumps(run_one(args.one, args.repeats, args.group, args.full, out / f"pass-{args.one}")))
        return 0

    from grpokit.kernels.precision import cpu_name, matmul_gflops

    peak = {dtype: matmul_gflops(4096, dtype, repeats=30, best=True) for dtype in ("float32", "bfloat16")}
    results = {}
    for name in args.only.split(","):
        print(f"[bench] training pass, {name}: {PROMPTS}x{args.group} rows ...", flush=True)
        command = [sys.executable, __file__, "--one", name, "--repeats", str(args.repeats), "--group", str(args.group)]
        command += ["--out", str(out)] + (["--full"] if args.full else [])
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])

    cpu = cpu_name()
    best = max(peak.values())
    print(f"\nCPU: {cpu}; GEMM 4096x576x1536: fp32 {peak['float32']:.0f}, bf16 {peak['bfloat16']:.0f} GFLOP/s")
    kind = "full fine-tune" if args.full else "LoRA r=16"
    print(f"training pass, SmolLM2-135M {kind}, {PROMPTS} prompts x {args.group} completions, every row trained")
    width = max(len(name) for name in results)
    print(
        f"{'contender':<{width}} {'pass s':>7} {'GFLOP':>7} {'GFLOP/s':>8} {'% peak':>7} {'matmuls alone s':>15} "
        f"{'their % peak':>12} {'peak RSS MB':>11} {'vs TRL':>7}"
    )
    for name, r in results.items():
        vs_trl = f"{results['trl']['pass_s'] / r['pass_s']:.2f}x" if "trl" in results else "-"  # TRL not run
        alone = r["matmul_gflop"] / r["matmul_alone_s"]  # the rate the pass's own products reach alone
        print(
            f"{name:<{width}} {r['pass_s']:>7.2f} {r['gflop']:>7.1f} {r['gflops_per_s']:>8.1f} "
            f"{100 * r['gflops_per_s'] / best:>6.1f}% {r['matmul_alone_s']:>15.2f} {100 * alone / best:>11.1f}% "
            f"{r['peak_rss_mb']:>11.0f} {vs_trl:>7}"
        )
    print(
        "matmuls alone: every product the pass ran, timed by itself at its shape, layout and dtype (the fastest of "
        "10, operands in cache): the most its matmuls allow"
    )
    path = out / f"results_train_pass{'_full' if args.full else ''}_g{args.group}.json"
    path.write_text(json.dumps({"cpu": cpu, "gemm_gflops": peak, "group": args.group, "results": results}, indent=2))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
