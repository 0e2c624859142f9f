"""What the backward's fused epilogue costs over the plain GEMM it rides on (issue 38: "the backward's fused epilogue
costing <= 3% over the plain GEMM it rides on"), with the project's paired CUPTI timer (kernel_cycle: every call
once a round, rotating order, L2 flushed before each; per-round ratios) and an A/A pair of the plain GEMM.

    python3 gpu/bench_backward_epilogue.py [--shape 4096x14336x4096 ...] [--rounds 20] [--json out.json] [--against DIR]

The fused epilogue is the recompute kernel's (save = "recompute": G = dOut * act'(A @ B + bias), dOut read as a
matrix operand at each output tile, G stored in the operands' dtype). Its plain GEMM is the same module's
epilogue-free backward kernel (the dgrad kernel: C = X @ Y) launched with the recompute role's tile, warps and
stages on the same A, B and a C of G's shape, stored by masked pointer stores (no TMA store: as recompute stored G
until session 34, which stores it by TMA boxes: --variants times the plain GEMM both ways).
Both go through the module's own launch path (specgen.runtime.triton.training.gemm: the TMA form, persistent).
- gelu: linear_gelu_train_recompute_bf16 (bias + GELU-tanh), an M x N x K GEMM.
- gated: mlp_up_swiglu_train_recompute_bf16 (SwiGLU, halves): the recompute GEMM reads gate and up tiles of B
  (K, 2N) and stores G (M, 2N); its plain GEMM is M x 2N x K with the role's tile twice as wide (BLOCK_Q x 2: each
  program covers the same output columns).
--against DIR (the Triton design): DIR holds another tree's generated module of each layer under its file name
(main's, say, beside a branch that changes the template): its recompute kernel ("before", its own shipped knobs) runs
in the same kernel_cycle as this tree's and an A/A of this tree's; reported: fused_over_before beside
fused_aa_over_fused (the A/A's noise), both G's against float32, and whether the two G's are equal bit for bit.
With save = "preact" there is no fused backward epilogue: G and dbias come from the separate columns pass
(`grad_cols`), whose time bench/train_step.py reports per kernel.

--design cute (the CuTe sm90 design; --design triton, the default, is the above): the recompute kernel of a module
rendered here with save = "recompute" (bench/train_step.py's render_cute_module: gelu, specs/training.toml's
linear_gelu_train_cute_bf16 spec; gated, train_step.py's GATED_CUTE, a 128x128x64 gated tile over B's gate and up
columns), against the same module's epilogue-free kernel (its dgrad role: C = X @ Y stored through SMEM by TMA)
traced at the recompute role's config (tile, stages, epilogue stages, warpgroups, cluster; gated: tile_n twice the
recompute's, each CTA covering the same output columns, the same SMEM) under the key CUTE_PLAIN, with A and B in
the recompute's majors: a Config row of the module's TRAIN_CONFIGS, launched by its own `_gemm`. Beside them, cuBLAS
(torch.mm) over the same (M, width N, K). Every output is NaN-poisoned, then checked against a float32 reference
(plain: A @ B; fused: G from dOut and the f32 pre, by autograd). The recompute's G is stored by TMA (gelu) or
element by element (gated: G's halves pairs), so the gated ratio includes that store's cost against a TMA store.
`--compile-only` (no GPU) compiles both kernels of each layer into the CuTe disk cache (SPECGEN_CUTE_CACHE).

--variants (the Triton design, issue 38's "<= 3%"): the recompute kernel's variants side by side in one
kernel_cycle (VARIANTS: its epilogue knobs, templates/gemm/triton/recompute.jinja: EPI_SPLIT column subtiles, dOut
by TMA, G stored by TMA, the first dOut subtile before the K loop; and its tile, warps and stages), each variant's G
checked against a float32 G (NaN-poisoned first); beside them the plain GEMM (the dgrad kernel) at every launch
config the variants use, with pointer stores (as before) and with TMA stores ("plain_tma"), and an A/A pair of the
shipped config's plain GEMM. Ratios per round over the shipped config's plain GEMM (pointer stores: the figure
docs/training/measurements.md reports), over the variant's own config's plain GEMM, and over its TMA-store plain GEMM.
`--variants --compile-only` (no GPU): each variant's recompute kernel compiled for sm_90 with the Triton here
(registers, spills, SMEM), as specgen compile does, so a variant that cannot fit is known before a GPU run.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specgen.bench.timing import kernel_cycle
from specgen.runtime.triton import training as tr


def layer(name: str):
    if name == "gelu":
        from generated.triton import linear_gelu_train_recompute_bf16 as module
    else:
        from generated.triton import mlp_up_swiglu_train_recompute_bf16 as module
    return module


def g_reference(ab: torch.Tensor, bias, grad: torch.Tensor, gated: bool) -> torch.Tensor:
    """G by autograd from pre = A @ B (`ab`, in its precision) + bias (gated: SiLU(gate) * up over the halves, G =
    [dgate | dup]; the bias after the gate plays no part), for the output's gradient `grad`."""
    import torch.nn.functional as F

    pre = (ab if gated else ab + bias.to(ab.dtype)).requires_grad_()
    if gated:
        gate, up = pre.chunk(2, dim=-1)
        act = F.silu(gate) * up
    else:
        act = F.gelu(pre, approximate="tanh")
    return torch.autograd.grad(act, pre, grad.to(ab.dtype))[0]


