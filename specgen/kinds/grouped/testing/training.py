"""What the grouped kind's training tests share (CPU under the interpreter, tests/grouped/test_training.py; GPU,
tests/gpu/test_grouped_training_gpu.py): a small training spec, its inputs from group sizes, and the float64
reference's output and gradients (torch autograd in float64 through the per-group loop of reference.py)."""

from __future__ import annotations

import torch

from specgen.kinds.gemm.testing.reference import TORCH_DTYPES
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.kinds.grouped.testing.reference import group_bounds, grouped

CHAINS: dict[str, list[dict]] = {
    "plain": [],
    "bias": [{"op": "bias"}],
    "gelu": [{"op": "activation", "fn": "gelu"}],
    "silu": [{"op": "activation", "fn": "silu"}],
    "bias_gelu_tanh": [{"op": "bias"}, {"op": "activation", "fn": "gelu_tanh"}],
    "bias_relu": [{"op": "bias"}, {"op": "activation", "fn": "relu"}],
    "bias_sigmoid": [{"op": "bias"}, {"op": "activation", "fn": "sigmoid"}],
    "swiglu_halves": [{"op": "gated", "fn": "silu", "layout": "halves"}],
    "geglu_il_bias": [{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}, {"op": "bias"}],
}


def train_spec(chain: str, save: str = "preact", dtype: str = "f32", b_major: str = "k", index: str = "offs",
               tail: str = "untouched", tile: int = 16, **training: object) -> dict:
    """A small-tile grouped Triton kernel with a backward (the interpreter walks every tail of its tiles)."""
    return {
        "name": f"gtrain_{chain}_{save}_{dtype}_{b_major}_{index}_{tail}_{tile}" + "".join(f"_{k}" for k in training),
        "kind": "grouped",
        "a": {"dtype": dtype, "major": "k"}, "b": {"dtype": dtype, "major": b_major}, "out": {"dtype": dtype},
        "groups": {"index": index, "tail": tail},
        "epilogue": CHAINS[chain], "training": {"save": save, **training},
        "tile": {"m": tile, "n": tile, "k": tile}, "triton": {"num_warps": 4}, "targets": ["triton:sm90"],
    }


def train_inputs(spec: dict, sizes: list[int], tail_rows: int, n: int, k: int, seed: int = 0,
                 device: str = "cpu") -> dict[str, torch.Tensor]:
    """a (rows, K) with `tail_rows` rows past the last group, b (G, K, N) in the spec's major (a K-major b is a (G,
    N, K) weight viewed transposed; (G, K, 2N) with a gated op), the group index (int32 ends or sizes), the bias (G, N) where the chain has
    one, in its dtype."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = TORCH_DTYPES[spec["a"]["dtype"]]
    rows, g = sum(sizes) + tail_rows, len(sizes)
    nb = 2 * n if any(op["op"] == "gated" for op in spec["epilogue"]) else n  # a gated B's gate and up columns
    a = torch.randn(rows, k, generator=gen, device=device).to(dt)
    b = (torch.randn(g, nb, k, generator=gen, device=device).to(dt).transpose(1, 2) if spec["b"]["major"] == "k"
         else torch.randn(g, k, nb, generator=gen, device=device).to(dt))
    b = b / k**0.5
    ends = torch.tensor(sizes, dtype=torch.int64).cumsum(0) if spec["groups"]["index"] == "offs" else torch.tensor(sizes)
    args = {"a": a, "b": b, "index": ends.to(torch.int32).to(device)}
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args["bias"] = torch.randn(g, n, generator=gen, device=device).to(TORCH_DTYPES[op.get("dtype", "f32")])
    return args


def reference_grads(spec: dict, args: dict[str, torch.Tensor],
                    grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """(out, the rows the kernel writes, gradients of a, b and the bias), all float64: autograd of the per-group
    loop reference for the output's gradient `grad` (rows no group holds take no part)."""
    leaves = {n: t.detach().cpu().double().requires_grad_() for n, t in args.items() if n != "index"}
    rest = {n: t for n, t in leaves.items() if n not in ("a", "b")}
    full = GroupedSpec.model_validate(spec).model_dump(mode="json")  # the defaults the reference reads (a bias's name)
    out, written = grouped(full, leaves["a"], leaves["b"], args["index"].cpu(), rest)
    if out.requires_grad:  # no group holds a row: nothing depends on the inputs, every gradient is zero
        out.backward(grad.detach().cpu().double() * written[:, None])
    return out.detach(), written, {n: torch.zeros_like(t) if t.grad is None else t.grad for n, t in leaves.items()}


