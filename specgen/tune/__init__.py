"""`specgen tune`: candidates from each design's `tune_space` pruned by check (space.py), compiled ahead of
time in parallel (compile_jobs.py, pool or Ray), timed paired against the incumbent and the peer
(measure.py), cached and resumable (cache.py), chosen and written back into the spec file preserving its
comments (select.py, writeback.py); run.py runs the lot. Imported only by `specgen tune`."""
