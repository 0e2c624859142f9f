"""The Triton plan: every number the Triton template renders, named, from a spec that passed check.

One generated module serves all of a spec's Triton targets: the kernel source is the same for sm90
and sm100, and the launcher picks the per-arch launch config (`configs`) by the device's compute
capability.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen import __version__
from specgen.check import rule_context
from specgen.envelope.rules import accumulator_registers
from specgen.spec.dtypes import DType
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target
from specgen.spec.targets import Backend


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


def plan_triton(loaded: LoadedSpec, targets: list[Target]) -> TritonPlan:
    spec = loaded.spec
    configs = []
    for t in targets:
        assert t.backend is Backend.triton
        ctx = rule_context(spec, t)  # the numbers `check` proved: stages and budget come from one place
        assert ctx.gpu is not None
        configs.append(TritonArchConfig(t.arch, ctx.gpu.compute_capability, spec.triton.num_warps, ctx.ab_stages,
                                        ctx.budget.total, ctx.budget.breakdown(), accumulator_registers(ctx)[0]))
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
