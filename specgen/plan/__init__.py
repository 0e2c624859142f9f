"""Planning: the derived numbers a backend's template needs, from a spec that passed `check`."""
