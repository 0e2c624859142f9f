"""The grouped kind's training step (issue 38) against its peers, on Triton, CuTe sm90 and Mosaic GPU.

Forward + backward of the generated op against the eager peer, on the issue-37 MoE rows (gpu/bench_grouped.py's
WORKLOADS and group-size generators, decode left out: no training step there), timed with the project's paired CUPTI
timer (specgen.bench.timing.kernel_cycle: every call once a round, rotating order, L2 flushed before each; all kernels
of one call summed), an A/A pair of the peer beside each table.

torch backends (`--backend triton` or `cute`): a step is out = op(a, b, offs[, bias]) then torch.autograd.grad(out,
(a, b[, bias]), dOut): dA (ragged-M dgrad), dB (ragged-K wgrad) and dbias where the chain has a bias. Ours: the
catalogue's training kernel moe_up_gelu_train_bf16 (specs/training.toml: per-expert bias + GELU-tanh, B K-major,
offs, tail zero, save = "preact") rendered for the backend, and the same spec with another chain (`plain`: no
epilogue; `swiglu`: a gated SiLU over the halves of B's 2N columns) and `save = "recompute"` (rendered here; the
CuTe sm90 design renders every one, it has no catalogue training kernel). Peers: `eager` (torch._grouped_mm, the
chain in eager torch (a bias gathered to the rows by each row's group), autograd: torch._grouped_mm's own backward
where the installed torch has one, else dA and dB as torch._grouped_mm calls, the JSON's `peer_backward` says
which); `compiled` (torch.compile(fullgraph=True) of that forward, its backward by AOTAutograd; where it does not
compile whole, the row says why); `peer_gemms`, the peer's three GEMMs alone (forward, dgrad, wgrad as
torch._grouped_mm calls, no_grad): eager / peer_gemms is the ceiling a fused step could reach.

Mosaic GPU (`--backend mgpu`): jax.jit(jax.grad) of sum(out * dOut) over the module's jitted entry (`_call`; the
catalogue's moe_up_gelu_train_mgpu, other chains and saves rendered here) against the same over
jax.lax.ragged_dot_general + the chain in jnp (`jnp`, `jnp_aa`), and `peer_gemms` (XLA's three ragged dots: forward,
dgrad, and wgrad with the contracting dim ragged), each call ordered after torch's flush and waited for
(specgen.bench.timing.jax_call).

Beside each row: every side's gradients' distance from a float32 reference (the per-group loop in float32 autograd
on the device): max |g - ref| / max |ref| for dA, dB[, dbias]; and the bytes each side keeps from forward to backward
(torch: memory allocated after the forward, less the output; ours expected: pre (rows x N, or 2N gated, 2 bytes)
with save = "preact", none with "recompute").

    python gpu/bench_grouped_train.py --backend triton --out out/gpu [--rounds 10] [--workloads "Mixtral up,..."]
        [--dists even,skewed] [--chains bias_gelu,swiglu] [--saves preact,recompute] [--no-compile] [--flush read]
    python gpu/bench_grouped_train.py --smoke      (one tiny row; without a GPU: the Triton interpreter in f16,
                                                     gradients only, nothing timed)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from bench_grouped import DISTRIBUTIONS, WORKLOADS, group_sizes  # noqa: E402

from specgen.bench.stats import geomean, paired  # noqa: E402

CATALOGUE = {"triton": "moe_up_gelu_train_bf16", "cute": "moe_up_gelu_train_bf16", "mgpu": "moe_up_gelu_train_mgpu"}
TARGETS = {"triton": "triton:sm90", "cute": "cute:sm90", "mgpu": "pallas:gpu_sm90"}
# the chains timed: the catalogue's own (bias + GELU-tanh), the plain GEMM, and a gated SwiGLU over B's 2N columns
CHAINS = {"bias_gelu": None,  # None: the catalogue kernel's chain
          "plain": [],
          "swiglu": [{"op": "gated", "fn": "silu", "layout": "halves"}]}
SAVES = ("preact", "recompute")
SMOKE = ("smoke", 4, 24, 32, 48)  # (name, experts, rows per expert, N, K): one tiny row


def default_chains(workload: str) -> tuple[str, ...]:
    """An up-projection's chains (bias + activation, gated); a down-projection's plain GEMM."""
    return ("plain",) if "down" in workload else ("bias_gelu", "swiglu")


def gated(chain: str) -> bool:
    return chain == "swiglu"


def has_bias(chain: str) -> bool:
    return chain == "bias_gelu"


# ---- our modules: the catalogue kernel, or its spec with another chain, save, dtype or tile, rendered here ----

def derived_spec(backend: str, chain: str, save: str, dtype: str = "bf16", tile: int | None = None):
    """The LoadedSpec timed for (backend, chain, save): the catalogue's training kernel itself where nothing
    changes, else its spec with the changes (named for them), checked (errors raise, naming the spec)."""
    from specgen.bench.workloads import catalogue_kernel
    from specgen.check import check_all
    from specgen.spec.load import load_text

    base = catalogue_kernel(CATALOGUE[backend], ROOT / "specs")
    if (backend, chain, save, dtype, tile) in (("triton", "bias_gelu", "preact", "bf16", None),
                                               ("mgpu", "bias_gelu", "preact", "bf16", None)):
        return base
    spec = base.spec.model_dump(mode="json")
    spec["name"] = f"bench_moe_train_{chain}_{save}_{dtype}_{backend}" + (f"_t{tile}" if tile else "")
    spec["targets"] = [TARGETS[backend]]
    spec["per_target"], spec["variants"] = {}, []
    if CHAINS[chain] is not None:
        spec["epilogue"] = CHAINS[chain]
    for side in ("a", "b", "out"):
        spec[side]["dtype"] = dtype
    for op in spec["epilogue"]:
        if "dtype" in op:
            op["dtype"] = dtype
    training = spec["training"]
    training["save"] = save
    if backend == "cute":  # the CuTe design's own backward tiles (the Triton wgrad override is a pointer kernel's)
        spec["training"] = {"save": save}
        if gated(chain):
            spec["cute"]["mma_warpgroups"] = 2  # a gate and an up accumulator (REG001)
    if backend in ("mgpu", "triton") and gated(chain):  # two accumulators (gate, up): 128 x 256 outputs' worth
        spec["tile"] = {"m": 128, "n": 128, "k": 64}  # (REG001; the catalogue's gated kernels' tile)
    if tile:  # the interpreter's small tile, every GEMM of the step
        spec["tile"] = {"m": tile, "n": tile, "k": tile}
        spec["triton"]["num_warps"] = 4
        spec["training"] = {"save": save}
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<bench_grouped_train:{spec['name']}>", ".json")
    errors = [str(d) for d in check_all([loaded]) if d.severity == "error"]
    if errors:
        raise SystemExit(f"{spec['name']} does not check:\n  " + "\n  ".join(errors))
    return loaded


def our_op(backend: str, chain: str, save: str, dtype: str = "bf16", tile: int | None = None):
    """(entry, loaded spec): the module rendered for the backend's target and imported, its torch op or (mgpu) its
    jitted JAX entry `_call`."""
    from specgen.bench.workloads import build_module
    from specgen.spec.models import parse_target

    loaded = derived_spec(backend, chain, save, dtype, tile)
    module = build_module(loaded, parse_target(TARGETS[backend]))
    return (module._call if backend == "mgpu" else getattr(module, loaded.name)), loaded


# ---- the torch peer ----

class _GroupedMM(torch.autograd.Function):
    """torch._grouped_mm with its backward as torch._grouped_mm calls, for a torch without its autograd formula:
    dA = G @ B[g]^T (ragged M), dB[g] = A_g^T @ G_g as the 2-D x 2-D ragged-K form, in B's layout."""

    @staticmethod
    def forward(ctx, a, b, offs):
        ctx.save_for_backward(a, b, offs)
        return torch._grouped_mm(a, b, offs=offs)

    @staticmethod
    def backward(ctx, g):
        a, b, offs = ctx.saved_tensors
        da = torch._grouped_mm(g, b.transpose(-2, -1), offs=offs) if ctx.needs_input_grad[0] else None
        db = None
        if ctx.needs_input_grad[1]:  # a K-major B (G, K, N) gets dB[g]^T = G_g^T @ A_g written as (G, N, K)
            db = (torch._grouped_mm(g.t(), a, offs=offs).transpose(-2, -1) if b.stride(-2) == 1
                  else torch._grouped_mm(a.t(), g, offs=offs))
        return da, db, None


