"""The cluster job's steps before its first executor run, in gpurl's own code (stdlib only).

job.sh runs them from the zipapp with the task image's python3, which is gone once kaniko's
first run replaces the job's filesystem (the image's own python3 runs the steps after it):

- `prepare`: the job's inputs (its environment) checked, the job's CA bundle copied where
  every later step reads it, crane fetched and checked by its sha256, the pinned executor
  exported for the overlay, and the values the script's later steps use written as a file it
  sources;
- `admit`, after the overlay and the auth file: the immutable tag looked up (never moved
  without OVERWRITE_TAG=1), then the profile's prebuilt wheels fetched and checked against
  their MANIFEST (its platform, its ABI key, each wheel's sha256), never compiled instead.

Every registry call and download is retried by writer/retry.py's rules, crane's through
writer/crane.py. An error is one `gpurl job: error:` line and exit 1, as the script's own.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import shutil
import ssl
import sys
import tarfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpurl_tasks.attest.tool import manifest_key, manifest_sums
from gpurl_tasks.files import sha256_of, write_atomic
from gpurl_tasks.writer.crane import Crane, CraneFailed
from gpurl_tasks.writer.retry import RetryRules, retryable_status

__all__ = ["JobInputs", "JobStartError", "job_inputs", "main"]

# Where Go (kaniko, crane) looks for the system's CA bundle, in its order: the first found.
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                  "/etc/ssl/ca-bundle.pem", "/etc/pki/tls/cacert.pem",
                  "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/cert.pem")
WHEEL_SOURCES = ("prebuilt-wheelhouse", "wheel-builder")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_NO_COMPILE = "not compiling instead; set WHEEL_SOURCE=wheel-builder to compile"


class JobStartError(Exception):
    """What stops the job before its executor runs, said in one line."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobInputs:
    """The job's environment, checked: what it builds, where it pushes, how it retries."""

    gitsha: str
    dockerfile: str
    tag: str  # TAG_PREFIX-GITSHA, the immutable tag
    floating_tag: str | None  # pushed too when PUSH_FLOATING=1
    overwrite: bool
    retries: int
    retry_max_wait: int
    wheel_source: str | None  # None: the profile has no compiled wheels

    @property
    def rules(self) -> RetryRules:
        return RetryRules(attempts=self.retries + 1, max_wait=float(self.retry_max_wait))


def job_inputs(env: Mapping[str, str], args: argparse.Namespace) -> JobInputs:
    """The job's inputs from its environment over the rendered defaults (`args`), or the
    first one that is refused."""
    gitsha = env.get("GITSHA", "")
    if not gitsha:
        raise JobStartError("GITSHA is required: the image is pushed as the immutable tag "
                            "PREFIX-GITSHA")
    if not re.fullmatch(args.source_id, gitsha):
        raise JobStartError("GITSHA must be a lowercase hex commit id (optionally "
                            f"-dirty-<12 hex>), got {gitsha!r}")
    if env.get("SINGLE_SNAPSHOT", "0") not in ("", "0"):
        raise JobStartError("SINGLE_SNAPSHOT=1 is refused: it collapses the image into one huge "
                            "layer that cannot be pulled over the cluster's registry egress "
                            "(every pod ImagePullBackOff); per-instruction layers are the default")
    dockerfile = env.get("DOCKERFILE") or args.dockerfile
    # an undecodable byte reads as a surrogate, which is not printable either
    if dockerfile.startswith("/") or ".." in dockerfile or not dockerfile.isprintable():
        raise JobStartError(f"DOCKERFILE must be a path inside the build context, got "
                            f"{dockerfile!r}")
    prefix = env.get("TAG_PREFIX") or args.tag_prefix
    floating = env.get("FLOATING_TAG") or (args.floating_tag if prefix == args.tag_prefix
                                           else prefix)
    for name, value in (("TAG_PREFIX", prefix), ("FLOATING_TAG", floating)):
        if not _TAG.fullmatch(value):
            raise JobStartError(f"{name} must be a tag (letters, digits, '_', '.', '-'), "
                                f"got {value!r}")
    bounds = (env.get("REGISTRY_RETRIES") or str(args.retries),
              env.get("REGISTRY_RETRY_MAX_WAIT") or str(args.retry_max_wait))
    if not all(re.fullmatch(r"[0-9]{1,4}", bound) for bound in bounds):
        raise JobStartError("REGISTRY_RETRIES and REGISTRY_RETRY_MAX_WAIT must be whole numbers")
    wheel_source = None
    if args.wheel_source:
        wheel_source = env.get("WHEEL_SOURCE") or args.wheel_source
        if wheel_source not in WHEEL_SOURCES:
            raise JobStartError(f"WHEEL_SOURCE must be {' or '.join(WHEEL_SOURCES)}, got "
                                f"{wheel_source!r}")
    return JobInputs(gitsha=gitsha, dockerfile=dockerfile, tag=f"{prefix}-{gitsha}",
                     floating_tag=floating if env.get("PUSH_FLOATING") == "1" else None,
                     overwrite=env.get("OVERWRITE_TAG") == "1", retries=int(bounds[0]),
                     retry_max_wait=int(bounds[1]), wheel_source=wheel_source)


