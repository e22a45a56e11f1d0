import pytest
import torch

from grpokit.rollout.sampler import DRAW_BLOCK, SamplingSettings, draw, draw_with_logprob, filter_logits, sample


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    from grpokit.models.load import load_model

    model, tokenizer = load_model(str(tiny_model_dir))
    return model.eval(), tokenizer


@pytest.fixture(params=["transformers", "grpokit"])
def sampler(request, model_and_tokenizer, monkeypatch):
    """The sampling tests run on both decoding engines: transformers' forward (what a model `grpokit.kernels.decode`
    does not cover decodes on) and grpokit's decoder (on a frozen model, as the rollout copy and evaluation's
    merged copy are)."""
    import grpokit.kernels.decode as decode

    model, tokenizer = model_and_tokenizer
    frozen = request.param == "grpokit"
    if not frozen:
        monkeypatch.setattr(decode, "refusal", lambda model: "off")
    model.requires_grad_(not frozen)
    assert (decode.refusal(model) is None) == frozen
    yield model, tokenizer
    model.requires_grad_(True)


def greedy_reference(model, tokenizer, prompts, max_new_tokens, eos_ids):
    """transformers' own greedy generate, one prompt at a time (no padding involved)."""
    out = []
    for ids in prompts:
        generated = model.generate(
            torch.tensor([ids]),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=eos_ids,
            pad_token_id=tokenizer.pad_token_id,
        )[0, len(ids) :].tolist()
        ended = next((i for i, t in enumerate(generated) if t in eos_ids), None)
        out.append(generated if ended is None else generated[: ended + 1])
    return out


PROMPTS = [[5, 9, 13, 2], [5, 9, 13, 2], [5, 9, 13, 2], [7, 3], [7, 3], [11, 4, 6, 8, 10, 12]]


def test_top_1_sampling_equals_greedy_generate(sampler):
    """Shared prompt caches, left padding, positions and rows leaving the batch: all match generate."""
    model, tokenizer = sampler
    free = greedy_reference(model, tokenizer, PROMPTS, 12, [tokenizer.eos_token_id])
    # Make some rows end early: a token that one row emits at step 3 becomes an EOS token.
    eos = [tokenizer.eos_token_id, free[3][3]]
    expected = greedy_reference(model, tokenizer, PROMPTS, 12, eos)
    got = sample(model, PROMPTS, SamplingSettings(max_new_tokens=12, top_k=1), eos_ids=eos, pad_id=0)
    assert got == expected
    assert any(len(row) < 12 for row in got) and any(len(row) == 12 for row in got)


def test_a_shared_prompt_prefix_is_forwarded_once_with_the_same_result(sampler, monkeypatch):
    """Prompts of one chat template share their system prompt: forwarded once, the samples do not change."""
    import grpokit.rollout.sampler as rollout

    model, tokenizer = sampler
    head = [5, 9, 13, 2, 7, 3, 11, 4, 6, 8]  # a common prefix of 10 tokens, then suffixes of 1 to 4 tokens
    prompts = [[*head, 20, 21], [*head, 20, 21], [*head, 30], [*head, 40, 41, 42, 43]]
    eos = [tokenizer.eos_token_id]
    expected = greedy_reference(model, tokenizer, prompts, 8, eos)
    calls = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **kw: calls.append(kw["input_ids"].shape) or forward(*a, **kw))
    got = sample(model, prompts, SamplingSettings(max_new_tokens=8, top_k=1), eos_ids=eos, pad_id=0)
    assert got == expected
    assert calls[0] == (1, 10) and calls[1] == (3, 4)  # the prefix once, then each distinct prompt's own tokens
    # The logits that start decoding equal each prompt's own forward pass.
    distinct = [prompts[0], prompts[2], prompts[3]]
    with torch.no_grad():
        _, logits, mask = rollout._prefill(model, distinct, 0, torch.device("cpu"), rollout._cache_argument(model))
        alone = torch.cat([forward(input_ids=torch.tensor([p])).logits[:, -1] for p in distinct])
    torch.testing.assert_close(logits, alone, rtol=1e-4, atol=1e-4)
    assert mask.sum(1).tolist() == [len(p) for p in distinct]
    monkeypatch.setattr(rollout, "SHARED_PREFIX_MIN", 11)  # below the threshold: the plain path, same samples
    assert sample(model, prompts, SamplingSettings(max_new_tokens=8, top_k=1), eos_ids=eos, pad_id=0) == expected