def peer_mm(device: str, dtype: torch.dtype) -> tuple[object, str]:
    """(the peer's grouped GEMM, how its backward runs): torch._grouped_mm where the installed torch differentiates
    it on `device`, else _GroupedMM."""
    a = torch.randn(32, 16, device=device, dtype=dtype, requires_grad=True)
    b = torch.randn(2, 16, 16, device=device, dtype=dtype).transpose(1, 2).requires_grad_()
    offs = torch.tensor([8, 32], device=device, dtype=torch.int32)
    try:
        y = torch._grouped_mm(a, b, offs=offs)
        torch.autograd.grad(y, (a, b), torch.randn_like(y))
    except (RuntimeError, NotImplementedError) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return (lambda a, b, offs: _GroupedMM.apply(a, b, offs)), f"dA, dB as torch._grouped_mm calls (its autograd: {why})"
    return (lambda a, b, offs: torch._grouped_mm(a, b, offs=offs)), "torch._grouped_mm's own autograd formula"


def peer_forward(chain: str, mm):
    """The eager layer: mm(a, b, offs), then the chain in eager torch (a per-expert bias gathered to the rows by
    `group`, each row's expert)."""
    def forward(a, b, offs, group, *bias):
        y = mm(a, b, offs)
        if gated(chain):
            gate, up = y.chunk(2, dim=-1)
            return F.silu(gate) * up
        if has_bias(chain):
            return F.gelu(y + bias[0][group], approximate="tanh")
        return y
    return forward


