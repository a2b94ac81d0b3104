"""``rag`` under Windows' file-system rules (tests/windows.py): what the tests' servers run during the Windows pass
(``pytest --windows-rules``), so a server's own renames and deletes meet them too."""

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from windows import WindowsRules, install  # noqa: E402

install(WindowsRules())

from app.cli.main import main  # noqa: E402

main(prog_name="rag")
