"""The few lines a user's repository commits so `invoke` and `nox` find gpurl's tasks and
sessions there (relative path -> text); `gpurl init` writes them."""

from __future__ import annotations

__all__ = ["SHIMS"]

SHIMS = {
    "tasks.py": (
        '"""invoke tasks of this repository\'s image: gpurl\'s collection (`invoke --list`)."""\n'
        "\n"
        "from gpurl_tasks.collection import ns  # noqa: F401\n"),
    "noxfile.py": (
        '"""nox sessions of this repository\'s image: gpurl\'s (`nox -l`)."""\n'
        "\n"
        "import gpurl_tasks.sessions  # noqa: F401\n"),
}