def reference_grads(chain: str, a, b, sizes: list[int], bias, grad) -> list[torch.Tensor]:
    """The float32 reference's (dA, dB[, dbias]) on the tensors' device: the per-group loop in float32 autograd.
    b is (G, K, N) (2N gated) as the op takes it, in any layout."""
    leaves = [t.detach().float().requires_grad_() for t in (a, b, *([bias] if bias is not None else []))]
    a32, b32, *rest = leaves
    outs, start = [], 0
    for g, size in enumerate(sizes):
        y = a32[start:start + size] @ b32[g]
        if gated(chain):
            gate, up = y.chunk(2, dim=-1)
            y = F.silu(gate) * up
        elif has_bias(chain):
            y = F.gelu(y + rest[0][g], approximate="tanh")
        outs.append(y)
        start += size
    out = torch.cat(outs)
    return list(torch.autograd.grad(out, leaves, grad[:start].float(), allow_unused=True))


def distance(got, want) -> float:
    """max |got - want| / max |want| (1 where want is all zeros)."""
    scale = max(want.abs().max().item(), 1e-30) if want.numel() else 1.0
    return (got.detach().float() - want).abs().max().item() / scale if want.numel() else 0.0


def torch_inputs(chain: str, sizes: list[int], n: int, k: int, device: str, dtype: torch.dtype, seed: int = 0):
    """a (rows, K), b (G, K, N or 2N) K-major (an expert's (N, K) weight viewed transposed), offs (int32 ends),
    each row's expert, the bias (G, N) where the chain has one, dOut (rows, N): leaves that require grad."""
    gen = torch.Generator(device=device).manual_seed(seed)
    rows, g, nb = sum(sizes), len(sizes), n * (2 if gated(chain) else 1)

    def randn(*dims):
        return torch.randn(*dims, generator=gen, device=device)

    a = (randn(rows, k) / k**0.25).to(dtype).requires_grad_()
    b = (randn(g, nb, k) / k**0.5).to(dtype).transpose(1, 2).requires_grad_()
    size_t = torch.tensor(sizes, device=device)
    offs = size_t.cumsum(0).to(torch.int32)
    group = torch.repeat_interleave(torch.arange(g, device=device), size_t, output_size=rows)
    bias = randn(g, n).to(dtype).requires_grad_() if has_bias(chain) else None
    return a, b, offs, group, bias, randn(rows, n).to(dtype)


