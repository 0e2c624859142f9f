"""The C entry point of an exported CuTe kernel, from a CuTe design's plan (no cutlass, no torch): one
implementation for every CuTe design (sm90's CuteSm90Plan, sm100's CuteSm100Plan), which read the fields
`CutePlan` and `CuteConfig` name.

One function per kernel, `specgen_<name>(M, N, K[, batch], <operands>, stream)`: each matrix operand
is a pointer and its leading stride in elements (and its batch stride when batched), a vector a pointer,
a scalar a float. The rendered C++ (templates/gemm/export/) checks what the Python guards check, picks the
size-selected config, caps the persistent grid by the device's SMs and calls the CuTe DSL's exported
wrapper of that config with its tensor descriptors (pointer, dynamic shapes, dynamic strides, in the
order the module's `_fake_args` declared them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from specgen.abi import Arg as CuteArg
from specgen.kinds.gemm import KIND

TMA_ALIGN = 16  # bytes: TMA's base and stride unit, and the fake tensors' assumed alignment


class CuteConfig(Protocol):
    """What the C entry reads of one config (the module's `Config` row; a `StagedConfigRow`,
    kinds/gemm/plan.py): its index and size bounds, its tile for the header, the cluster whose size
    divides the device's SMs for a persistent grid."""

    index: int | None
    when: str
    bounds: list[tuple[str, int]]
    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int
    cluster_n: int
    persistent: bool

    @property
    def cluster_size(self) -> int: ...  # CTAs per cluster (sm90's split-K adds a third dim)

    @property
    def launch_clusters(self) -> int: ...  # clusters one launch holds along grid z (not persistent: one a tile)


class CutePlan(Protocol):
    """What the C entry reads of a CuTe design's plan."""

    name: str
    description: str
    arch: str  # the target's arch (sm90, sm100)
    arch_flag: str  # what the DSL compiled for (sm_90a, sm_100a)
    a: CuteArg
    b: CuteArg
    out: CuteArg
    args: list[CuteArg]
    a_major: str
    b_major: str
    batch: bool
    epilogue: list[dict[str, object]]
    config: CuteConfig
    variants: list  # of CuteConfig


@dataclass(frozen=True)
class COperand:
    """One operand of the C function, and the DSL tensor descriptor it becomes."""

    name: str
    role: str  # a, b, out, matrix, vec_m, vec_n, scalar
    dtype: str
    elem_bytes: int
    rows: str  # logical (rows, cols) of a matrix, as the torch launcher sees it: A (M, K), B (K, N)
    cols: str
    rows_contiguous: bool  # the stored layout: element (r, c) at r + c * ld, else r * ld + c
    tma: bool  # moved by TMA: 16-byte strides required
    doc: str

    @property
    def matrix(self) -> bool:
        return self.role in ("a", "b", "out", "matrix")

    @property
    def ld(self) -> str:
        return f"ld{self.name}"

    @property
    def batch_stride(self) -> str:
        return f"batch_stride_{self.name}"

    @property
    def extent(self) -> str:
        return "M" if self.role == "vec_m" else "N"

    @property
    def contiguous_extent(self) -> str:
        return self.rows if self.rows_contiguous else self.cols

    @property
    def index(self) -> str:
        """Where element (r, c) lives, for the header's comment."""
        r, c = self.rows.lower(), self.cols.lower()
        return f"{self.name}[{c} * {self.ld} + {r}]" if self.rows_contiguous else f"{self.name}[{r} * {self.ld} + {c}]"


