"""The differentiable JAX entry (`<name>_jax`, a jax.custom_vjp: specgen/runtime/cute_jax_train.py) of `batch = true`
CuTe sm90 training modules (issue 38; session 34) on a Hopper GPU: jax.grad under jax.jit, and inside a one-device
jax.shard_map (the batch sharded, the bias replicated), runs the module's kernels through XLA custom calls and gives
dA, dB (each batch's) and the bias gradient (over every batch's rows) in their primals' stored shapes and dtypes,
within bf16 rounding of float64 autograd and no worse than twice eager bf16 autograd's error: [] (B mn-major),
[bias, gelu_tanh] preact, [bias, silu] recompute (A and B mn-major), SwiGLU halves (preact), GeGLU-tanh interleaved
with a bias (recompute); batch 3 with M, N and K off the tiles and off whole 16 bytes, batch 1 with M = 1 (passed on
an H200, session 34, the lead's run of 1e3c245). Also an fp8 forward (four forms, batched or not; a ReLU form's slack:
`relu_slack`) and the other chains (four, unbatched): the whole file passed on an H200 (session 34, the lead's run of
d761ab2: 13 passed in 49.8 s). Session 35 adds a batched chain (a bias along m, a batched residual, silu, a column
scale; preact and recompute: `test_batched_chain_jax_grad_under_jit_and_shard_map`): the whole file passed on an H200
(session 35, the lead's run of 7ff55710: 15 passed with the shard file's batched chain case, 16 in 49.5 s).
The outputs are new arrays (XLA's), so no NaN poisoning applies; the padding they are sliced from is checked by the
values at every edge.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpu.test_training_cute_batch_gpu import grads, within

pytestmark = pytest.mark.gpu

ACTS = {"gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "relu": torch.relu}  # the fp8 forms'
# name: (epilogue, save, a major, b major), as tests/backends/cute/test_cute_training_batch.py's FORMS
FORMS = {
    "gjb_plain": ([], "preact", "k", "mn"),
    "gjb_bias_gelu": ([{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}], "preact", "k", "k"),
    "gjb_silu_rec": ([{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "silu"}], "recompute", "mn", "mn"),
    "gjb_swiglu": ([{"op": "gated", "fn": "silu", "layout": "halves"}], "preact", "k", "k"),
    "gjb_geglu_il": ([{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}, {"op": "bias", "dtype": "bf16"}],
                     "recompute", "k", "k"),
}
SHAPES = [(3, 200, 100, 72), (1, 1, 264, 40)]  # batch, M, N, K
_MODULES: dict[str, object] = {}


def spec(name: str) -> dict:
    epilogue, save, am, bm = FORMS[name]
    return {"name": name, "kind": "gemm", "batch": True, "a": {"dtype": "bf16", "major": am},
            "b": {"dtype": "bf16", "major": bm}, "out": {"dtype": "bf16"}, "epilogue": epilogue,
            "training": {"save": save}, "tile": {"m": 128, "n": 128, "k": 64}, "cute": {"mma_warpgroups": 2},
            "schedule": {"persistent": True}, "targets": ["cute:sm90"]}


def module(name: str, tmp_path_factory):
    if name not in _MODULES:
        from kernels import load_target_module

        _MODULES[name] = load_target_module(spec(name), "cute:sm90", tmp_path_factory.mktemp(name),
                                            "_specgen_cute_jax_batch_train_")[0]
    return _MODULES[name]


def data(name: str, shape: tuple[int, int, int, int]) -> dict[str, torch.Tensor]:
    """The logical (torch) operands: a (batch, M, K), b (batch, K, cols), bias (N,); float32 values of bf16s."""
    epilogue = FORMS[name][0]
    batch, M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    cols = 2 * N if epilogue and epilogue[0]["op"] == "gated" else N
    out = {"a": torch.randn(batch, M, K, generator=gen, device="cuda").bfloat16(),
           "b": (torch.randn(batch, K, cols, generator=gen, device="cuda") / K**0.5).bfloat16()}
    if any(op["op"] == "bias" for op in epilogue):
        out["bias"] = torch.randn(N, generator=gen, device="cuda").bfloat16()
    return out


@pytest.mark.parametrize("name", list(FORMS))
def test_batched_jax_grad_under_jit_and_shard_map(name: str, tmp_path_factory) -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mod = module(name, tmp_path_factory)
    fn = getattr(mod, f"{name}_jax")
    _, _, am, bm = FORMS[name]
    mesh = Mesh(jax.devices()[:1], ("x",))

    def to_jax(t: torch.Tensor):
        return jnp.asarray(t.float().cpu().numpy()).astype(jnp.bfloat16)

    def back(x) -> torch.Tensor:
        return torch.from_numpy(np.asarray(x.astype(jnp.float32))).cuda()

    for shape in SHAPES:
        args = data(name, shape)
        grad = torch.randn(*shape[:3], generator=torch.Generator(device="cuda").manual_seed(1), device="cuda").bfloat16()
        stored = [to_jax(args["a"] if am == "k" else args["a"].mT), to_jax(args["b"].mT if bm == "k" else args["b"]),
                  *([to_jax(args["bias"])] if "bias" in args else [])]
        g_jax = to_jax(grad)

        def loss(*xs, g_jax=g_jax):
            return (fn(*xs).astype(jnp.float32) * g_jax.astype(jnp.float32)).sum()

        argnums = tuple(range(len(stored)))
        got = jax.jit(jax.grad(loss, argnums=argnums))(*stored)
        specs = (P("x"), P("x"), *([P()] if "bias" in args else []))
        sharded = jax.jit(jax.shard_map(jax.grad(loss, argnums=argnums), mesh=mesh, in_specs=specs,
                                        out_specs=specs))(*stored)
        s = spec(name)  # the batched op as test_training_cute_batch_gpu.py's forward runs it
        want, theirs = grads(s, args, grad, torch.float64), grads(s, args, grad, torch.bfloat16)
        for (n, w), g, s, x in zip(want.items(), got, sharded, stored, strict=True):
            where = f"{name} d{n} at {shape}"
            assert g.shape == x.shape and g.dtype == x.dtype and s.shape == x.shape, where
            t = back(g)
            t = t.mT if (n == "a" and am != "k") or (n == "b" and bm == "k") else t
            assert not t.isnan().any(), where
            within(t, w, theirs[n], where)
            assert bool(jnp.array_equal(g, s)), f"{where}: shard_map's gradient differs from jit's"


# An fp8 forward (rowwise scales first, then a bias and GELU-tanh, or ReLU alone; both K-major): jax.grad gives dA and dB,
# the gradients of the dequantized A sa and B sb, in the output's dtype (bf16) in A's and B's stored shapes, the bias
# U's column sum (over every batch's rows), the scales zeros; within 2e-2 of the largest float64 gradient (the torch
# fp8 GPU tests' bound). Unbatched and batched (the scales shared by the batches).
FP8_FORMS = {"gjf8_pre": ("fp8_e4m3", "fp8_e4m3", "preact", True, "gelu_tanh", False),
             "gjf8_rec": ("fp8_e4m3", "fp8_e5m2", "recompute", False, "relu", False),
             "gjf8_rec_b": ("fp8_e4m3", "fp8_e5m2", "recompute", False, "relu", True),
             "gjf8_pre_b": ("fp8_e4m3", "fp8_e4m3", "preact", True, "gelu_tanh", True)}
FP8_SHAPES = [(3, 200, 100, 72), (1, 1, 264, 40)]


def fp8_spec(name: str) -> dict:
    a, b, save, bias, act, batch = FP8_FORMS[name]
    return {"name": name, "kind": "gemm", "batch": batch, "a": {"dtype": a, "major": "k"}, "b": {"dtype": b, "major": "k"},
            "out": {"dtype": "bf16"}, "targets": ["cute:sm90"], "tile": {"m": 128, "n": 128, "k": 128},
            "schedule": {"persistent": True}, "training": {"save": save},
            "epilogue": [{"op": "scale", "by": "rowcol"}] + ([{"op": "bias", "dtype": "bf16"}] if bias else [])
            + [{"op": "activation", "fn": act}]}


def relu_slack(a64: torch.Tensor, b64: torch.Tensor, deq_a: torch.Tensor, deq_b: torch.Tensor, dout: torch.Tensor,
               has_bias: bool) -> list:
    """What ReLU's step may move each gradient by where the fp8 tensor core's accumulator cannot tell pre's sign: Hopper's
    fp8 wgmma keeps about 13-14 bits of the sum, and without a bias a sum of 72 exact fp8 products often nearly cancels
    (round 2 of session 34: dA off by 0.6405 at a scale of 3.615; a 13-bit accumulator on the CPU, from the same data:
    3 mask flips, 0.6377). An element whose
    float64 sum is within 2^-9 of its terms' magnitudes may take either mask value: its dOut's contribution to dA's row,
    dB's column and the bias is allowed (each gradient's slack, in the reference's layout: dA, dB (K, N), dbias)."""
    acc = a64 @ b64.mT
    unsure = (acc.abs() <= 2.0**-9 * (a64.abs() @ b64.abs().mT)).double() * dout.abs()
    out = [unsure @ deq_b.abs().mT, deq_a.abs().mT @ unsure, None, None]
    return out + ([unsure.reshape(-1, unsure.shape[-1]).sum(0)] if has_bias else [])