COMPILED: dict[str, object] = {}  # chain -> torch.compile of its eager forward


def torch_steps(chain: str, ours: dict, mm, a, b, offs, group, bias, grad, compiled: bool) -> tuple[dict, str]:
    """The timed calls of one (row, chain) on a torch backend: each of ours, eager (and its A/A), compiled; and
    why compiled is missing where it is."""
    extra = (bias,) if bias is not None else ()
    leaves = (a, b, *extra)

    def step(forward):
        return lambda: torch.autograd.grad(forward(), leaves, grad)

    calls = {name: step(lambda fn=fn: fn(a, b, offs, *extra)) for name, fn in ours.items()}
    eager = peer_forward(chain, mm)
    calls["eager"] = calls["eager_aa"] = step(lambda: eager(a, b, offs, group, *extra))
    why = "not asked (--no-compile)"
    if compiled:
        # one compiled function a chain (its dynamo cache holds a graph per shape: the dists of a row share one)
        if chain not in COMPILED:
            # every chain's eager forward is one code object: its graphs (a chain and shape each) share dynamo's
            # cache, past its default limit of 8 here (imported here: torch._dynamo imports triton)
            config = torch._dynamo.config
            limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
            setattr(config, limit, max(getattr(config, limit), 64))
            COMPILED[chain] = torch.compile(eager, fullgraph=True, dynamic=False)
        fn = COMPILED[chain]
        try:
            torch.autograd.grad(fn(a, b, offs, group, *extra), leaves, grad)
            calls["compiled"] = step(lambda: fn(a, b, offs, group, *extra))
            why = ""
        except Exception as e:  # noqa: BLE001 - any compile failure is the row's finding, said in its JSON
            why = f"{type(e).__name__}: " + " / ".join(line.strip() for line in str(e).splitlines()[:4] if line.strip())
    return calls, why


def peer_gemms_torch(a, b, offs, grad_cols):
    """The peer's three GEMMs alone, no autograd: forward a @ b[g], dgrad G @ b[g]^T, wgrad G_g^T @ a_g (B's
    K-major layout), G a (rows, N or 2N) tensor of the operands' dtype."""
    a, b = a.detach(), b.detach()

    def run():
        with torch.no_grad():
            return (torch._grouped_mm(a, b, offs=offs), torch._grouped_mm(grad_cols, b.transpose(-2, -1), offs=offs),
                    torch._grouped_mm(grad_cols.t(), a, offs=offs))
    return run


def saved_bytes(forwards: dict) -> dict[str, int]:
    """What each forward keeps for its backward beyond its output (CUDA memory allocated after it, less the out)."""
    saved = {}
    for name, fn in forwards.items():
        fn()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        out = fn()
        saved[name] = torch.cuda.memory_allocated() - before - out.numel() * out.element_size()
        del out
    return saved


def expected_saved(chain: str, saves, rows: int, n: int) -> dict[str, int]:
    """The bytes our forward keeps beyond its inputs and output: pre (rows x N, 2N gated; bf16) with save = "preact"
    where the chain has an activation or gate, none with "recompute" or without one (the plain GEMM has no pre)."""
    cols = n * (2 if gated(chain) else 1)
    return {f"ours_{s}": rows * cols * 2 if s == "preact" and CHAINS[chain] != [] else 0 for s in saves}