def scripted_draws(monkeypatch, script):
    """Make the sampler draw `script` in order (one row), whatever the logits say."""
    import grpokit.rollout.sampler as rollout

    tokens = iter(script)

    def scripted(logits, overwrite=False):
        return torch.tensor([next(tokens)] * logits.size(0)), torch.zeros(logits.size(0))

    monkeypatch.setattr(rollout, "draw_with_logprob", scripted)


@pytest.mark.parametrize("shared", [False, True])
def test_prompts_meet_the_vocabulary_at_their_last_position_only(sampler, shared):
    """Logits for every prompt position would be [rows, prompt tokens, vocabulary] floats: 1.2 GB for an
    evaluation batch of 100 prompts of 60 tokens with SmolLM2's 49,152-token vocabulary. The prefill (with
    a shared prefix forwarded apart, or without) and each decoding step ask for one position per row."""
    from grpokit.kernels.decode import refusal

    model, tokenizer = sampler
    prefix = list(range(20, 29)) if shared else []  # 9 tokens: long enough to be forwarded once
    prompts = [prefix + p for p in PROMPTS]
    positions = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: positions.append(args[0].size(1)))
    try:
        settings = SamplingSettings(max_new_tokens=3, top_k=1)
        sample(model, prompts, settings, eos_ids=[-1], pad_id=tokenizer.pad_token_id)  # -1: no row ends early
    finally:
        hook.remove()
    # prefill(s), then two decoding steps on transformers' forward; grpokit's decoder computes its LM head
    # itself, into a [rows, vocabulary] buffer (`test_decode`)
    decoding_steps = 0 if refusal(model) is None else 2
    assert len(positions) == (2 if shared else 1) + decoding_steps
    assert set(positions) == {1}


@pytest.mark.parametrize(
    ("after_stop", "is_end", "expected"),
    [
        (40, False, [20, 21, 22, 40]),  # drawn after the stop text, not an end token: kept, and the row ends
        (2, True, [20, 21, 22, 2]),  # an end token the model drew: kept the same way
    ],
)
def test_a_stop_text_ends_the_row_on_tokens_the_model_drew(sampler, monkeypatch, after_stop, is_end, expected):
    """Nothing the model did not draw is returned, and every draw after the stop text is (issue 52 changed
    the first case, which dropped a draw that was not an end token): the trainer trains every returned token
    with its row's advantage."""
    from grpokit.rollout.sampler import finished

    model, tokenizer = sampler
    eos = [tokenizer.eos_token_id, *([after_stop] if is_end else [])]
    scripted_draws(monkeypatch, [20, 21, 22, after_stop, 50, 51, 52])
    stop = tokenizer.decode([21, 22])
    settings = SamplingSettings(max_new_tokens=7, stop_texts=(stop,))
    (row,) = sample(model, PROMPTS[:1], settings, eos_ids=eos, pad_id=0, tokenizer=tokenizer)
    assert row == expected
    assert finished(row, eos, tokenizer, (stop,))
    assert not finished([20, 50, 51], eos, tokenizer, (stop,))  # ran out of tokens


