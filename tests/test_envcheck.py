"""The image's package-set proof and `uv pip check` gate (docker/gpurl-envcheck.py), run for
real: the generated script itself, with a real uv, in a real venv holding real wheels (built
here with .dist-info metadata, Requires-Dist lines included), as the rl stage runs it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile.envcheck import conflict_problems, parse_freeze, reached, without
from gpurl_tasks.errors import ConfigError, LockError
from gpurl_tasks.plan.lock import install_closure, load_lock
from gpurl_tasks.plan.profile import outside_lock
from tests.conftest import REPO_ROOT
from tests.support.pyindex import make_wheel

pytestmark = pytest.mark.integration

SCRIPT = REPO_ROOT / "docker" / "gpurl-envcheck.py"  # what the image runs (generate writes it)


class Env:
    """A venv with uv on PATH and VIRTUAL_ENV set, as in the image."""

    def __init__(self, tmp: Path) -> None:
        uv = str(REPO_ROOT / ".venv" / "bin" / "uv")  # the project's pinned uv (the image pins one too)
        self.venv, self.wheels = tmp / "venv", tmp / "wheels"
        self.wheels.mkdir()
        self.env = {"PATH": f"{self.venv}/bin:{Path(uv).parent}:/usr/bin:/bin",
                    "VIRTUAL_ENV": str(self.venv), "UV_NO_CACHE": "1", "HOME": str(tmp)}
        subprocess.run([uv, "venv", "-q", str(self.venv)], check=True, env=self.env)
        self.tmp = tmp

    def install(self, *wheels: Path) -> None:
        """Install by name from the wheel directory (as from an index: freeze says name==v)."""
        names = [f"{w.name.split('-')[0]}=={w.name.split('-')[1]}" for w in wheels]
        subprocess.run(["uv", "pip", "install", "-q", "--no-deps", "--offline", "--no-index",
                        "--find-links", str(self.wheels), *names], check=True, env=self.env)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([f"{self.venv}/bin/python", "-B", str(SCRIPT), *args],
                              capture_output=True, text=True, env=self.env, check=False)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def test_the_lock_plus_post_installs_and_their_dependencies_passes_and_a_stray_fails(
        env: Env) -> None:
    w = env.wheels
    locked = make_wheel(w, "locked-a", "1.0")
    env.install(locked)
    assert env.run("lock-set", str(env.tmp / "lock.txt")).returncode == 0
    assert (env.tmp / "lock.txt").read_text() == "locked-a==1.0\n"
    # a post-install with a dependency and an extra's dependency (asked for), and one of an
    # extra nobody asked for (never installed: it must not be needed either)
    make_wheel(w, "dep-b", "2.0")
    make_wheel(w, "extra-c", "3.0")
    post = make_wheel(w, "post-x", "1.0", requires=["dep-b>=2", 'extra-c; extra == "fast"',
                                                    'unused-d; extra == "slow"'])
    env.install(post)
    env.install(w / "dep_b-2.0-py3-none-any.whl", w / "extra_c-3.0-py3-none-any.whl")
    out = env.tmp / "freeze.txt"
    ok = env.run("prove", "--lock-set", str(env.tmp / "lock.txt"), "--out", str(out),
                 "--post-install", "post-x[fast]==1.0")
    assert ok.returncode == 0, ok.stderr
    assert "package set: the lock's 1 + 3 after it" in ok.stdout
    assert sorted(out.read_text().split()) == ["dep-b==2.0", "extra-c==3.0", "locked-a==1.0",
                                               "post-x==1.0"]
    without_extra = env.run("prove", "--lock-set", str(env.tmp / "lock.txt"), "--out", str(out),
                            "--post-install", "post-x==1.0")  # extra-c is then unexplained
    assert without_extra.returncode == 1
    assert "'extra-c==3.0' is neither in the lock nor a post-install" in without_extra.stderr
    env.install(make_wheel(w, "locked-a", "1.1"))  # a post-install that moved a locked package
    moved = env.run("prove", "--lock-set", str(env.tmp / "lock.txt"), "--out", str(out),
                    "--post-install", "post-x[fast]==1.0")
    assert moved.returncode == 1
    assert "locked-a: the lock's 'locked-a==1.0' became 'locked-a==1.1'" in moved.stderr
    assert "Traceback" not in moved.stderr


def test_pip_check_tolerates_exactly_the_allowed_conflicts(env: Env) -> None:
    w = env.wheels
    env.install(make_wheel(w, "botocore", "1.35.0"),
                make_wheel(w, "aiobotocore", "2.15.0", requires=["botocore<1.35.17,>=1.35.16"]))
    allow = "The package `aiobotocore` requires `botocore*"
    ok = env.run("pip-check", "--allow", allow)
    assert ok.returncode == 0, ok.stderr
    assert "1 allowed conflict(s), no other" in ok.stdout
    bare = env.run("pip-check")
    assert bare.returncode == 1
    assert ("new conflict: The package `aiobotocore` requires `botocore>=1.35.16,<1.35.17`, "
            "but `1.35.0` is installed") in bare.stderr
    env.install(make_wheel(w, "fastapi", "0.1", requires=["starlette>=9"]))  # a new conflict
    new = env.run("pip-check", "--allow", allow)
    assert new.returncode == 1
    assert "new conflict: The package `fastapi` requires `starlette>=9`" in new.stderr
    assert "aiobotocore" not in new.stderr.split("error: uv pip check")[0]


def test_a_stale_allowance_is_said_not_failed(env: Env) -> None:
    env.install(make_wheel(env.wheels, "plain", "1.0"))
    done = env.run("pip-check", "--allow", "The package `aiobotocore` requires `botocore*")
    assert done.returncode == 0
    assert "is not reported any more (drop it from build.pip-check-allow)" in done.stdout


def test_the_pure_parts() -> None:
    assert parse_freeze("a==1\nB_c @ file:///x\n-e file:///app\n") == {
        "a": "a==1", "b-c": "B_c @ file:///x", "-e file:///app": "-e file:///app"}
    assert reached(["x[e]==1"], {"x": ["y", 'z; extra == "e"', 'q; extra == "o"'],
                                 "y": ["w ; python_version >= '3'"]}) == {"x", "y", "z", "w"}
    assert conflict_problems("Checked 2 packages\nThe package `a` requires `b`, x\n",
                             ["The package `a` *", "The package `c` *"]) == (
        [], ["The package `c` *"])


# --- the config: post-install entries, the harbor migration ----------------------------------


@pytest.mark.parametrize("entry", [
    "fastapi==0.115.6", "fastapi[all]==0.115.6 | import fastapi | import fastapi.testclient",
    "harbor @ git+https://github.com/laude-institute/harbor.git@" + "a" * 40 + " | import harbor"])
def test_a_pinned_post_install_is_accepted(entry: str) -> None:
    config = load_config(REPO_ROOT, profile="demo", env={}, overrides={"build.post-install": [entry]})
    (parsed,) = config.build.post_installs
    assert parsed.requirement == entry.split(" | ")[0]
    assert parsed.asserts == tuple(entry.split(" | ")[1:])


@pytest.mark.parametrize(("entry", "hint"), [
    ("fastapi", "pin one exact version: fastapi==<version>"),
    ("fastapi>=0.115", "pin one exact version"),
    ("fastapi==0.*", "pin one exact version"),
    ("harbor @ git+https://github.com/laude-institute/harbor.git@main", "pin the commit"),
    ("harbor @ git+https://github.com/laude-institute/harbor.git", "pin the commit"),
    ("harbor @ https://example.invalid/harbor.tar.gz", "pin the commit"),
])
def test_an_unpinned_post_install_is_refused(entry: str, hint: str) -> None:
    with pytest.raises(ConfigError, match=r"build\.post-install\[0\]") as caught:
        load_config(REPO_ROOT, profile="demo", env={}, overrides={"build.post-install": [entry]})
    assert hint in str(caught.value.hint)


def test_the_old_harbor_keys_say_how_to_migrate(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.gpurl.build]\ninstall-harbor = true\nharbor-commit = "f4a6b1a0"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path, env={})
    assert caught.value.message == "build.install-harbor in [tool.gpurl] is no longer a key: harbor is one " \
           "build.post-install entry now"
    assert 'post-install = ["harbor[EXTRAS] @ git+<harbor-repo>@<harbor-commit>' in str(
        caught.value.hint)


def test_a_post_install_of_a_locked_package_must_pin_the_locks_version() -> None:
    """The lock rules: the same version is a no-op install whose asserts still run; another
    would change a locked package, refused before any build."""
    config = load_config(REPO_ROOT, profile="demo", env={})
    closure = install_closure(load_lock(config.lock), config.target, config.python)
    locked = next(p for p in closure.packages if p.name == "pyyaml")
    same = load_config(REPO_ROOT, profile="demo", env={},
                       overrides={"build.post-install": [f"pyyaml=={locked.version}"]})
    assert outside_lock(same.build, closure) == (f"pyyaml=={locked.version}",)
    other = load_config(REPO_ROOT, profile="demo", env={},
                        overrides={"build.post-install": ["pyyaml==1.0"]})
    with pytest.raises(LockError, match=f"the lock already pins pyyaml {locked.version}"):
        outside_lock(other.build, closure)


def test_the_generated_script_is_the_module(tmp_path: Path) -> None:
    """docker/gpurl-envcheck.py is dockerfile/envcheck.py with a header (generate --check
    keeps it so); it runs with only the standard library."""
    module = (REPO_ROOT / "gpurl_tasks" / "dockerfile" / "envcheck.py").read_text()
    assert SCRIPT.read_text().endswith(module)
    done = subprocess.run(["python3", "-I", "-S", str(SCRIPT), "--help"], capture_output=True,
                          text=True, env={"PATH": os.environ["PATH"]}, check=False)
    assert done.returncode == 0 and "lock-set" in done.stdout


def test_lock_set_leaves_out_the_pinned_post_installs_in_any_spelling() -> None:
    """`lock-set --outside NAME`: the pinned post-install slice's packages are not the lock's;
    every other line (a URL source, an editable) is kept as uv froze it."""
    freeze = ("Markdown_It.Py==4.3.0\nmdurl==0.1.2\npyyaml==6.0.2\n"
              "torch @ https://x/torch.whl\n-e file:///opt/workspace\n")
    assert without(freeze, ["markdown-it-py", "MDURL"]) == \
        "pyyaml==6.0.2\ntorch @ https://x/torch.whl\n-e file:///opt/workspace\n"