def gradient_check(chain: str, calls: dict, names, a, b, sizes, bias, grad) -> dict[str, list[float]]:
    """Each named step's gradients' distance from the float32 reference (dA, dB[, dbias])."""
    want = reference_grads(chain, a, b, sizes, bias, grad)
    return {name: [distance(g, w) for g, w in zip(calls[name](), want, strict=True)] for name in names}


# ---- one row ----

def summarize(cycle: dict, ours: list[str], peers: list[str]) -> dict:
    """Medians, the paired ratios (peer / ours per round), the A/A and the ceiling from a kernel_cycle."""
    s = {k: v["samples"] for k, v in cycle.items()}
    first = peers[0]  # eager / jnp
    return {"median_us": {k: statistics.median(v) for k, v in s.items()},
            "ratio": {p: {o: paired(s[o], s[p]).model_dump() for o in ours} for p in peers if p in s},
            "aa": paired(s[first], s[f"{first}_aa"]).model_dump(),
            "ceiling_peer_over_gemms": paired(s["peer_gemms"], s[first]).model_dump(),
            "fraction_of_ceiling": {o: paired(s[o], s["peer_gemms"]).ratio for o in ours},
            "kernels_us": {k: v["kernels"] for k, v in cycle.items()}}


def run_torch_row(backend: str, workload: tuple, dist: str, chain: str, saves, rounds: int, compiled: bool, mm,
                  modules: dict, timed: bool, dtype: torch.dtype, flush: str = "write") -> dict:
    from specgen.bench.timing import kernel_cycle

    name, experts, rows, n, k = workload
    sizes = group_sizes(dist, experts, rows)
    device = "cuda" if timed else "cpu"
    a, b, offs, group, bias, grad = torch_inputs(chain, sizes, n, k, device, dtype)
    ours = {f"ours_{save}": modules[(chain, save)][0] for save in saves}
    calls, why = torch_steps(chain, ours, mm, a, b, offs, group, bias, grad, compiled and timed)
    row = {"workload": name, "dist": dist, "sizes": sizes, "n": n, "k": k, "chain": chain,
           "specs": {f"ours_{s}": [modules[(chain, s)][1].name, modules[(chain, s)][1].spec_hash] for s in saves},
           "compiled_missing": why,
           "grad_rel_err_vs_f32": gradient_check(chain, calls, [*ours, "eager", *(["compiled"] if "compiled" in calls else [])],
                                                 a, b, sizes, bias, grad)}
    print(f"  {backend} {name} {dist} {chain}: |grad - f32| / max|f32| (dA, dB[, dbias]): "
          + "; ".join(f"{s} {', '.join(f'{e:.2g}' for e in v)}" for s, v in row["grad_rel_err_vs_f32"].items()), flush=True)
    if not timed:
        return row
    cols = n * (2 if gated(chain) else 1)
    calls["peer_gemms"] = peer_gemms_torch(a, b, offs, torch.randn(sum(sizes), cols, device="cuda", dtype=dtype))
    extra = (bias,) if bias is not None else ()
    forwards = {**{o: (lambda fn=fn: fn(a, b, offs, *extra)) for o, fn in ours.items()},
                "eager": lambda: peer_forward(chain, mm)(a, b, offs, group, *extra)}
    row["saved_bytes_measured"] = saved_bytes(forwards)
    row["saved_bytes_expected"] = expected_saved(chain, saves, sum(sizes), n)
    print(f"  {backend} {name} {dist} {chain}: bytes kept for the backward beyond the output (measured): "
          + ", ".join(f"{o} {v}" for o, v in row["saved_bytes_measured"].items()), flush=True)
    row.update(summarize(kernel_cycle(calls, rounds, flush), list(ours), ["eager", "compiled"]))
    row["flops"] = 3 * 2 * sum(sizes) * cols * k
    return row


# ---- Mosaic GPU ----