def mount_over(path: str, mountinfo: str) -> str | None:
    """The mount of this job that `path` lies under (mountinfo's fifth field), if any: kaniko
    keeps every mount point out of its snapshots, so the image would miss what it writes."""
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
            if f"{path}/".startswith(f"{mount}/"):
                return mount
    return None


def _say(line: str) -> None:
    print(line, flush=True)


def ca_bundle_path(work: Path) -> Path:
    """Where the job's CA bundle is kept (under the kaniko dir: it outlives kaniko's reset)."""
    return work / "ca-certificates.crt"


def job_ca_bundle(work: Path, env: Mapping[str, str]) -> Path:
    """The job's trust, its system bundle plus $SSL_CERT_FILE, copied under the kaniko dir:
    kaniko's reset after its first run puts the built stage's /etc/ssl in place of this job's,
    and every later step (the executor, crane, the composing build) reads this copy."""
    found = next((Path(p) for p in SYSTEM_BUNDLES if Path(p).is_file()), None)
    text = found.read_text(encoding="utf-8", errors="replace") + "\n" if found else ""
    extra = env.get("SSL_CERT_FILE")
    if extra:
        if not extra.isprintable() or not Path(extra).is_file():
            raise JobStartError(f"SSL_CERT_FILE={extra!r} is not a file in this job")
        text += Path(extra).read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise JobStartError("this job has no CA bundle (/etc/ssl/certs/ca-certificates.crt, or "
                            "SSL_CERT_FILE): install ca-certificates in the task image")
    bundle = ca_bundle_path(work)
    write_atomic(bundle, text)
    _say(f"==> CA bundle for every step: {bundle} "
         f"({text.count('BEGIN CERTIFICATE')} certificates)")
    return bundle


def download(url: str, target: Path, rules: RetryRules, ca: Path) -> None:
    """`url` into `target` (whole or not at all), a 429, a 5xx or a broken connection sent
    again by `rules`; JobStartError with the answer otherwise."""
    context = ssl.create_default_context(cafile=str(ca))
    partial = target.with_name(target.name + ".partial")
    attempt = 1
    while True:
        retry_after = None
        try:
            with urllib.request.urlopen(url, timeout=60, context=context) as answer, \
                    partial.open("wb") as out:
                shutil.copyfileobj(answer, out, 1 << 20)
                expected = answer.headers.get("Content-Length")
                # a connection closed early ends the read quietly: count what came
                if expected is not None and expected.isdigit() and out.tell() != int(expected):
                    raise OSError(f"the answer was cut short: {out.tell()} of {expected} bytes")
            partial.replace(target)
            return
        except urllib.error.HTTPError as error:
            failure, worth = f"HTTP {error.code}", retryable_status(error.code)
            retry_after = error.headers.get("Retry-After")
        except (urllib.error.URLError, OSError) as error:
            failure, worth = str(getattr(error, "reason", error)), True
        partial.unlink(missing_ok=True)
        if not worth or not rules.again(attempt):
            raise JobStartError(failure)
        wait = rules.delay(attempt, retry_after)
        _say(f"    retry {attempt}/{rules.attempts - 1} in {wait:.1f}s ({url}): {failure}")
        time.sleep(wait)
        attempt += 1


