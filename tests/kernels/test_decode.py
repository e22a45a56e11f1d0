import functools

import pytest
import torch

import grpokit.kernels.decode as decode
import grpokit.rollout.sampler as rollout
from grpokit.kernels.attention import use_grouped_attention
from grpokit.rollout.sampler import SamplingSettings, sample


def tiny(kind: str, dtype: torch.dtype = torch.float32, seed: int = 0):
    """A random-weight model of each covered family, small enough to run in milliseconds: 6 query heads on
    2 key/value heads (grouped, as SmolLM2's 9 on 3), 3 layers."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    shape = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=3)
    shape.update(num_attention_heads=6, num_key_value_heads=2)
    if kind == "llama":
        # head size 16: a power-of-two score scale (1/4), SmolLM2's case (1/8), which the decoder folds into
        # the scores' matmul; the other families' 8 (1/sqrt(8)) take the float32 path
        model = LlamaForCausalLM(LlamaConfig(**shape, head_dim=16, rope_theta=100.0))
    elif kind == "qwen3":  # an RMSNorm on each query and key head before the rotary embedding
        model = Qwen3ForCausalLM(Qwen3Config(**shape, head_dim=8))
        for layer in model.model.layers:
            torch.nn.init.normal_(layer.self_attn.q_norm.weight, mean=1.0, std=0.3)
    else:  # qwen2: biases on q/k/v, which the fused projection must carry
        model = Qwen2ForCausalLM(Qwen2Config(**shape))
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                torch.nn.init.normal_(proj.bias, std=0.5)
    for param in model.parameters():  # larger weights than the init's: logits that differ from token to token
        param.data.mul_(4.0) if param.dim() > 1 else None
    model = model.to(dtype).eval().requires_grad_(False)
    use_grouped_attention(model)  # as the rollout copy is
    return model


# Left padding, a shared prefix, and prompts of different lengths in one batch.
PROMPTS = (
    [[5, 6, 7, 8, 9, 10, 11, 12, 13, 3]] * 3
    + [[5, 6, 7, 8, 9, 10, 11, 12, 40, 41, 42, 43]] * 2
    + [[5, 6, 7, 8, 9, 10, 11, 12, 60]]
)


def _prefilled(model, prompts):
    distinct, counts = rollout.group_runs(prompts)
    cache, logits, mask = rollout._prefill(model, distinct, 0, torch.device("cpu"), rollout._cache_argument(model))
    expand = torch.repeat_interleave(torch.arange(len(distinct)), torch.tensor(counts))
    cache.reorder_cache(expand)
    return cache, logits[expand], mask[expand]


@pytest.mark.parametrize("static", [False, True], ids=["growing", "static"])
@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_decoding_steps_give_transformers_logits(kind, static):
    """Each step's logits equal transformers' forward with its own cache (fp32), rows leaving included; the
    static cache (a GPU's: every slot from the start, finished rows kept in place, the slot a device tensor,
    which a CUDA graph replays) computes the same as the growing one, eagerly here on a CPU."""
    model = tiny(kind)
    assert decode.refusal(model) is None
    torch.manual_seed(1)
    feed = torch.randint(0, 97, (20, len(PROMPTS)))  # 20 steps: the decoder's cache grows past 16 slots
    runs = []
    for use_decoder in (True, False):
        cache, _, mask = _prefilled(model, PROMPTS)
        with pytest.MonkeyPatch.context() as patch:
            if not use_decoder:  # the same steps on transformers' forward
                patch.setattr(decode, "refusal", lambda model: "off")
            patch.setattr(decode, "Decoder", functools.partial(decode.Decoder, static=static))
            steps = rollout._Steps(model, cache, mask, 20, rollout._cache_argument(model))
        assert (steps.decoder is not None) == use_decoder
        if use_decoder:  # the prefill's cache moved into the decoder's buffers, not copied beside them
            assert all(layer.keys is None and layer.values is None for layer in cache.layers)
            room = 20 if static else decode.GROW  # static: every slot now; growing: room for GROW, then more
            assert steps.decoder.bias.size(-1) == mask.size(1) + room
            assert steps.decoder.static == static and not steps.decoder.graphs  # a CPU never captures a graph
        rows, out = torch.arange(len(PROMPTS)), []
        for i in range(20):
            if i == 4:  # rows 1 and 4 leave the batch
                rows = torch.tensor([0, 2, 3, 5])
                steps.keep(torch.tensor([0, 2, 3, 5]))
            out.append(steps.step(feed[i, rows]).clone())  # the decoder reuses its logits buffer
        if use_decoder and static:  # a full static cache says so instead of writing past its end
            with pytest.raises(ValueError, match="no room"):
                steps.step(feed[0, rows])
        runs.append(out)
    for fast, slow in zip(*runs, strict=True):
        torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
        assert fast.dtype == torch.float32 and fast.abs().max() > 1  # logits that would show a wrong path
        assert fast.shape == slow.shape and fast.dim() == 2  # one position per row, no [rows, positions, vocabulary]


def test_bf16_decoding_stays_within_rounding_of_transformers():
    """In bf16 the fused matmuls may round differently: the greedy tokens agree, the logits within bf16's
    resolution of their size."""
    model = tiny("llama", torch.bfloat16)
    settings = SamplingSettings(max_new_tokens=10, top_k=1)
    fast = sample(model, PROMPTS, settings, eos_ids=[96], pad_id=0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode, "refusal", lambda model: "off")
        slow = sample(model, PROMPTS, settings, eos_ids=[96], pad_id=0)
    assert fast == slow


@pytest.mark.parametrize("static", [False, True], ids=["growing", "static"])
def test_sampling_with_the_decoder_draws_what_transformers_forward_draws(monkeypatch, static):
    """T=1 sampling from one seed: the same tokens and log-probabilities either way (static: finished rows
    stay in the decoder's batch, and the sampler still sees only the live ones)."""
    model = tiny("qwen2")
    monkeypatch.setattr(decode, "Decoder", functools.partial(decode.Decoder, static=static))
    settings = SamplingSettings(max_new_tokens=12, temperature=1.0)
    eos = [3, 17, 29]  # several end tokens: rows end at different steps
    runs = []
    for refuse in (False, True):
        if refuse:
            monkeypatch.setattr(decode, "refusal", lambda model: "off")
        torch.manual_seed(7)
        runs.append(sample(model, PROMPTS * 2, settings, eos_ids=eos, pad_id=0, logprobs=True))
    (fast, fast_lp), (slow, slow_lp) = runs
    assert fast == slow
    assert any(len(r) < 12 for r in fast) and any(len(r) == 12 for r in fast)
    for a, b in zip(fast_lp, slow_lp, strict=True):
        assert a == pytest.approx(b, abs=1e-5)


def test_fused_projections_are_views_that_follow_writes_and_reallocations():
    model = tiny("qwen2")
    attn = model.model.layers[0].self_attn
    weight, bias = decode.fused((attn.q_proj, attn.k_proj, attn.v_proj))
    assert weight.shape == (48 + 2 * 16, 48) and bias.shape == (48 + 2 * 16,)
    attn.k_proj.weight.data.fill_(0.5)  # an in-place write (the rollout copy's refresh) shows in the fused matrix
    again, _ = decode.fused((attn.q_proj, attn.k_proj, attn.v_proj))
    assert again.data_ptr() == weight.data_ptr() and bool((again[48:64] == 0.5).all())
    attn.v_proj.weight.data = torch.full_like(attn.v_proj.weight, 2.0)  # reallocated (a released copy's weights)
    rebuilt, _ = decode.fused((attn.q_proj, attn.k_proj, attn.v_proj))
    assert bool((rebuilt[64:] == 2.0).all()) and bool((rebuilt[48:64] == 0.5).all())
    assert attn.v_proj.weight.data_ptr() == rebuilt[64:].data_ptr()  # the layers are views again


def test_a_model_whose_parameters_train_decodes_on_copies_of_its_weights():
    """A policy evaluated between training steps (parameters requiring gradients, eval mode) decodes on the
    decoder, greedy tokens equal to transformers' forward, and its parameters keep their own storage: joined
    into one allocation they would share memory in its checkpoints."""
    model = tiny("llama").requires_grad_(True)
    storage = {name: (p.data_ptr(), p.requires_grad) for name, p in model.named_parameters()}
    assert decode.refusal(model) is None
    settings = SamplingSettings(max_new_tokens=20, top_k=1)
    on_decoder = sample(model, PROMPTS, settings, eos_ids=[], pad_id=0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode, "refusal", lambda model: "off")
        assert sample(model, PROMPTS, settings, eos_ids=[], pad_id=0) == on_decoder
    assert {name: (p.data_ptr(), p.requires_grad) for name, p in model.named_parameters()} == storage
    frozen = tiny("llama")
    sample(frozen, PROMPTS, settings, eos_ids=[], pad_id=0)
    q, k = frozen.model.layers[0].self_attn.q_proj.weight, frozen.model.layers[0].self_attn.k_proj.weight
    assert k.data_ptr() == q.data_ptr() + q.numel() * q.element_size()  # a frozen model's are joined in place


def test_models_the_decoder_cannot_run_exactly_keep_transformers_forward(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    model = tiny("llama")
    assert decode.refusal(model) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert "autocast" in decode.refusal(model)
    assert "training mode" in decode.refusal(tiny("llama").train())
    adapted = get_peft_model(tiny("llama"), LoraConfig(r=2, target_modules=["q_proj"])).get_base_model()
    adapted.requires_grad_(False)
    assert "Linear" in decode.refusal(adapted)
    split = tiny("llama")
    split.model.layers[2].to("meta")  # a device_map's model: layers on another device than the embeddings
    assert "several devices" in decode.refusal(split)
    with pytest.raises(ValueError, match="CUDA graphs"):  # a graph replays only on a GPU
        decode.Decoder(model, graphs=True)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=50)).eval().requires_grad_(False)
    assert "gpt2" in decode.refusal(gpt2)


