"""The cluster job's own gpurl: the `__main__` of the zipapp the job carries (`jobapp`), stdlib
only, so the job needs nothing but a python3.

    python3 -B job.pyz SUBCOMMAND ...          the layer tool (writer/tool.py)
    python3 -B job.pyz attest SUBCOMMAND ...   the SBOM and provenance writer (attest/tool.py)
    python3 -B job.pyz start STEP ...          the job's steps before its first executor run
                                               (cluster/jobstart.py)
    python3 gpu.pyz gpu-check --out R.json ... the GPU check (gpu/check.py), in the image
                                               on its GPU node (`invoke verify-gpu`)

The layer tool takes no tool name, so the job calls it as it always has
(`python3 -B "$LAYER_TOOL" SUBCOMMAND`); a tool named first is that tool. Each zipapp carries
the tools its job runs (the build job's the first two, verify-gpu's the GPU check); one it does
not carry is refused in one line.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

LAYER = "gpurl_tasks.writer.tool"
TOOLS = {"attest": "gpurl_tasks.attest.tool", "gpu-check": "gpurl_tasks.gpu.check",
         "start": "gpurl_tasks.cluster.jobstart"}
OLDEST = (3, 11)  # the package's requires-python


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool `argv` names (the layer tool when it names none) on the rest of it."""
    if sys.version_info < OLDEST:
        print(f"{sys.argv[0]}: error: this python3 is {sys.version.split()[0]}; gpurl's job "
              f"steps need {'.'.join(map(str, OLDEST))} or newer (cluster.task-image)",
              file=sys.stderr)
        return 2
    args = list(sys.argv[1:] if argv is None else argv)
    module = TOOLS.get(args[0], LAYER) if args else LAYER
    if module != LAYER:
        args = args[1:]
    try:
        tool = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if not f"{module}.".startswith(f"{exc.name}."):  # a module the tool imports is missing
            raise
        print(f"{sys.argv[0]}: error: this zipapp does not carry {module}", file=sys.stderr)
        return 2
    result: int = tool.main(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
