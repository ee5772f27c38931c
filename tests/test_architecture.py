"""The layout holds: imports point one way down the pipeline, processes run only through
`proc`, and the pure modules reach no network, process or terminal. Read from the source."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gpurl_tasks"
# A module may import its own layer and the ones before it; cluster and local are siblings.
LAYERS = {"basics": 0, "writer": 0, "plan": 1, "dockerfile": 2, "attest": 3, "oci": 4, "rebuild": 5,
          "release": 6, "cluster": 7, "local": 7, "launcher": 0,
          "adopt": 2, "gpu": 0}
# The entry points, above every layer: the `gpurl` command, the collection of tasks it runs
# (a project's tasks.py imports it) and the nox sessions.
ENTRY = {"__main__", "collection", "sessions"}
EDGE_IMPORTS = {"subprocess", "httpx", "socket", "http.server", "urllib.request"}
PURE = ["plan.lock", "plan.target", "plan.sizes", "plan.planner", "plan.variants",
        "plan.wheelglobs", "plan.model", "plan.report", "dockerfile.checks",
        "dockerfile.model", "dockerfile.recipe", "dockerfile.lint", "dockerfile.inputs",
        "dockerfile.provenance", "dockerfile.wheels", "dockerfile.handwritten", "dockerfile.ignore",
        "oci.image",
        "oci.scheme", "release.verify",
        "release.pin", "release.index", "rebuild.fingerprint", "rebuild.inputs_key",
        "cluster.watch", "imageref", "errors", "steps",
        "plan.layerlimit", "plan.fitting", "dockerfile.layers", "attest.sbom", "attest.provenance",
        "attest.check",
        "attest.documents", "attest.verification", "launcher.source", "launcher.table",
        "config", "values", "gpu.result", "gpu.fatbin", "writer.orchestration", "writer.retry"]


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = ast.parse(path.read_text())
    return found


MODULES = _modules()


def _layer(module: str) -> str:
    head = module.split(".")[0]
    return head if head in LAYERS else "entry" if module in ENTRY else "basics"


def _rank(layer: str) -> int:
    return max(LAYERS.values()) + 1 if layer == "entry" else LAYERS[layer]


def _imports(tree: ast.Module) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "gpurl_tasks":
                names += [f"gpurl_tasks.{a.name}" for a in node.names]
            else:
                names.append(node.module)
                # `from gpurl_tasks.attest import collect` imports the module attest.collect
                package = PACKAGE.parent.joinpath(*node.module.split("."))
                names += [f"{node.module}.{a.name}" for a in node.names
                          if (package / f"{a.name}.py").is_file()]
    return names


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_one_way(module: str) -> None:
    mine = _layer(module)
    for target in _imports(MODULES[module]):
        if not target.startswith("gpurl_tasks."):
            continue
        theirs = _layer(target.removeprefix("gpurl_tasks."))
        assert _rank(theirs) < _rank(mine) or theirs == mine \
            or theirs == "basics", f"{module} ({mine}) imports {target} ({theirs})"


# Runs alone, stdlib only, in env-base's python3 (the cluster job's copy has no gpurl_tasks
# to import proc from): its probe of the venv and uv starts processes itself.
# scripts gpurl writes into the repository to run on their own (the cluster job's layer writer,
# the image's package-set and `uv pip check` checks, the job's SBOM and provenance writer):
# they start processes and print
# (the layer tool's composition in the job runs uv and crane: writer.job, writer.crane; the
# zipapp's `__main__` refuses a tool its zipapp does not carry: cluster.jobmain)
STANDALONE = {"writer.probe", "writer.tool", "writer.crane", "writer.job", "dockerfile.envcheck",
              "attest.tool", "gpu.check", "cluster.jobmain", "cluster.jobstart"}
# What the job's zipapp (cluster/jobapp.py) carries to the cluster job, which has no gpurl
# installed: each tool's package, whole (the attestation step with the writer's OCI
# spellings and crane adapter), and the zipapp's `__main__`; the GPU check runs in the image on
# the node, its package, the error type its modules raise and the atomic writer of its result.
SHIPPED = {"attest": {"attest.sbom", "attest.provenance", "attest.documents", "attest.tool",
                      "writer.ocispec", "writer.crane", "writer.retry", "writer.orchestration",
                      "writer.composition", "writer.records", "writer.blob"},
           "writer": {m for m in MODULES if m.startswith("writer.")},
           "cluster": {"cluster.jobmain", "cluster.jobstart", "writer.crane", "writer.retry",
                       "writer.orchestration", "writer.composition", "writer.records",
                       "writer.blob", "writer.ocispec", "attest.tool", "attest.sbom",
                       "attest.provenance", "attest.documents", "errors", "files"},
           "gpu": {m for m in MODULES if m.startswith("gpu.")} | {"errors", "files"}}


@pytest.mark.parametrize("package", sorted(SHIPPED))
def test_the_modules_the_job_runs_import_only_the_stdlib_and_each_other(package: str) -> None:
    import sys

    shipped = SHIPPED[package]
    assert shipped
    for module in sorted(shipped):
        ours = {t.removeprefix("gpurl_tasks.") for t in _imports(MODULES[module])
                if t.startswith("gpurl_tasks")}
        packages = {m.rpartition(".")[0] for m in shipped} - {""}  # the zipapp makes them
        assert ours <= shipped | packages, (module, ours - shipped - packages)
        others = {t.split(".")[0] for t in _imports(MODULES[module])} - {"gpurl_tasks"}
        assert others <= set(sys.stdlib_module_names) | {"__future__"}, (module, others)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_proc_starts_processes(module: str) -> None:
    if module == "proc" or module in STANDALONE:
        return
    assert "subprocess" not in _imports(MODULES[module])


@pytest.mark.parametrize("module", sorted(m for m in MODULES
                                          if m not in ("cli", "proc", *STANDALONE)))
def test_only_cli_prints(module: str) -> None:
    """cli prints outcomes and proc echoes `+ command`; everything else reports through
    return values or a `say` callback the task passes."""
    calls = [n for n in ast.walk(MODULES[module]) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "print"]
    assert not calls, f"{module} prints"


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_touch_no_network_process_or_terminal(module: str) -> None:
    tree = MODULES[module]
    assert not EDGE_IMPORTS & set(_imports(tree)), f"{module} imports an edge"
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id in ("print", "input")]
    assert not calls, f"{module} prints"


# Modules that run processes, talk to the network or the terminal, or write files: the
# edges. Besides these, any module importing an EDGE_IMPORTS module is one.
EDGE_MODULES = {"proc", "git", "cli"}
# `files` is both: pure modules load their inputs (pyproject, uv.lock, sizes) through its
# readers, and only its writer is a side effect.
FILE_WRITERS = {"write_atomic"}
# Paths from a pure module to an edge that exist today, each a debt with its reason. The test
# fails when one disappears (take it off) as when a new one appears.
KNOWN_EDGE_PATHS = {
    # cluster.iris takes its runner injected (proc.run in production) but imports proc for the
    # result and error types (Completed, CommandFailed), which proc defines beside subprocess.
    ("cluster.watch", "proc"): "cluster.watch -> cluster.iris -> proc",
}


def _edges(modules: Mapping[str, ast.Module]) -> set[str]:
    return EDGE_MODULES | {m for m, tree in modules.items() if EDGE_IMPORTS & set(_imports(tree))}


def _writers(modules: Mapping[str, ast.Module]) -> set[str]:
    """Modules that import a file writer from gpurl_tasks.files, or call `files.<writer>`."""
    return {m for m, tree in modules.items() for node in ast.walk(tree)
            if (isinstance(node, ast.ImportFrom) and node.module == "gpurl_tasks.files"
                and FILE_WRITERS & {a.name for a in node.names})
            or (isinstance(node, ast.Attribute) and node.attr in FILE_WRITERS
                and isinstance(node.value, ast.Name) and node.value.id == "files")}


def edge_paths(start: str, modules: Mapping[str, ast.Module] = MODULES) -> dict[str, str]:
    """edge module -> the shortest import path from `start` to it (breadth-first, through every
    gpurl_tasks module, function-level imports too), for every edge `start` reaches."""
    graph, edges = _graph(modules), _edges(modules) | _writers(modules)
    came_from: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    paths = {}
    for edge in sorted(edges & set(came_from) - {start}):
        path = [edge]
        while (prev := came_from[path[-1]]) is not None:
            path.append(prev)
        paths[edge] = " -> ".join(reversed(path))
    return paths


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_reach_no_edge_through_any_import(module: str) -> None:
    """Not directly and not through any chain of gpurl_tasks imports: a pure module that
    imports a helper that imports `git` runs git."""
    assert module not in _edges(MODULES) | _writers(MODULES), f"{module} is an edge itself"
    found = {(module, edge): path for edge, path in edge_paths(module).items()}
    known = {k: v for k, v in KNOWN_EDGE_PATHS.items() if k[0] == module}
    assert found == known


def test_the_edge_walk_follows_imports_transitively() -> None:
    modules = {"a": ast.parse("from gpurl_tasks.pkg import b\n"),
               "pkg": ast.parse(""),
               "pkg.b": ast.parse("def f():\n    from gpurl_tasks import c\n"),
               "c": ast.parse("import subprocess\n"),
               "d": ast.parse("from gpurl_tasks.files import read_text, write_atomic\n"),
               "e": ast.parse("from gpurl_tasks.d import x\n"),
               "f": ast.parse("from gpurl_tasks.files import read_text\n"),
               "g": ast.parse("from gpurl_tasks import files\nfiles.write_atomic(p, t)\n")}
    assert edge_paths("a", modules) == {"c": "a -> pkg.b -> c"}
    assert edge_paths("e", modules) == {"d": "e -> d"}
    assert edge_paths("f", modules) == {}
    assert "g" in _writers(modules)


# oci/ takes plain values (references, tags, settings, media types, bytes): the config, git
# and the attestation documents stay with its callers (release/configured.py maps a config).
OCI_MAY_NOT_REACH = ("config", "git", "attest")
# Import edges a chain from oci/ may cross into those, each a debt with its reason. The test
# fails when one disappears (take it off) as when a new chain appears.
KNOWN_OCI_REACH = {
    # oci.auth finds the token through redact, which reads registry.user's variable raw (no
    # resolved config on the redaction path) with config.environment_value.
    ("redact", "config"): "redact.known_secrets reads GPURL_REGISTRY_USER",
}


def reach(start: str, forbidden: Collection[str], graph: Mapping[str, set[str]],
          crossing: Collection[tuple[str, str]] = ()) -> dict[str, str]:
    """forbidden module (or a module of a forbidden package) -> the shortest import chain from
    `start` to it, through every gpurl_tasks module but over none of the edges `crossing`."""
    came_from: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in came_from and (node, nxt) not in crossing:
                came_from[nxt] = node
                queue.append(nxt)
    found = {}
    for module in sorted(came_from):
        if any(module == f or module.startswith(f + ".") for f in forbidden):
            path = [module]
            while (prev := came_from[path[-1]]) is not None:
                path.append(prev)
            found[module] = " -> ".join(reversed(path))
    return found


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[0] == "oci"))
def test_oci_reaches_neither_the_config_nor_git_nor_the_attestations(module: str) -> None:
    """Not directly and not through a helper: `oci.tags` once read the config and the source
    id (git), `oci.referrers` the attestation documents."""
    assert reach(module, OCI_MAY_NOT_REACH, _graph(), KNOWN_OCI_REACH) == {}


def test_each_known_oci_reach_is_still_an_import() -> None:
    graph = _graph()
    assert [edge for edge in KNOWN_OCI_REACH if edge[1] not in graph.get(edge[0], ())] == []


def test_the_reach_check_finds_a_chain_through_a_helper() -> None:
    graph = {"oci.tags": {"dockerfile.context", "errors"}, "dockerfile.context": {"git"},
             "oci.auth": {"redact"}, "redact": {"config"}, "oci.referrers": {"attest.documents"}}
    assert reach("oci.tags", OCI_MAY_NOT_REACH, graph) == {"git": "oci.tags -> dockerfile.context -> git"}
    assert reach("oci.referrers", OCI_MAY_NOT_REACH, graph) == {
        "attest.documents": "oci.referrers -> attest.documents"}
    assert reach("oci.auth", OCI_MAY_NOT_REACH, graph) == {"config": "oci.auth -> redact -> config"}
    assert reach("oci.auth", OCI_MAY_NOT_REACH, graph, {("redact", "config")}) == {}


def test_the_top_level_holds_only_basics_and_subpackages() -> None:
    top = {p.name for p in PACKAGE.iterdir() if not p.name.startswith(("_", "."))}
    basics = {"config.py", "errors.py", "proc.py", "files.py", "values.py", "cli.py", "git.py",
              "redact.py", "imageref.py", "steps.py", "configdoc.py", "program.py"}
    entry = {f"{m}.py" for m in ENTRY if not m.startswith("_")}
    assert top - {"__pycache__"} == basics | entry | {n for n in LAYERS if n != "basics"}
    assert len(basics) <= 12  # a new basic module joins one of these, or a package


def test_every_subpackage_says_what_it_owns() -> None:
    for name in LAYERS:
        if name != "basics":
            doc = ast.get_docstring(MODULES[name]) or ""
            assert "Imports" in doc, f"gpurl_tasks/{name}/__init__.py does not say what it imports"


def _imported_modules(tree: ast.Module, modules: Collection[str]) -> set[str]:
    """The gpurl_tasks modules `tree` imports (function-level imports too): `from
    gpurl_tasks.plan import lock` imports the package and its module `plan.lock`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return {t.removeprefix("gpurl_tasks.") for t in found
            if t.startswith("gpurl_tasks.")} & set(modules)


