"""Rendering: Jinja2 over validated plans, deterministic bytes, write-if-different, a manifest."""
