"""gpu/bench_grouped_train.py's pieces that time nothing, on the CPU: the torch step functions (ours: the catalogue
training kernel's spec rendered for the Triton interpreter in f16 with a 16 tile; the eager peer through torch's own
_grouped_mm backward and through the script's explicit one) and its float32 reference give the gradients float64
autograd of the kind's per-group loop gives; the JAX peer's jax.grad step of the loss the Mosaic GPU rows time, and
both sides' three-GEMM ceiling calls, against per-group loops. Empty groups first and in the middle, sizes off the
tile. The timing itself runs on the GPU only (`python gpu/bench_grouped_train.py --backend ...`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from specgen.kinds.grouped.testing.training import close, reference_grads

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

ROOT = Path(__file__).resolve().parents[2]
SIZES = [0, 5, 11, 0, 8]  # empty groups first and in the middle; 24 rows, no row past the groups
N, K = 16, 24  # multiples of 8: torch._grouped_mm's CPU path asks 16-byte strides of f16


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_grouped_train", ROOT / "gpu" / "bench_grouped_train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _want(loaded, a, b, offs, bias, grad) -> list[torch.Tensor]:
    """float64 autograd of the per-group loop (the kind's test reference) for the spec's chain: dA, dB[, dbias]."""
    args = {"a": a, "b": b, "index": offs, **({"bias": bias} if bias is not None else {})}
    _, _, want = reference_grads(loaded.spec.model_dump(mode="json"), args, grad)
    return [want[n] for n in ("a", "b", "bias") if n in want]


@pytest.mark.parametrize(("chain", "save"), [("bias_gelu", "preact"), ("swiglu", "recompute"), ("plain", "preact")])
def test_torch_steps_and_reference_match_float64(bench, chain: str, save: str) -> None:
    fn, loaded = bench.our_op("triton", chain, save, "f16", 16)
    assert [op["op"] for op in loaded.spec.model_dump(mode="json")["epilogue"]] == \
        {"bias_gelu": ["bias", "activation"], "swiglu": ["gated"], "plain": []}[chain]
    a, b, offs, group, bias, grad = bench.torch_inputs(chain, SIZES, N, K, "cpu", torch.float16)
    assert b.shape == (len(SIZES), K, N * (2 if chain == "swiglu" else 1)) and b.stride(1) == 1  # K-major
    want = _want(loaded, a, b, offs, bias, grad)
    mm, _ = bench.peer_mm("cpu", torch.float16)
    calls, why = bench.torch_steps(chain, {"ours": fn}, mm, a, b, offs, group, bias, grad, False)
    assert why.startswith("not asked")
    explicit, _ = bench.torch_steps(chain, {}, lambda a, b, offs: bench._GroupedMM.apply(a, b, offs), a, b, offs,
                                    group, bias, grad, False)
    sides = {"ours": (calls["ours"](), 1e-2), "eager": (calls["eager"](), 1e-2),
             "explicit backward": (explicit["eager"](), 1e-2),
             "f32 reference": (bench.reference_grads(chain, a, b, SIZES, bias, grad), 1e-5)}
    for side, (got, tol) in sides.items():
        assert len(got) == len(want), side
        for g, w, what in zip(got, want, ("dA", "dB", "dbias"), strict=False):
            close(g, w, tol, f"{side} {chain} {what}")
    for i in (0, 3):  # an empty group: dB[g] (and dbias[g]) exactly 0 in ours
        assert not sides["ours"][0][1][i].any() and (bias is None or not sides["ours"][0][2][i].any())
    got = bench.reference_grads(chain, a, b, SIZES, bias, grad)
    assert bench.distance(got[0], got[0]) == 0 and 0 < bench.distance(got[0] * 1.5, got[0]) == pytest.approx(0.5)


def _ceiling_case():
    """a (rows, K), gc (rows, N), w (G, N, K) as stored, offs, and the three products by a per-group loop."""
    gen = torch.Generator().manual_seed(3)
    a, gc = torch.randn(24, K, generator=gen), torch.randn(24, N, generator=gen)
    w = torch.randn(len(SIZES), N, K, generator=gen)
    offs = torch.tensor(SIZES).cumsum(0).to(torch.int32)
    ends = [0, *offs.tolist()]
    rows = [slice(ends[i], ends[i + 1]) for i in range(len(SIZES))]
    want = (torch.cat([a[r] @ w[g].t() for g, r in enumerate(rows)]), torch.cat([gc[r] @ w[g] for g, r in enumerate(rows)]),
            torch.stack([gc[r].t() @ a[r] for r in rows]))
    return a, gc, w, offs, want


def test_the_torch_ceiling_gemms_are_the_steps_three_products(bench) -> None:
    """Forward a @ b[g], dgrad G @ b[g]^T, wgrad G_g^T @ a_g in b's (G, N, K) storage."""
    a, gc, w, offs, want = _ceiling_case()
    for g, v, what in zip(bench.peer_gemms_torch(a, w.transpose(1, 2), offs, gc)(), want, ("forward", "dgrad", "wgrad"),
                          strict=True):
        close(g, v.double(), 1e-5, f"torch {what}")


def test_the_jax_side_matches_float64(bench) -> None:
    """The Mosaic GPU rows' peer: XLA's three ragged dots (the ceiling) against the loop; jax.jit(jax.grad) of
    sum(layer * dOut) over ragged_dot_general and the chain, f32 operands, against the float64 per-group loop's
    gradients of a, w (as stored, (G, N, K)) and the bias, for the bias + GELU and the SwiGLU chains."""
    import jax.numpy as jnp

    a, gc, w, offs, want = _ceiling_case()
    got = bench.jnp_peer_gemms()(*(jnp.asarray(t.numpy()) for t in (a, w, gc)), jnp.asarray(SIZES, jnp.int32))
    for g, v, what in zip(got, want, ("forward", "dgrad", "wgrad"), strict=True):
        close(torch.from_numpy(np.array(g)), v.double(), 1e-5, f"jax {what}")
    for chain in ("bias_gelu", "swiglu"):
        _, loaded = bench.our_op("triton", chain, "preact", "f32", 16)  # the spec the reference reads (f32 operands)
        a, b, offs, _, bias, grad = bench.torch_inputs(chain, SIZES, N, K, "cpu", torch.float32)
        want = _want(loaded, a, b, offs, bias, grad)
        operands = [jnp.asarray(t.detach().numpy()) for t in (a, b.transpose(1, 2).contiguous(),
                                                              *([bias] if bias is not None else []))]
        steps = bench.mgpu_steps(chain, {}, len(operands))
        assert list(steps) == ["jnp"]
        index = (jnp.asarray(offs.numpy()), jnp.asarray(SIZES, jnp.int32), jnp.asarray(grad.numpy()))
        got = [torch.from_numpy(np.array(x)) for x in steps["jnp"](*operands, *index)]
        got[1] = got[1].transpose(1, 2)  # (G, N, K) as stored -> the op's (G, K, N) view
        assert len(got) == len(want)
        for g, v, what in zip(got, want, ("dA", "dB", "dbias"), strict=False):
            close(g, v, 1e-4, f"jnp {chain} {what}")