def test_the_expected_gradient_at_the_draw_after_a_stop_text_is_zero(model_and_tokenizer, monkeypatch):
    """Over every token the policy can draw after the stop text, the expectation of what the trainer trains
    at that position (A * grad log p(token) where the row holds one, else nothing) must be 0 for an advantage
    A that does not depend on the draw: sum_x p(x) grad log p(x) = grad sum_x p(x) = 0. Keeping only end
    tokens gave A * p(EOS) * (onehot(EOS) - p), which pushes wrong answers (A < 0) away from stopping.
    The gradient is taken with respect to that position's logits (the parameters' is its image under the
    Jacobian)."""
    model, tokenizer = model_and_tokenizer
    eos = [tokenizer.eos_token_id]
    stop = tokenizer.decode([21, 22])
    prompt = PROMPTS[0]
    with torch.no_grad():
        logits = model(torch.tensor([[*prompt, 20, 21, 22]])).logits[0, -1].double()  # after the stop text
    probs = logits.softmax(-1)
    expected = torch.zeros_like(probs)
    settings = SamplingSettings(max_new_tokens=6, stop_texts=(stop,))
    for token in range(probs.numel()):
        scripted_draws(monkeypatch, [20, 21, 22, token, 50, 51])
        (row,) = sample(model, [prompt], settings, eos_ids=eos, pad_id=0, tokenizer=tokenizer)
        assert row[:3] == [20, 21, 22] and len(row) <= 4  # the row ends at the draw after the stop text
        if len(row) == 4:  # trained at that position: grad of log p(row[3]) with respect to the logits
            expected += probs[token] * (torch.nn.functional.one_hot(torch.tensor(row[3]), probs.numel()) - probs)
    assert expected.abs().max().item() < 1e-12


def test_a_stop_text_at_the_token_limit_adds_nothing(sampler, monkeypatch):
    model, tokenizer = sampler
    scripted_draws(monkeypatch, [20, 21, 22, 2])
    settings = SamplingSettings(max_new_tokens=3, stop_texts=(tokenizer.decode([21, 22]),))
    (row,) = sample(model, PROMPTS[:1], settings, eos_ids=[tokenizer.eos_token_id, 2], pad_id=0, tokenizer=tokenizer)
    assert row == [20, 21, 22]  # never longer than max_new_tokens


def test_min_new_tokens_holds_back_end_tokens_and_stop_texts(sampler):
    model, tokenizer = sampler
    eos = [tokenizer.eos_token_id]
    free = greedy_reference(model, tokenizer, PROMPTS[:1], 12, eos)[0]
    stop = tokenizer.decode(free[4:6])
    held = SamplingSettings(max_new_tokens=12, top_k=1, min_new_tokens=10, stop_texts=(stop,))
    (row,) = sample(model, PROMPTS[:1], held, eos_ids=[free[1]], pad_id=0, tokenizer=tokenizer)
    assert len(row) >= 10 and free[1] not in row[:9]


def test_first_token_frequencies_follow_the_softmax(sampler):
    model, _ = sampler
    torch.manual_seed(0)
    prompt = [5, 9, 13, 2]
    with torch.no_grad():
        probs = model(torch.tensor([prompt])).logits[0, -1].float().softmax(-1)
    rows = sample(model, [prompt] * 3000, SamplingSettings(max_new_tokens=1), eos_ids=[], pad_id=0)
    counts = torch.bincount(torch.tensor([r[0] for r in rows]), minlength=probs.numel()).float()
    top = probs.argsort(descending=True)[:5]
    # Binomial standard error at n=3000 is at most 0.009; 4 sigma.
    assert torch.allclose(counts[top] / 3000, probs[top], atol=0.036)


