"""The kernel kinds: one package per kind (`gemm` today), each with its designs under `designs/` and its
line-up of them in its `__init__.py`; lineup.py lists the kinds (adding a kind: its package and one line
there)."""