def layer_inputs(M: int, N: int, K: int, width: int) -> tuple[torch.Tensor, ...]:
    """a (M, K), b (K, width N) K-major (an nn.Linear (out, in) weight's w.t(): what the op is called with), the
    bias (N,) and the output's gradient (M, N), bf16 on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(width * N, K, generator=gen, device="cuda") / K**0.5).bfloat16()
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    return a, w.t(), bias, grad


def module_from(path: Path, name: str):
    """The generated module at `path` (another tree's: main's file copied, say), imported as generated.triton.`name`
    (its relative import of its spec resolves in this tree)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"generated.triton.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def measure(name: str, M: int, N: int, K: int, rounds: int, against: Path | None = None) -> dict:
    """The recompute kernel against its plain GEMM (and an A/A of that); `against`: a folder holding another tree's
    module of this layer, whose recompute kernel (its own shipped knobs) runs in the same kernel_cycle as "before",
    beside an A/A of this tree's ("fused_aa"), its G compared bit for bit with this tree's."""
    module = layer(name)
    kernel = module.METADATA["kernel"]
    gated = "halves" if name == "gated" else ""
    width = 2 if gated else 1
    a, b, bias, grad = layer_inputs(M, N, K, width)
    g = torch.full((M, width * N), float("nan"), device="cuda", dtype=torch.bfloat16)
    c, c_aa = torch.empty_like(g), torch.empty_like(g)
    device = a.get_device()
    tiles, configs = module.BACKWARD_TILES["recompute"], module.BACKWARD_CONFIGS["recompute"]
    plain_tiles = {**tiles, "BLOCK_Q": tiles["BLOCK_Q"] * width}
    fused_args = (grad, bias) if not gated else (grad,)

    def fused_by(mod, out):
        def run():
            tr.gemm(kernel, mod._BACKWARD_KERNELS["recompute"], mod.BACKWARD_CONFIGS["recompute"],
                    mod.BACKWARD_TILES["recompute"], device, a, b, out, fused_args, grad.stride(), False, True, gated=gated,
                    epilogue=mod.RECOMPUTE_EPILOGUE)
        return run

    fused = fused_by(module, g)

    def plain(out):
        def run():  # the dgrad kernel's store path, with its TMA store off (tr.TMA_STORES): recompute's pointer stores
            tr.TMA_STORES = False
            try:
                tr.gemm(kernel, module._BACKWARD_KERNELS["dgrad"], configs, plain_tiles, device, a, b, out, (), (), True,
                        True)
            finally:
                tr.TMA_STORES = True
        return run

    calls = {"plain": plain(c), "plain_aa": plain(c_aa), "fused": fused}
    if against is not None:
        before = module_from(against / f"{module.__name__.rsplit('.', 1)[1]}.py", f"_before_{kernel}")
        g_before, g_aa = torch.full_like(g, float("nan")), torch.full_like(g, float("nan"))
        calls |= {"before": fused_by(before, g_before), "fused_aa": fused_by(module, g_aa)}
    for fn in calls.values():
        fn()
    torch.cuda.synchronize()
    ref = (a.float() @ b.float()).bfloat16()
    plain_err = ((c.float() - ref.float()).abs().max() / ref.float().abs().max()).item()  # the comparator computes A @ B
    g_ref = g_reference(a.float() @ b.float(), bias, grad, bool(gated))
    errs = {"fused": g} | ({"before": g_before, "fused_aa": g_aa} if against is not None else {})
    g_err = {k: ((v.float() - g_ref).abs().max() / g_ref.abs().max()).item() for k, v in errs.items()}  # NaN: unwritten
    del g_ref
    res = kernel_cycle(calls, rounds=rounds)
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}

    def over(k, base):
        return statistics.median(s / p for s, p in zip(res[k]["samples"], res[base]["samples"], strict=True))

    paired = {k: over(k, "plain") for k in calls if k != "plain"}
    flops = 2 * M * width * N * K
    report = {"layer": name, "kernel": kernel, "shape": [M, N, K], "rounds": rounds,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__, "tile": tiles, "config": configs,
              "median_us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
              "paired_time_over_plain": paired, "fused_overhead_pct": 100 * (paired["fused"] - 1),
              "plain_rel_err_vs_f32": plain_err, "g_rel_err_vs_f32": g_err}
    if against is not None:  # this tree's over the other's, beside the A/A of this tree's kernel with itself
        report |= {"against": str(against), "fused_over_before": over("fused", "before"),
                   "fused_aa_over_fused": over("fused_aa", "fused"), "g_equals_before": bool(torch.equal(g, g_before))}
    print(json.dumps(report, indent=1))
    return report