@pytest.mark.parametrize("settings", [SamplingSettings(8, temperature=0.7), SamplingSettings(8, top_k=5)])
def test_sampled_log_probabilities_are_the_sampling_distributions(sampler, settings):
    """Each token's log-probability is its own under the distribution it was drawn from (temperature,
    top-k): the model's logits at that position, teacher-forced, filtered the same way. The tokens are
    the ones `sample` draws without them."""
    model, _ = sampler
    prompts = [[5, 9, 13, 2]] * 3 + [[7, 3]] * 3
    torch.manual_seed(0)
    plain = sample(model, prompts, settings, eos_ids=[], pad_id=0)
    torch.manual_seed(0)
    rows, logps = sample(model, prompts, settings, eos_ids=[], pad_id=0, logprobs=True)
    assert rows == plain and [len(lp) for lp in logps] == [len(r) for r in rows] == [8] * 6
    for prompt, row, drawn in zip(prompts, rows, logps, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + row])).logits[0, len(prompt) - 1 : -1].float()
        expected = filter_logits(logits, settings).log_softmax(-1).gather(1, torch.tensor(row)[:, None]).squeeze(1)
        assert torch.allclose(torch.tensor(drawn), expected, atol=1e-4), (drawn, expected.tolist())


def test_draw_follows_the_softmax_and_never_picks_a_masked_token():
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, float("-inf"), 1.0, 2.0, float("-inf")]]).repeat(20_000, 1)
    counts = torch.bincount(draw(logits), minlength=5).float() / 20_000
    assert counts[1] == 0 and counts[4] == 0
    # Binomial standard error at n=20000 is at most 0.0036; 4 sigma.
    assert torch.allclose(counts, logits[0].softmax(-1), atol=0.015)
    assert draw(torch.tensor([[float("-inf"), 5.0, float("-inf")]])).tolist() == [1]


def test_draw_across_blocks_follows_the_softmax():
    # A vocabulary of several blocks, not a multiple of the block: mass on both sides of a block boundary,
    # in the padded last block, and everywhere else masked.
    torch.manual_seed(0)
    vocab, kept = 2 * DRAW_BLOCK + 100, [3, DRAW_BLOCK - 1, DRAW_BLOCK, 2 * DRAW_BLOCK + 99]
    logits = torch.full((1, vocab), float("-inf"))
    logits[0, kept] = torch.tensor([0.0, 1.0, 2.0, 0.5])
    counts = torch.bincount(draw(logits.repeat(20_000, 1)), minlength=vocab).float() / 20_000
    assert counts.sum() == 1 and counts[kept].sum() == 1  # nothing outside the kept tokens
    # Binomial standard error at n=20000 is at most 0.0036; 4 sigma.
    assert torch.allclose(counts[kept], logits[0, kept].softmax(-1), atol=0.015)


def test_filters():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    assert filter_logits(logits, SamplingSettings(1, top_k=2)).isinf().tolist() == [[True, False, False, True]]
    probs = logits.softmax(-1)[0].tolist()  # [.09, .64, .24, .03]
    top_p = filter_logits(logits, SamplingSettings(1, top_p=0.7))
    assert top_p.isinf().tolist() == [[True, False, False, True]] and probs[1] < 0.7 < probs[1] + probs[2]
    assert torch.equal(filter_logits(logits, SamplingSettings(1, temperature=2.0)), logits / 2)


@pytest.mark.parametrize(
    "settings", [dict(temperature=0.7), dict(top_k=2), dict(top_p=0.7), dict(temperature=2.0, top_k=3)]
)
def test_filters_in_place_write_the_same_values_into_the_buffer(settings):
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.5, -1.0, 4.0, 2.5]])
    buffer = logits.clone()
    filtered = filter_logits(buffer, SamplingSettings(1, **settings), in_place=True)
    assert filtered.data_ptr() == buffer.data_ptr()
    assert torch.equal(filtered, filter_logits(logits, SamplingSettings(1, **settings)))


