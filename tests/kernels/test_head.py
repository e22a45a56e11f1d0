"""The training pass's LM head on a CPU (grpokit.kernels.head): the log-probabilities, entropies and gradients of a
plain log-softmax over the whole vocabulary, taken tile by tile."""

import pytest
import torch
from trl.kernels import ChunkedLogProbFunction

from grpokit.kernels import head


def _inputs(seed: int, bias: bool, tokens: int = 23, hidden: int = 16, vocab: int = 1000):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(tokens, hidden, generator=gen).requires_grad_()
    w = (0.3 * torch.randn(vocab, hidden, generator=gen)).requires_grad_()
    b = (0.1 * torch.randn(vocab, generator=gen)).requires_grad_() if bias else None
    targets = torch.randint(0, vocab, (tokens,), generator=gen)
    targets[:3] = torch.tensor([0, vocab - 1, 2 * head.TILE])  # the first, last and a tile's first entry
    return h, w, b, targets


def _reference(h, w, b, targets, temperature):
    log_p = ((h @ w.t() + (b if b is not None else 0)) / temperature).log_softmax(dim=1)
    return log_p.gather(1, targets.unsqueeze(1)).squeeze(1), -(log_p.exp() * log_p).sum(dim=1)


def _grads(fn, leaves, weights) -> list[torch.Tensor]:
    for leaf in leaves:
        leaf.grad = None
    logps, entropies = fn()
    loss = (logps * weights[0]).sum() if weights[0] is not None else 0
    loss = loss + ((entropies * weights[1]).sum() if weights[1] is not None else 0)
    loss.backward()
    return [leaf.grad.clone() for leaf in leaves]


@pytest.fixture(autouse=True)
def _small_tiles(monkeypatch):
    monkeypatch.setattr(head, "TILE", 128)  # 1,000 entries: 7 full tiles and a partial one
    head.cast_weight.clear()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("trained", ["logps", "entropy", "both"])
@pytest.mark.parametrize("token_chunks", [1, 3])
def test_fp32_equals_a_whole_vocabulary_log_softmax(bias, temperature, trained, token_chunks, monkeypatch):
    if token_chunks > 1:  # the backward's logits gradient for 8 of the 23 tokens at a time
        monkeypatch.setattr(head, "GRAD_ENTRIES", 8 * 1000)
    h, w, b, targets = _inputs(0, bias)
    gen = torch.Generator().manual_seed(1)
    weights = (
        torch.randn(h.size(0), generator=gen) if trained != "entropy" else None,
        torch.randn(h.size(0), generator=gen) if trained != "logps" else None,
    )
    leaves = [x for x in (h, w, b) if x is not None]

    logps, entropies = head.CompletionLogProbs.apply(h, w, b, targets, temperature, True)
    ref_logps, ref_entropies = _reference(h, w, b, targets, temperature)
    torch.testing.assert_close(logps, ref_logps, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropies, ref_entropies, rtol=1e-5, atol=1e-5)

    ours = _grads(lambda: head.CompletionLogProbs.apply(h, w, b, targets, temperature, True), leaves, weights)
    theirs = _grads(lambda: _reference(h, w, b, targets, temperature), leaves, weights)
    for mine, ref in zip(ours, theirs, strict=True):
        assert ref.abs().max() > 0, "a zero gradient compares nothing"
        assert (mine - ref).abs().max() <= 1e-5 * ref.abs().max()


def test_without_entropy_none_is_returned_and_the_log_probs_are_the_same():
    h, w, b, targets = _inputs(2, bias=False)
    logps, entropies = head.CompletionLogProbs.apply(h, w, b, targets, 1.0, False)
    assert entropies is None
    torch.testing.assert_close(logps, _reference(h, w, b, targets, 1.0)[0], rtol=1e-5, atol=1e-5)


def test_bf16_autocast_agrees_with_trl_kernel_and_with_fp32():
    h, w, _, targets = _inputs(3, bias=False, tokens=40, hidden=64)
    w.requires_grad_(False)  # a LoRA policy's frozen head
    gen = torch.Generator().manual_seed(4)
    weights = (torch.randn(h.size(0), generator=gen), None)

    def ours():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return head.CompletionLogProbs.apply(h, w, None, targets, 1.0, True)

    def trl():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = ChunkedLogProbFunction.apply(h, w, None, targets, 1.0, 128, None, 1.0, ("log_probs", "entropy"))
        return out[0], out[1]

    (mine_lp, mine_ent), (trl_lp, trl_ent) = ours(), trl()
    assert mine_lp.dtype == torch.float32
    torch.testing.assert_close(mine_lp, trl_lp, rtol=1e-4, atol=1e-4)  # the same bf16 GEMM, fp32 statistics
    torch.testing.assert_close(mine_ent, trl_ent, rtol=1e-4, atol=1e-4)
    ref_lp = _reference(h, w, None, targets, 1.0)[0]
    assert (mine_lp - ref_lp).abs().max() < 0.1 < (ref_lp.abs().max())  # bf16's rounding, not a different value
    (grad,) = _grads(ours, [h], weights)
    (grad_trl,) = _grads(trl, [h], weights)
    (grad_ref,) = _grads(lambda: _reference(h, w, None, targets, 1.0), [h], weights)
    assert (grad - grad_trl).abs().max() <= 2e-2 * grad_trl.abs().max()
    assert (grad - grad_ref).abs().max() <= 2e-2 * grad_ref.abs().max()


def test_bf16_hidden_gradient_is_autocasts_plain_head_rounded_once():
    """Under bf16 autocast the hidden state's gradient is what a plain `F.linear` head and an fp32
    log-softmax give: the logits' gradient rounded to bf16, one GEMM over the whole vocabulary, its sum rounded
    once. Each tile's share rounded before the sum (grpokit v0.30-v0.31) differs from it by ~2e-3 of the
    gradient's size; TRL's kernel avoids that rounding, noting that it drifts entropy lower."""
    h, w, _, targets = _inputs(6, bias=False, tokens=40, hidden=64)
    w.requires_grad_(False)
    gen = torch.Generator().manual_seed(7)
    weights = (torch.randn(h.size(0), generator=gen), torch.randn(h.size(0), generator=gen))

    def ours():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return head.CompletionLogProbs.apply(h, w, None, targets, 1.0, True)

    def plain():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = torch.nn.functional.linear(h, w)
        log_p = logits.float().log_softmax(dim=1)
        return log_p.gather(1, targets.unsqueeze(1)).squeeze(1), -(log_p.exp() * log_p).sum(dim=1)

    (grad,) = _grads(ours, [h], weights)
    (grad_plain,) = _grads(plain, [h], weights)
    assert grad_plain.abs().max() > 0
    assert (grad - grad_plain).abs().max() <= 1e-6 * grad_plain.abs().max()


def test_the_cast_head_follows_a_weight_written_in_place():
    h, w, _, targets = _inputs(5, bias=False)
    w.requires_grad_(False)

    def logps():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return head.CompletionLogProbs.apply(h, w, None, targets, 1.0, False)[0]

    first = logps()
    cached = head.cast_weight.value
    assert cached is not None and cached.dtype == torch.bfloat16
    torch.testing.assert_close(logps(), first)
    assert head.cast_weight.value is cached, "an unchanged weight is cast once"
    w.mul_(2.0)  # an optimizer step writes the weight in place
    doubled = logps()
    assert not torch.allclose(doubled, first)
    torch.testing.assert_close(doubled, _reference(h, w, None, targets, 1.0)[0], rtol=0.05, atol=0.1)
    head.cast_weight.clear()
    assert head.cast_weight.value is None