# The recompute kernel's variants (--variants): (epilogue knobs over the module's RECOMPUTE_EPILOGUE, tile over
# BACKWARD_TILES["recompute"], launch config over BACKWARD_CONFIGS["recompute"]) by layer; "shipped" is the module's.
# The session-34 record (bench/results/2026-11-29-h200-s34-recompute-variants-*) ran them over the configs shipped
# before it (gelu 256 x 128 x 3 stages, gated 128 x 64 x 4, every knob off); since then the module ships its winners
# (gelu t128x256_split4_dtma_gtma_fact, gated t128x128_s3_split2_dtma_gtma), which the overrides now start from.
_KNOBS = {"": {}, "split2": {"EPI_SPLIT": 2}, "split4": {"EPI_SPLIT": 4}, "dtma": {"DOUT_TMA": True},
          "split2_dtma": {"EPI_SPLIT": 2, "DOUT_TMA": True}, "split4_dtma": {"EPI_SPLIT": 4, "DOUT_TMA": True},
          "split2_gtma": {"EPI_SPLIT": 2, "G_TMA": True}, "split2_dtma_gtma": {"EPI_SPLIT": 2, "DOUT_TMA": True, "G_TMA": True},
          "split4_dtma_gtma": {"EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True},
          "split4_dtma_early": {"EPI_SPLIT": 4, "DOUT_TMA": True, "DOUT_EARLY": True}}
_OFF = {"EPI_SPLIT": 1, "DOUT_TMA": False, "G_TMA": False, "DOUT_EARLY": False, "GELU_FACTORED": False}
VARIANTS = {
    "gelu": {
        "shipped": (None, {}, {}),
        **{k: ({**_OFF, **v}, {}, {}) for k, v in _KNOBS.items() if k},
        # 128 x 256: the forward's and dgrad's tile
        "t128x128_s4_split2_dtma": ({**_OFF, "EPI_SPLIT": 2, "DOUT_TMA": True}, {"BLOCK_P": 128, "BLOCK_Q": 128},
                                    {"num_stages": 4}),
        "t128x256_split4_dtma_gtma": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True},
                                      {"BLOCK_P": 128, "BLOCK_Q": 256}, {}),
        "s4_split4_dtma_gtma": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True}, {}, {"num_stages": 4}),
        # gelu_tanh's derivative factored (fewer f32 operations an element)
        "split2_fact": ({**_OFF, "EPI_SPLIT": 2, "GELU_FACTORED": True}, {}, {}),
        "split4_dtma_fact": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "GELU_FACTORED": True}, {}, {}),
        "split4_dtma_gtma_fact": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True, "GELU_FACTORED": True}, {}, {}),
        "split2_dtma_gtma_fact": ({**_OFF, "EPI_SPLIT": 2, "DOUT_TMA": True, "G_TMA": True, "GELU_FACTORED": True}, {}, {}),
        "t128x256_split4_dtma_gtma_fact": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True,
                                           "GELU_FACTORED": True}, {"BLOCK_P": 128, "BLOCK_Q": 256}, {}),
        # a program a tile (not persistent) on tiles small enough for two CTAs an SM: one's epilogue under the
        # other's mainloop
        "np_t128x128_w4_s3_split4_dtma_gtma_fact": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True,
                                                    "GELU_FACTORED": True}, {"BLOCK_P": 128, "BLOCK_Q": 128},
                                                   {"num_warps": 4, "num_stages": 3, "persistent": False}),
        "np_t128x128_w8_s3_split4_dtma_gtma_fact": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True,
                                                    "GELU_FACTORED": True}, {"BLOCK_P": 128, "BLOCK_Q": 128},
                                                   {"num_stages": 3, "persistent": False}),
        "np_t128x128_w4_s2_split2_dtma_gtma_fact": ({**_OFF, "EPI_SPLIT": 2, "DOUT_TMA": True, "G_TMA": True,
                                                    "GELU_FACTORED": True}, {"BLOCK_P": 128, "BLOCK_Q": 128},
                                                   {"num_warps": 4, "num_stages": 2, "persistent": False}),
        "np_split4_dtma_gtma_fact": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True, "GELU_FACTORED": True},
                                     {}, {"persistent": False}),
    },
    "gated": {
        "shipped": (None, {}, {}),
        **{k: ({**_OFF, **v}, {}, {}) for k, v in _KNOBS.items() if k},  # (FLATTEN: the module's, added by variant_launch)
        # 128 x 128 (the gate's and the up's: 128 x 256 of B a K step), 3 stages
        "t128x128_s3_split2_dtma_gtma": ({**_OFF, "EPI_SPLIT": 2, "DOUT_TMA": True, "G_TMA": True}, {"BLOCK_Q": 128},
                                         {"num_stages": 3}),
        "t128x128_s3_split4_dtma_gtma": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True}, {"BLOCK_Q": 128},
                                         {"num_stages": 3}),
        "t128x128_s4_split4_dtma_gtma": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True}, {"BLOCK_Q": 128},
                                         {"num_stages": 4}),
        # the persistent loop flattened (the next tile's loads under this one's epilogue, as the gelu kernel's)
        "flat": ({**_OFF, "FLATTEN": True}, {}, {}),
        "flat_split2_dtma_gtma": ({**_OFF, "EPI_SPLIT": 2, "DOUT_TMA": True, "G_TMA": True, "FLATTEN": True}, {}, {}),
        "flat_split4_dtma_gtma": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True, "FLATTEN": True}, {}, {}),
        "flat_split2_dtma": ({**_OFF, "EPI_SPLIT": 2, "DOUT_TMA": True, "FLATTEN": True}, {}, {}),
        "flat_t128x128_s3_split4_dtma_gtma": ({**_OFF, "EPI_SPLIT": 4, "DOUT_TMA": True, "G_TMA": True, "FLATTEN": True},
                                              {"BLOCK_Q": 128}, {"num_stages": 3}),
        # a program a tile (not persistent), two or more CTAs an SM
        "np_w4_s3_split2_dtma_gtma": ({**_OFF, "EPI_SPLIT": 2, "DOUT_TMA": True, "G_TMA": True}, {},
                                      {"num_warps": 4, "num_stages": 3, "persistent": False}),
        "np_s3_split2_dtma_gtma": ({**_OFF, "EPI_SPLIT": 2, "DOUT_TMA": True, "G_TMA": True}, {},
                                   {"num_stages": 3, "persistent": False}),
        "np_split2_dtma_gtma": ({**_OFF, "EPI_SPLIT": 2, "DOUT_TMA": True, "G_TMA": True}, {}, {"persistent": False}),
    },
}


