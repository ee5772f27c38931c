"""The files a project commits so that `invoke` and `nox` run gpurl there: each imports
gpurl's collection or sessions from the installed package, nothing of gpurl's source is
copied. `gpurl init` writes them; gpurl's own tasks.py is the same file (a test checks it).
`gpurl TASK` needs neither: it runs `collection.ns` itself."""

from __future__ import annotations

__all__ = ["SHIMS"]

# relative path in the project -> the file's exact text
SHIMS: dict[str, str] = {
    "tasks.py": '"""invoke tasks of this repository\'s image: gpurl\'s collection (`invoke --list`)."""\n'
                "\n"
                "from gpurl_tasks.collection import ns  # noqa: F401\n",
    "noxfile.py": '"""nox sessions of this repository\'s image: gpurl\'s (`nox -l`)."""\n'
                  "\n"
                  "import gpurl_tasks.sessions  # noqa: F401\n",
}
