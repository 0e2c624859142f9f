"""The C++ export the CuTe designs share (`specgen compile --export`): export.py the hook both the sm90 and
the sm100 design name as their `export_hook`, abi.py the C entry it renders from either design's plan.
Not a design: the kind's line-up (specgen/kinds/gemm/__init__.py) does not name it. Imports nothing."""
