"""The staging install of one slice (pure: shell words and text): what the local path's
staging container and the cluster job's composing build run before the writer tars the
result."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["build_env_script", "install_command", "no_isolation_args"]


def install_command(*, prefix: str, venv: str, slice_file: str,
                    build_args: Sequence[str] = ()) -> list[str]:
    """The staging install of one slice: its files laid out as they sit in `venv`, under
    `prefix` (the local path's staging container and the cluster job's script run it);
    `build_args` are the slice's `no_isolation_args`."""
    return ["uv", "pip", "install", "--no-deps", "--require-hashes", "--no-installer-metadata",
            *build_args, "--prefix", prefix, "--python", f"{venv}/bin/python", "-r", slice_file]


def no_isolation_args(names: Sequence[str]) -> list[str]:
    """The lock's `no-build-isolation-package` settings for a slice's packages, as uv's flags."""
    return [w for name in names for w in ("--no-build-isolation-package", name)]


def build_env_script(*, prefix: str, venv: str, files: str) -> str:
    """Shell that installs the slices below one slice (`files`: their slice files, as shell
    words) into the scratch `prefix` and puts it on PYTHONPATH, so the slice's sdists build
    against the packages the environment holds under it (plan/buildenv.py); `prefix` never
    reaches the layer. One install per file: each names its own index, and uv refuses two
    `--index-url`s in one install. No --require-hashes (a git slice has no hash; the hashes
    listed are still checked). Its status is non-zero when one install fails."""
    install = ["uv", "pip", "install", "--no-deps", "--no-installer-metadata",
               "--prefix", prefix, "--python", f"{venv}/bin/python"]
    return (f'{{ built=0; for lower in {files}; do {" ".join(install)} -r "$lower" >&2 '
            '|| { built=1; break; }; done; [ "$built" = 0 ]; } && '
            f'PYTHONPATH="$(echo {prefix}/lib/python*/site-packages)" && export PYTHONPATH')