def variant_launch(module, name: str, layer_name: str):
    """(knobs, tiles, per-capability configs, persistent) of variant `name` of the layer's recompute kernel (a
    config's "persistent": False launches a program a tile, so an SM holds as many CTAs as fit, where the shipped
    launch runs one program an SM)."""
    knobs, tile, config = VARIANTS[layer_name][name]
    config = dict(config)
    persistent = config.pop("persistent", True)
    tiles = {**module.BACKWARD_TILES["recompute"], **tile}
    configs = {cc: {**c, **config} for cc, c in module.BACKWARD_CONFIGS["recompute"].items()}
    shipped = dict(module.RECOMPUTE_EPILOGUE)
    # a knob the module has and the variant leaves out (FLATTEN: the gated kernel's) keeps the module's value
    return ({**shipped, **{k: v for k, v in knobs.items() if k in shipped}} if knobs is not None else shipped), tiles, configs, \
        persistent


def measure_variants(name: str, M: int, N: int, K: int, rounds: int, only: list[str]) -> dict:
    """The recompute kernel's variants and the plain GEMMs at their launch configs, in one kernel_cycle."""

    module = layer(name)
    kernel = module.METADATA["kernel"]
    gated = "halves" if name == "gated" else ""
    width = 2 if gated else 1
    a, b, bias, grad = layer_inputs(M, N, K, width)
    device = a.get_device()
    fused_args = (grad, bias) if not gated else (grad,)
    names = [v for v in VARIANTS[name] if not only or v in only or v == "shipped"]
    launches = {v: variant_launch(module, v, name) for v in names}
    calls, outs, plains = {}, {}, {}

    def fused(knobs, tiles, configs, persistent, g):
        def run():
            tr.PERSISTENT = persistent
            try:
                tr.gemm(kernel, module._BACKWARD_KERNELS["recompute"], configs, tiles, device, a, b, g, fused_args,
                        grad.stride(), False, True, gated=gated, epilogue=knobs)
            finally:
                tr.PERSISTENT = True
        return run

    def plain(tiles, configs, persistent, out, tma):
        ptiles = {**tiles, "BLOCK_Q": tiles["BLOCK_Q"] * width}

        def run():
            tr.TMA_STORES, tr.PERSISTENT = tma, persistent
            try:
                tr.gemm(kernel, module._BACKWARD_KERNELS["dgrad"], configs, ptiles, device, a, b, out, (), (), True, True)
            finally:
                tr.TMA_STORES = tr.PERSISTENT = True
        return run

    def config_key(tiles, configs, persistent):
        cc = tr.capability(device)
        return (f"{tiles['BLOCK_P']}x{tiles['BLOCK_Q']}x{tiles['BLOCK_R']}_w{configs[cc]['num_warps']}"
                f"_s{configs[cc]['num_stages']}{'' if persistent else '_np'}")

    errors: dict[str, str] = {}

    def runs(label, fn) -> bool:
        """Whether `fn` runs (a kernel that does not fit the device, SMEM or registers, at this Triton raises at its
        first launch: reported under `label`, not timed)."""
        try:
            fn()
            torch.cuda.synchronize()
            return True
        except Exception as e:
            errors[label] = f"{type(e).__name__}: {e}"[:300]
            return False

    for v in names:
        knobs, tiles, configs, persistent = launches[v]
        key = config_key(tiles, configs, persistent)
        g = torch.full((M, width * N), float("nan"), device="cuda", dtype=torch.bfloat16)
        fn = fused(knobs, tiles, configs, persistent, g)
        if not runs(v, fn):
            continue
        calls[v], outs[v] = fn, g
        for tma in (False, True):
            pk = f"plain{'_tma' if tma else ''}@{key}"
            if pk not in plains and pk not in errors:
                p = plain(tiles, configs, persistent, torch.empty(M, width * N, device="cuda", dtype=torch.bfloat16), tma)
                if runs(pk, p):
                    plains[pk] = p
        if v == "shipped":
            shipped_key = key
            plains[f"plain_aa@{key}"] = plain(tiles, configs, persistent, torch.empty(M, width * N, device="cuda",
                                                                                      dtype=torch.bfloat16), False)
    g_ref = g_reference(a.float() @ b.float(), bias, grad, bool(gated))
    rel = {v: ((g.float() - g_ref).abs().max() / g_ref.abs().max()).item() for v, g in outs.items()}  # NaN: unwritten
    del g_ref
    res = kernel_cycle({**plains, **calls}, rounds=rounds)

    def over(k, base):  # NaN where the base did not run
        if base not in res:
            return float("nan")
        return statistics.median(s / p for s, p in zip(res[k]["samples"], res[base]["samples"], strict=True))

    base = f"plain@{shipped_key}"
    table = {}
    for v in calls:
        key = config_key(*launches[v][1:])
        table[v] = {"knobs": launches[v][0], "config": key, "us": statistics.median(res[v]["samples"]),
                    "over_shipped_plain": over(v, base), "over_own_plain": over(v, f"plain@{key}"),
                    "over_own_plain_tma": over(v, f"plain_tma@{key}"), "rel_err_vs_f32": rel[v]}
    report = {"layer": name, "kernel": kernel, "shape": [M, N, K], "rounds": rounds,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__, "variants": table,
              "plain_us": {k: statistics.median(res[k]["samples"]) for k in plains},
              "plain_over_shipped_plain": {k: over(k, base) for k in plains}, "aa": over(f"plain_aa@{shipped_key}", base),
              "errors": errors}
    print(f"{name} {M}x{N}x{K}: A/A {report['aa']:.3f}; plain " + ", ".join(
        f"{k} {u:.1f} us" for k, u in report["plain_us"].items()), flush=True)
    for v, r in sorted(table.items(), key=lambda kv: kv[1]["over_shipped_plain"]):
        print(f"  {v:24s} {r['config']:22s} {r['us']:8.1f} us  / shipped plain {r['over_shipped_plain']:.3f}  / own plain "
              f"{r['over_own_plain']:.3f}  / own plain TMA {r['over_own_plain_tma']:.3f}  err {r['rel_err_vs_f32']:.2e}",
              flush=True)
    for v, e in errors.items():
        print(f"  {v}: not run: {e}", flush=True)
    return report