@dataclass(frozen=True)
class CKernel:
    """What the header, the launcher and the CMake file render for one kernel."""

    name: str
    description: str
    batch: bool
    operands: list[COperand]  # in the DSL host's order: a, b, epilogue arguments, out
    configs: list[tuple[str, CuteConfig]]  # (tag, config): the default first, then each variant
    variants: list[tuple[str, CuteConfig]]  # the size-selected ones, in the launcher's order
    epilogue: str
    arch: str  # what the DSL compiled for (sm_90a, sm_100a)
    target_arch: str  # the target's arch (sm90, sm100): the export's folder where several are exported at once
    b_columns: int = 1  # B's columns per output column: 2 with a gated epilogue (B (K, 2N): gate and up)

    @property
    def dispatch(self) -> list[tuple[str, CuteConfig]]:
        """The order the launcher tries configs in: each variant whose bounds hold, else the default."""
        return [*self.variants, self.configs[0]]

    @property
    def function(self) -> str:
        return f"specgen_{self.name}"

    def prefix(self, tag: str) -> str:
        """The symbol prefix of one config's DSL export (its header, object and wrapper)."""
        return f"specgen_{self.name}_{tag}"

    @property
    def params(self) -> list[tuple[str, str]]:
        """(C type, name) of the launch function, in order."""
        out = [("int32_t", "M"), ("int32_t", "N"), ("int32_t", "K")] + ([("int32_t", "batch")] if self.batch else [])
        for o in self.operands:
            const = "" if o.role == "out" else "const "
            if o.role == "scalar":
                out.append(("float", o.name))
            else:
                out.append((f"{const}void *", o.name))
            if o.matrix:
                out.append(("int64_t", o.ld))
                if self.batch:
                    out.append(("int64_t", o.batch_stride))
        return out + [("cudaStream_t", "stream")]


def config_tag(c: CuteConfig) -> str:
    return "default" if c.index is None else f"variant{c.index}"


def config_shape(c: CuteConfig) -> str:
    """The header's view of a config's tile: per CTA, and the pair's MMA where two CTAs share one (sm100)."""
    tile = f"{c.tile_m}x{c.tile_n}x{c.tile_k}"
    if getattr(c, "swap_ab", False):  # sm90: the kernel's tile is out^T's
        return f"{c.tile_n}x{c.tile_m}x{c.tile_k} swap_ab (out^T in {tile} tiles)"
    return f"{tile} 2-CTA ({2 * c.tile_m}x{c.tile_n} MMA)" if getattr(c, "two_cta", False) else tile


def _operand(arg: CuteArg, p: CutePlan) -> COperand:
    b = arg.dtype.bytes
    if arg.role == "a":
        return COperand("a", "a", str(arg.dtype), b, "M", "K", p.a_major != "k", True, arg.doc)
    if arg.role == "b":
        cols = "2 * N" if getattr(p, "gated", False) else "N"  # a gated B: gate and up columns
        return COperand("b", "b", str(arg.dtype), b, "K", cols, p.b_major == "k", True, arg.doc)
    if arg.role in ("out", "matrix"):  # a residual is read element-wise: any stride
        return COperand(arg.name, arg.role, str(arg.dtype), b, "M", "N", False, arg.role == "out", arg.doc)
    return COperand(arg.name, arg.role, str(arg.dtype), b, "", "", False, False, arg.doc)


def c_kernel(p: CutePlan) -> CKernel:
    configs = [p.config, *p.variants]
    epilogue = ", then ".join(_describe(op) for op in p.epilogue) or "none"
    return CKernel(
        name=p.name, description=" ".join(p.description.split()), batch=p.batch,
        operands=[_operand(a, p) for a in (p.a, p.b, *p.args, p.out)],
        configs=[(config_tag(c), c) for c in configs], variants=[(config_tag(c), c) for c in p.variants],
        epilogue=epilogue, arch=p.arch_flag, target_arch=p.arch, b_columns=2 if getattr(p, "gated", False) else 1,
    )


def _describe(op: dict[str, object]) -> str:
    fields = ", ".join(f"{k}={v}" for k, v in op.items() if k != "op" and v is not None)
    return f"{op['op']}({fields})"


def render_files(kernels: list[CKernel], dsl_version: str) -> dict[str, str]:
    """{relative path: text} of the header, one launcher source per kernel and the CMake file."""
    from specgen import __version__
    from specgen.render.env import environment

    env = environment(KIND)
    common = {"version": __version__, "dsl_version": dsl_version, "tma_align": TMA_ALIGN, "config_shape": config_shape}
    arch = ", ".join(sorted({k.arch for k in kernels}))
    files = {"include/specgen_kernels.h": env.get_template("export/kernels.h.jinja").render(kernels=kernels, arch=arch,
                                                                                           **common)}
    for k in kernels:
        files[f"src/{k.name}.cpp"] = env.get_template("export/kernel.cpp.jinja").render(k=k, **common)
    files["CMakeLists.txt"] = env.get_template("export/CMakeLists.txt.jinja").render(kernels=kernels, **common)
    return files
