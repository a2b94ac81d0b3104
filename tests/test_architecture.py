"""The house plan under test (issue #36).

* The import contracts in pyproject.toml ``[tool.importlinter]``: each forbidden import is planted in a copy of
  the product, one at a time, and ``lint-imports`` must fail on it for the contract that fences it (and for no
  other); the untouched copy must pass. A contract that fences less than its name says fails here.
* No function-local import in the product unless the line says why (``# lazy: ...``): an import inside a
  function hides an arrow of the graph from the reader (import-linter still sees it).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rag.core.settings import PROJECT_ROOT, tomllib

PACKAGES = ("rag", "ingest", "app", "api")

# Runs import-linter on the current folder, refusing to lint any other tree: an editable install of the project
# would otherwise answer for a package the copy lacks.
LINT = """\
import importlib.util, sys
from pathlib import Path
for name in sys.argv[1:]:
    origin = Path(importlib.util.find_spec(name).origin).resolve()
    assert origin.is_relative_to(Path.cwd().resolve()), f"{name} comes from {origin}, not the copy"
from importlinter.cli import lint_imports_command
sys.argv[1:] = ["--no-cache", "--no-logo"]
sys.exit(lint_imports_command())
"""


@dataclass(frozen=True)
class Plant:
    path: str  # relative to the repository root; a new module when it does not exist
    code: str  # appended to the file
    broken: tuple[str, ...]  # the contracts it must break: a part of each contract's name
    reported: str  # what the lint's report must say: the planted import, or where the circle is


PLANTS = {
    "faiss in ingest.sources": Plant("ingest/sources.py", "import faiss\n", ("FAISS",), "ingest.sources -> faiss"),
    "psycopg in ingest.jobs": Plant("ingest/jobs.py", "import psycopg\n", ("FAISS",), "ingest.jobs -> psycopg"),
    "psycopg_pool in app.runtime": Plant("app/runtime.py", "from psycopg_pool import ConnectionPool\n", ("FAISS",),
                                         "app.runtime -> psycopg_pool"),
    "pgvector in rag.embedder": Plant("rag/embedder.py", "import pgvector.psycopg\n", ("FAISS",),
                                      "rag.embedder -> pgvector"),
    "sqlite3 in rag.answering.result": Plant("rag/answering/result.py", "import sqlite3\n", ("FAISS",),
                                             "rag.answering.result -> sqlite3"),
    "litestar in rag.telemetry.setup": Plant("rag/telemetry/setup.py", "from litestar import Litestar\n",
                                             ("Litestar",), "rag.telemetry.setup -> litestar"),
    "jwt in app.cli.main": Plant("app/cli/main.py", "import jwt\n", ("Litestar",), "app.cli.main -> jwt"),
    "onnxruntime in ingest.pipeline": Plant("ingest/pipeline.py", "import onnxruntime\n", ("ONNX Runtime only",),
                                            "ingest.pipeline -> onnxruntime"),
    "onnxruntime_genai in api.routes.answers": Plant("api/routes/answers.py", "import onnxruntime_genai as og\n",
                                                     ("ONNX Runtime GenAI",), "api.routes.answers -> onnxruntime_genai"),
    # Inside a function: hiding an import there does not hide it from the lint.
    "httpx in rag.core.text": Plant("rag/core/text.py", "\n\ndef fetch():\n    import httpx\n    return httpx\n",
                                    ("httpx",), "rag.core.text -> httpx"),
    "click in api.app": Plant("api/app.py", "import click\n", ("click",), "api.app -> click"),
    "uvicorn in api.app": Plant("api/app.py", "import uvicorn\n", ("click",), "api.app -> uvicorn"),
    "rich in app.diagnostics": Plant("app/diagnostics.py", "from rich.table import Table\n", ("click",),
                                     "app.diagnostics -> rich"),
    "tokenizers in rag.answering.prompt": Plant("rag/answering/prompt.py", "from tokenizers import Tokenizer\n",
                                                ("Tokenizers",), "rag.answering.prompt -> tokenizers"),
    "opentelemetry in rag.answering.service": Plant("rag/answering/service.py", "from opentelemetry import trace\n",
                                                    ("OpenTelemetry",), "rag.answering.service -> opentelemetry"),
    "pypdf in ingest.loaders": Plant("ingest/loaders.py", "import pypdf\n", ("pypdf",), "ingest.loaders -> pypdf"),
    # New modules are fenced without being listed anywhere.
    "faiss in a new ingest module": Plant("ingest/newthing.py", "import faiss\n", ("FAISS",),
                                          "ingest.newthing -> faiss"),
    "httpx in a new api module": Plant("api/newthing.py", "import httpx\n", ("httpx",), "api.newthing -> httpx"),
    # Floors and rooms.
    "upward: the CLI imports the HTTP front end": Plant("app/cli/serve.py", "from api.app import create_app\n",
                                                       ("Floors", "Rooms"), "app.cli.serve -> api.app"),
    "upward: answering imports ingest": Plant("rag/answering/service.py", "from ingest.pipeline import ingest_paths\n",
                                              ("Floors", "Rooms"), "rag.answering.service -> ingest.pipeline"),
    "upward: rag imports the application": Plant("rag/store/backup.py", "import app.runtime\n", ("Floors", "Rooms"),
                                                 "rag.store.backup -> app.runtime"),
    "sideways: ingest imports answering": Plant("ingest/jobs.py", "from rag.answering import service\n", ("Rooms",),
                                                "ingest.jobs -> rag.answering.service"),
    "sideways: the store imports the generator": Plant("rag/store/embedded.py", "import rag.generation.base\n",
                                                       ("Rooms",), "rag.store.embedded -> rag.generation.base"),
    # Downward arrows already exist here, so these close circles as well.
    "upward: core imports a component": Plant("rag/core/access.py", "from rag.store import embedded\n",
                                              ("Rooms", "No circles"), "rag.core.access -> rag.store.embedded"),
    "upward: the application imports the CLI": Plant("app/runtime.py", "import app.cli.common\n",
                                                     ("Rooms", "No circles"), "app.runtime -> app.cli.common"),
    # Circles.
    "a circle between two new modules in rag.core": Plant("rag/core/loop_a.py", "from rag.core import loop_b\n",
                                                          ("No circles",), "No cycles are allowed in rag.core."),
    "a circle between the tools and the diagnostics": Plant("app/bench/stats.py", "import app.diagnostics\n",
                                                            ("No circles",), "No cycles are allowed in app."),
}
EXTRA_FILES = {"a circle between two new modules in rag.core": {"rag/core/loop_b.py": "from rag.core import loop_a\n"}}


def contract_names() -> list[str]:
    config = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [contract["name"] for contract in config["tool"]["importlinter"]["contracts"]]


def squash(text: str) -> str:
    """Without whitespace: the lint's report wraps long contract names wherever the terminal is narrow."""
    return re.sub(r"\s+", "", text)