def _cpu_launch(module, role: str, tiles: dict, configs: dict, knobs: dict, tma: bool, gated: str, tensors: tuple) -> None:
    """The recompute kernel (with `knobs`) or the plain GEMM (dgrad's kernel, TMA stores where `tma`) as
    measure_variants launches them, on CPU tensors (compile_variants records the launch)."""
    a, b, out, grad, bias = tensors
    kernel = module.METADATA["kernel"]
    tr.TMA_STORES = tma
    try:
        if role == "recompute":
            tr.gemm(kernel, module._BACKWARD_KERNELS[role], configs, tiles, -1, a, b, out, (grad,) if gated else (grad, bias),
                    grad.stride(), False, True, gated=gated, epilogue=knobs)
        else:
            tr.gemm(kernel, module._BACKWARD_KERNELS[role], configs, tiles, -1, a, b, out, (), (), True, True)
    finally:
        tr.TMA_STORES = True


def compile_variants(layers: list[str], only: list[str]) -> None:
    """Each variant's recompute kernel and its plain GEMMs (pointer and TMA stores) compiled for sm_90 with the Triton
    here, launched as measure_variants launches them (on small CPU tensors, the runtime's launch recorded): registers,
    spills, SMEM (over sm_90's 232,448 B: it will not launch)."""
    from specgen.kinds.gemm.designs.triton import compile_backward as cb
    from specgen.kinds.gemm.designs.triton.compile import timed_cubin
    from specgen.runtime import guards
    from specgen.targets import TARGETS

    target = TARGETS["triton:sm90"]
    limit = target.gpu.smem_per_block
    done: set[tuple] = set()

    def record(call) -> tuple:
        got = []
        saved = tr.launch, tr.config_for, guards.INTERPRET
        tr.launch = lambda name, jit, config, tiles, grid, args, bf16, per_matrix=False, **ce: got.append(
            (jit, config, args, {**tiles, **ce}))
        tr.config_for, guards.INTERPRET = (lambda name, configs, device: configs[90]), True
        try:
            call()
        finally:
            tr.launch, tr.config_for, guards.INTERPRET = saved
        (launch,) = got
        return launch

    for name in layers:
        module = layer(name)
        gated = "halves" if name == "gated" else ""
        width = 2 if gated else 1
        n = 256
        a = torch.zeros(n, n, dtype=torch.bfloat16)
        b = torch.zeros(width * n, n, dtype=torch.bfloat16).t()
        grad, bias = torch.zeros(n, n, dtype=torch.bfloat16), torch.zeros(n, dtype=torch.bfloat16)
        out = torch.zeros(n, width * n, dtype=torch.bfloat16)
        for v in VARIANTS[name]:
            if only and v not in only and v != "shipped":
                continue
            knobs, tiles, configs, _ = variant_launch(module, v, name)  # (persistence: the same kernel)
            ptiles = {**tiles, "BLOCK_Q": tiles["BLOCK_Q"] * width}
            for label, role, t, tma in ((v, "recompute", tiles, False), ("  plain", "dgrad", ptiles, False),
                                        ("  plain_tma", "dgrad", ptiles, True)):
                jit, config, args, constexprs = record(functools.partial(
                    _cpu_launch, module, role, t, configs, knobs, tma, gated, (a, b, out, grad, bias)))
                key = (jit.__name__, tuple(sorted(config.items())), tuple(sorted(constexprs.items())))
                if key in done:
                    continue
                done.add(key)
                row = cb._compile(label, jit, config, args, constexprs, target, 0, timed_cubin)
                smem = row.compiler_smem or 0
                print(f"{name:5s} {label:40s} SMEM {smem}{' (over sm_90: will not launch)' if smem > limit else ''}, "
                      f"registers {row.registers}, spills {row.spills.store_bytes if row.spills else '?'} B, "
                      f"{row.seconds:.1f} s{', ' + row.error if row.error else ''}", flush=True)


