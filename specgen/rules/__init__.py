"""Envelope rules: the machinery (base.py), the rules several designs share (one module per topic),
and the table that collects them with every design's own rules (table.py). Designs import base.py only."""
