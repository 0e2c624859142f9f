"""The Triton GEMM design: its SMEM layout, its plan, its render, and (lazily) its compile hook.

One generated module serves all of a spec's Triton targets: the kernel source is the same for sm90
and sm100, and the launcher picks the per-arch launch config (`configs`) by the device's compute
capability.

SMEM: each stage holds one A tile and one B tile. The persistent TMA kernel also keeps the output
tile staged for its TMA store (half of it with `epilogue_subtile`) alive beside the pipeline; the
plain kernel's epilogue layout conversion reuses the pipeline buffers once the K loop ends. Triton
itself keeps no barrier reserve worth counting (a few 8-byte mbarriers per stage).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from specgen import __version__
from specgen.envelope.budget import MemoryBudget, ab_stage_bytes
from specgen.spec.dtypes import DType
from specgen.spec.load import LoadedSpec
from specgen.spec.models import GemmSpec, Target
from specgen.targets import Backend, TargetInfo

if TYPE_CHECKING:
    from specgen.resolve import Resolved


class TritonGemm:
    kind = "gemm"
    backend = Backend.triton
    compile_hook = "specgen.designs.gemm_triton_compile:compile_module"

    def memory(self, spec: GemmSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        gpu = target.gpu
        assert gpu is not None
        t = spec.tile
        if spec.triton.tma:
            epi = t.m * t.n * spec.out.dtype.bytes // (2 if spec.triton.epilogue_subtile else 1)
        else:
            epi = t.m * t.n * 4  # layout conversion scratch of the f32 accumulator, reusing A/B
        # Only a persistent TMA kernel keeps its store buffer alive beside the next tile's pipeline.
        overlaps = not (spec.triton.tma and spec.schedule.persistent)
        return MemoryBudget("SMEM", gpu.smem_per_block, 0, ab_stage_bytes(spec), ab_stages, epi,
                            epilogue_overlaps_ab=overlaps)

    def modules(self, spec: GemmSpec, targets: list[Target]) -> dict[str, list[Target]]:
        return {f"triton/{spec.name}.py": list(targets)}

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> dict[str, str]:
        from specgen.render.env import environment

        (rel,) = self.modules(loaded.spec, targets)
        context = triton_context(plan_triton(loaded, targets, resolved))
        return {rel: environment().get_template("triton/gemm.py.jinja").render(context)}


@dataclass(frozen=True)
class TritonArchConfig:
    arch: str
    compute_capability: int
    num_warps: int
    num_stages: int
    smem_bytes: int  # the plan's estimate; `specgen compile` prints it beside the compiler's figure
    smem_breakdown: str
    acc_registers: int


@dataclass(frozen=True)
class TensorArg:
    """A tensor (or scalar) the launcher takes, with what the guards check."""

    name: str
    role: str  # a, b, out, vec_m, vec_n, matrix, scalar
    dtype: DType
    torch_dtype: str
    triton_dtype: str
    doc: str


@dataclass(frozen=True)
class TritonPlan:
    name: str
    kernel_name: str
    spec_file: str
    spec_hash: str
    specgen_version: str
    description: str
    a: TensorArg
    b: TensorArg
    out: TensorArg
    a_major: str
    b_major: str
    acc_dtype: str  # triton.language name of the accumulator
    input_precision: str | None  # "tf32" / "ieee" for 32-bit operands, None otherwise
    batch: bool
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    raster_along_n: bool
    persistent: bool
    tma: bool
    epilogue_subtile: bool
    flatten: bool
    epilogue: list[dict[str, object]]
    args: list[TensorArg]  # epilogue runtime arguments, in chain order
    configs: list[TritonArchConfig]
    spec_json: dict[str, object]


def _tensor_arg(name: str, role: str, dtype: DType, doc: str) -> TensorArg:
    return TensorArg(name, role, dtype, dtype.info.torch, dtype.info.triton, doc)


def plan_triton(loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> TritonPlan:
    spec = loaded.spec
    configs = []
    for t in targets:
        r = resolved[str(t)]  # the numbers `check` proved: stages and budget come from one place
        assert r.info.backend is Backend.triton and r.info.compute_capability is not None
        configs.append(TritonArchConfig(t.arch, r.info.compute_capability, spec.triton.num_warps, r.ab_stages,
                                        r.budget.total, r.budget.breakdown(), r.acc_registers))
    a_dt = spec.a.dtype
    precision = ("tf32" if a_dt == DType.tf32 else "ieee") if a_dt.bytes == 4 else None
    batch_dims = "(batch, M, K)" if spec.batch else "(M, K)"
    return TritonPlan(
        name=spec.name,
        kernel_name=f"_{spec.name}_kernel",
        spec_file=loaded.file,
        spec_hash=loaded.spec_hash,
        specgen_version=__version__,
        description=spec.description,
        a=_tensor_arg("a", "a", a_dt, f"{batch_dims} {a_dt}, {spec.a.major}-major"),
        b=_tensor_arg("b", "b", spec.b.dtype, f"{'(batch, K, N)' if spec.batch else '(K, N)'} {spec.b.dtype}, "
                      f"{spec.b.major}-major"),
        out=_tensor_arg("out", "out", spec.out.dtype, f"{'(batch, M, N)' if spec.batch else '(M, N)'} {spec.out.dtype}, "
                        "row-major"),
        a_major=spec.a.major,
        b_major=spec.b.major,
        acc_dtype=spec.accumulator.info.triton,
        input_precision=precision,
        batch=spec.batch,
        block_m=spec.tile.m,
        block_n=spec.tile.n,
        block_k=spec.tile.k,
        group_m=spec.schedule.group_m,
        raster_along_n=spec.schedule.raster == "along_n",
        persistent=spec.schedule.persistent,
        tma=spec.triton.tma,
        epilogue_subtile=spec.triton.epilogue_subtile,
        flatten=spec.schedule.persistent and spec.triton.flatten,
        epilogue=[op.model_dump(mode="json") for op in spec.epilogue],
        args=[_tensor_arg(a.name, a.shape, a.dtype, a.doc) for a in spec.runtime_args()],
        configs=configs,
        spec_json=spec.model_dump(mode="json"),
    )


def _stride(param: str, var: str, dim: int, batch: bool = False) -> dict[str, object]:
    """A stride parameter: the kernel's name for it, and which dim of which tensor's stride() it is."""
    return {"param": param, "var": var, "dim": dim, "batch": batch}


def triton_context(p: TritonPlan) -> dict[str, object]:
    lead_a = -2 if p.a_major == "k" else -1
    lead_b = -1 if p.b_major == "k" else -2
    strides: list[dict[str, object]] = []
    if not p.tma:
        if p.batch:
            strides.append(_stride("stride_ab", "sa", 0, batch=True))
        strides.append(_stride("stride_a", "sa", lead_a))
        if p.batch:
            strides.append(_stride("stride_bb", "sb", 0, batch=True))
        strides.append(_stride("stride_b", "sb", lead_b))
        if p.batch:
            strides.append(_stride("stride_ob", "so", 0, batch=True))
        strides.append(_stride("stride_om", "so", -2))
    for arg in p.args:
        if arg.role == "matrix":
            if p.batch:
                strides.append(_stride(f"stride_{arg.name}b", f"s_{arg.name}", 0, batch=True))
            strides.append(_stride(f"stride_{arg.name}m", f"s_{arg.name}", -2))
    # Batch strides (and the batch count) may pass 2**31: never specialized, only their width is keyed.
    no_specialize = [s["param"] for s in strides if s["batch"]] + (["BATCH"] if p.batch and p.persistent else [])
    if p.persistent:
        no_specialize.append("NUM_SMS")  # a device fact, not a problem size: one compile serves every GPU
    signature = _signature(p, strides)
    schema = [[a.name, "float" if a.role == "scalar" else "Tensor"] for a in (p.a, p.b, *p.args)]
    return {
        "p": p,
        "plan": asdict(p),
        "strides": strides,
        "no_specialize": no_specialize,
        "op_schema": schema,
        "signature": signature,
        "uses_tanh": any(op["op"] == "activation" and op["fn"] in ("gelu_tanh", "silu", "sigmoid") for op in p.epilogue),
    }


def _desc(dtype_sig: str, block: list[str]) -> str:
    return f"tensordesc<{dtype_sig}[{', '.join(block)}]>"


def _signature(p: TritonPlan, strides: list[dict[str, object]]) -> dict[str, str]:
    """Parameter name -> Triton type string, in declaration order (constexprs as "constexpr")."""
    sig: dict[str, str] = {}
    bm, bn, bk = str(p.block_m), str(p.block_n), str(p.block_k)
    lead = ["1"] if p.batch else []
    if p.tma:
        sig["a_desc"] = _desc(p.a.dtype.info.triton_sig, [*lead, bm, bk] if p.a_major == "k" else [*lead, bk, bm])
        sig["b_desc"] = _desc(p.b.dtype.info.triton_sig, [*lead, bn, bk] if p.b_major == "k" else [*lead, bk, bn])
        out_n = str(p.block_n // 2) if p.epilogue_subtile else bn
        sig["out_desc"] = _desc(p.out.dtype.info.triton_sig, [*lead, bm, out_n])
    else:
        for side in (p.a, p.b, p.out):
            sig[f"{side.name}_ptr"] = "*" + side.dtype.info.triton_sig
    for arg in p.args:
        sig[arg.name if arg.role == "scalar" else f"{arg.name}_ptr"] = (
            "fp32" if arg.role == "scalar" else "*" + arg.dtype.info.triton_sig
        )
    sig.update(M="i32", N="i32", K="i32")
    if p.batch and p.persistent:
        sig["BATCH"] = "i32"
    for s in strides:
        sig[str(s["param"])] = "i32"
    if p.persistent:
        sig["NUM_SMS"] = "i32"
    sig.update(BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr", FAST_MATH="constexpr")
    return sig