def test_draw_in_the_logits_buffer_draws_the_same_tokens_with_their_log_softmax():
    torch.manual_seed(0)
    logits = torch.randn(64, 3 * DRAW_BLOCK + 7) * 4  # a padded last block
    logits[:, 5] = float("-inf")
    torch.manual_seed(1)
    tokens, logps = draw_with_logprob(logits)
    buffer = logits.clone()
    torch.manual_seed(1)
    again, again_logps = draw_with_logprob(buffer, overwrite=True)
    assert torch.equal(tokens, again) and torch.equal(logps, again_logps)
    assert not torch.equal(buffer, logits)  # spent: no [B, V] tensor of its own
    assert logps.dtype == torch.float32 and not (tokens == 5).any()
    expected = logits.log_softmax(-1).gather(1, tokens[:, None]).squeeze(1)
    torch.testing.assert_close(logps, expected, rtol=0, atol=1e-5)


def _lora(model, seed=1):
    """The tiny model with LoRA on every linear layer and non-zero adapters (fresh B is zero)."""
    import copy

    from peft import LoraConfig, get_peft_model

    policy = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5)
    return policy.eval()


def test_copy_holds_the_merged_policy_and_follows_its_updates(model_and_tokenizer):
    from grpokit.rollout.sampler import RolloutCopy, wants_copy

    model, _ = model_and_tokenizer
    policy = _lora(model)
    for name, param in policy.named_parameters():
        param.requires_grad_(param.requires_grad or name.endswith("norm.weight"))  # norms that train too
    ids = torch.tensor([PROMPTS[5]])
    rollout = RolloutCopy(torch.float32)
    assert wants_copy(policy) and not wants_copy(model)
    first = rollout.get(policy, version=0)
    assert not hasattr(first, "get_base_model") and not any(p.requires_grad for p in first.parameters())
    with torch.no_grad():
        torch.testing.assert_close(first(ids).logits, policy(ids).logits, rtol=1e-5, atol=1e-5)
        before = first(ids).logits.clone()
        for name, param in policy.named_parameters():  # an "optimizer step" on the adapters and a base norm
            if "lora_A" in name or name.endswith("norm.weight"):
                param.add_(0.3)
        assert torch.equal(rollout.get(policy, version=0)(ids).logits, before), "same step: no refresh"
        moved = rollout.get(policy, version=1)(ids).logits
        assert moved is not None and not torch.allclose(moved, before)
        torch.testing.assert_close(moved, policy(ids).logits, rtol=1e-5, atol=1e-5)
    assert rollout.get(policy, version=1) is first  # refreshed in place, never rebuilt


def test_a_released_copy_frees_its_weights_and_comes_back_the_same(model_and_tokenizer):
    from grpokit.rollout.sampler import RolloutCopy

    model, _ = model_and_tokenizer
    policy = _lora(model, seed=3)
    ids = torch.tensor([PROMPTS[5]])
    rollout = RolloutCopy(torch.float32)
    copy = rollout.get(policy, version=0)
    weights = sum(p.numel() for p in copy.parameters())
    with torch.no_grad():
        before = copy(ids).logits
        rollout.release()
        assert sum(p.numel() for p in copy.parameters()) == 0, "the training pass gets the weights' memory"
        assert rollout.get(policy, version=0) is copy  # the same step: rewritten all the same
        assert sum(p.numel() for p in copy.parameters()) == weights
        assert copy.lm_head.weight is copy.model.embed_tokens.weight, "still tied"
        assert torch.equal(copy(ids).logits, before)
        for name, param in policy.named_parameters():  # an optimizer step while the copy is released
            if "lora_A" in name:
                param.add_(0.3)
        rollout.release()
        torch.testing.assert_close(rollout.get(policy, version=1)(ids).logits, policy(ids).logits, rtol=1e-5, atol=1e-5)