@pytest.mark.parametrize("name", list(FP8_FORMS))
def test_fp8_jax_grad_under_jit_and_shard_map(name: str, tmp_path_factory) -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P
    from kernels import load_target_module

    a_dt, b_dt, _, has_bias, act, batched = FP8_FORMS[name]
    if name not in _MODULES:
        _MODULES[name] = load_target_module(fp8_spec(name), "cute:sm90", tmp_path_factory.mktemp(name),
                                            "_specgen_cute_jax_fp8_train_")[0]
    fn = getattr(_MODULES[name], f"{name}_jax")
    jd = {"fp8_e4m3": jnp.float8_e4m3fn, "fp8_e5m2": jnp.float8_e5m2}
    mesh = Mesh(jax.devices()[:1], ("x",))
    for batch, M, N, K in FP8_SHAPES:
        lead = (batch,) if batched else ()
        gen = torch.Generator().manual_seed(batch + M + N + K)
        a = jnp.asarray(torch.randn(lead + (M, K), generator=gen).numpy()).astype(jd[a_dt])
        b = jnp.asarray(torch.randn(lead + (N, K), generator=gen).numpy()).astype(jd[b_dt])
        sa = jnp.asarray((torch.rand(M, generator=gen) / 10 + 0.05).numpy())
        sb = jnp.asarray((torch.rand(N, generator=gen) / 10 + 0.05).numpy())
        args = [a, b, sa, sb] + ([jnp.asarray(torch.randn(N, generator=gen).numpy()).astype(jnp.bfloat16)] if has_bias else [])
        dout = jnp.asarray(torch.randn(lead + (M, N), generator=gen).numpy()).astype(jnp.bfloat16)

        def loss(*xs, dout=dout):
            return (fn(*xs).astype(jnp.float32) * dout.astype(jnp.float32)).sum()

        argnums = tuple(range(len(args)))
        got = jax.jit(jax.grad(loss, argnums=argnums))(*args)
        specs = (P("x") if batched else P(), P("x") if batched else P(), P(), P(), *([P()] if has_bias else []))
        sharded = jax.jit(jax.shard_map(jax.grad(loss, argnums=argnums), mesh=mesh, in_specs=specs,
                                        out_specs=specs))(*args)

        def t64(x) -> torch.Tensor:
            return torch.from_numpy(np.asarray(x.astype(jnp.float32))).double()

        deq_a = (t64(a) * t64(sa)[:, None]).requires_grad_()
        deq_b = (t64(b).mT * t64(sb)).requires_grad_()
        bias64 = t64(args[4]).requires_grad_() if has_bias else None
        v = deq_a @ deq_b + (bias64 if has_bias else 0)
        ACTS[act](v).backward(t64(dout))
        want = [deq_a.grad, deq_b.grad.mT, None, None] + ([bias64.grad] if has_bias else [])
        # ReLU (a step): the elements the fp8 accumulator cannot place either side of 0 may move a gradient
        slack = relu_slack(t64(a), t64(b), deq_a.detach(), deq_b.detach(), t64(dout), has_bias) if act == "relu" else None
        if slack is not None:
            slack[1] = slack[1].mT  # dB in its stored layout
        failures = []
        for i, (g, s, w, x) in enumerate(zip(got, sharded, want, args, strict=True)):
            where = f"{name} grad {i} at {(batch, M, N, K)}"
            assert g.shape == x.shape and s.shape == x.shape, where
            if w is None:  # a scale: no gradient
                assert not bool(jnp.any(g)), where
                continue
            assert g.dtype == jnp.bfloat16, where
            t = t64(g)
            assert not t.isnan().any(), where
            scale = w.abs().max().item()
            over = (t - w).abs() - (slack[i] if slack is not None else 0)  # past what a ReLU tie may move
            err = over.max().item()
            # where it is off (a failure's message): the error per batch, and the rows and columns past 2e-2
            bad = (over > 2e-2 * scale).nonzero()
            per_batch = [round(over[j].max().item(), 4) for j in range(batch)] if batched else []
            if err > 2e-2 * scale:  # every gradient's verdict in the message, then the assertion
                failures.append(f"{where}: {err:.4g} > 2e-2 x {scale:.4g}; per batch {per_batch}; {len(bad)} elements "
                                f"off, first {bad[:4].tolist()}, last {bad[-4:].tolist()}")
            assert bool(jnp.array_equal(g, s)), f"{where}: shard_map's gradient differs from jit's"
        assert not failures, "\n".join(failures)


