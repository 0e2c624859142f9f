"""Run the README's two commands the way a new user does: in a fresh virtual environment, so a
dependency the project forgot to declare fails here instead of hiding behind the machine's own
packages. Stdlib only (a CI machine's base Python may have nothing else).

    python3 .ci/fresh_venv.py            # in this checkout (CI: already a clean clone)
    python3 .ci/fresh_venv.py --clone    # in a clean `git clone` of this checkout's HEAD (nox -s fresh)

The commands are read from README.md's "The two commands" section (its ```bash blocks), so the
README cannot drift from what CI runs. Exits with the first failing command's status.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands(readme: Path) -> list[str]:
    text = readme.read_text()
    section = text[text.index("## The two commands"):]
    section = section[:section.index("\n## ", 1)]
    commands = re.findall(r"```bash\n(.*?)\n```", section, re.S)
    if len(commands) != 2:
        raise SystemExit(f"README.md's 'The two commands' section has {len(commands)} bash blocks, not 2")
    return commands


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clone", action="store_true", help="run in a clean clone of HEAD, not this checkout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="specgen-fresh-") as tmp:
        work = ROOT
        if args.clone:
            work = Path(tmp) / "specgen"
            subprocess.run(["git", "clone", "--quiet", str(ROOT), str(work)], check=True)
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "TRITON_INTERPRET")}
        env |= {"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
        for command in readme_commands(work / "README.md"):
            print(f"$ {command}", flush=True)
            start = time.monotonic()
            # stdin closed: CI has none, and nothing here may wait for an answer
            rc = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=work, env=env,
                                stdin=subprocess.DEVNULL).returncode
            print(f"(exit {rc}, {time.monotonic() - start:.0f} s)", flush=True)
            if rc:
                return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
