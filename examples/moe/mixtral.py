"""A Mixtral-structure sparse MoE block on specgen's generated grouped kernels (issue 37's client).

The block is transformers' `MixtralSparseMoeBlock` (modeling_mixtral.py): a router (a linear map to one logit an
expert), softmax in float32, the top-k experts a token, their weights renormalized to sum to one and cast back,
and each expert the gated MLP w2(silu(w1 x) * w3 x). Two forwards compute it from the same weights:

- `eager_block`: the structure as transformers writes it, one expert at a time (`torch.where` over the routing
  mask: a host sync an expert), each expert's three nn.Linear products and the weighted `index_add_`;
- `grouped_block`: the routed rows sorted by expert (device-only: no host sync, so a decode step replays as a CUDA
  graph), two grouped GEMMs, and a sum of each token's top-k rows. The gate and up projections are one grouped
  GEMM over the experts' w1 and w3 rows (G, 2I, H) with the gated SwiGLU epilogue (act(gate) * up);
  the down projection a second over w2 (G, H, I) with each routed row scaled by its routing weight (the
  `router_weights` row scale). Both take the weights as torch._grouped_mm callers do: (G, N, K) transposed, the
  gate_up rows in the kernel's layout (`GroupedKernels.prepare`: interleaved for the shipped kernel).

`GroupedKernels` names the two kernels: by default the shipped ones (generated/triton/, bf16, sm_90 / sm_100);
the CPU tests pass the same specs rendered in f16 for the Triton interpreter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

Kernel = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class MoEConfig:
    hidden: int = 1024  # H
    intermediate: int = 3584  # I, each expert's
    experts: int = 8  # G
    top_k: int = 2


@dataclass(frozen=True)
class MoEWeights:
    router: torch.Tensor  # (G, H): the router's nn.Linear weight (no bias)
    gate_up: torch.Tensor  # (G, 2I, H): each expert's w1 (gate) rows, then its w3 (up) rows
    down: torch.Tensor  # (G, H, I): each expert's w2

    @classmethod
    def random(cls, cfg: MoEConfig, dtype: torch.dtype, device: torch.device | str,
               generator: torch.Generator | None = None) -> MoEWeights:
        """nn.Linear's default scale (uniform, 1/sqrt(fan_in)), drawn on the CPU then moved: the same weights on
        every device for one generator."""
        def linear(*shape: int) -> torch.Tensor:
            bound = shape[-1] ** -0.5
            w = (torch.rand(*shape, generator=generator, dtype=torch.float32) * 2 - 1) * bound
            return w.to(device=device, dtype=dtype)

        h, i, g = cfg.hidden, cfg.intermediate, cfg.experts
        return cls(router=linear(g, h), gate_up=linear(g, 2 * i, h), down=linear(g, h, i))


def route(x: torch.Tensor, w: MoEWeights, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's top-k experts (T, k) and their weights (T, k) in x's dtype: softmax in float32 over the
    router's logits, renormalized over the k chosen (Mixtral's), as transformers computes them."""
    logits = x @ w.router.t()
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(x.dtype), experts


def eager_block(x: torch.Tensor, w: MoEWeights, top_k: int) -> torch.Tensor:
    """transformers' MixtralSparseMoeBlock forward over (T, H) tokens: one expert at a time."""
    weights, experts = route(x, w, top_k)
    inter = w.down.shape[-1]
    out = torch.zeros_like(x)
    mask = F.one_hot(experts, num_classes=w.router.shape[0]).permute(2, 1, 0)  # (G, k, T)
    for e in range(w.router.shape[0]):
        slot, token = torch.where(mask[e])
        if token.numel() == 0:
            continue
        rows = x[token]
        gate, up = w.gate_up[e, :inter], w.gate_up[e, inter:]
        h = F.silu(rows @ gate.t()) * (rows @ up.t())
        y = (h @ w.down[e].t()) * weights[token, slot, None]
        out.index_add_(0, token, y.to(x.dtype))
    return out


