"""The orchestration's registry (writer/orchestration.py's `Registry`) as the cluster job has
it: crane as a subprocess, stdlib only. Each call runs with `-v`, so the registry's answer
and its Retry-After (delta-seconds or an HTTP date) are in crane's stderr, and is sent again
by writer/retry.py's rules: crane (go-containerregistry v0.20.3) retries a little by itself,
never a 429 on a read, and never reads Retry-After. The composed image goes to the cache
repository itself, where every layer it names already is: crane moves none. The job's
attestation step (attest/tool.py) reads and pushes by full reference through the same calls.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpurl_tasks.writer.composition import Composition
from gpurl_tasks.writer.orchestration import ComposeError, Slot, StagedSlice
from gpurl_tasks.writer.records import write_layout
from gpurl_tasks.writer.retry import RETRIED_ANSWERS, RetryRules

__all__ = ["Crane", "CraneFailed", "crane_answer", "retry_after_of"]

_RETRIED = re.compile(RETRIED_ANSWERS)
_RETRY_AFTER = re.compile(r"^retry-after:[ \t]*(.+?)\s*$", re.I | re.M)
_ABSENT = re.compile(r"MANIFEST_UNKNOWN|NAME_UNKNOWN|BLOB_UNKNOWN|status code 404")
_SECRETS = ((re.compile(r"(Bearer|Basic) [^ \"]+"), r"\1 <redacted>"),
            (re.compile(r"_state=[^&\" ]+"), "_state=REDACTED"))


def retry_after_of(said: str) -> str | None:
    """The last Retry-After crane -v logged (a response header), as the registry wrote it."""
    found = _RETRY_AFTER.findall(said)
    return found[-1] if found else None


def crane_answer(said: str) -> str:
    """The registry's answer in crane's stderr: its `Error:` lines (else its last line), one
    line, with tokens and upload states redacted."""
    lines = said.splitlines()
    answer = " ".join(line for line in lines if line.startswith("Error: ")) \
        or (lines[-1] if lines else "")
    for pattern, replacement in _SECRETS:
        answer = pattern.sub(replacement, answer)
    return answer


class CraneFailed(Exception):
    """A crane call's final answer (redacted, one line): not worth sending again, or no
    retry left."""

    def __init__(self, answer: str) -> None:
        super().__init__(answer)
        self.answer = answer

    @property
    def absent(self) -> bool:
        """The registry said it holds no such manifest, repository or blob."""
        return _ABSENT.search(self.answer) is not None


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@dataclasses.dataclass(kw_only=True)
class Crane:
    """crane at `binary` on `repository` (host/path: the cache repository), its image
    layouts written under `scratch`; `on_retry` hears each retry in the job's one line."""

    binary: Path
    repository: str
    scratch: Path
    rules: RetryRules
    on_retry: Callable[[str], None] = _say
    sleep: Callable[[float], None] = time.sleep

    @property
    def composed_repository(self) -> str:
        return self.repository

    def _ref(self, reference: str) -> str:
        return f"{self.repository}{'@' if reference.startswith('sha256:') else ':'}{reference}"

    def _attempt(self, args: list[str], what: str, attempt: int, *, first_byte: bool = False
                 ) -> bytes | None:
        """One try of `crane -v ARGS`: its stdout (`first_byte`: only its first byte, and the
        call ends there), None to try again (the wait done, the line said), CraneFailed when the
        answer is final or no retry is left."""
        # stderr to a file: -v logs every request, more than a pipe holds while stdout is read
        with tempfile.TemporaryFile() as log, subprocess.Popen(
                [str(self.binary), "-v", *args], stdout=subprocess.PIPE, stderr=log) as proc:
            assert proc.stdout is not None
            out = proc.stdout.read(1) if first_byte else proc.stdout.read()
            if first_byte and out:
                proc.kill()
            proc.communicate()
            if proc.returncode == 0 or (first_byte and out):
                return out
            log.seek(0)
            said = log.read().decode(errors="replace")
        answer = crane_answer(said)
        if not _RETRIED.search(answer):
            raise CraneFailed(answer)
        if not self.rules.again(attempt):
            raise CraneFailed(f"{answer} after {attempt} attempts")
        after = retry_after_of(said)
        ms = int(self.rules.delay(attempt, after) * 1000)
        shown = f"Retry-After {after}{' s' if after.isdigit() else ''}, " if after else ""
        self.on_retry(f"    retry {attempt}/{self.rules.attempts - 1} in "
                      f"{ms // 1000}.{ms % 1000 // 100}s ({shown}{what}): {answer}")
        self.sleep(ms / 1000)
        return None

    def _call(self, args: list[str], what: str, *, first_byte: bool = False) -> bytes:
        attempt = 1
        while (out := self._attempt(args, what, attempt, first_byte=first_byte)) is None:
            attempt += 1
        return out

    def _json(self, args: list[str], what: str) -> Mapping[str, Any] | None:
        try:
            document = json.loads(self._call(args, what))
        except CraneFailed as failed:
            if failed.absent:
                return None
            raise ComposeError(f"cannot read {args[-1]}: {failed.answer}") from None
        except ValueError:
            raise ComposeError(f"{args[-1]} is not a JSON document") from None
        if not isinstance(document, dict):
            raise ComposeError(f"{args[-1]} is not a JSON object")
        return document

    # --- any reference (the job's attestation step): CraneFailed on a final answer --------

    def read(self, document: str, reference: str) -> bytes:
        """`crane manifest|config REFERENCE`: the `document`'s bytes as the registry holds
        them (a manifest's are what its digest is of)."""
        return self._call([document, reference], f"crane {document} {reference}")

    def digest(self, reference: str) -> str:
        return self._call(["digest", reference], f"crane digest {reference}").decode().strip()

    def export(self, reference: str, platform: str, target: Path) -> None:
        """`crane export --platform PLATFORM REFERENCE TARGET`: the image's filesystem as one
        tar (the job's executor, for its overlay)."""
        self._call(["export", "--platform", platform, reference, str(target)],
                   f"export of {reference}")

    def tag(self, reference: str, tag: str) -> None:
        """`crane tag REFERENCE TAG`: the manifest `reference` names, also under `tag` in its
        repository (one manifest PUT, no blob moves)."""
        self._call(["tag", reference, tag], f"crane tag {reference} {tag}")

    def push_layout(self, layout: Path, reference: str, what: str) -> str:
        """`crane push LAYOUT REFERENCE`: the layout's one image or index -> its reference."""
        return self._call(["push", str(layout), reference], what).decode().strip()

    # --- writer/orchestration.py's Registry ------------------------------------------------

    def lookup(self, tag: str) -> str | None:
        ref = self._ref(tag)
        try:
            return self.digest(ref)
        except CraneFailed as failed:
            if failed.absent:
                return None
            raise ComposeError(f"cannot look up {ref}: {failed.answer}") from None

    def manifest(self, reference: str) -> Mapping[str, Any]:
        ref = self._ref(reference)
        document = self._json(["manifest", ref], f"crane manifest {ref}")
        if document is None:
            raise ComposeError(f"cannot read {ref}: the registry no longer holds it")
        return document

    def blob_json(self, digest: str) -> Mapping[str, Any] | None:
        ref = self._ref(digest)
        return self._json(["blob", ref], f"read of blob {ref}")

    def has_blob(self, digest: str, *, composed: bool = False) -> bool:
        """crane has no HEAD of a blob: the first byte of its GET shows the blob is there
        (the rest is never read), a 404 that it is not."""
        ref = self._ref(digest)
        try:
            self._call(["blob", ref], f"read of blob {ref}", first_byte=True)
        except CraneFailed as failed:
            if failed.absent:
                return False
            raise ComposeError(f"cannot read blob {ref}: {failed.answer}") from None
        return True

    def _push(self, layout: Path, ref: str, what: str) -> str:
        try:
            return self.push_layout(layout, ref, what)
        except CraneFailed as failed:
            raise ComposeError(f"cannot push {what.removeprefix('push of ')} to {ref}: "
                               f"{failed.answer}") from None

    def push_record(self, slot: Slot, manifest: bytes, config: bytes, staged: StagedSlice,
                    *, lost: bool) -> None:
        """crane pushes nothing, not even a missing blob, when the tag already names the
        manifest (the same slice, the same bytes): a record whose blob is gone is pushed
        under a tag of its own first, which uploads the blob, then under its own tag again."""
        layout = self.scratch / f"{slot.name}.image"
        shutil.rmtree(layout, ignore_errors=True)
        write_layout(layout, manifest, config, moved=(staged.blob, staged.path))
        tags = [slot.tag]
        if lost:
            tags.insert(0, f"{slot.tag}-rewrite-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}")
        try:
            for tag in tags:
                self._push(layout, self._ref(tag), f"push of slice {slot.name}")
        finally:
            shutil.rmtree(layout, ignore_errors=True)

    def gather(self, composition: Composition) -> None:
        """Nothing: the layers are the cache repository's, and crane pushes the config."""

    def push_composed(self, composition: Composition) -> str:
        layout = self.scratch / "env"
        shutil.rmtree(layout, ignore_errors=True)
        write_layout(layout, composition.manifest, composition.config)
        try:
            return self._push(layout, self._ref(composition.tag), "push of the composed environment")
        finally:
            shutil.rmtree(layout, ignore_errors=True)