def close(got: torch.Tensor, want: torch.Tensor, rel: float, what: str) -> None:
    """|got - want| within rel of want's largest magnitude (at least 1: the gradients are sums over a dimension)."""
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    scale = max(want.abs().max().item(), 1.0) if want.numel() else 1.0
    err = (got.detach().cpu().double() - want).abs().max().item() if want.numel() else 0.0
    assert err <= rel * scale, f"{what}: max error {err:.3g} > {rel:.1g} x {scale:.3g}"


FP8_TORCH = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def fp8_train_inputs(spec: dict, sizes: list[int], tail_rows: int, n: int, k: int, seed: int = 0,
                     device: str = "cpu") -> dict[str, torch.Tensor]:
    """An fp8 forward's inputs in call order: a (rows, K) and b (G, K, N) (K-major: a (G, N, K) weight viewed
    transposed) in their fp8 dtypes, the index, scale_a (rows,) and scale_b (G, N) f32 (scale_b / sqrt(K): out of
    order one), the bias (G, N) in its dtype where the chain has one."""
    gen = torch.Generator(device=device).manual_seed(seed)
    rows, g = sum(sizes) + tail_rows, len(sizes)
    a = torch.randn(rows, k, generator=gen, device=device).to(FP8_TORCH[spec["a"]["dtype"]])
    b = torch.randn(g, n, k, generator=gen, device=device).to(FP8_TORCH[spec["b"]["dtype"]]).transpose(1, 2)
    ends = torch.tensor(sizes, dtype=torch.int64).cumsum(0) if spec["groups"]["index"] == "offs" else torch.tensor(sizes)
    args = {"a": a, "b": b, "index": ends.to(torch.int32).to(device),
            "scale_a": torch.rand(rows, generator=gen, device=device) + 0.5,
            "scale_b": (torch.rand(g, n, generator=gen, device=device) + 0.5) / k**0.5}
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args["bias"] = torch.randn(g, n, generator=gen, device=device).to(TORCH_DTYPES[op.get("dtype", "f32")])
    return args


def fp8_reference(spec: dict, args: dict[str, torch.Tensor], grad: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """float64 autograd of the per-group loop act((A scale_a) @ (B[g] scale_b[g]) + bias[g]) over the dequantized
    operands: (the groups' rows of out, the gradients of the dequantized A and B and of the bias: "a", "b", "bias"),
    zeros where no row reads an operand."""
    fns = {"gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu, "relu": torch.nn.functional.relu,
           "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}
    act = next((op["fn"] for op in spec["epilogue"] if op["op"] == "activation"), "")
    x = {n: t.detach().cpu() for n, t in args.items()}
    leaves = {"a": (x["a"].double() * x["scale_a"].double()[:, None]).requires_grad_(),
              "b": (x["b"].double() * x["scale_b"].double()[:, None, :]).requires_grad_()}
    if "bias" in x:
        leaves["bias"] = x["bias"].double().requires_grad_()
    full = GroupedSpec.model_validate(spec).model_dump(mode="json")
    outs = []
    for g, (s, e) in enumerate(group_bounds(full, x["index"], x["a"].shape[0])):
        y = leaves["a"][s:e] @ leaves["b"][g] + (leaves["bias"][g] if "bias" in leaves else 0.0)
        outs.append(fns[act](y) if act else y)
    want = torch.cat(outs) if outs else leaves["a"].new_zeros(0, x["b"].shape[2])
    if want.numel() and want.requires_grad:
        (want * grad.detach().cpu().double()[: want.shape[0]]).sum().backward()
    return want.detach(), {n: t.grad if t.grad is not None else torch.zeros_like(t) for n, t in leaves.items()}