def jnp_peer(chain: str):
    """The JAX peer's layer over (a (rows, K), w (G, N or 2N, K), offs, sizes (int32)[, bias (G, N)]):
    jax.lax.ragged_dot_general over the experts' weights as stored (a product of the operands' dtype), then the chain
    in f32 (the bias gathered to the rows by each row's expert), rounded to the operands' dtype."""
    import jax
    import jax.numpy as jnp

    numbers = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(((1,), (2,)), ((), ())),
                                                lhs_ragged_dimensions=[0], rhs_group_dimensions=[0])

    def layer(a, w, offs, gs, *bias):
        y = jax.lax.ragged_dot_general(a, w, gs, numbers)
        if gated(chain):  # gate and up as the GEMM rounded them, as eager torch keeps them
            gate, up = jnp.split(y.astype(jnp.float32), 2, axis=1)
            return (jax.nn.silu(gate) * up).astype(a.dtype)
        if has_bias(chain):
            row_group = jnp.repeat(jnp.arange(gs.shape[0]), gs, total_repeat_length=a.shape[0])
            return jax.nn.gelu(y.astype(jnp.float32) + bias[0][row_group].astype(jnp.float32),
                               approximate=True).astype(a.dtype)
        return y
    return layer


def jnp_peer_gemms():
    """XLA's three ragged dots of the peer's step alone, jitted over (a (rows, K), w (G, C, K), gc (rows, C), sizes):
    the forward a @ w[g]^T, dgrad gc @ w[g] (rows, K), wgrad gc_g^T @ a_g (G, C, K) with the contracting dim ragged."""
    import jax

    def dims(lhs: int, rhs: int, group: list[int]):
        return jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(((lhs,), (rhs,)), ((), ())),
                                                 lhs_ragged_dimensions=[0], rhs_group_dimensions=group)

    return jax.jit(lambda a, w, gc, gs: (jax.lax.ragged_dot_general(a, w, gs, dims(1, 2, [0])),
                                         jax.lax.ragged_dot_general(gc, w, gs, dims(1, 1, [0])),
                                         jax.lax.ragged_dot_general(gc, a, gs, dims(0, 0, []))))


def mgpu_steps(chain: str, entries: dict, operands: int) -> dict:
    """jax.jit(jax.grad) of sum(layer(a, w[, bias]) * dOut) for each of our entries ({name: the module's `_call`})
    and the jnp peer (`jnp`), each called as step(a, w[, bias], offs, sizes, dOut): the gradients of a, w and the
    bias where there is one. Built once a chain: jit's cache serves every row and distribution of one shape."""
    import jax
    import jax.numpy as jnp

    def grad_of(layer):
        def loss(*xs):
            *xs, offs, gs, dout = xs
            return jnp.sum(layer(xs[0], xs[1], offs, gs, *xs[2:]).astype(jnp.float32) * dout.astype(jnp.float32))
        return jax.jit(jax.grad(loss, argnums=tuple(range(operands))))

    def ours(entry):
        return lambda a, w, offs, gs, *bias: entry(a, w, offs, *bias)

    layers = {name: ours(fn) for name, fn in entries.items()}
    return {name: grad_of(f) for name, f in {**layers, "jnp": jnp_peer(chain)}.items()}


STEPS: dict = {}  # (chain, our step names) -> mgpu_steps; "peer_gemms" -> jnp_peer_gemms()


