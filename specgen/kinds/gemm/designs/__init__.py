"""The GEMM kind's designs (their line-up: specgen/kinds/gemm/__init__.py's DESIGN_PACKAGES)."""