# The CuTe design's modules (rendered with save = "recompute"), and the key of its plain GEMM's config row.
CUTE_NAMES = {"gelu": "linear_gelu_train_recompute_cute_bench", "gated": "mlp_up_swiglu_train_recompute_cute_bench"}
CUTE_PLAIN = "dgrad@recompute_plain"


@functools.cache  # once a process: a module's import registers its torch ops
def cute_module(name: str):
    """The layer's CuTe sm90 module with save = "recompute" (gated: the one bench/train_step.py --layer gated_cute
    renders, so the disk cache serves both), its plain row (CUTE_PLAIN) added to TRAIN_CONFIGS."""
    import tomllib

    import bench.train_step as ts
    from bench.cute_train_tiles import smem

    if name == "gated":
        spec = ts.GATED_CUTE
    else:
        with open(Path(__file__).resolve().parents[1] / "specs" / "training.toml", "rb") as f:
            spec = next(k for k in tomllib.load(f)["kernels"] if k["name"] == "linear_gelu_train_cute_bf16")
    m = ts.render_cute_module(spec, CUTE_NAMES[name], "recompute")
    cfg = m.TRAIN_CONFIGS["recompute"]
    # the epilogue-free kernel at the recompute's config; gated: B's 2N columns as one plain GEMM, tile_n doubled
    plain = cfg._replace(role="dgrad", tile_n=cfg.tile_n * (2 if name == "gated" else 1))
    m.TRAIN_CONFIGS[CUTE_PLAIN] = plain._replace(smem_bytes=smem(plain))
    return m


