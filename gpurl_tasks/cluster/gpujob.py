"""`invoke verify-gpu`: the pushed image itself, run as an iris job on the GPUs of one node,
checks itself there (gpu/check.py), and its verdict is attached to the image's manifest.

The job's task image is the image by digest, so the node's own containerd pulls exactly what
a pin would name, and that pull is part of the test. The check is a zipapp of the installed
package's own module files (cluster/jobapp.py, the build job's kind, with the GPU check's
closure only), carried base64 in the job's environment (the job has no workspace bundle: it
runs the image as it is), and run with the image's environment's python (build.venv) once its
sha256 is the one built here. It prints one `GPURL-GPU-RESULT <json>` line, which is read back
from the job's log once the watch ends. Every way the job can end without a usable result is
one line (`no_result`), and nothing is attached then.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import os
import re
import shlex
import time
from collections.abc import Callable, Mapping
from typing import Any

import gpurl_tasks
from gpurl_tasks.attest import verification as vsa
from gpurl_tasks.cluster.iris import ClusterTarget, IrisCli, JobSpec, job_run_argv, parse_job_id
from gpurl_tasks.cluster.iris_release import find_iris, iris_program
from gpurl_tasks.cluster.jobapp import JobApp, job_app
from gpurl_tasks.cluster.jobs import run_watch
from gpurl_tasks.cluster.submit import elide_argument
from gpurl_tasks.cluster.watch import WatchResult
from gpurl_tasks.config import Config
from gpurl_tasks.errors import BUG_HINT, BuildError, CheckFailed, ExitCode, GpurlError
from gpurl_tasks.gpu import check as gpu_check
from gpurl_tasks.gpu import result as gpu_result
from gpurl_tasks.gpu.check import LINE_PREFIX
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.image import same_platform
from gpurl_tasks.oci.referrers import fetch
from gpurl_tasks.proc import CommandFailed, run
from gpurl_tasks.release.configured import client_settings, resolve_reference
from gpurl_tasks.release.gpu import attach_summary
from gpurl_tasks.steps import DryRun

__all__ = [
    "APP_ENV",
    "GpuCheckOutcome",
    "check_node",
    "find_result",
    "gpu_app",
    "gpu_job",
    "gpu_spec",
    "gpu_target",
    "no_result",
    "run_verify_gpu",
    "unschedulable",
]

APP_ENV = "GPU_CHECK_PYZ_B64"
# The job's command, before the check's own arguments (`python -c _BOOT SHA256 gpu-check ...`):
# stdlib only, it decodes the shipped zipapp, refuses bytes other than the ones built here
# (a value cut or altered on the way), and runs it as `python gpu.pyz gpu-check ...` would, in
# this process (`runpy`), so its exit code is the job's.
_BOOT = ";".join((
    "import base64,hashlib,os,pathlib,runpy,sys,tempfile",
    f"data=base64.b64decode(os.environ.get('{APP_ENV}',''))",
    "want,*args=sys.argv[1:]",
    "got=hashlib.sha256(data).hexdigest()",
    "got==want or sys.exit(f'gpurl-gpu-check: error: the shipped zipapp has sha256 {got}, "
    "not {want}: it was cut or altered on the way')",
    "path=pathlib.Path(tempfile.mkdtemp(),'gpu.pyz')",
    "path.write_bytes(data)",
    "sys.argv=[str(path),*args]",
    "runpy.run_path(str(path),run_name='__main__')"))
# One environment string of an exec'd process may hold 128 KiB (Linux MAX_ARG_STRLEN), and so
# may the one argument `iris job run -e` takes it as: stay well below (iris sets no lower cap)
_MAX_APP_B64 = 100_000
LOG_LINES = 400  # the log tail searched for the result line (it is the check's last line)
AFTER_WATCH_S = 60.0
_PULL_FAILURE = re.compile(r"ImagePull|ErrImagePull|pull access denied|manifest unknown|"
                           r"failed to pull", re.IGNORECASE)
Say = Callable[[str], None]


def gpu_target(config: Config, flag: str | None = None) -> ClusterTarget:
    """The GPU job's cluster: a `--cluster` flag, else cluster.gpu-cluster, else the variant's
    build cluster (its controller URL or name)."""
    cluster = config.cluster
    return ClusterTarget.resolve(name=cluster.gpu_cluster or cluster.name,
                                 controller_url="" if cluster.gpu_cluster
                                 else cluster.controller_url, flag=flag)


def gpu_spec(config: Config) -> str:
    """iris `--gpu`: COUNT, or TYPExCOUNT with cluster.gpu-type."""
    cluster = config.cluster
    return f"{cluster.gpu_type}x{cluster.gpus}" if cluster.gpu_type else str(cluster.gpus)


def gpu_app() -> JobApp:
    """The zipapp the GPU job runs: the check (`gpu-check`, jobmain's tool) with every gpurl
    module it imports, the same bytes for the same installed package."""
    return job_app((gpu_check,))


def _app_b64(app: JobApp) -> str:
    """`app` as the job's environment carries it."""
    encoded = base64.b64encode(app.data).decode()
    if len(encoded) > _MAX_APP_B64:
        raise BuildError(f"the GPU check's zipapp is {len(encoded)} bytes in base64, over the "
                         f"{_MAX_APP_B64} one environment variable of the job may carry",
                         hint=BUG_HINT)
    return encoded


def gpu_job(config: Config, image: str, digest: str, *, target: ClusterTarget,
            app: JobApp) -> JobSpec:
    """The iris job that runs the check (`app`) in `image`@`digest` on the GPUs of one node."""
    cluster = config.cluster
    python = f"{config.build.venv.rstrip('/')}/bin/python"
    return JobSpec(
        cluster=target, task_image=f"{image}@{digest}", gpu=gpu_spec(config),
        cpu=cluster.gpu_cpu, memory=cluster.gpu_memory, disk="10GB",
        job_name=f"gpurl-gpu-{digest.split(':', 1)[1][:12]}", max_retries=0,
        timeout=cluster.gpu_timeout,
        env=((APP_ENV, _app_b64(app)),),
        command=(python, "-c", _BOOT, app.sha256, "gpu-check", "--image-digest", digest,
                 "--out", "gpurl-gpu-result.json", "--gpus", str(cluster.gpus),
                 *(("--arch-list", config.build.cuda_arch_list)
                   if config.build.cuda_arch_list else ()),
                 *(arg for code in config.build.gpu_asserts for arg in ("--assert", code))))


def find_result(log: str) -> gpu_result.Result | None:
    """The check's result from its log (the last `GPURL-GPU-RESULT` line; iris prefixes each
    line with its time and task); None when no line carries one. GpurlError when the line is
    there but not a valid document (a line cut off mid-write)."""
    found = None
    for line in log.splitlines():
        mark = line.find(LINE_PREFIX)
        if mark >= 0:
            found = line[mark + len(LINE_PREFIX):].strip()
    return gpu_result.parse(found) if found is not None else None


def check_node(result: gpu_result.Result, *, digest: str, gpus: int) -> None:
    """Refuse a result that is not this image's, or from a node with fewer GPUs than asked:
    neither says anything about the image on the node it will run on."""
    if result.image != digest:
        raise CheckFailed(f"the GPU check's result is for {result.image}, not {digest}: "
                          "nothing attached", hint="run `invoke verify-gpu` for the image again")
    if len(result.node.gpus) < gpus:
        raise CheckFailed(f"the node {result.node.hostname} gave the check {len(result.node.gpus)}"
                          f" GPU(s), {gpus} were asked (cluster.gpus): nothing attached",
                          hint="the node or its device plugin is short of GPUs; run again, or "
                               "set cluster.gpus to the node's count")


def unschedulable(job: str, said: str) -> CheckFailed:
    """No node of the cluster offers what the job asks (iris refuses it at submit, or ends it
    unschedulable): its GPUs, their type."""
    return CheckFailed(f"the GPU job {job} cannot be scheduled: no node offers what it asks"
                       f"{f' ({said})' if said else ''}",
                       hint="check cluster.gpus and cluster.gpu-type (or --cluster) against the "
                            "cluster's nodes (`invoke doctor`); nothing attached")


_REFUSED = re.compile(r"is unschedulable: (.*)$")


def no_result(watched: WatchResult, image: str, job_id: str) -> GpurlError:
    """Why a job ended without a result line, as one line: its image could not be pulled, no
    node offers its GPUs, it never started within the watch's bound, or it ended (killed,
    timed out) mid-run."""
    obs = watched.observation
    said = " ".join(filter(None, (obs.error, obs.pending_reason))) if obs else ""
    if _PULL_FAILURE.search(said):
        return CheckFailed(f"the node could not pull {image}: {said}",
                           hint="check the image exists at its digest and the cluster's pull "
                                "secret (nothing attached)")
    if obs is not None and obs.state == "unschedulable":
        return unschedulable(job_id, said)
    if obs is None or obs.state in ("pending", "building"):
        waited = f" ({said})" if said else ""
        error = CheckFailed(f"the GPU job {job_id} did not start within {watched.elapsed:.0f}s"
                            f"{waited}: {watched.reason}",
                            hint="no node with the GPUs asked is free; raise "
                                 "cluster.gpu-start-timeout or check the cluster's queue "
                                 f"(`invoke watch {job_id}`)")
        error.exit_code = ExitCode.INCONCLUSIVE
        return error
    code = f", exit code {obs.exit_code}" if obs.exit_code is not None else ""
    return CheckFailed(f"the GPU check in {job_id} printed no result: the job ended "
                       f"{obs.state}{code}{f' ({said})' if said else ''}; it was killed or "
                       "crashed mid-run", hint="see its log (`iris job logs`); nothing attached")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuCheckOutcome:
    """A check that ran and was attached: exit 0 when it passed, 1 when it failed."""

    image: str
    job_id: str
    verdict: vsa.Verdict
    attached: str  # the summary's artifact digest
    via: str

    @property
    def exit_code(self) -> int:
        return ExitCode.OK if self.verdict.passed else ExitCode.CHECK_FAILED

    def human(self) -> str:
        return (f"{self.image}: {self.verdict.line()}\nattached as {self.attached[:19]} "
                f"({self.via}); job {self.job_id}")

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "job_id": self.job_id, "attached": self.attached,
                "via": self.via, **self.verdict.to_json()}


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_verify_gpu(config: Config, text: str | None, *, dry_run: bool, say: Say,
                   cluster: str | None = None, interval: float = 30.0,
                   env: Mapping[str, str] | None = None, cli: IrisCli | None = None,
                   clock: Callable[[], str] = _now) -> GpuCheckOutcome | DryRun:
    """Resolve the image to its digest (the variant's platform of an index), submit the check
    job, watch it to its end, read its result from the log, and attach the verdict."""
    env = dict(os.environ if env is None else env)
    ref = resolve_reference(config, text)
    with open_client(client_settings(config), ref, env) as client:
        image = client.pull(ref, platform=config.target.platform)
    if image.platform and not same_platform(image.platform, config.target.platform):
        raise CheckFailed(f"{ref} is a {image.platform} image; variant {config.variant.name} "
                          f"runs on {config.target.platform}",
                          hint="pass the variant the image was built for (--variant)")
    digest, repository = image.subject, image.ref.name
    target = gpu_target(config, cluster)
    spec = gpu_job(config, repository, digest, target=target, app=gpu_app())
    program = iris_program(env)
    argv = (program, *job_run_argv(spec, reveal=True))
    shown = shlex.join(elide_argument(a) for a in argv)  # the zipapp: its start, length
    if dry_run:
        return DryRun((argv,), shown=(shown,))
    find_iris(program, env)
    say(f"+ {shown}")
    submitted_ms = int(time.time() * 1000)
    try:
        submitted = run(argv, cwd=config.root, env=env, echo=None)
    except CommandFailed as exc:
        if refused := _REFUSED.search(exc.message):
            raise unschedulable(spec.job_name, refused.group(1)) from None
        raise BuildError(f"iris job run failed: {exc.message}",
                         hint="see the output above; nothing was attached") from None
    job_id = parse_job_id(submitted.stdout + "\n" + submitted.stderr, spec.job_name)
    if job_id is None:
        raise BuildError(f"iris printed no job id for {spec.job_name}",
                         hint="find it with `iris job list`; nothing was attached")
    iris = cli or IrisCli(lambda a, timeout: run(a, echo=None, timeout=timeout),
                          program=program, cluster=target)
    bound = config.cluster.gpu_timeout + config.cluster.gpu_start_timeout
    watched = run_watch(config, job_id, interval=interval, max_duration=bound, say=say,
                        cli=iris).result
    # a finished job's name is reused by the next run of the same digest, and its log kept:
    # only this run's lines count (the controller's submission time, else ours less a minute)
    since = (watched.observation.submitted_ms if watched.observation else None) \
        or iris.submitted_ms(job_id, within=AFTER_WATCH_S) or submitted_ms - 60_000
    log = iris.log_tail(job_id, since_ms=since, lines=LOG_LINES, within=AFTER_WATCH_S)
    found = find_result(log)
    if found is None:
        raise no_result(watched, f"{repository}@{digest}", job_id)
    check_node(found, digest=digest, gpus=config.cluster.gpus)
    document = vsa.summary(found, image=repository, digest=digest,
                           policy=vsa.GpuPolicy(gpus=config.cluster.gpus,
                                                gpu_type=config.cluster.gpu_type),
                           job=vsa.JobFacts(job_id=job_id, cluster=" ".join(target.args)),
                           verified_at=clock(), version=gpurl_tasks.__version__)
    with open_client(client_settings(config), ref, env) as client:
        attached = attach_summary(client, image.ref, digest, document)
        verdict = vsa.read_summary(fetch(client, image.ref, attached), digest)  # read back
    return GpuCheckOutcome(image=f"{repository}@{digest}", job_id=job_id, verdict=verdict,
                           attached=attached.digest, via=attached.via)

