"""`python -m specgen` runs the CLI (where the `specgen` script is not on PATH)."""

from specgen.cli import main

main()