def python_files_only(folder: str, names: list[str]) -> list[str]:
    return [name for name in names
            if name == "__pycache__" or not (name.endswith(".py") or (Path(folder) / name).is_dir())]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The product's packages and pyproject.toml (the contracts), Python files only."""
    root = tmp_path_factory.mktemp("house")
    for package in PACKAGES:
        shutil.copytree(PROJECT_ROOT / package, root / package, ignore=python_files_only)
    shutil.copy2(PROJECT_ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def lint(root: Path) -> tuple[int, str, dict[str, str]]:
    """``lint-imports`` on the tree at ``root``: exit status, report, and each contract's verdict."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(PYTHONPATH=str(root), COLUMNS="1000", NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-c", LINT, *PACKAGES], cwd=root, env=env, capture_output=True,
                          text=True, encoding="utf-8", errors="replace", timeout=120)
    report = proc.stdout + proc.stderr
    flat = squash(report)
    verdicts = {}
    for name in contract_names():
        kept, broken = squash(name) + "KEPT" in flat, squash(name) + "BROKEN" in flat
        assert kept != broken, f"no verdict for contract {name!r}:\n{report}"
        verdicts[name] = "BROKEN" if broken else "KEPT"
    return proc.returncode, report, verdicts


def test_the_product_keeps_every_contract(pristine: Path) -> None:
    status, report, verdicts = lint(pristine)
    assert status == 0 and set(verdicts.values()) == {"KEPT"}, report


def test_every_contract_is_under_test() -> None:
    names = contract_names()
    planted = {part for plant in PLANTS.values() for part in plant.broken}
    untested = [name for name in names if not any(part in name for part in planted)]
    assert not untested, f"no planted import breaks these contracts: {untested}"
    assert len(PLANTS) >= 12


@pytest.mark.parametrize("plant_name", list(PLANTS))
def test_a_planted_import_breaks_its_contract(plant_name: str, pristine: Path, tmp_path: Path) -> None:
    plant = PLANTS[plant_name]
    root = tmp_path / "house"
    shutil.copytree(pristine, root)
    for path, code in {plant.path: plant.code, **EXTRA_FILES.get(plant_name, {})}.items():
        target = root / path
        before = target.read_text(encoding="utf-8") if target.exists() else ""
        target.write_text(before + ("\n" if before and not before.endswith("\n") else "") + code, encoding="utf-8")
    names = contract_names()
    expected = set()
    for part in plant.broken:
        matching = [name for name in names if part in name]
        assert len(matching) == 1, f"{part!r} names {len(matching)} contracts: {matching}"
        expected.add(matching[0])

    status, report, verdicts = lint(root)
    broken = {name for name, verdict in verdicts.items() if verdict == "BROKEN"}
    assert status != 0 and broken == expected, report
    assert plant.reported in report, report


# --------------------------------------------------------------------------- function-local imports
# An import inside a function hides an arrow of the import graph: it is at the module's top, or its line says why
# it stays lazy (an optional dependency, rag --help's start-up, Windows only).


def function_local_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, explained) of each import inside a function of ``path``. Explained: a ``# lazy: why`` comment
    on one of the statement's lines, or on a comment line right above it or above the run of imports it ends."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    import_lines = {line for node in imports for line in range(node.lineno, node.end_lineno + 1)}

    def explained(node: ast.Import | ast.ImportFrom) -> bool:
        if any("# lazy:" in lines[line - 1] for line in range(node.lineno, node.end_lineno + 1)):
            return True
        line = node.lineno - 1
        while line >= 1 and (line in import_lines or lines[line - 1].lstrip().startswith("#")):
            if lines[line - 1].lstrip().startswith("# lazy:"):
                return True
            line -= 1
        return False

    found = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) \
                        else ["." * node.level + (node.module or "")]
                    found += [(node.lineno, module, explained(node)) for module in modules]
    return sorted(set(found))


def test_no_function_local_import_without_a_reason() -> None:
    unexplained = {(path.relative_to(PROJECT_ROOT).as_posix(), line, module)
                   for package in PACKAGES for path in sorted((PROJECT_ROOT / package).rglob("*.py"))
                   for line, module, explained in function_local_imports(path) if not explained}
    new = sorted(f"{path}:{line} {module}" for path, line, module in unexplained)
    assert not new, ("imports inside functions hide arrows of the import graph: hoist them to the module's top, "
                     "or say why on the line (# lazy: optional dependency / keeps rag --help fast / ...):\n"
                     + "\n".join(new))


# --------------------------------------------------------------------------- every room placed
def test_every_room_is_placed_in_the_rooms_contract() -> None:
    """A layers contract fences only the rooms it names: a new module or package directly under a floor that is not
    a room of its own (``ingest`` and ``api`` are one room each) must be placed in a layer of the "Rooms" contract,
    or nothing stops it importing upward."""
    contracts = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    rooms_contract = next(c for c in contracts["contracts"] if c["name"].startswith("Rooms"))
    rooms = {room.strip() for layer in rooms_contract["layers"] for room in re.split(r"[|:]", layer)}
    assert {"ingest", "api"} <= rooms
    children = {f"{floor}.{child.stem if child.is_file() else child.name}"
                for floor in ("rag", "app") for child in (PROJECT_ROOT / floor).iterdir()
                if (child.suffix == ".py" and child.stem != "__init__")
                or (child.is_dir() and (child / "__init__.py").is_file())}
    assert children, "no rooms found"
    assert children <= rooms, f"not placed in a layer of the Rooms contract: {sorted(children - rooms)}"
