"""The rendered specgen catalogue: `specgen render` writes this package; do not edit."""
