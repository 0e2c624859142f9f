"""One argument class for every design's ABI: an operand or epilogue argument of the generated entry
point, with its role, dtype and docstring line, and the dtype as each framework or compiler the module
uses spells it (`arg.torch_dtype`, `arg.<name>_dtype`: the design says which spellings it needs).

The host signature, the launcher's guards, the fake arguments for AOT compile, METADATA, the torch op
schema and fake, and the JAX entry all render from these objects, so a design spells its argument list
once (its plan's `a`, `b`, `out` and `args`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from specgen.spec.dtypes import DType

Spellings = Callable[[DType], Mapping[str, str]]  # dtype -> {"torch": "bfloat16", ...}


@dataclass(frozen=True)
class Arg:
    name: str
    role: str  # a, b, out, vec_m, vec_n, matrix, scalar
    dtype: DType
    doc: str
    spelled: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # (framework, dtype spelling)

    def __getattr__(self, key: str) -> str:
        """`arg.<framework>_dtype`: the dtype as that framework spells it (AttributeError if not given)."""
        if key.endswith("_dtype"):
            for framework, spelling in self.spelled:
                if f"{framework}_dtype" == key:
                    return spelling
        raise AttributeError(f"{type(self).__name__} {self.name!r} has no {key!r}")


def make_arg(name: str, role: str, dtype: DType, doc: str, spellings: Spellings) -> Arg:
    return Arg(name, role, dtype, doc, tuple(sorted(spellings(dtype).items())))