def run_mgpu_row(workload: tuple, dist: str, chain: str, saves, rounds: int, modules: dict, flush: str = "write") -> dict:
    import jax
    import jax.numpy as jnp

    from specgen.bench.timing import jax_call, kernel_cycle

    name, experts, rows, n, k = workload
    sizes = group_sizes(dist, experts, rows)
    # the torch inputs (b (G, K, N) K-major: the (G, N, K) weight the JAX entry takes, transposed), shared by DLPack
    a_t, b_t, offs_t, _, bias_t, grad_t = torch_inputs(chain, sizes, n, k, "cuda", torch.bfloat16)
    torch.cuda.synchronize()  # made on torch's stream: done before JAX reads them
    a, w, offs, dout = (jax.dlpack.from_dlpack(t.detach().contiguous()) for t in (a_t, b_t.transpose(1, 2), offs_t, grad_t))
    operands = (a, w, *([jax.dlpack.from_dlpack(bias_t.detach())] if bias_t is not None else []))
    gs = jnp.asarray(sizes, jnp.int32)
    entries = {f"ours_{s}": modules[(chain, s)][0] for s in saves}
    if (chain, *entries) not in STEPS:
        STEPS[(chain, *entries)] = mgpu_steps(chain, entries, len(operands))
    steps = STEPS[(chain, *entries)]
    layers = list(entries)
    operands = (*operands, offs, gs, dout)
    want = reference_grads(chain, a_t, b_t, sizes, bias_t, grad_t)  # dB in the op's (G, K, N) view
    errors = {}
    for o, f in steps.items():
        got = [torch.from_dlpack(x) for x in f(*operands)]
        got[1] = got[1].transpose(1, 2)
        errors[o] = [distance(g, r) for g, r in zip(got, want, strict=True)]
    g_cols = jax.random.normal(jax.random.key(1), (sum(sizes), n * (2 if gated(chain) else 1)), jnp.bfloat16)
    calls = {o: jax_call(f, *operands) for o, f in steps.items()}
    calls["jnp_aa"] = calls["jnp"]
    STEPS["peer_gemms"] = STEPS.get("peer_gemms") or jnp_peer_gemms()
    calls["peer_gemms"] = jax_call(STEPS["peer_gemms"], a, w, g_cols, gs)
    row = {"workload": name, "dist": dist, "sizes": sizes, "n": n, "k": k, "chain": chain,
           "specs": {f"ours_{s}": [modules[(chain, s)][1].name, modules[(chain, s)][1].spec_hash] for s in saves},
           "grad_rel_err_vs_f32": errors,
           "saved_bytes_expected": expected_saved(chain, saves, sum(sizes), n)}
    print(f"  mgpu {name} {dist} {chain}: |grad - f32| / max|f32| (dA, dB[, dbias]): "
          + "; ".join(f"{s} {', '.join(f'{e:.2g}' for e in v)}" for s, v in errors.items()), flush=True)
    row.update(summarize(kernel_cycle(calls, rounds, flush), list(layers), ["jnp"]))
    row["flops"] = 3 * 2 * sum(sizes) * n * (2 if gated(chain) else 1) * k
    return row


# ---- the table ----

