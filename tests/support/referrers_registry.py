"""A second real registry on 127.0.0.1, one that serves the OCI 1.1 referrers API.

Debian's docker-registry is CNCF distribution 2.8.2, which has no `/v2/<name>/referrers/<digest>`
(the endpoint came with distribution v3, which no package source here carries, nor any other
registry package in the lists this machine can install from). go-containerregistry's own
registry (`pkg/registry`, in the crane source archive the cluster tests build from) implements
the endpoint behind an option that `crane registry serve` does not set: a ten-line main of
gpurl's over that library, built offline like crane (`go build -mod=vendor`), serves it. It
keeps everything in memory and allows anonymous pushes. Note where it departs from the spec:
its referrers list gives each artifact its config's media type as `artifactType`, not the
manifest's own `artifactType` (oci/referrers.py reads the manifest for such an entry).
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from gpurl_tasks.config import load_config
from gpurl_tasks.local.from_source import build_binary, go_toolchain, load_sources
from tests.conftest import REPO_ROOT
from tests.support.local_parts import free_port, need

__all__ = ["referrers_registry"]

_PACKAGE = "./cmd/gpurl-referrers-registry"
_MAIN = """package main

import (
	"fmt"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/registry"
)

// Serves an in-memory registry with the OCI 1.1 referrers API on the address in argv[1].
func main() {
	handler := registry.New(registry.WithReferrersSupport(true))
	if err := http.ListenAndServe(os.Args[1], handler); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
"""


def _binary(cache: Path) -> Path:
    sources_dir = load_config(REPO_ROOT, profile="demo", env={}).cluster.source_archives
    need(sources_dir.is_dir(), f"no go-containerregistry source archive at {sources_dir}: the "
         "registry with the referrers API is built from it (set cluster.source-archives)")
    go_requirement, sources = load_sources(sources_dir)
    source = sources["crane"]
    need(source.archive.is_file(), f"{source.archive} is missing")
    own = dataclasses.replace(source, name="referrers-registry", package=_PACKAGE)
    return build_binary(own, cache, go_toolchain(cache, go_requirement),
                        files={_PACKAGE.removeprefix("./") + "/main.go": _MAIN})


@contextlib.contextmanager
def referrers_registry(cache: Path, log: Path) -> Iterator[str]:
    """Run the registry; yield its host (127.0.0.1:PORT, plain HTTP like the loopback one)."""
    binary = _binary(cache)
    host = f"127.0.0.1:{free_port()}"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(binary), host], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://{host}/v2/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the referrers registry did not start: {log.read_text()}")
            time.sleep(0.2)
        yield host
    finally:
        proc.terminate()
        proc.wait(timeout=10)
