"""Element types a spec may name, with the facts every backend needs about them.

One table, so the checker, the planner and each backend's template agree on bit widths and spellings.
`tf32` is stored as f32 (4 bytes) and only changes how the tensor cores read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class DType(str, Enum):
    f32 = "f32"
    tf32 = "tf32"
    f16 = "f16"
    bf16 = "bf16"
    fp8_e4m3 = "fp8_e4m3"
    fp8_e5m2 = "fp8_e5m2"
    int8 = "int8"
    int32 = "int32"

    def __str__(self) -> str:  # messages print "bf16", not "DType.bf16"
        return self.value

    @property
    def info(self) -> DTypeInfo:
        return DTYPES[self]

    @property
    def bytes(self) -> int:
        return DTYPES[self].bits // 8

    @property
    def is_fp8(self) -> bool:
        return self in (DType.fp8_e4m3, DType.fp8_e5m2)

    @property
    def is_16bit(self) -> bool:
        return self in (DType.f16, DType.bf16)

    @property
    def is_float(self) -> bool:
        return self not in (DType.int8, DType.int32)


@dataclass(frozen=True)
class DTypeInfo:
    bits: int
    torch: str  # attribute of the torch module (the host side every torch entry shares); each design
    # spells the dtype its own compiler's way in its package


DTYPES: dict[DType, DTypeInfo] = {
    DType.f32: DTypeInfo(32, "float32"),
    DType.tf32: DTypeInfo(32, "float32"),
    DType.f16: DTypeInfo(16, "float16"),
    DType.bf16: DTypeInfo(16, "bfloat16"),
    DType.fp8_e4m3: DTypeInfo(8, "float8_e4m3fn"),
    DType.fp8_e5m2: DTypeInfo(8, "float8_e5m2"),
    DType.int8: DTypeInfo(8, "int8"),
    DType.int32: DTypeInfo(32, "int32"),
}