def fetch_crane(args: argparse.Namespace, rules: RetryRules, ca: Path) -> Path:
    _say(f"==> crane {args.crane_url}")
    archive = args.work / "crane.tgz"
    try:
        download(args.crane_url, archive, rules, ca)
    except JobStartError as failed:
        raise JobStartError(f"could not download crane from {args.crane_url}: {failed}") from None
    if sha256_of(archive) != args.crane_sha256:
        raise JobStartError(f"crane archive checksum mismatch (expected sha256 "
                            f"{args.crane_sha256})")
    binary: Path = args.work / "crane"
    with tarfile.open(archive) as tar:
        member = tar.extractfile("crane")
        if member is None:
            raise JobStartError(f"the crane archive at {args.crane_url} has no crane")
        write_atomic(binary, member.read(), mode=0o755)
    return binary


def _crane(args: argparse.Namespace, rules: RetryRules) -> Crane:
    return Crane(binary=args.work / "crane", repository="", scratch=args.work, rules=rules,
                 on_retry=_say)


def prepare(args: argparse.Namespace, inputs: JobInputs, env: Mapping[str, str]) -> None:
    """Everything before the overlay; the values the script goes on with in WORK/job.vars."""
    mountinfo = Path("/proc/self/mountinfo")
    mount = mount_over(args.image_workspace, mountinfo.read_text() if mountinfo.exists() else "")
    if mount:
        raise JobStartError(f"the image's workspace {args.image_workspace} is under {mount}, a "
                            "mount of this job: kaniko would leave it out of the image")
    ca = job_ca_bundle(args.work, env)
    os.environ["SSL_CERT_FILE"] = str(ca)  # crane's trust too
    fetch_crane(args, inputs.rules, ca)
    _say(f"==> kaniko executor {args.executor_image} over {args.root}")
    try:
        _crane(args, inputs.rules).export(args.executor_image, args.platform,
                                          args.work / "executor.tar")
    except CraneFailed as failed:
        raise JobStartError(f"cannot export {args.executor_image}: {failed.answer}") from None
    values = {"SSL_CERT_FILE": str(ca), "DOCKERFILE": inputs.dockerfile, "TAG": inputs.tag,
              "DESTINATION": f"{args.image}:{inputs.tag}",
              "FLOATING": f"{args.image}:{inputs.floating_tag}" if inputs.floating_tag else "",
              "REGISTRY_RETRIES": str(inputs.retries),
              "REGISTRY_RETRY_MAX_WAIT": str(inputs.retry_max_wait),
              "WHEEL_SOURCE": inputs.wheel_source or "",
              "WHEELHOUSE": str(args.context / args.wheelhouse),
              # the wheels admit fetches: a composing job writes them as a layer of its own
              "PREBUILT_WHEELHOUSE": str(args.context / args.wheelhouse)
              if inputs.wheel_source == "prebuilt-wheelhouse" else "",
              # new on every run: the generated Dockerfile's last RUN is never cached
              "BUILD_ID": uuid.uuid4().hex}
    write_atomic(args.work / "job.vars",
                 "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items()))


def admit(args: argparse.Namespace, inputs: JobInputs) -> None:
    """The immutable tag is free (or knowingly overwritten); the prebuilt wheels are here."""
    destination = f"{args.image}:{inputs.tag}"
    _say(f"==> immutable tag {destination}")
    try:
        existing = _crane(args, inputs.rules).digest(destination)
    except CraneFailed as failed:
        if not failed.absent:
            raise JobStartError(f"cannot check whether {destination} exists: "
                                f"{failed.answer}") from None
        _say("    not pushed yet")
    else:
        if not inputs.overwrite:
            raise JobStartError(f"{destination} already exists as {existing}; an immutable tag "
                                "is never moved (pin that digest, or rebuild with invoke build "
                                "--force to overwrite it knowingly)")
        _say(f"    overwriting {existing} (OVERWRITE_TAG=1)")
    if inputs.wheel_source == "prebuilt-wheelhouse":
        fetch_wheels(args, inputs.rules, ca_bundle_path(args.work))


def fetch_wheels(args: argparse.Namespace, rules: RetryRules, ca: Path) -> None:
    """The MANIFEST first: another platform or ABI key fails in seconds, before any wheel."""
    base = args.wheel_base_url
    _say(f"==> prebuilt wheels from {base}")
    wheelhouse: Path = args.context / args.wheelhouse
    wheelhouse.mkdir(parents=True, exist_ok=True)
    try:
        download(f"{base}/MANIFEST", wheelhouse / "MANIFEST", rules, ca)
    except JobStartError:
        raise JobStartError(f"MANIFEST is missing at {base}/MANIFEST ({_NO_COMPILE})") from None
    manifest = (wheelhouse / "MANIFEST").read_text(encoding="utf-8", errors="replace")
    found = manifest_key(manifest, args.abi_prefix)
    sums = manifest_sums(manifest)
    for word in found.split():
        if word.startswith("platform=") and word != f"platform={args.wheel_platform}":
            raise JobStartError(
                f"the MANIFEST at {base} is for {word.replace('=', ' ')}, not this job's "
                f"{args.wheel_platform}: point build.wheel-base-url at the {args.wheel_platform} "
                f"wheels ({_NO_COMPILE})")
    if found != args.abi_key:
        raise JobStartError(f"the MANIFEST at {base} records another ABI key: expected "
                            f"{args.abi_key!r}, found {found or 'none'!r} (rebuild the wheels "
                            f"for these pins; {_NO_COMPILE})")
    for wheel in args.wheel:
        want = sums.get(wheel)
        if want is None:
            raise JobStartError(f"MANIFEST at {base} has no entry for {wheel}")
        try:
            download(f"{base}/{wheel}", wheelhouse / wheel, rules, ca)
        except JobStartError:
            raise JobStartError(f"wheel {wheel} is missing at {base}/{wheel} "
                                f"({_NO_COMPILE})") from None
        got = sha256_of(wheelhouse / wheel)
        if got != want:
            raise JobStartError(f"checksum mismatch for {wheel}: MANIFEST says {want}, the "
                                f"download is {got}")
        _say(f"    ok {wheel}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpurl job start", description=(
        "the cluster job's steps before its first executor run (job.sh renders every option; "
        "the job's environment overrides the defaults)"))
    parser.add_argument("step", choices=("prepare", "admit"))
    for name in ("root", "image-workspace", "image", "source-id", "dockerfile", "tag-prefix",
                 "floating-tag", "crane-url", "crane-sha256", "executor-image", "platform"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--context", type=Path, required=True)
    parser.add_argument("--retries", type=int, required=True)
    parser.add_argument("--retry-max-wait", type=int, required=True)
    wheels = parser.add_argument_group("the profile's compiled wheels (none: no option)")
    wheels.add_argument("--wheel-source", default="")
    wheels.add_argument("--wheelhouse", type=Path, default=Path(),
                        help="where the wheels are fetched to, in the build context")
    for name in ("wheel-base-url", "abi-key", "abi-prefix", "wheel-platform"):
        wheels.add_argument(f"--{name}", default="")
    wheels.add_argument("--wheel", action="append", default=[])
    return parser


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    env = os.environ
    try:
        inputs = job_inputs(env, args)
        if args.step == "prepare":
            prepare(args, inputs, env)
        else:
            admit(args, inputs)
    except JobStartError as failed:
        print(f"gpurl job: error: {failed}", file=sys.stderr)
        return 1
    return 0
