"""Log-probabilities of the tokens a policy wrote, through the LM head, for the training pass on a CPU.

As TRL's `ChunkedLogProbFunction` (used off a CPU), the vocabulary is walked in tiles so the `[tokens,
vocabulary]` logits never exist whole. Unlike its CPU fallback, the weight is cast once per training pass, the
tiles reuse three buffers, the softmax statistics are fp32 and the GEMMs run in the compute dtype. In fp32 it is
a plain log-softmax's arithmetic; under bf16 autocast a plain `F.linear` head's: the logits rounded to bf16,
and the hidden state's gradient one GEMM over the whole vocabulary, its sum rounded once (for
`GRAD_ENTRIES // vocabulary` tokens at a time), as TRL's kernel rounds it.
"""

from __future__ import annotations

import torch

from grpokit.kernels.casts import CastOnce, compute_dtype

TILE = 4096  # vocabulary entries per tile (TRL's size): three [tokens, TILE] buffers at a time
# The backward holds the logits' gradient of this many (token, vocabulary entry) pairs at once (32 MB in
# bf16): each token's whole row, so its hidden-state gradient is one GEMM rounded once.
GRAD_ENTRIES = 1 << 24
cast_weight = CastOnce()  # the head weight in the compute dtype, once per training pass


def _tiles(vocab: int):
    for start in range(0, vocab, TILE):
        yield slice(start, min(start + TILE, vocab))