def test_bf16_copy_is_as_close_to_the_fp32_policy_as_autocast(model_and_tokenizer):
    """The bf16 copy is cast once; autocast casts at every matmul: the same precision, the same error."""
    from grpokit.rollout.sampler import RolloutCopy

    model, _ = model_and_tokenizer
    policy = _lora(model, seed=2)
    copy = RolloutCopy(torch.bfloat16).get(policy, version=0)
    assert next(copy.parameters()).dtype == torch.bfloat16
    ids = torch.tensor(PROMPTS[:3])
    with torch.no_grad():
        exact = policy(ids).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast_error = (policy(ids).logits.float() - exact).abs().max()
        copy_error = (copy(ids).logits.float() - exact).abs().max()
        unmerged_error = (RolloutCopy(torch.bfloat16).get(model, 0)(ids).logits.float() - exact).abs().max()
    assert copy_error <= 2 * autocast_error + 1e-3
    assert unmerged_error > 10 * copy_error  # the adapters matter: a copy without them is far off


def test_copy_never_calls_back_into_a_wrapped_policy(model_and_tokenizer):
    """A model prepared by accelerate with mixed precision has its `forward` replaced by an autocast
    wrapper that closes over the original model; the copy must run its own weights, not that."""
    import functools
    import types

    from grpokit.rollout.sampler import RolloutCopy

    model, _ = model_and_tokenizer
    policy = _lora(model, seed=4)
    calls = []
    inner = policy.get_base_model()  # the module the merged copy is made of (the policy itself without LoRA)
    original = inner.forward

    @functools.wraps(original.__func__)
    def wrapped(self, *args, **kwargs):  # what accelerate's autocast wrapper does
        calls.append(1)
        return original(*args, **kwargs)

    inner._original_forward = original
    inner.forward = types.MethodType(wrapped, inner)
    copy = RolloutCopy(torch.bfloat16).get(policy, version=0)
    with torch.no_grad():
        copy(torch.tensor([PROMPTS[0]]))
    assert calls == [] and "forward" not in vars(copy)


def _adapted(model, seed=5, **lora):
    """The tiny model under a peft adapter of `lora`'s kind, every trainable parameter moved off its start."""
    import copy

    from peft import LoraConfig, get_peft_model

    config = lora.pop("config", None) or LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", **lora)
    policy = get_peft_model(copy.deepcopy(model), config)
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in policy.parameters():
            if param.requires_grad:
                param.add_(torch.randn_like(param) * 0.3)
    return policy.eval()


@pytest.mark.parametrize("kind", ["dora", "lora_bias", "ia3"])
def test_adapters_a_merged_copy_cannot_hold_sample_on_the_policy(model_and_tokenizer, caplog, kind):
    """DoRA, a bias on B, or another kind of adapter: `W + B A` is not the policy, so evaluation (and the
    trainer, through the same `wants_copy`) decodes on the policy itself, saying so once."""
    import logging

    from peft import IA3Config

    from grpokit.eval.evaluate import _generate
    from grpokit.rollout.sampler import RolloutCopy, wants_copy

    model, tokenizer = model_and_tokenizer
    settings = {
        "dora": {"use_dora": True},
        "lora_bias": {"lora_bias": True},
        "ia3": {
            "config": IA3Config(target_modules=["q_proj", "v_proj", "down_proj"], feedforward_modules=["down_proj"])
        },
    }[kind]
    policy = _adapted(model, **settings)
    with caplog.at_level(logging.INFO, logger="grpokit.rollout.sampler"):
        assert not wants_copy(policy) and not wants_copy(policy)
    assert len([r for r in caplog.records if "not a merged copy" in r.getMessage()]) <= 1  # once per process
    with pytest.raises(ValueError, match="would not be the policy"):
        RolloutCopy(torch.float32).get(policy, version=0)
    prompts = ["What is 2 + 3 * 4?", "What is 7 * 2 + 1?"]
    got = _generate(policy, tokenizer, prompts, max_new_tokens=8, batch_size=4)
    expected = []
    for text in prompts:
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        out = policy.generate(input_ids=ids, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        expected.append([tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)])
    assert got.completions == expected


