"""Tiny helpers the generated modules import: argument guards, the Triton launcher, custom-op glue.

Imported only by generated code (never by check/render): these modules may import torch and triton.
"""
