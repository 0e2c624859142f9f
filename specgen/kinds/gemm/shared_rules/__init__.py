"""The rules every GEMM design shares, one module a topic; rules.py (the kind's part) collects them."""