@pytest.mark.parametrize("bias", ["all", "lora_only"])
def test_lora_with_trained_biases_keeps_an_exact_copy(tiny_model_dir, bias):
    """With `bias="all"` the biases train in place, in the base layers `refresh` copies from: the copy
    stays exact (measured, and kept), so these policies keep the faster merged sampling."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from grpokit.rollout.sampler import RolloutCopy, wants_copy

    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.attention_bias = config.mlp_bias = True  # a model with biases to train
    torch.manual_seed(0)
    policy = _adapted(AutoModelForCausalLM.from_config(config), bias=bias)
    assert wants_copy(policy)
    rollout = RolloutCopy(torch.float32)
    ids = torch.tensor([PROMPTS[5]])
    with torch.no_grad():
        torch.testing.assert_close(rollout.get(policy, 0)(ids).logits, policy(ids).logits, rtol=1e-5, atol=1e-5)
        biases = [p for n, p in policy.named_parameters() if n.endswith("bias") and p.requires_grad]
        assert biases, "the adapter trains biases"
        for param in biases:  # an "optimizer step" on the biases alone
            param.add_(0.5)
        torch.testing.assert_close(rollout.get(policy, 1)(ids).logits, policy(ids).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_dithered_rounding_keeps_what_lies_between_two_bf16_numbers_on_average(sign):
    from grpokit.rollout.sampler import round_dithered

    step = 2.0**-7  # bf16's spacing in [1, 2)
    for frac in (0.1, 0.25, 0.5, 0.9):
        x = torch.full((128, 256), sign * (1.0 + frac * step))
        y = round_dithered(x).float()
        assert set(y.unique().tolist()) <= {sign * 1.0, sign * (1.0 + step)}  # a neighbour, never further
        assert y.mean().item() == pytest.approx(x[0, 0].item(), abs=0.02 * step)
        if frac < 0.5:  # rounded to nearest, the whole part under half a step is gone
            assert x.to(torch.bfloat16).float().unique().tolist() == [sign * 1.0]
    assert torch.equal(round_dithered(x), round_dithered(x))  # the same thresholds every time
    inplace = x.clone()
    assert round_dithered(inplace, in_place=True) is inplace and inplace.dtype == torch.float32
    assert torch.equal(inplace.to(torch.bfloat16), round_dithered(x))  # refresh's path: the same numbers


def test_a_merged_bf16_copy_keeps_small_adapter_changes_on_average(tiny_model_dir):
    """The rollout copy of a policy whose base is held in bf16: adapter changes under half a bf16 step,
    which rounding to nearest would drop from every weight, stay in the copy on average."""
    from peft import LoraConfig, get_peft_model

    from grpokit.models.load import hold_frozen_linears, load_model
    from grpokit.rollout.sampler import RolloutCopy, base_model

    model, _ = load_model(str(tiny_model_dir))
    policy = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    hold_frozen_linears(policy, torch.bfloat16)
    torch.manual_seed(0)
    with torch.no_grad():  # B A of order 1e-5: under half a bf16 step (6e-5) of weights of order 2e-2
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.copy_(3e-5 * torch.randn_like(param))
    copy = RolloutCopy(torch.bfloat16).get(policy, version=1)
    lost, kept, total = 0.0, 0.0, 0.0
    base = base_model(policy)
    for name, module in base.named_modules():
        if not hasattr(module, "lora_A"):
            continue
        weight = module.get_base_layer().weight.float()
        delta = module.get_delta_weight("default").float()
        merged = copy.get_submodule(name).weight.float()
        nearest = (weight + delta).to(torch.bfloat16).float()
        kept += ((merged - weight) * delta).sum().item()
        lost += ((nearest - weight) * delta).sum().item()
        total += (delta * delta).sum().item()
    assert kept / total == pytest.approx(1.0, abs=0.15)  # the copy moved along the adapters' change
    assert lost / total < 0.5  # where rounding to nearest left most of it out


def test_prefill_runs_the_lm_head_as_one_matmul(model_and_tokenizer):
    """`logits_to_keep=1` slices a non-contiguous view: for weights that need no gradient torch.matmul then
    broadcasts the LM head to every prompt and copies it (0.26 s of a 0.52 s prefill for 7 prompts)."""
    import copy

    from torch.profiler import profile

    from grpokit.rollout.sampler import _cache_argument, _prefill

    model, _ = model_and_tokenizer
    frozen = copy.deepcopy(model).to(torch.bfloat16).requires_grad_(False)
    vocab, hidden = frozen.config.vocab_size, frozen.config.hidden_size
    prompts = [[5, 9, 13, 2, 7, 3, 11, 4, 6, 8, 20], [5, 9, 13, 2, 7, 3, 11, 4, 6, 8, 30, 31], [7, 3]]
    with torch.no_grad(), profile(record_shapes=True) as prof:
        _, logits, _ = _prefill(frozen, prompts, 0, "cpu", _cache_argument(frozen))
    copied = [e.input_shapes for e in prof.events() if e.name == "aten::copy_"]
    assert not any(shapes and shapes[0][-2:] == [hidden, vocab] for shapes in copied), "the LM head was copied"
    with torch.no_grad():
        expected = torch.stack([frozen(torch.tensor([p])).logits[0, -1].float() for p in prompts])
    torch.testing.assert_close(logits, expected, rtol=0.02, atol=0.02)


def test_an_fp32_copy_shares_the_policys_unchanged_weights_instead_of_holding_them_twice(model_and_tokenizer):
    """Evaluation's fp32 copy points its embedding, LM head and norms at the policy's (frozen, no adapters,
    same dtype): the same logits with that memory held once, kept shared across a release, and a release
    never frees the policy's own weights. The merged layers stay the copy's."""
    from grpokit.rollout.sampler import RolloutCopy, base_model, share_frozen

    model, _ = model_and_tokenizer
    policy = _lora(model, seed=5)
    policy.requires_grad_(False)
    for name, param in policy.named_parameters():
        param.requires_grad_("lora_" in name)  # as training leaves it: only the adapters train
    base = base_model(policy)
    ids = torch.tensor(PROMPTS[:3])
    rollout = RolloutCopy(torch.float32)
    copy = rollout.get(policy, version=0)
    embedding = base.model.embed_tokens.weight
    assert copy.model.embed_tokens.weight.data_ptr() == embedding.data_ptr()
    assert copy.lm_head.weight is copy.model.embed_tokens.weight  # still tied
    assert copy.model.norm.weight.data_ptr() == base.model.norm.weight.data_ptr()
    q_proj = base.model.layers[0].self_attn.q_proj
    assert copy.model.layers[0].self_attn.q_proj.weight.data_ptr() != q_proj.get_base_layer().weight.data_ptr()
    with torch.no_grad():
        torch.testing.assert_close(copy(ids).logits, policy(ids).logits, rtol=1e-5, atol=1e-5)
        rollout.release()
        assert embedding.numel() > 0 and base.model.norm.weight.numel() > 0, "the policy keeps its weights"
        again = rollout.get(policy, version=1)
        assert again.model.embed_tokens.weight.data_ptr() == embedding.data_ptr()
        torch.testing.assert_close(again(ids).logits, policy(ids).logits, rtol=1e-5, atol=1e-5)
    assert share_frozen(copy, policy) == 0  # all shared already
    base.model.norm.weight.requires_grad_(True)  # a later stage trains the final norm: the copy's own again
    with torch.no_grad():
        rollout.get(policy, version=2)
        base.model.norm.weight.add_(0.5)
    assert copy.model.norm.weight.data_ptr() != base.model.norm.weight.data_ptr()
    assert not torch.equal(copy.model.norm.weight, base.model.norm.weight)  # until the next refresh
    assert share_frozen(RolloutCopy(torch.bfloat16).get(policy, version=0), policy) == 0  # other dtype: own copy
