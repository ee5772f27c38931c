"""The cluster job's own gpurl: the `__main__` of the zipapp the job carries (`jobapp`), stdlib
only, so the job needs nothing but a python3.

    python3 -B job.pyz SUBCOMMAND ...          the layer tool (writer/tool.py)
    python3 -B job.pyz attest SUBCOMMAND ...   the SBOM and provenance writer (attest/tool.py)

The layer tool takes no tool name, so the job calls it as it always has
(`python3 -B "$LAYER_TOOL" SUBCOMMAND`); a tool named first is that tool.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

LAYER = "gpurl_tasks.writer.tool"
TOOLS = {"attest": "gpurl_tasks.attest.tool"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool `argv` names (the layer tool when it names none) on the rest of it."""
    args = list(sys.argv[1:] if argv is None else argv)
    module = TOOLS.get(args[0], LAYER) if args else LAYER
    if module != LAYER:
        args = args[1:]
    result: int = importlib.import_module(module).main(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
