"""Does every runtime dependency install on Windows? Resolves pyproject.toml's dependencies (and any extras
named) for win_amd64 with wheels only, per Python version, using ``pip download`` (needs only PyPI).

    python tools/windows/check_wheels.py [--python 3.13 ...] [--extra postgres] [--dest DIR]

With ``--dest`` the wheels stay there: the folder to carry to a disconnected Windows machine
(``pip install --no-index --find-links DIR offline-rag``, see docs/install.md, "Windows / manual setup").
Exit status 0 when every version resolves; the failing versions' pip output otherwise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLATFORM = "win_amd64"
PYTHONS = ["3.11", "3.12", "3.13", "3.14"]  # the versions docs/install.md supports on Windows


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    unknown = sorted(set(extras) - set(optional))
    if unknown:
        raise SystemExit(f"no such extra: {', '.join(unknown)} (have {', '.join(optional)})")
    return list(project["dependencies"]) + [r for extra in extras for r in optional[extra]]


def download(reqs: list[str], python: str, dest: Path) -> subprocess.CompletedProcess:
    listing = dest / "requirements.txt"
    dest.mkdir(parents=True, exist_ok=True)
    listing.write_text("\n".join(reqs) + "\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--platform", PLATFORM,
           "--python-version", python, "--implementation", "cp", "--disable-pip-version-check",
           "-r", str(listing), "-d", str(dest)]
    return subprocess.run(cmd, capture_output=True, encoding="utf-8", errors="replace")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", help=f"Python version (default: {', '.join(PYTHONS)})")
    parser.add_argument("--extra", action="append", default=[], help="an optional-dependencies group too")
    parser.add_argument("--dest", type=Path, help="keep the wheels here (one folder per Python version)")
    args = parser.parse_args(argv)
    reqs = requirements(ROOT / "pyproject.toml", args.extra)
    failed = []
    with tempfile.TemporaryDirectory(prefix="rag-win-wheels-") as tmp:
        for python in args.python or PYTHONS:
            dest = (args.dest or Path(tmp)) / f"cp{python.replace('.', '')}-{PLATFORM}"
            proc = download(reqs, python, dest)
            wheels = sorted(p.name for p in dest.glob("*.whl"))
            if proc.returncode != 0:
                failed.append(python)
                print(f"Python {python} on {PLATFORM}: FAILED\n{(proc.stdout + proc.stderr)[-3000:]}")
            else:
                print(f"Python {python} on {PLATFORM}: {len(wheels)} wheels resolve: {', '.join(wheels)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