# The other chains (unbatched; test_training_cute_chain_gpu.py's specs, data, float64 reference and eager bound): jax.grad
# under jax.jit and a one-device shard_map gives dA, dB (stored layouts) and every array argument's gradient (a runtime
# scalar is compiled in: no gradient) within twice eager bf16's error of float64 autograd.
CHAIN_CASES = [("col_gelu_res", "preact"), ("biasm_rowcol_cast", "recompute"), ("alpha_clamp_res_row", "preact"),
               ("res_biasm", "preact")]
CHAIN_SHAPES = [(200, 136, 96), (1, 264, 72)]


@pytest.mark.parametrize(("chain", "save"), CHAIN_CASES, ids=[f"{c}-{s}" for c, s in CHAIN_CASES])
def test_chain_jax_grad_under_jit_and_shard_map(chain: str, save: str, tmp_path_factory) -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    from gpu.test_training_chain_gpu import eager
    from gpu.test_training_cute_chain_gpu import data as chain_data
    from gpu.test_training_cute_chain_gpu import module as chain_module
    from gpu.test_training_cute_chain_gpu import reference as chain_reference
    from gpu.test_training_cute_chain_gpu import spec as chain_spec

    s = chain_spec(chain, save)
    fn = getattr(chain_module(s, tmp_path_factory), f"{s['name']}_jax")
    mesh = Mesh(jax.devices()[:1], ("x",))
    jd = {torch.bfloat16: jnp.bfloat16, torch.float32: jnp.float32, torch.float16: jnp.float16}
    for shape in CHAIN_SHAPES:
        args = chain_data(s, shape)
        grad = torch.randn(shape[0], shape[1], generator=torch.Generator(device="cuda").manual_seed(2),
                           device="cuda").bfloat16()
        names = list(args)
        scalars = {n: v for n, v in args.items() if not isinstance(v, torch.Tensor)}
        arrays = [n for n in names if n not in scalars]
        stored = [jnp.asarray((args[n].t() if n == "b" else args[n]).float().cpu().numpy()).astype(jd[args[n].dtype])
                  for n in arrays]  # b: the (N, K) weight, as the JAX entry stores it
        g_jax = jnp.asarray(grad.float().cpu().numpy()).astype(jnp.bfloat16)

        def loss(*xs, g_jax=g_jax, arrays=arrays, scalars=scalars, names=names):
            given = dict(zip(arrays, xs, strict=True)) | scalars
            return (fn(*(given[n] for n in names)).astype(jnp.float32) * g_jax.astype(jnp.float32)).sum()

        argnums = tuple(range(len(stored)))
        got = jax.jit(jax.grad(loss, argnums=argnums))(*stored)
        specs = tuple(P() for _ in stored)
        sharded = jax.jit(jax.shard_map(jax.grad(loss, argnums=argnums), mesh=mesh, in_specs=specs,
                                        out_specs=specs))(*stored)
        _, want = chain_reference(s, args, grad)
        theirs = eager(s, args, grad)
        for n, g, sh, x in zip(arrays, got, sharded, stored, strict=True):
            where = f"{s['name']} d{n} at {shape}"
            assert g.shape == x.shape and g.dtype == x.dtype, where
            t = torch.from_numpy(np.asarray(g.astype(jnp.float32))).cuda()
            t = t.t() if n == "b" else t
            assert not t.isnan().any(), where
            within(t, want[n], theirs[n], where)
            assert bool(jnp.array_equal(g, sh)), f"{where}: shard_map's gradient differs from jit's"


