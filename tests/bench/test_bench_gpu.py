"""bench/bench_gpu.py's pieces that decide its figures, on a CPU: the FLOP count behind its MFU column, and
the tokenizer it builds for random-weight models. Nothing is trained."""

import pytest
import torch

from tests.conftest import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/bench_gpu.py")  # it imports bench_step's step clock from its folder


def test_the_flop_count_is_what_the_forward_multiplies(bench):
    """3x the forward of rows of prompt + completion tokens, logits for the completion only, causal
    attention: counted against torch's FlopCounterMode on a forward with eager attention (which multiplies
    the whole T x T score matrix: its upper half is taken off here)."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    kind, shape = bench.TINY
    rows, group, prompt, completion = 4, 2, 6, 5
    length = prompt + completion
    config = AutoConfig.for_model(kind, **shape, attn_implementation="eager")
    model = AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(3, shape["vocab_size"], (rows, length))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=ids, logits_to_keep=completion)
    full_attention = 4 * shape["num_hidden_layers"] * shape["hidden_size"] * length * length * rows
    causal_attention = 4 * shape["num_hidden_layers"] * shape["hidden_size"] * length * (length + 1) // 2 * rows
    forward = counter.get_total_flops() - full_attention + causal_attention
    assert bench.model_flops(shape, rows, group, prompt, completion)["unshared"] == 3 * forward


def test_the_shared_prefix_count_saves_only_the_repeated_prompts(bench):
    shape = bench.TINY[1]
    alone = bench.model_flops(shape, rows=8, group=1, prompt=16, completion=24)
    assert alone["shared"] == alone["unshared"]  # groups of one: nothing repeated
    shared = bench.model_flops(shape, rows=8, group=4, prompt=16, completion=24)
    assert shared["unshared"] == alone["unshared"]
    # The prompt's own forward (projections and its causal attention) 2 times instead of 8.
    one_prompt = bench.model_flops(shape, rows=1, group=1, prompt=16, completion=0)["unshared"]
    assert shared["unshared"] - shared["shared"] == 6 * one_prompt


def test_the_tokenizer_round_trips_any_id_a_random_model_draws(bench):
    tokenizer = bench.build_tokenizer(1000)
    assert len(tokenizer) == 1000
    ids = torch.randint(3, 1000, (64,)).tolist()
    text = tokenizer.decode(ids)
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids
    assert tokenizer.pad_token_id == 0 and tokenizer.eos_token_id == 1


def test_the_reward_tells_completions_apart(bench):
    rewards = bench.hashed_reward([f"w{i} w{i + 1}" for i in range(3, 67)])
    assert len(set(rewards)) > 50 and all(0 <= r < 1 for r in rewards)
    assert bench.hashed_reward(["w5 w6"]) == bench.hashed_reward(["w5 w6"])
