"""What a registry holds, read through its HTTP API: every tag of some repositories, each
manifest checked to name only blobs the registry has (what a stopped or faulted job leaves
must be complete or absent, never half there)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

ACCEPT = ", ".join(("application/vnd.docker.distribution.manifest.v2+json",
                    "application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.oci.image.index.v1+json"))


def tags(http: httpx.Client, repo: str) -> list[str]:
    answer = http.get(f"/v2/{repo}/tags/list")
    return [] if answer.status_code == 404 else sorted(answer.json().get("tags") or [])


def manifest(http: httpx.Client, repo: str, tag: str) -> dict[str, Any] | None:
    answer = http.get(f"/v2/{repo}/manifests/{tag}", headers={"Accept": ACCEPT})
    return None if answer.status_code == 404 else dict(answer.json())


def missing_blobs(http: httpx.Client, repo: str, document: dict[str, Any]) -> list[str]:
    named = [*([document["config"]] if "config" in document else []),
             *document.get("layers", [])]
    return [d["digest"] for d in named
            if http.head(f"/v2/{repo}/blobs/{d['digest']}").status_code != 200]


def sound(http: httpx.Client, repositories: Sequence[str], *, settle: float = 0.0
          ) -> dict[str, list[str]]:
    """{repo: its tags}, asserting every manifest under every tag names only blobs the
    registry holds. With `settle`, first wait until the tag lists hold still for that many
    seconds: a request in flight when a process died still reaches the registry."""
    held = {repo: tags(http, repo) for repo in repositories}
    while settle:
        time.sleep(settle)
        again = {repo: tags(http, repo) for repo in repositories}
        if again == held:
            break
        held = again
    for repo, listed in held.items():
        for tag in listed:
            document = manifest(http, repo, tag)
            assert document is not None, f"{repo}:{tag} is listed and unreadable"
            lost = missing_blobs(http, repo, document)
            assert not lost, f"{repo}:{tag} names blobs the registry lacks: {lost}"
    return held