# A batched chain (session 35; test_training_cute_batch_gpu.py's "chain": a bias along m, a batched residual, silu, a
# column scale), preact and recompute: jax.grad under jax.jit and inside a one-device jax.shard_map (the batch sharded,
# the vectors replicated) gives dA, dB and the residual's gradient per batch, the row bias's and the column scale's over
# every batch's rows, within twice eager bf16's error of float64 autograd; shard_map's the same bits as jit's.
BATCH_CHAIN_SAVES = ["preact", "recompute"]


@pytest.mark.parametrize("save", BATCH_CHAIN_SAVES)
def test_batched_chain_jax_grad_under_jit_and_shard_map(save: str, tmp_path_factory) -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    from gpu.test_training_cute_batch_gpu import data as batch_data
    from gpu.test_training_cute_batch_gpu import module as batch_module
    from gpu.test_training_cute_batch_gpu import spec as batch_spec

    s = batch_spec("chain", save)
    fn = getattr(batch_module(s, tmp_path_factory), f"{s['name']}_jax")
    mesh = Mesh(jax.devices()[:1], ("x",))
    jd = {torch.bfloat16: jnp.bfloat16, torch.float32: jnp.float32}
    for shape in SHAPES:
        args = batch_data(s, shape, seed=sum(shape))
        grad = torch.randn(*shape[:3], generator=torch.Generator(device="cuda").manual_seed(3), device="cuda").bfloat16()
        # b: each batch's (N, K) weight, as the JAX entry stores it; the vectors 1-D, the residual (batch, M, N)
        stored = [jnp.asarray((t.mT if n == "b" else t).float().cpu().numpy()).astype(jd[t.dtype]) for n, t in args.items()]
        g_jax = jnp.asarray(grad.float().cpu().numpy()).astype(jnp.bfloat16)

        def loss(*xs, g_jax=g_jax):
            return (fn(*xs).astype(jnp.float32) * g_jax.astype(jnp.float32)).sum()

        argnums = tuple(range(len(stored)))
        got = jax.jit(jax.grad(loss, argnums=argnums))(*stored)
        specs = tuple(P("x") if x.ndim == 3 else P() for x in stored)
        sharded = jax.jit(jax.shard_map(jax.grad(loss, argnums=argnums), mesh=mesh, in_specs=specs,
                                        out_specs=specs))(*stored)
        want, theirs = grads(s, args, grad, torch.float64), grads(s, args, grad, torch.bfloat16)
        for (n, w), g, sh, x in zip(want.items(), got, sharded, stored, strict=True):
            where = f"{s['name']} d{n} at {shape}"
            assert g.shape == x.shape and g.dtype == x.dtype and sh.shape == x.shape, where
            t = torch.from_numpy(np.asarray(g.astype(jnp.float32))).cuda()
            t = t.mT if n == "b" else t
            assert not t.isnan().any(), where
            within(t, w, theirs[n], where)
            assert bool(jnp.array_equal(g, sh)), f"{where}: shard_map's gradient differs from jit's"