def _graph(modules: Mapping[str, ast.Module] = MODULES) -> dict[str, set[str]]:
    """module -> the gpurl_tasks modules it imports (function-level imports too)."""
    return {module: _imported_modules(tree, modules) - {module}
            for module, tree in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules on it, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_import_cycle_anywhere() -> None:
    """Within a package as between packages: a cycle hidden by a function-level import (the
    planner and its variants once imported each other) is still a cycle."""
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# GPURL_* variables that are not config keys, each with why it is read outside the cascade.
# Every other GPURL_* name belongs to config.py, the one reader of the environment's config.
NOT_CONFIG_ENV = {
    "GPURL_DEBUG": "cli: show the traceback of an internal error",
    "GPURL_REGISTRY_TOKEN": "redact: the registry token, a secret kept out of the config",
    "GPURL_KANIKO_ROOT": "kaniko script: test-only hook, where the harness roots the job",
    "GPURL_IRIS": "cluster.iris_release: which iris program runs on this machine",
    "GPURL_DOCKER_CLIENT": "local.engine: which docker client runs on this machine",
    "GPURL_CACHE_DIR": "local.setup: where this machine keeps the local path's state",
    "GPURL_LOG": "proc: the log file handed to a detached child, set by proc itself",
    "GPURL_PROBE": "local.engine: an ENV line of the probe image, not a variable read",
    "GPURL_IMAGE_DIGEST": "gpu.check: the digest the GPU job runs, set in the job's environment",
}
_ENV_NAME = re.compile(r"GPURL_[A-Z0-9_]*")


def _env_names(tree: ast.Module) -> set[str]:
    """String constants spelled like a GPURL_* variable name (prose mentioning one is not)."""
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and _ENV_NAME.fullmatch(n.value)}


