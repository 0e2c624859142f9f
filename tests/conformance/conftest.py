"""The conformance summary: per backend, how many cases ran and passed and how many its target refused
at check time (with the rule ids), printed at the end of any run that collected conformance tests."""

from __future__ import annotations

from collections import Counter, defaultdict

from .backends import BACKENDS


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001 (pytest's hook signature)
    counts: dict[str, Counter] = defaultdict(Counter)
    for status in ("passed", "failed"):
        for report in terminalreporter.stats.get(status, []):
            if "conformance" not in report.nodeid or report.when != "call":
                continue
            name = report.nodeid.split("::")[-1]
            param = name.split("[", 1)[-1]
            backend = next((b.id for b in BACKENDS if param.startswith(f"{b.id}-")), "same outcome") \
                if name.startswith("test_same_answer") else "same outcome"
            outcome = dict(report.user_properties).get("outcome", status)
            key = "refused" if outcome.startswith("refused") else status
            counts[backend][key] += 1
            if outcome.startswith("refused"):
                for rule in outcome.split(" ", 1)[1].split(","):
                    counts[backend][f"refused by {rule}"] += 1
    if not counts:
        return
    terminalreporter.section("conformance")
    for backend, c in sorted(counts.items()):
        rules = ", ".join(f"{k[11:]} {v}" for k, v in sorted(c.items()) if k.startswith("refused by"))
        terminalreporter.write_line(f"{backend}: run {c['passed'] + c['failed']} (passed {c['passed']}, failed "
                                    f"{c['failed']}), refused by check {c['refused']}{f' ({rules})' if rules else ''}")
