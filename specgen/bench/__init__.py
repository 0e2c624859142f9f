"""`specgen bench` and `specgen tune`: the one paired CUPTI timer (timing.py), its statistics (stats.py),
the JSON record (record.py), the kinds' problems as bench and tune reach them (problem.py: each kind's
shapes, flops, inputs and peers live in its `specgen/kinds/<kind>/problem.py`; shapes.py asks the spec's
kind), GPU tensors any kind's inputs use (tensors.py), the workloads (workloads.py), the bench run (run.py)
and its report (report.py); the tuner lives in specgen/tune/.

Nothing here is imported by `specgen check` or `render`; modules that need torch import it inside
functions, so that the CLI's import stays light."""
