"""`specgen bench` and `specgen tune`: the one paired CUPTI timer (timing.py), its statistics (stats.py),
the JSON record (record.py), default shapes (shapes.py), the workloads and their peers (workloads.py),
the bench run (run.py) and its report (report.py); the tuner lives in specgen/tune/.

Nothing here is imported by `specgen check` or `render`; modules that need torch import it inside
functions, so that the CLI's import stays light."""