@dataclass(frozen=True)
class GroupedKernels:
    """The block's two grouped GEMMs: `gate_up(a, b, offs)` -> (R, I) with the gated SwiGLU epilogue over b's 2I
    columns, in its spec's `layout` ("halves": gate then up; "interleaved": column 2j gate j, 2j + 1 up j);
    `down(a, b, offs, router_weights)` -> (R, H), each row scaled by its weight (f32)."""

    gate_up: Kernel
    down: Kernel
    layout: str = "halves"

    @classmethod
    def shipped(cls) -> GroupedKernels:
        from generated.triton import moe_gate_up_swiglu_bf16 as gate_up
        from generated.triton.moe_down_router_bf16 import moe_down_router_bf16

        return cls(gate_up.moe_gate_up_swiglu_bf16, moe_down_router_bf16, gated_layout(gate_up.SPEC))

    def prepare(self, w: MoEWeights) -> MoEWeights:
        """The weights as these kernels read them, made once at load: the gate_up rows interleaved (gate j, up j)
        where the kernel's layout is "interleaved" (one 128 x 256 dot a K step instead of two 128 x 128 ones)."""
        if self.layout == "halves":
            return w
        g, two_i, h = w.gate_up.shape
        rows = w.gate_up.view(g, 2, two_i // 2, h).transpose(1, 2).reshape(g, two_i, h)  # row 2j gate j, 2j + 1 up j
        return MoEWeights(w.router, rows.contiguous(), w.down)


def gated_layout(spec: dict) -> str:
    """The layout of a spec's gated op (its module's SPEC)."""
    return next(op["layout"] for op in spec["epilogue"] if op["op"] == "gated")


def grouped_block(x: torch.Tensor, w: MoEWeights, top_k: int, kernels: GroupedKernels) -> torch.Tensor:
    """The same block over (T, H) tokens on two grouped GEMMs, device-only (no host sync); `w` as
    `kernels.prepare` gives it."""
    weights, order, offs, rows = dispatch(x, w, top_k)
    h = kernels.gate_up(rows, w.gate_up.transpose(-2, -1), offs)  # (T * k, I)
    y = kernels.down(h, w.down.transpose(-2, -1), offs, weights[order].float())  # (T * k, H)
    return combine(y, order, top_k)


def dispatch(x: torch.Tensor, w: MoEWeights, top_k: int) -> tuple[torch.Tensor, ...]:
    """The routed rows grouped by expert, device-only: (each routed row's weight (T * k,) in token order, the
    order grouping them by expert (token order within one), offs (G,) int32 cumulative ends, the rows (T * k, H))."""
    weights, experts = route(x, w, top_k)
    flat = experts.reshape(-1)  # (T * k,): routed row r is token r // k's (r % k)-th choice
    order = torch.argsort(flat, stable=True)
    # each expert's row count without a host sync (bincount sizes its output from the data's max: a sync)
    ones = torch.ones_like(flat, dtype=torch.int32)
    counts = torch.zeros(w.router.shape[0], dtype=torch.int32, device=x.device).scatter_add_(0, flat, ones)
    return weights.reshape(-1), order, torch.cumsum(counts, 0, dtype=torch.int32), x[order // top_k]


def combine(y: torch.Tensor, order: torch.Tensor, top_k: int) -> torch.Tensor:
    """Each token's k routed rows of y (grouped by expert) summed, in its choices' order: (T, H)."""
    unsorted = torch.empty_like(y)
    unsorted[order] = y
    return unsorted.view(-1, top_k, y.shape[-1]).sum(dim=1)


def grouped_mm_block(x: torch.Tensor, w: MoEWeights, top_k: int) -> torch.Tensor:
    """The grouped block with torch._grouped_mm for both GEMMs and the gate, the SiLU product and the routing
    weights in eager torch between them: the peer the generated kernels are timed against beside eager's."""
    weights, order, offs, rows = dispatch(x, w, top_k)
    inter = w.down.shape[-1]
    hu = torch._grouped_mm(rows, w.gate_up.transpose(-2, -1), offs=offs)
    h = F.silu(hu[:, :inter]) * hu[:, inter:]
    y = torch._grouped_mm(h, w.down.transpose(-2, -1), offs=offs) * weights[order, None]
    return combine(y, order, top_k)
