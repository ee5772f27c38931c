"""A hand-written Dockerfile (`build.generate = false`): what its build reads.

gpurl neither plans nor writes such a file; the cluster build runs it with the same kaniko
job. What the build reads, and so what `rebuild-needed` compares, is: the stages that reach
the image (kaniko runs with `--skip-unused-stages`, the last stage is the image), the ARG
values they see (the file's defaults under `build.build-args`), and the context files their
COPY/ADD take, after the context's .dockerignore. Pure: callers pass texts and file lists.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable, Mapping

from gpurl_tasks.dockerfile.ignore import in_context
from gpurl_tasks.dockerfile.inputs import DockerfileInputs, parse_dockerfile_inputs

__all__ = ["base_image", "copied_files", "image_inputs", "problems"]


def image_inputs(text: str, build_args: Mapping[str, str]) -> DockerfileInputs:
    """The Dockerfile's inputs as its image is built: the last stage is the target, a stage
    it does not reach is left out with the ARGs only such stages use."""
    parsed = parse_dockerfile_inputs(text, build_args)
    if not parsed.stages:
        return parsed
    whole = dataclasses.replace(parsed, target=parsed.stages[-1].name)
    reached = whole.image_stages()
    stages = tuple(s for s in whole.stages if s.name in reached)
    used = {name for s in stages for name in s.uses}
    args = tuple((key, value) for key, value in whole.args
                 if ("/" in key and key.split("/", 1)[0] in reached)
                 or ("/" not in key and key in used))
    return dataclasses.replace(whole, stages=stages, args=args)


def base_image(inputs: DockerfileInputs) -> str:
    """The external image the target stage starts from, through the stages it is FROM ("" for
    no stages, or a chain that never leaves them: `FROM scratch` is one)."""
    by_name = {s.name: s for s in inputs.stages}
    name, seen = inputs.target, set()
    while name in by_name and name not in seen:
        seen.add(name)
        name = by_name[name].base.lower() if by_name[name].base.lower() in by_name \
            else by_name[name].base
    return "" if name in by_name or name == "scratch" else name


def _matches(source: str, path: str) -> bool:
    """A COPY/ADD source (a file, a directory, or a glob of either) takes `path`, both
    relative to the context."""
    parts = [p for p in source.strip("/").split("/") if p not in ("", ".")]
    if not parts:  # `COPY . dest`: the whole context
        return True
    names = path.split("/")
    return len(names) >= len(parts) and all(
        fnmatch.fnmatchcase(name, part) for name, part in zip(names, parts, strict=False))


def copied_files(inputs: DockerfileInputs, files: Mapping[str, str], context: str,
                 ignore_text: str) -> dict[str, str]:
    """{repository path: blob id} of the files (`files`, repository-relative, with their blob
    ids) that a COPY/ADD of the image's stages takes from `context` (repository-relative) once
    its .dockerignore (`ignore_text`) has kept its rules' files out."""
    sources = [source for stage in inputs.stages for source in stage.copies]
    if not sources:
        return {}
    taken = in_context(files, context, ignore_text)
    return {path: files[path] for rel, path in sorted(taken.items())
            if any(_matches(source, rel) for source in sources)}


def problems(text: str, build_args: Mapping[str, str], files: Iterable[str], context: str,
             ignore_text: str) -> list[str]:
    """What would make the build fail or quietly differ from what the config says: no stage at
    all, a build arg the Dockerfile declares no ARG for (the builders ignore it), a COPY/ADD
    of the image's stages that takes no file of the context (missing, or kept out by
    .dockerignore); `files` are the bundle's, repository-relative."""
    parsed = parse_dockerfile_inputs(text, build_args)
    if not parsed.stages:
        return ["it has no FROM: no stage to build"]
    found = []
    declared = {key.rsplit("/", 1)[-1] for key, _ in parsed.args}
    found += [f"build.build-args sets {name}, which it declares no ARG for (the builders "
              "ignore it)" for name in sorted(set(build_args) - declared)]
    taken = in_context(files, context, ignore_text)
    for stage in image_inputs(text, build_args).stages:
        for source in stage.copies:
            if "$" not in source and not any(_matches(source, rel) for rel in taken):
                found.append(f"stage {stage.name}: COPY/ADD {source} takes no file of the "
                             f"context {context} (missing, or kept out by .dockerignore)")
    return found