def test_the_static_decoder_makes_its_buffers_on_the_model_device():
    """Every buffer of a rollout is made on the model's device: a tensor made without one would land on the
    default device, a CPU, beside a GPU model (which failed on an H200). Here the default device is `meta`,
    so anything made without a device clashes with the CPU model's tensors."""
    model = tiny("llama", torch.bfloat16)
    settings = SamplingSettings(max_new_tokens=12, temperature=1.0)
    torch.manual_seed(3)
    expected = sample(model, PROMPTS * 2, settings, eos_ids=[3, 17], pad_id=0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(decode, "Decoder", functools.partial(decode.Decoder, static=True))
        torch.set_default_device("meta")
        try:
            torch.manual_seed(3)
            drawn = sample(model, PROMPTS * 2, settings, eos_ids=[3, 17], pad_id=0)
        finally:
            torch.set_default_device("cpu")
    assert drawn == expected and any(len(r) < 12 for r in drawn)  # rows left the batch on the way


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the decoding step replayed from a graph")
@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_the_cuda_graph_replays_the_eager_steps_logits(kind):
    """On a GPU each replayed step gives the eager static decoder's logits (the same kernels, so the same
    bits) and transformers' forward's within fp32 rounding, rows leaving included."""
    model = tiny(kind).cuda()
    torch.manual_seed(1)
    feed = torch.randint(0, 97, (20, len(PROMPTS)), device="cuda")
    runs = {}
    for way in ("graph", "eager", "transformers"):
        distinct, counts = rollout.group_runs(PROMPTS)
        cache, _, mask = rollout._prefill(model, distinct, 0, torch.device("cuda"), rollout._cache_argument(model))
        expand = torch.repeat_interleave(torch.arange(len(distinct)), torch.tensor(counts)).cuda()
        cache.reorder_cache(expand)
        mask = mask[expand]
        with pytest.MonkeyPatch.context() as patch:
            if way == "transformers":
                patch.setattr(decode, "refusal", lambda model: "off")
            patch.setattr(decode, "Decoder", functools.partial(decode.Decoder, graphs=way == "graph"))
            steps = rollout._Steps(model, cache, mask, 20, rollout._cache_argument(model))
        rows, out = torch.arange(len(PROMPTS), device="cuda"), []
        for i in range(20):
            if i == 4:
                rows = torch.tensor([0, 2, 3, 5], device="cuda")
                steps.keep(torch.tensor([0, 2, 3, 5], device="cuda"))
            out.append(steps.step(feed[i, rows]).clone())
        if way == "graph":
            assert steps.decoder.graph is not None and steps.decoder.graphs
        runs[way] = out
    for graph, eager, slow in zip(runs["graph"], runs["eager"], runs["transformers"], strict=True):
        assert torch.equal(graph, eager)
        torch.testing.assert_close(graph, slow, rtol=1e-4, atol=1e-4)
