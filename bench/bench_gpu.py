"""GPU: one GRPO step, grpokit vs plain TRL, on random-weight models of three shapes; prints one table.

Issue 15 item 7, for a GPU machine lent for a few minutes: nothing can be downloaded there, so the models
are built from a config with random weights (SmolLM2-135M, Qwen2.5-0.5B and Qwen2.5-1.5B shapes: layers,
widths, heads and vocabulary as published) and the tokenizer is a word-level one made here with the
model's vocabulary size (`w0 w1 ...`, one token per word). The work is the same for every contender:
`--prompts` distinct prompts of `--prompt-tokens` tokens x `--group` completions of exactly `--tokens`
tokens (`min_new_tokens` forces the length), full fine-tune, a reward that differs between completions
(a hash of the text), so every group disagrees and every row is trained: the worst case of a step.

Contenders: TRL's defaults (bf16, activation checkpointing on), TRL hand-tuned (bf16, checkpointing off),
grpokit (`GrpoTrainer` with its defaults: its own sampler, the shared-prefix training pass, bf16).
Per contender: the mean over the timed steps (the first is warm-up) of the step, generation and the
training pass (GPU clocks read after a synchronize), rollout tokens per second, peak GPU memory, and the
training pass's model FLOPs utilization: the FLOPs of the unshared pass (every row forwards its prompt and
completion; backward twice the forward; checkpointing's recomputation not counted) over its time, against
the bf16 matmul rate measured in the same run (8192^3). grpokit's shared prefix does fewer FLOPs than that
count, so its figure is the rate of the same work, an effective utilization; `executed_tflop` gives what it ran.

Results go to `<out>/results_gpu.json` after every contender (a run cut short keeps what it measured).
Run on the GPU machine: python bench/bench_gpu.py [--models smollm2-135m,qwen2.5-0.5b] [--steps 3]
A dry run on a CPU (tiny shapes, fp32): python bench/bench_gpu.py --tiny

`--decode` measures the rollout alone instead (`<out>/results_gpu_decode.json`): the same rows and forced
lengths sampled at T=1 from the model in bf16 (a plain copy, as grpokit's rollout copy is), by transformers'
`generate` (what TRL calls), by grpokit's sampler on transformers' forward (its path before the static
decoder), on `grpokit.kernels.decode` eager with the static cache, and on it replayed from a CUDA graph (the
default on a GPU); tokens per second, milliseconds per decoding step, the graph's capture time, and a
greedy check that the graph draws the eager decoder's tokens exactly.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import time_steps  # the same step clock as `make bench`


def _shape(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, vocab: int, rope: float) -> dict:
    return dict(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=vocab,
        rope_theta=rope,
        tie_word_embeddings=True,
    )


# (model type, config): the published shapes' layers, widths, heads and vocabulary
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "smollm2-135m": ("llama", _shape(576, 1536, 30, 9, 3, 49152, 1e5)),
    "qwen2.5-0.5b": ("qwen2", _shape(896, 4864, 24, 14, 2, 151936, 1e6)),
    "qwen2.5-1.5b": ("qwen2", _shape(1536, 8960, 28, 12, 2, 151936, 1e6)),
}
TINY = ("llama", _shape(64, 128, 2, 4, 2, 512, 1e4))
CONTENDERS = ("trl-defaults", "trl-tuned", "grpokit")


def build_model(kind: str, shape: dict[str, Any], device: str) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(kind, **shape, max_position_embeddings=4096, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: a 1.5B model's init on the host takes a while
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def build_tokenizer(vocab_size: int) -> Any:
    """A word-level tokenizer over the model's whole vocabulary: `w<i>` is token i, so every id a random
    model draws decodes to text and the text encodes back to the same ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2} | {f"w{i}": i for i in range(3, vocab_size)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def hashed_reward(completions: list[str], **_: Any) -> list[float]:
    """Differs between completions (a hash of the text), so no group agrees and every row is trained."""
    return [(zlib.crc32(c.encode()) % 1000) / 1000 for c in completions]


def model_flops(shape: dict[str, Any], rows: int, group: int, prompt: int, completion: int) -> dict[str, float]:
    """FLOPs of one training pass (forward + backward = 3x the forward's matmuls and attention), full fine-tune.
    `unshared`: every row forwards its prompt; `shared`: each group's prompt forwarded once (grpokit.kernels.prefix)."""
    h, inter, layers, vocab = (
        shape[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size")
    )
    kv = h // shape["num_attention_heads"] * shape["num_key_value_heads"]
    per_token = 2 * layers * (2 * h * h + 2 * h * kv + 3 * h * inter)  # the projections' matmuls, forward
    length = prompt + completion

    def attention(queries_from: int, to: int) -> float:  # causal: position t reads t keys, QK and AV
        return 4 * layers * h * sum(range(queries_from + 1, to + 1))

    head = 2 * h * vocab * completion  # logits for the completion tokens only
    unshared = rows * (length * per_token + attention(0, length) + head)
    groups = rows // group
    shared = groups * (prompt * per_token + attention(0, prompt)) + rows * (
        completion * per_token + attention(prompt, length) + head
    )
    return {"unshared": 3 * unshared, "shared": 3 * shared}


def bf16_matmul_tflops(device: str) -> float:
    """The bf16 rate of an 8192^3 product on `device` (1024^3 in a dry run on a CPU), in TFLOP/s: the fastest
    of `repeats` products timed one by one, the peak every CPU benchmark uses (bench/RESULTS.md v0.34)."""
    from grpokit.kernels.precision import matmul_gflops

    n, repeats = (1024, 3) if device == "cpu" else (8192, 10)
    return matmul_gflops(n, "bfloat16", repeats, inner=n, cols=n, device=device, best=True) / 1000


def contender_config(name: str, out: Path, args: argparse.Namespace, device: str) -> Any:
    from trl import GRPOConfig

    rows = args.prompts * args.group
    cpu = device == "cpu"
    common = dict(
        output_dir=str(out),
        per_device_train_batch_size=rows,
        num_generations=args.group,
        max_completion_length=args.tokens,
        generation_kwargs={"min_new_tokens": args.tokens},
        learning_rate=1e-6,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        disable_tqdm=True,
        bf16=not cpu,
        use_cpu=cpu,
    )
    if name == "trl-defaults":
        return GRPOConfig(**common)  # activation checkpointing on, beta 0 (TRL 1.16's defaults)
    return GRPOConfig(**common, gradient_checkpointing=False, beta=0.0)


def run_contender(name: str, model_name: str, args: argparse.Namespace, device: str) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer

    from grpokit.stages.trainer import GrpoOptions, GrpoTrainer

    kind, shape = TINY if args.tiny else SHAPES[model_name]
    model = build_model(kind, shape, device)
    tokenizer = build_tokenizer(shape["vocab_size"])
    rng = random.Random(0)
    prompts = [
        " ".join(f"w{rng.randrange(3, shape['vocab_size'])}" for _ in range(args.prompt_tokens))
        for _ in range(args.prompts * args.steps)
    ]
    data = Dataset.from_list([{"prompt": p} for p in prompts])
    cls = GrpoTrainer if name.startswith("grpokit") else GRPOTrainer
    # train_pass.micro_batch_rows: the loss in parts of whole groups, one part's activations at a time
    options = GrpoOptions(micro_batch_rows=args.micro_batch_rows) if args.micro_batch_rows else None
    kwargs = {"options": options} if cls is GrpoTrainer and options else {}
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer = cls(
        model=model,
        reward_funcs=[hashed_reward],
        args=contender_config(name, Path(args.out) / name, args, device),
        train_dataset=data,
        processing_class=tokenizer,
        **kwargs,
    )
    result: dict[str, Any] = time_steps(trainer, args.steps, grpokit=cls is GrpoTrainer)
    if cls is GrpoTrainer:
        result["shared_prefix"] = bool(trainer.shared_prefix)
        # after a pass that ran out of memory, the micro-batches it settled on (None: the whole batch)
        result["micro_batch_rows"] = trainer.micro_batch_rows
    result["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 1e9 if device == "cuda" else float("nan")
    return result


def run_decode(model_name: str, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """The rollout alone, four ways (see the module's docstring), on one model shape."""
    import functools
    from unittest import mock

    import torch

    from grpokit.kernels import decode, precision
    from grpokit.rollout.sampler import SamplingSettings, sample

    kind, shape = TINY if args.tiny else SHAPES[model_name]
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = build_model(kind, shape, device).to(dtype).eval().requires_grad_(False)
    rng = random.Random(1)
    vocab = shape["vocab_size"]
    prompts = [[rng.randrange(3, vocab) for _ in range(args.prompt_tokens)] for _ in range(args.prompts)]
    rows = [p for p in prompts for _ in range(args.group)]
    captures: list[float] = []

    def clock() -> float:
        return precision.clock(device)

    real_decoder = decode.Decoder
    real_capture = real_decoder._capture

    def timed_capture(self: Any) -> Any:
        start = clock()
        graph = real_capture(self)
        captures.append(clock() - start)
        return graph

    def grpokit_sampler(tokens: int, top_k: int, static: bool | None, graphs: bool | None) -> list[list[int]]:
        settings = SamplingSettings(max_new_tokens=tokens, min_new_tokens=tokens, top_k=top_k)
        decoder = functools.partial(real_decoder, static=static, graphs=graphs)
        with mock.patch.object(real_decoder, "_capture", timed_capture), mock.patch.object(decode, "Decoder", decoder):
            if static is None:  # the sampler on transformers' forward: the decoder refused
                with mock.patch.object(decode, "refusal", lambda model: "measured without it"):
                    return sample(model, rows, settings, eos_ids=[1], pad_id=0)
            return sample(model, rows, settings, eos_ids=[1], pad_id=0)

    def generate(tokens: int, top_k: int) -> list[list[int]]:
        ids = torch.tensor(rows, device=device)
        options = dict(do_sample=True, top_k=0, top_p=1.0, temperature=1.0) if top_k != 1 else dict(do_sample=False)
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            pad_token_id=0,
            eos_token_id=1,
            **options,
        )
        return out[:, ids.size(1) :].tolist()

    cuda = device == "cuda"
    ways: dict[str, Any] = {
        "generate (TRL's path)": generate,
        "grpokit sampler, transformers forward": functools.partial(grpokit_sampler, static=None, graphs=None),
        "grpokit.kernels.decode, static cache, eager": functools.partial(grpokit_sampler, static=True, graphs=False),
    }
    if cuda:
        ways["grpokit.kernels.decode, static cache, CUDA graph"] = functools.partial(
            grpokit_sampler, static=True, graphs=True
        )
    result: dict[str, Any] = {"rows": len(rows), "tokens": args.tokens, "ways": {}}
    for way, run in ways.items():
        try:
            run(8, 0)  # warm-up: kernels, cuBLAS handles, allocator
            captures.clear()
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            start = clock()
            drawn = run(args.tokens, 0)
            seconds = clock() - start
            assert all(len(r) == args.tokens for r in drawn), "every row must decode the forced length"
        except Exception as err:  # one way failing keeps the others
            result.setdefault("failed", {})[way] = f"{type(err).__name__}: {err}"[:500]
            print(f"[bench-gpu] {model_name} / {way}: failed: {result['failed'][way]}", flush=True)
            continue
        result["ways"][way] = {
            "seconds": seconds,
            "tok_s": len(rows) * args.tokens / seconds,
            "ms_per_step": 1000 * seconds / args.tokens,
            "capture_s": sum(captures),
            "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else float("nan"),
        }
        print(f"[bench-gpu] {model_name} / {way}: {json.dumps(result['ways'][way])}", flush=True)
    # Greedy agreement: the graph replays the eager decoder's kernels (identical tokens); transformers'
    # forward rounds bf16 differently (fused projections), so its share of identical tokens is reported.
    check = min(args.tokens, 32)
    eager = ways["grpokit.kernels.decode, static cache, eager"](check, 1)
    graph = ways.get(
        "grpokit.kernels.decode, static cache, CUDA graph", ways["grpokit.kernels.decode, static cache, eager"]
    )
    forward = ways["grpokit sampler, transformers forward"](check, 1)
    same = sum(a == b for r, s in zip(eager, forward, strict=True) for a, b in zip(r, s, strict=True))
    result["greedy_graph_equals_eager"] = graph(check, 1) == eager
    result["greedy_tokens_equal_to_forward"] = same / (len(rows) * check)
    return result


def main_decode(args: argparse.Namespace, device: str, record: dict[str, Any], start: float) -> int:
    from grpokit.kernels import memory

    path = Path(args.out) / "results_gpu_decode.json"
    for model_name in args.models.split(","):
        if time.perf_counter() - start > args.budget:
            record["not_run"][model_name] = "the run's time budget was spent"
            continue
        try:
            record["results"][model_name] = run_decode(model_name, args, device)
        except Exception as err:  # one shape failing keeps the others
            record["not_run"][model_name] = f"{type(err).__name__}: {err}"[:500]
            print(f"[bench-gpu] {model_name}: failed: {record['not_run'][model_name]}", flush=True)
        finally:
            memory.release_device_cache()
        path.write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"\n{record['device']}; {args.prompts} prompts x {args.group} rows, {args.prompt_tokens}-token prompts, "
        f"{args.tokens} tokens forced, T=1, bf16 weights"
    )
    print(f"{'model / rollout':<58} {'s':>6} {'tok/s':>8} {'ms/step':>8} {'capture s':>9} {'peak GB':>7}")
    for model_name, r in record["results"].items():
        for way, why in r.get("failed", {}).items():
            print(f"{model_name + ' / ' + way:<58} failed: {why}")
        for way, w in r["ways"].items():
            print(
                f"{model_name + ' / ' + way:<58} {w['seconds']:>6.2f} {w['tok_s']:>8.0f} {w['ms_per_step']:>8.2f} "
                f"{w['capture_s']:>9.3f} {w['peak_gpu_gb']:>7.1f}"
            )
        print(
            f"{model_name}: greedy graph == eager: {r['greedy_graph_equals_eager']}; "
            f"greedy tokens equal to transformers' forward: {100 * r['greedy_tokens_equal_to_forward']:.1f}%"
        )
    for key, why in record["not_run"].items():
        print(f"{key}: not run ({why})")
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written: {path}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SHAPES))
    parser.add_argument("--only", default=",".join(CONTENDERS), help="comma-separated contenders")
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per contender (the first is warm-up)")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=256, help="completion tokens (forced)")
    parser.add_argument("--micro-batch-rows", type=int, help="grpokit: train_pass.micro_batch_rows")
    parser.add_argument(
        "--max-gpu-gb", type=float, help="cap this process's GPU memory (torch's per-process fraction): a real OOM"
    )
    parser.add_argument("--budget", type=float, default=480, help="seconds; contenders not started after it")
    parser.add_argument("--out", default="bench/out-gpu")
    parser.add_argument("--tiny", action="store_true", help="a dry run on a CPU: tiny shapes, fp32")
    parser.add_argument("--decode", action="store_true", help="the rollout alone, four ways (see above)")
    args = parser.parse_args()
    start = time.perf_counter()
    import torch

    from grpokit.kernels import memory

    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu (dry run)"
    if args.max_gpu_gb and device == "cuda":  # the allocator raises OutOfMemoryError past this many GB
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(args.max_gpu_gb * 1e9 / total)
    peak = bf16_matmul_tflops(device)
    print(f"[bench-gpu] {gpu}; bf16 matmul 8192^3: {peak:.0f} TFLOP/s; torch {torch.__version__}", flush=True)
    rows = args.prompts * args.group
    record: dict[str, Any] = {
        "device": gpu,
        "torch": torch.__version__,
        "bf16_matmul_tflops": peak,
        "workload": {
            "prompts": args.prompts,
            "group": args.group,
            "prompt_tokens": args.prompt_tokens,
            "completion_tokens": args.tokens,
            "steps": args.steps,
            "full_finetune": True,
        },
        "max_gpu_gb": args.max_gpu_gb,
        "results": {},
        "not_run": {},
    }
    if args.decode:
        return main_decode(args, device, record, start)
    suffix = f"_micro{args.micro_batch_rows}" if args.micro_batch_rows else ""
    suffix += f"_cap{args.max_gpu_gb:g}gb" if args.max_gpu_gb else ""
    path = out / f"results_gpu{suffix}.json"
    for model_name in args.models.split(","):
        shape = (TINY if args.tiny else SHAPES[model_name])[1]
        flops = model_flops(shape, rows, args.group, args.prompt_tokens, args.tokens)
        for name in args.only.split(","):
            key = f"{model_name}/{name}"
            if name == "grpokit" and args.micro_batch_rows:
                key += f"-micro{args.micro_batch_rows}"
            if time.perf_counter() - start > args.budget:
                record["not_run"][key] = "the run's time budget was spent"
                continue
            print(f"[bench-gpu] {key}: {args.steps} steps ...", flush=True)
            try:
                r = run_contender(name, model_name, args, device)
            except Exception as err:  # one contender failing (memory, an unsupported path) keeps the others
                record["not_run"][key] = f"{type(err).__name__}: {err}"[:500]
                print(f"[bench-gpu] {key}: failed: {record['not_run'][key]}", flush=True)
                continue
            finally:  # the contender's model, optimizer and caches go before the next one starts
                memory.release_device_cache()
            executed = flops["shared"] if r.get("shared_prefix") else flops["unshared"]
            r["model_tflop"] = flops["unshared"] / 1e12
            r["executed_tflop"] = executed / 1e12
            r["train_tflop_s"] = flops["unshared"] / r["train_pass_s"] / 1e12
            r["mfu"] = r["train_tflop_s"] / peak
            record["results"][key] = r
            shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
            print(f"[bench-gpu] {key}: {json.dumps(shown)}", flush=True)
            path.write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"\n{gpu}; bf16 matmul {peak:.0f} TFLOP/s; {args.prompts} prompts x {args.group} completions, "
        f"{args.prompt_tokens}-token prompts, {args.tokens} completion tokens, full fine-tune"
    )
    print(format_table(record["results"]))
    for key, why in record["not_run"].items():
        print(f"{key}: not run ({why})")
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"written: {path}")
    return 0


def format_table(results: dict[str, dict[str, Any]]) -> str:
    head = (
        f"{'model / contender':<28} {'step s':>7} {'gen s':>6} {'train s':>7} {'tok/s':>7} "
        f"{'train TFLOP/s':>13} {'MFU':>5} {'peak GB':>7} {'micro':>5} {'vs defaults':>11} {'vs tuned':>8}"
    )
    lines = [head]
    for key, r in results.items():
        model = key.split("/")[0]
        vs = {b: results.get(f"{model}/{b}", {}).get("step_s", float("nan")) for b in ("trl-defaults", "trl-tuned")}
        lines.append(
            f"{key:<28} {r['step_s']:>7.2f} {r['generate_s']:>6.2f} {r['train_pass_s']:>7.2f} "
            f"{r['rollout_tok_s']:>7.0f} {r['train_tflop_s']:>13.1f} {100 * r['mfu']:>4.0f}% {r['peak_gpu_gb']:>7.1f} "
            f"{r.get('micro_batch_rows') or '-':>5} "
            f"{r['step_s'] / vs['trl-defaults']:>10.2f}x {r['step_s'] / vs['trl-tuned']:>7.2f}x"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