def measure_cute(name: str, M: int, N: int, K: int, rounds: int) -> dict:

    m = cute_module(name)
    gated = name == "gated"
    width = 2 if gated else 1
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(width * N, K, generator=gen, device="cuda") / K**0.5).bfloat16()  # nn.Linear's (out, in)
    b = w.t()  # (K, width N), K-major: what the op is called with
    bias = None if gated else torch.randn(N, generator=gen, device="cuda").bfloat16()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    g, c, c_aa, c_cublas = (torch.full((M, width * N), float("nan"), device="cuda", dtype=torch.bfloat16)
                            for _ in range(4))
    x, y = m._operands("recompute", a, b)  # as _backward passes them
    xp, yp = m._operands(CUTE_PLAIN, a, b)
    dout = m._tr.tma_ready(grad, 1)
    fused_args = () if gated else (m._vector(bias),)

    def fused():
        m._gemm("recompute", x, y, g, dout, *fused_args)

    def plain(out):
        return lambda: m._gemm(CUTE_PLAIN, xp, yp, out)

    calls = {"plain": plain(c), "plain_aa": plain(c_aa), "fused": fused,
             "cublas": lambda: torch.mm(a, b, out=c_cublas)}
    for fn in calls.values():
        fn()
    torch.cuda.synchronize()
    # float32 references: the product, and G from dOut and the f32 pre by autograd (halves: [dgate | dup])
    ref = a.float() @ b.float()
    g_ref = g_reference(ref, bias, grad, gated)

    def rel(got, want):
        return ((got.float() - want).abs().max() / want.abs().max()).item()  # NaN (unwritten) propagates

    errors = {"plain": rel(c, ref), "plain_aa": rel(c_aa, ref), "cublas": rel(c_cublas, ref), "fused": rel(g, g_ref)}
    del ref, g_ref
    res = kernel_cycle(calls, rounds=rounds)
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}
    per_round = {k: [s / p for s, p in zip(res[k]["samples"], res["plain"]["samples"], strict=True)]
                 for k in ("fused", "plain_aa", "cublas")}
    paired = {k: statistics.median(v) for k, v in per_round.items()}
    flops = 2 * M * width * N * K
    report = {"design": "cute_sm90", "layer": name, "module": CUTE_NAMES[name], "shape": [M, N, K], "rounds": rounds,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cutlass_dsl": __import__("importlib.metadata").metadata.version("nvidia-cutlass-dsl"),
              "config": {"recompute": m.TRAIN_CONFIGS["recompute"]._asdict(), "plain": m.TRAIN_CONFIGS[CUTE_PLAIN]._asdict()},
              "median_us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
              "kernels_us": {k: v["kernels"] for k, v in res.items()},
              "paired_time_over_plain": paired, "per_round_time_over_plain": per_round,
              "fused_overhead_pct": 100 * (paired["fused"] - 1), "rel_err_vs_f32": errors}
    print(json.dumps({k: v for k, v in report.items() if k != "per_round_time_over_plain"}, indent=1), flush=True)
    return report


