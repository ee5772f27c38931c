"""The `gpurl` command (`gpurl TASK`, `python -m gpurl_tasks TASK`, `gpurl --version`):
gpurl's program with its collection bundled in, so a project needs no tasks.py."""

from __future__ import annotations

from gpurl_tasks import cli
from gpurl_tasks.collection import ns
from gpurl_tasks.program import GpurlProgram, gpurl_version

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Run the command; `argv` runs it in-process (the nox sessions). Exits as the task does."""
    cli.RUNNING[:] = ["gpurl_tasks"]  # a task's help runs `python -m gpurl_tasks`, this again
    GpurlProgram(name="gpurl", binary="gpurl", binary_names=["gpurl"], version=gpurl_version(),
                 namespace=ns).run(argv)


if __name__ == "__main__":
    main()
