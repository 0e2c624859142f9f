"""The grouped GEMM kind's designs, one package per (backend, MMA family)."""
