"""Rendered cute kernels."""
