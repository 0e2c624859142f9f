"""specgen: declarative GEMM-family kernel specs -> checked plans -> readable Triton / CuTe DSL / Pallas code."""

__version__ = "0.1.0"
