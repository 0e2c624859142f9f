"""The grouped GEMM kind's tests (specgen/kinds/grouped/)."""
