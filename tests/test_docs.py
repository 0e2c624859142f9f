"""README is what the code does: its spec reference is the one the schema generates now, and its console
examples are what the commands print (run in a temporary folder with the quickstart's spec)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

from specgen.docs import BEGIN, END, spec_reference

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_spec_reference_is_current() -> None:
    text = README.read_text()
    embedded = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    assert embedded == spec_reference().strip(), "README's spec reference is stale: paste `specgen schema --markdown`"


def test_reference_names_every_epilogue_op_and_target() -> None:
    ref = spec_reference()
    for op in ("Gated", "Bias", "Scale", "Activation", "Residual", "Clamp", "Cast"):
        assert f"### {op}" in ref
    assert "`pallas:tpu_v7x`" in ref and "`triton:sm100`" in ref


# --- README's console examples are what the commands print ---------------------------------------------------
CONSOLE = re.compile(r"^( *)```console\n(.*?)^\1```", re.M | re.S)
TIMING = re.compile(r"\(\d+ ms\)| in \d+(\.\d+)? s")


def console_examples(text: str) -> list[tuple[str, str]]:
    """(command line, expected output) for every `$ specgen ...` line of README's console blocks."""
    examples = []
    for indent, body in CONSOLE.findall(text):
        command, lines = None, []
        for line in body.splitlines():
            line = line[len(indent):]
            if line.startswith("$ "):
                if command is not None:
                    examples.append((command, "\n".join(lines)))
                command, lines = line[2:], []
            else:
                lines.append(line)
        if command is not None:
            examples.append((command, "\n".join(lines)))
    return examples


def quickstart_spec(text: str) -> str:
    start = text.index("## Five-minute quickstart")
    block = re.search(r"^( *)```toml\n(.*?)^\1```", text[start:], re.M | re.S)
    assert block is not None
    return textwrap.dedent(block.group(2))


def test_readme_console_examples_are_what_the_commands_print(tmp_path: Path) -> None:
    text = README.read_text()
    examples = console_examples(text)
    assert [c.split("#")[0].split() for c, _ in examples][:2] == [["specgen", "check", "specs/my_linear.toml"],
                                                                 ["specgen", "check", "bad.toml"]]
    spec = quickstart_spec(text)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "my_linear.toml").write_text(spec)
    # bad.toml as README's comment describes it: tile.k = 128 and, on line 9, pipeline = { ab_stages = 4 }
    comment = examples[1][0].split("#", 1)[1]
    assert "tile.k = 128" in comment and "pipeline = { ab_stages = 4 }" in comment
    bad = spec.replace("k = 64 }", "k = 128 }\npipeline = { ab_stages = 4 }", 1)
    assert bad.splitlines()[8] == "pipeline = { ab_stages = 4 }"
    (tmp_path / "bad.toml").write_text(bad)
    # as a user with the `[triton]` extra runs them: near-boundary verdicts compiled (a cold cache of its own)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "SPECGEN_NO_COMPILE")}
    env["SPECGEN_SETTLE_CACHE"] = str(tmp_path / "settle")
    for command, expected in examples:
        args = shlex.split(command.split("#")[0])
        assert args[0] == "specgen", command
        r = subprocess.run([sys.executable, "-m", "specgen", *args[1:]], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        got = (r.stdout + r.stderr).rstrip("\n")
        assert TIMING.sub("(N)", got) == TIMING.sub("(N)", expected), f"$ {command}\n{got}"


def test_ci_runs_the_readmes_two_commands_in_a_fresh_venv() -> None:
    """`.ci/run` -> .ci/fresh_venv.py, which runs README's two bash blocks in a new venv (nox -s fresh
    does the same from a clean clone; both take minutes, so the regular suite checks the wiring)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fresh_venv", README.parent / ".ci" / "fresh_venv.py")
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    first, second = fresh.readme_commands(README)
    assert first == "python3 -m pip install -e . && specgen check && specgen render"
    assert second == "python3 -m pip install torch==2.13.0 -e '.[test]' && python3 -m nox -s lint tests"
    run = (README.parent / ".ci" / "run").read_text()
    assert "python3 .ci/fresh_venv.py" in run and "pip install" not in run
    source = (README.parent / ".ci" / "fresh_venv.py").read_text()
    assert '"-m", "venv"' in source and "stdin=subprocess.DEVNULL" in source
    noxfile = (README.parent / "noxfile.py").read_text()
    assert '".ci/fresh_venv.py", "--clone"' in noxfile and "success_codes=[0]" in noxfile


def test_extras_declare_what_the_code_imports_and_bound_tested_versions() -> None:
    """Triton's interpreter imports numpy and torch no longer pulls it in: a fresh venv needs it declared.
    triton, jax and the CuTe DSL stop at the newest release tested (README, "Tested versions")."""
    import tomllib

    extras = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {extra: {re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0]: req for req in reqs} for extra, reqs in extras.items()}
    for extra in ("triton", "test"):
        assert "numpy" in names[extra] and {"torch", "triton"} <= set(names[extra])
    for extra, package in (("triton", "triton"), ("test", "triton"), ("pallas", "jax"), ("cute", "nvidia-cutlass-dsl")):
        assert "<" in names[extra][package], names[extra][package]
        upper = names[extra][package].split("<")[1]
        assert f"{package}>=" in names[extra][package] and upper in README.read_text(), (package, upper)