def _tile_logits(h, w, bias, cols: slice, inv_t: float, low: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The tile's logits `h w[cols]^T (+ bias) / T` in fp32, written into `out` (via `low`, the GEMM's dtype)."""
    width = cols.stop - cols.start
    z = out[:, :width]
    torch.mm(h, w[cols].t(), out=low[:, :width])
    z.copy_(low[:, :width])
    if bias is not None:
        z += bias[cols].float()
    if inv_t != 1.0:
        z *= inv_t
    return z


class CompletionLogProbs(torch.autograd.Function):
    """(log p(target) [N], entropy [N] or None) of `hidden @ weight.T + bias` at `temperature`.

    The vocabulary in tiles of TILE: each tile's logits are one GEMM of every token against a slice of the
    weight (the slice stays in cache), folded into running fp32 softmax statistics; the backward computes
    each tile again and adds its share of the hidden-state gradient. Buffers are made once per call and
    reused by every tile (a fresh tile-sized tensor per tile costs page faults on a CPU)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature: float, entropy: bool):  # type: ignore[override]
        ctx.set_materialize_grads(False)
        dtype = compute_dtype(hidden)
        inv_t = 1.0 / temperature
        n = hidden.size(0)
        with torch.autocast("cpu", enabled=False):
            w, h = cast_weight.get(weight, dtype), hidden.detach().to(dtype)
            low = torch.empty(n, TILE, dtype=dtype)  # the tile's logits from the GEMM
            z = torch.empty(n, TILE, dtype=torch.float32)  # ... in fp32, scaled
            e = torch.empty(n, TILE, dtype=torch.float32)
            running_max = torch.full((n,), float("-inf"))
            sum_exp, z_sum_exp, target = torch.zeros(n), torch.zeros(n), torch.zeros(n)
            for cols in _tiles(weight.size(0)):
                width = cols.stop - cols.start
                zt, et = _tile_logits(h, w, bias, cols, inv_t, low, z), e[:, :width]
                new_max = torch.maximum(running_max, zt.amax(dim=1))
                rescale = (running_max - new_max).exp_()
                torch.sub(zt, new_max.unsqueeze(1), out=et).exp_()
                sum_exp.mul_(rescale).add_(et.sum(dim=1))
                if entropy:
                    z_sum_exp.mul_(rescale).add_((et * zt).sum(dim=1))
                running_max = new_max
                local = targets - cols.start
                inside = (local >= 0) & (local < width)
                target = torch.where(inside, zt.gather(1, local.clamp(0, width - 1).unsqueeze(1)).squeeze(1), target)
            log_z = running_max + sum_exp.log()
            logps = target - log_z
            entropies = log_z - z_sum_exp / sum_exp if entropy else None
        ctx.save_for_backward(hidden, weight, bias, targets, log_z, entropies)
        ctx.dtype, ctx.inv_t = dtype, inv_t
        return logps, entropies

    @staticmethod
    def backward(ctx, grad_logps, grad_entropy):  # type: ignore[override]
        hidden, weight, bias, targets, log_z, entropies = ctx.saved_tensors
        dtype, inv_t = ctx.dtype, ctx.inv_t
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        if grad_logps is None and grad_entropy is None:
            return None, None, None, None, None, None
        n, vocab = hidden.size(0), weight.size(0)
        chunk = max(1, min(n, GRAD_ENTRIES // vocab))  # tokens whose whole-vocabulary logits gradient is held
        with torch.autocast("cpu", enabled=False):
            w, h_all = cast_weight.get(weight, dtype), hidden.detach().to(dtype)
            low = torch.empty(chunk, TILE, dtype=dtype)
            grad = torch.empty(chunk, TILE, dtype=torch.float32)
            probs = torch.empty(chunk, TILE, dtype=torch.float32) if grad_entropy is not None else None
            logits_grad = torch.empty(chunk, vocab, dtype=dtype) if need_hidden else None
            grad_hidden = torch.empty(hidden.shape, dtype=torch.float32) if need_hidden else None
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32) if need_weight else None
            grad_bias = torch.zeros(bias.shape, dtype=torch.float32) if need_bias else None
            for first in range(0, n, chunk):
                rows = slice(first, min(first + chunk, n))
                m, h = rows.stop - rows.start, h_all[rows]
                g_logp = grad_logps[rows].float().unsqueeze(1) if grad_logps is not None else None
                g_ent = grad_entropy[rows].float().unsqueeze(1) if grad_entropy is not None else None
                for cols in _tiles(vocab):
                    width = cols.stop - cols.start
                    # z, then log p, then its gradient, in place
                    gt = _tile_logits(h, w, bias, cols, inv_t, low[:m], grad[:m])
                    gt -= log_z[rows].unsqueeze(1)
                    # d log p_t / dz_j = 1[j = t] - p_j;  d H / dz_j = -p_j (log p_j + H)
                    if g_ent is not None:
                        pt = probs[:m, :width]
                        torch.exp(gt, out=pt)
                        gt.add_(entropies[rows].unsqueeze(1)).mul_(g_ent)
                        if g_logp is not None:
                            gt.add_(g_logp)
                        gt.mul_(pt).neg_()
                    else:
                        gt.exp_().mul_(-g_logp)
                    local = targets[rows] - cols.start
                    inside = (local >= 0) & (local < width)
                    if g_logp is not None and inside.any():
                        hit = inside.nonzero().squeeze(1)
                        gt[hit, local[hit]] += g_logp[hit, 0]
                    if inv_t != 1.0:
                        gt *= inv_t
                    # the tile's gradient in the GEMMs' dtype, written once for both of them
                    grad_low = logits_grad[:m, cols] if logits_grad is not None else low[:m, :width]
                    grad_low.copy_(gt)
                    if grad_weight is not None:
                        grad_weight[cols] += torch.mm(grad_low.t(), h).float()
                    if grad_bias is not None:
                        grad_bias[cols] += gt.sum(dim=0)
                if grad_hidden is not None:  # one GEMM over the whole vocabulary: the sum is rounded once
                    grad_hidden[rows] = torch.mm(logits_grad[:m], w)
        return (
            grad_hidden.to(hidden.dtype) if grad_hidden is not None else None,
            grad_weight.to(weight.dtype) if grad_weight is not None else None,
            grad_bias.to(bias.dtype) if grad_bias is not None else None,
            None,
            None,
            None,
        )


def completion_logprobs(
    hidden: torch.Tensor,  # [N, H]
    weight: torch.Tensor,  # [V, H]
    bias: torch.Tensor | None,  # [V]
    targets: torch.Tensor,  # [N]
    temperature: float,
    entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probabilities [N], entropies [N] or None); TRL's chunked kernel off a CPU."""
    if hidden.device.type != "cpu":
        # slow import: trl (and its Triton kernel), only off a CPU
        from trl.kernels import ChunkedLogProbFunction

        outputs = ("log_probs", "entropy") if entropy else ("log_probs",)
        result = ChunkedLogProbFunction.apply(hidden, weight, bias, targets, temperature, 4096, None, 1.0, outputs)
        return result[0], result[1] if entropy else None
    return CompletionLogProbs.apply(hidden, weight, bias, targets, temperature, entropy)