def _second_readers(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    return {module: names for module, tree in modules.items() if module != "config"
            and (names := _env_names(tree) - set(NOT_CONFIG_ENV))}


def test_config_is_the_only_reader_of_gpurl_variables() -> None:
    """A module reading a GPURL_* variable itself bypasses the cascade (its order, its typed
    errors, `load_committed_config` leaving the environment out)."""
    assert _second_readers(MODULES) == {}


def test_every_variable_read_outside_the_cascade_draws_no_unknown_warning() -> None:
    """config.OTHER_VARIABLES (what `warn_unknown_variables` accepts besides the config keys'
    variables) holds each variable read outside the cascade."""
    from gpurl_tasks.config import OTHER_VARIABLES, PROFILE_ENV

    assert set(NOT_CONFIG_ENV) | {PROFILE_ENV} <= OTHER_VARIABLES


def test_the_reader_check_finds_a_second_reader() -> None:
    tree = ast.parse('import os\nuser = os.environ.get("GPURL_REGISTRY_USER")\n'
                     '"""Set GPURL_REGISTRY_USER to name the user."""\n')
    assert _second_readers({"oci.auth": tree}) == {"oci.auth": {"GPURL_REGISTRY_USER"}}
    assert _second_readers({"config": tree}) == {}


@pytest.mark.parametrize("package", sorted({p.parent for p in PACKAGE.rglob("__init__.py")}),
                         ids=lambda p: p.relative_to(PACKAGE.parent).as_posix())
def test_each_package_docstring_names_every_module_it_holds(package: Path) -> None:
    """A package's docstring is its map: each module in it is named there in backticks, so a
    module added, moved or renamed without its line fails here."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    named = set(re.findall(r"`([a-z_]+)`", doc))
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    assert not modules - named, f"{package.name}/__init__.py does not name {sorted(modules - named)}"