def print_row(backend: str, row: dict) -> None:
    peer = "jnp" if backend == "mgpu" else "eager"
    med, aa, ceil = row["median_us"], row["aa"], row["ceiling_peer_over_gemms"]
    for o, r in row["ratio"][peer].items():
        comp = row["ratio"].get("compiled", {}).get(o)
        print(f"| {backend} | {row['workload']} | {row['dist']} | {row['chain']} | {o[5:]} | {med[o]:.1f} | "
              f"{med[peer]:.1f} | {r['ratio']:.3f} ({r['ratio_lo']:.3f}-{r['ratio_hi']:.3f}) | "
              f"{'-' if comp is None else format(comp['ratio'], '.3f')} | {aa['ratio']:.3f} | {ceil['ratio']:.3f} | "
              f"{row['fraction_of_ceiling'][o]:.3f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=tuple(CATALOGUE), default="triton")
    ap.add_argument("--out", type=Path, default=Path("out/gpu"))
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--workloads", default="", help="only these WORKLOADS rows (comma-separated names; default: all "
                                                    "but decode)")
    ap.add_argument("--dists", default="even,skewed")
    ap.add_argument("--chains", default="", help=f"the chains of every row ({', '.join(CHAINS)}); default: an up "
                                                 "row's bias_gelu and swiglu, a down row's plain")
    ap.add_argument("--saves", default="preact,recompute")
    ap.add_argument("--flush", choices=("write", "read"), default="write",
                    help="how the timer empties the L2 before each call (specgen.bench.timing.Flush; `read` where a "
                         "step launches a kernel of the write flush's name and the timer says so)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile's step out (torch backends)")
    ap.add_argument("--smoke", action="store_true", help="one tiny row; without a GPU the Triton interpreter, "
                                                         "gradients only")
    args = ap.parse_args()
    saves = [s for s in args.saves.split(",") if s]
    if args.smoke:
        workloads, dists = [SMOKE], ["skewed"]
        args.chains = args.chains or ",".join(CHAINS)
    else:
        names = [w for w in args.workloads.split(",") if w]
        known = [w[0] for w in WORKLOADS if w[0] != "decode"]
        dists = args.dists.split(",")
        for what, given, valid in (("--workloads", names, known), ("--dists", dists, DISTRIBUTIONS),
                                   ("--chains", [c for c in args.chains.split(",") if c], list(CHAINS)),
                                   ("--saves", saves, SAVES)):
            if unknown := [x for x in given if x not in valid]:
                raise SystemExit(f"{what}: {', '.join(map(repr, unknown))} unknown (one of {', '.join(valid)})")
        workloads = [w for w in WORKLOADS if w[0] in known and (not names or w[0] in names)]
    timed = torch.cuda.is_available()
    if not timed:
        if not args.smoke or args.backend != "triton":
            raise SystemExit("no CUDA device: only `--smoke --backend triton` runs here (the Triton interpreter, "
                             "f16, gradients only)")
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    dtype, tile = (torch.bfloat16, None) if timed else (torch.float16, 16)  # the interpreter is wrong for bf16
    modules: dict = {}
    mm, how = peer_mm("cuda" if timed else "cpu", dtype)
    rows = []
    print(f"peer backward: {how}")
    if timed:
        print("| backend | workload | sizes | chain | save | ours us | peer us | peer / ours (interval) | compiled / ours "
              "| A/A | ceiling peer / 3 GEMMs | ours: 3 GEMMs / ours |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for workload in workloads:
        for chain in (args.chains.split(",") if args.chains else default_chains(workload[0])):
            chain_saves = saves if CHAINS[chain] != [] else saves[:1]  # no activation: no pre, one backward
            for save in chain_saves:
                if (chain, save) not in modules:
                    modules[(chain, save)] = our_op(args.backend, chain, save, "bf16" if timed else "f16", tile)
            for dist in dists:
                try:
                    if args.backend == "mgpu":
                        row = run_mgpu_row(workload, dist, chain, chain_saves, args.rounds, modules, args.flush)
                    else:
                        row = run_torch_row(args.backend, workload, dist, chain, chain_saves, args.rounds,
                                            not args.no_compile, mm, modules, timed, dtype, args.flush)
                except ValueError as exc:  # a generated op refusing the row's shapes (its message), not a crash
                    rows.append({"workload": workload[0], "dist": dist, "chain": chain, "refused": str(exc)})
                    print(f"| {args.backend} | {workload[0]} | {dist} | {chain} | refused: {exc} |", flush=True)
                    continue
                rows.append(row)
                if timed:
                    print_row(args.backend, row)
    peer = "jnp" if args.backend == "mgpu" else "eager"
    if timed:
        for save in saves:
            mine = [r["ratio"][peer][f"ours_{save}"]["ratio"] for r in rows
                    if "ratio" in r and f"ours_{save}" in r["ratio"][peer]]
            if mine:
                print(f"| {args.backend} | geomean | | | {save} | | | {geomean(mine):.3f} | | | | |")
    record = {"backend": args.backend, "target": TARGETS[args.backend], "rounds": args.rounds, "peer": peer,
              "peer_backward": how if args.backend != "mgpu" else "jax's autodiff of ragged_dot_general",
              "rows": rows}
    if timed:
        from specgen.bench.record import environment

        record["environment"] = environment(args.flush).model_dump(mode="json")
    else:
        record["environment"] = {"gpu": None, "torch": torch.__version__, "note": "CPU smoke: Triton interpreter, "
                                 "f16, gradients only, nothing timed"}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"bench-grouped-train-{args.backend}{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps(record, indent=1, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
