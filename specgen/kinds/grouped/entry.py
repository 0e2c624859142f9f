"""What every grouped design's entry point shares, whatever its backend: the group index's argument name and
meaning by the spec's `groups.index`, the operands as the host templates read them, and the template environment
(templates/grouped/, with the dense kind's templates under `gemm/`, so that a grouped template imports the dense
epilogue and host macros, not copies)."""

from __future__ import annotations

from functools import cache

import jinja2

from specgen.abi import Halved, HostOperand, bind_operands, halved_extents
from specgen.kinds.gemm import KIND as GEMM
from specgen.kinds.gemm.plan import GATED_N
from specgen.kinds.grouped import KIND
from specgen.render.env import environment, templates_dir

# The entry's group index by `groups.index`: its argument name and what it holds.
INDEX_ARGS: dict[str, tuple[str, str]] = {
    "offs": ("offs", "cumulative ends, as torch._grouped_mm's offs"),
    "sizes": ("group_sizes", "group sizes, as jax.lax.ragged_dot's group_sizes"),
}


class GroupedHostOperands:
    """A plan's operands as its host template reads them, from the plan's `a`, `b`, `out`, `index` (specgen.abi.Arg)
    and `a_major`, `b_major`, `ragged_k`, `gated` fields: ragged M, A (M, K) and B (G, K, N), M every group's rows,
    and out (M, N); with a gated epilogue B is (G, K, 2N): it binds N2, and N is half of it (`halved`); ragged K,
    A (M, K) and B (K, N), K every group's rows, and out (G, M, N), G the group index's length."""

    gated: bool = False  # a plan with a gated epilogue says so (a dataclass field of its own)

    @property
    def host(self) -> tuple[tuple[HostOperand, ...], HostOperand]:
        a_contiguous = "K" if self.a_major == "k" else "M"  # type: ignore[attr-defined]
        if self.ragged_k:  # type: ignore[attr-defined]
            b_contiguous = "K" if self.b_major == "k" else "N"  # type: ignore[attr-defined]
            return bind_operands([(self.a, ("M", "K"), a_contiguous, "a"), (self.b, ("K", "N"), b_contiguous, "b")],  # type: ignore[attr-defined]
                                 (self.out, ("G", "M", "N"), "N", "o"), bound={"G": f"{self.index.name}.shape[0]"})  # type: ignore[attr-defined]
        bn = "N2" if self.gated else "N"
        return bind_operands([(self.a, ("M", "K"), a_contiguous, "a"),  # type: ignore[attr-defined]
                              (self.b, ("G", "K", bn), "K" if self.b_major == "k" else bn, "b")],  # type: ignore[attr-defined]
                             (self.out, ("M", "N"), "N", "o"), halved=GATED_N if self.gated else None)  # type: ignore[attr-defined]

    @property
    def halved(self) -> tuple[Halved, ...]:
        return halved_extents(self.operands, GATED_N) if self.gated else ()

    @property
    def operands(self) -> tuple[HostOperand, ...]:
        return self.host[0]

    @property
    def output(self) -> HostOperand:
        return self.host[1]


@cache
def grouped_environment() -> jinja2.Environment:
    """The kind's environment, seeing the dense kind's templates under `gemm/` too; last, the dense tree unprefixed,
    where a dense template imports its own neighbours (gemm/pallas/epilogue.jinja's "pallas/formula.jinja": no
    grouped template has that path, so the dense one answers)."""
    base = environment(KIND)
    dense = jinja2.FileSystemLoader(str(templates_dir() / GEMM))
    return base.overlay(loader=jinja2.ChoiceLoader([base.loader, jinja2.PrefixLoader({GEMM: dense}), dense]))