def compile_cute(layers: list[str]) -> None:
    """Both kernels of each layer's CuTe module into the disk cache (no GPU needed), each with the compiler's SMEM
    beside the plan's, registers, spills and its TMA / wgmma SASS counts (specgen compile's per-config hook)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import compile_config
    from specgen.targets import TARGETS

    bad = 0
    for name in layers:
        m = cute_module(name)
        for key in ("recompute", CUTE_PLAIN):
            r = compile_config(m._train_launcher, CUTE_NAMES[name], key, TARGETS["cute:sm90"],
                               m.TRAIN_CONFIGS[key].smem_bytes, True, True)
            wrong = bool(r.error) or r.compiler_smem != r.plan_smem
            bad += wrong
            print(f"{'FAILED' if wrong else 'compiled'} {r.kernel}: {r.seconds:.1f} s, SMEM plan {r.plan_smem} compiler "
                  f"{r.compiler_smem}, registers {r.registers}, SASS {r.sass}{', cached' if r.cache else ''}"
                  f"{', ' + r.error if r.error else ''}", flush=True)
    if bad:
        raise SystemExit(f"{bad} kernels failed")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--design", choices=("triton", "cute"), default="triton")
    ap.add_argument("--layer", nargs="+", choices=("gelu", "gated"), default=["gelu", "gated"])
    ap.add_argument("--shape", nargs="+", default=["4096x14336x4096", "8192x8192x8192"], help="M x N x K")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--compile-only", action="store_true", help="cute: fill the CuTe disk cache, time nothing")
    ap.add_argument("--against", type=Path, default=None,
                    help="triton: a folder with another tree's module of each layer (its file name), timed beside this one's")
    ap.add_argument("--variants", nargs="*", default=None,
                    help="triton: the recompute kernel's variants side by side (names from VARIANTS; none: all)")
    args = ap.parse_args()
    if args.variants is not None:
        if args.design != "triton":
            ap.error("--variants is for --design triton")
        if args.compile_only:
            compile_variants(args.layer, args.variants)
            return
        reports = [measure_variants(name, *map(int, shape.split("x")), args.rounds, args.variants)
                   for name in args.layer for shape in args.shape]
        if args.json:
            with open(args.json, "w") as f:
                json.dump(reports, f, indent=1)
        return
    if args.compile_only:
        if args.design != "cute":
            ap.error("--compile-only is for --design cute")
        compile_cute(args.layer)
        return
    if args.against and args.design != "triton":
        ap.error("--against is for --design triton")
    fn = measure_cute if args.design == "cute" else functools.partial(measure, against=args.against)
    reports = [fn(name, *map(int, shape.split("x")), args.rounds) for name in args.layer for shape in args.shape]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)


if __name__ == "__main__":
    main()
