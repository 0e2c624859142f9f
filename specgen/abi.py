"""One argument class for every design's ABI: an operand or epilogue argument of the generated entry
point, with its role, dtype and docstring line, and the dtype as each framework or compiler the module
uses spells it (`arg.torch_dtype`, `arg.<name>_dtype`: the design says which spellings it needs).

The host signature, the launcher's guards, the fake arguments for AOT compile, METADATA, the torch op
schema and fake, and the JAX entry all render from these objects, so a design spells its argument list
once (its plan's `a`, `b`, `out` and `args`).

A kind describes its tensor operands to the host templates as `HostOperand` records (`bind_operands`):
each an `Arg` with its dimensions as problem-size symbols, the one that is contiguous, and where each
symbol is bound; the torch and JAX host parts iterate them instead of naming the operands.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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


@dataclass(frozen=True)
class Extent:
    """One dimension of a host operand: the problem-size symbol it is and where the host binds it."""

    symbol: str  # "M", "K", "batch"
    index: int  # its position in the operand's (logical) shape
    bound: str  # the name `_validate` unpacks it into: the symbol, or "<symbol>_<operand>" bound earlier
    fast: str  # the name the fast path `_check` unpacks it into ("_": compared as `<operand>.shape[index]`)
    first: str = ""  # where an earlier argument bound the symbol ("a.shape[2]"); "": this one binds it


@dataclass(frozen=True)
class HostOperand:
    """A tensor argument of the host entry as the host templates read it: the `Arg`, its extents in
    logical order, its contiguous (unit-stride) symbol, and the short names the fast path gives its strides
    and address. The last two dimensions are the matrix (contiguous and leading); any before them are
    outer (a batch or a group), each stride of its own."""

    arg: Arg
    extents: tuple[Extent, ...]
    contiguous: str  # the unit-stride dimension's symbol: K for a k-major operand, M or N for mn-major
    stride: str  # the fast path's name for `<operand>.stride()`: "sa"
    pointer: str  # and for `<operand>.data_ptr()`: "pa"

    def __post_init__(self) -> None:
        if self.contiguous not in self.dims[-2:]:
            raise ValueError(f"{self.arg.name}: contiguous {self.contiguous!r} is not one of its last two dims")

    @property
    def name(self) -> str:
        return self.arg.name

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(e.symbol for e in self.extents)

    @property
    def rank(self) -> int:
        return len(self.extents)

    @property
    def shape(self) -> str:
        """The logical shape as the host spells it: "(batch, M, K)"."""
        return "(" + ", ".join(self.dims) + ("," if self.rank == 1 else "") + ")"

    @property
    def contiguous_at(self) -> int:
        return self.dims.index(self.contiguous)

    @property
    def leading_at(self) -> int | None:
        """The other matrix dimension's position: its stride is the leading dimension (None at rank 1)."""
        return None if self.rank < 2 else (self.rank - 2 if self.contiguous_at == self.rank - 1 else self.rank - 1)

    @property
    def leading(self) -> str | None:
        return None if self.leading_at is None else self.dims[self.leading_at]

    @property
    def outer_at(self) -> tuple[int, ...]:
        """The positions before the matrix (a batch, a group): each stride a step of its own."""
        return tuple(range(self.rank - 2))

    @property
    def stored(self) -> tuple[str, ...]:
        """The dims in memory order, contiguous last (how JAX arrays hold the operand)."""
        return (*self.dims[:-2], *(d for d in self.dims[-2:] if d != self.contiguous), self.contiguous)

    @property
    def transposed(self) -> bool:
        """Whether the stored order differs from the logical one (the torch-to-JAX door transposes it)."""
        return self.stored != self.dims

    @property
    def binds(self) -> tuple[str, ...]:
        """The symbols this argument binds first (no earlier argument has them)."""
        return tuple(e.symbol for e in self.extents if not e.first)

    @property
    def repeats(self) -> tuple[Extent, ...]:
        """The extents an earlier argument bound: each checked against that position."""
        return tuple(e for e in self.extents if e.first)


@dataclass(frozen=True)
class Halved:
    """A problem-size symbol that is half of an operand's extent: a gated epilogue's N outputs from B's 2N columns
    (gate and up). The host binds `source` from the operand, refuses an odd one, and sets `symbol` to half of it."""

    symbol: str  # "N"
    source: str  # "N2", the operand's extent
    at: str  # where the operand binds it: "b.shape[1]"
    operand: str  # "b"
    index: int  # the extent's position in the operand's logical shape


def bind_operands(operands: Sequence[tuple[Arg, Sequence[str], str, str]], output: tuple[Arg, Sequence[str], str, str],
                  *, fast_by_shape: Sequence[str] = (), bound: Mapping[str, str] | None = None,
                  halved: Mapping[str, str] | None = None,
                  ) -> tuple[tuple[HostOperand, ...], HostOperand]:
    """The host records of a kind's tensor operands and output, each given as (arg, dims as symbols,
    contiguous symbol, short name: strides `s<short>`, address `p<short>`). The first operand to have a
    symbol binds it; a later one binds `<symbol>_<name>` and is checked against the first position. The
    fast path compares the later `fast_by_shape` symbols by shape instead of binding them. The output binds
    nothing: every symbol of its shape is bound by an operand (its `first` says where), or by another argument
    (`bound`: symbol -> where, "offs.shape[0]": a ragged-K kernel's group count, which no operand holds), or is half
    of one that is (`halved`: symbol -> the operand's symbol, `halved_extents` says where)."""
    first: dict[str, str] = dict(bound or {})
    records = []
    for arg, dims, contiguous, short in operands:
        extents = []
        for i, sym in enumerate(dims):
            if sym in first:
                extents.append(Extent(sym, i, f"{sym}_{arg.name}", "_" if sym in fast_by_shape else f"{sym}_{arg.name}",
                                      first[sym]))
            else:
                extents.append(Extent(sym, i, sym, sym))
        for i, sym in enumerate(dims):
            first.setdefault(sym, f"{arg.name}.shape[{i}]")
        records.append(HostOperand(arg, tuple(extents), contiguous, f"s{short}", f"p{short}"))
    for symbol, source in (halved or {}).items():
        if source in first and symbol not in first:
            first[symbol] = f"{first[source]} // 2"
    arg, dims, contiguous, short = output
    missing = [s for s in dims if s not in first]
    if missing:
        raise ValueError(f"{arg.name}: no operand binds {missing}")
    out = HostOperand(arg, tuple(Extent(s, i, s, s, first[s]) for i, s in enumerate(dims)), contiguous,
                      f"s{short}", f"p{short}")
    return tuple(records), out


def halved_extents(operands: Sequence[HostOperand], halved: Mapping[str, str]) -> tuple[Halved, ...]:
    """Where each halved symbol's source is bound (the first operand with that extent)."""
    found = []
    for symbol, source in halved.items():
        x, e = next((x, e) for x in operands for e in x.extents if e.symbol == source and not e.first)
        found.append(Halved(symbol, source, f"{x.name}.shape[{e.index}]", x.name, e.index))
    return tuple(found)
