"""The Dockerfile model: image references, rendering rules, validation and the lint pass."""

from __future__ import annotations

import io
import string
import subprocess

import pytest
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from gpurl_tasks.dockerfile.lint import lint
from gpurl_tasks.dockerfile.model import (
    Arg,
    ArgImage,
    Command,
    Copy,
    Dockerfile,
    DockerfileError,
    Env,
    Label,
    Run,
    Shell,
    Stage,
    Workdir,
    image,
    quote_word,
    render,
)
from gpurl_tasks.imageref import parse_reference

DIGEST = "sha256:" + "e8b48241b548da570a319ff421e72787692ee87dae2408c99a2d0c6794186177"


@pytest.mark.parametrize("text", [
    "ubuntu",
    "ubuntu:22.04",
    "ghcr.io/open-thoughts/openthoughts-agent:gpu-rl",
    f"ghcr.io/open-thoughts/openthoughts-agent@{DIGEST}",
    f"ghcr.io/open-thoughts/openthoughts-agent:gpu-rl-e03896b7@{DIGEST}",
    "127.0.0.1:5005/gpurl/demo:demo",
    "nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04",
])
def test_image_ref_round_trips(text: str) -> None:
    assert str(image(text)) == text


def test_image_ref_parts() -> None:
    ref = image(f"127.0.0.1:5005/gpurl/demo:demo-abc@{DIGEST}")
    assert (ref.host, ref.repository, ref.tag, ref.digest) == (
        "127.0.0.1:5005", "gpurl/demo", "demo-abc", DIGEST)


def test_from_lines_and_registry_share_one_grammar() -> None:
    """`a__b` is a valid repository component for Docker; a FROM line and a registry lookup
    must agree on it (they once had two grammars)."""
    assert str(image("org/a__b:1")) == str(parse_reference("org/a__b:1", bare=True)) == "org/a__b:1"


@pytest.mark.parametrize("text", [
    "Ubuntu:22.04",  # upper case repository
    "repo@sha256:abc",  # short digest
    "repo@md5:" + "0" * 32,
    "repo:bad tag",
    "${BASE_IMAGE}:tag",
])
def test_image_ref_rejects(text: str) -> None:
    with pytest.raises(DockerfileError):
        image(text)


def test_long_commands_go_one_group_per_line_and_unordered_words_sorted() -> None:
    cmd = Command(head=("apt-get", "install"), groups=(("-y", "--no-install-recommends"),),
                  unordered=("zlib1g", "curl", "ca-certificates", "curl", "rdma-core",
                             "libibverbs1", "ibverbs-providers"))
    lines = cmd.render().split(" \\\n")
    assert lines[0] == "apt-get install"
    assert [ln.strip() for ln in lines[1:]] == [
        "-y --no-install-recommends", "ca-certificates", "curl", "ibverbs-providers",
        "libibverbs1", "rdma-core", "zlib1g"]
    short = Command(head=("uv", "sync"), groups=(("--frozen",),))
    assert short.render() == "uv sync --frozen"


def test_env_and_label_keys_are_sorted_and_unique() -> None:
    env = Env(pairs=(("B", "2"), ("A", "1")))
    assert env.render().replace(" \\\n      ", " ") == 'ENV A="1" B="2"'
    with pytest.raises(DockerfileError, match="duplicate"):
        Label(pairs=(("a.b", "1"), ("a.b", "2"))).render()


_WORD = st.text(alphabet=string.ascii_letters + string.digits + " '\"\\`=<>[];|&()!#~^-_.,:/",
                min_size=1, max_size=30)


@settings(max_examples=50, deadline=None)
@given(words=st.lists(_WORD, min_size=1, max_size=8))
def test_quoted_words_survive_the_shell(words: list[str]) -> None:
    """Real /bin/sh (the shell RUN uses) must see exactly the words the model was given."""
    line = " ".join(quote_word(w) for w in words)
    out = subprocess.run(["sh", "-c", f"printf '%s\\0' {line}"], capture_output=True,
                         check=True).stdout
    assert out.decode().split("\0")[:-1] == words


def test_variables_and_globs_stay_live() -> None:
    assert quote_word("flash_attn-${FLASH_ATTN_VERSION}-*.whl") == (
        'flash_attn-"${FLASH_ATTN_VERSION}"-*.whl')  # the glob matches, the reference is one word
    assert quote_word("uv==${UV_VERSION}") == '"uv==${UV_VERSION}"'
    assert quote_word("setuptools>=77") == '"setuptools>=77"'
    assert quote_word("$@") == '"$@"'


def test_validation_errors() -> None:
    base = image("debian:bookworm")
    with pytest.raises(DockerfileError, match="duplicate stage"):
        Dockerfile(stages=(Stage(name="a", base=base), Stage(name="a", base=base)))
    with pytest.raises(DockerfileError, match="names no earlier stage"):
        Dockerfile(stages=(Stage(name="a", base=base, instructions=(
            Copy(sources=("/x",), dest="/y", from_stage="b"),)),))
    with pytest.raises(DockerfileError, match="not a global ARG"):
        Dockerfile(stages=(Stage(name="a", base=ArgImage(name="BASE")),))
    with pytest.raises(DockerfileError, match="later"):
        Dockerfile(stages=(Stage(name="a", base="b"), Stage(name="b", base=base)))
    with pytest.raises(DockerfileError, match="absolute"):
        Workdir(path="app")
    with pytest.raises(DockerfileError, match="stage name"):
        Stage(name="Bad Name", base=base)
    with pytest.raises(DockerfileError, match="ARG name"):
        Arg(name="1X")
    with pytest.raises(DockerfileError, match="one line"):
        Shell(text="a\nb")


def test_lint_catches_a_global_arg_not_redeclared_in_its_stage() -> None:
    stage = Stage(name="s", base=ArgImage(name="BASE"), instructions=(
        Run(commands=(Command(head=("echo", "${TORCH_VERSION}")),)),
        Arg(name="LATER"),
        Run(commands=(Shell(text='test -n "${LATER}"'),)),
        Env(pairs=(("P", "${PATH}"),)),
    ))
    df = Dockerfile(stages=(stage,), global_args=(Arg(name="BASE", default="x"),
                                                  Arg(name="TORCH_VERSION", default="2")))
    findings = lint(df)
    assert [str(f) for f in findings] == [
        "stage s: ${TORCH_VERSION} is used but not declared (a global ARG: re-declare it in "
        "the stage)"]
    fixed = Stage(name="s", base=stage.base, instructions=(Arg(name="TORCH_VERSION"),
                                                           *stage.instructions))
    assert lint(Dockerfile(stages=(fixed,), global_args=df.global_args)) == ()


def test_render_is_parseable_and_stable() -> None:
    df = Dockerfile(
        global_args=(Arg(name="BASE", default="debian:bookworm"),),
        header=("generated",),
        stages=(
            Stage(name="one", base=ArgImage(name="BASE"), comment="first", instructions=(
                Workdir(path="/w"),
                Run(commands=(Command(head=("touch", "a b")), Shell(text="echo ok > /w/log"))),
            )),
            Stage(name="two", base="one", instructions=(
                Copy(sources=("/w/",), dest="/v/", from_stage="one"),)),
        ),
    )
    text = render(df)
    assert text == render(df)
    structure = DockerfileParser(fileobj=io.BytesIO(text.encode())).structure
    kinds = [(e["instruction"], e["value"]) for e in structure if e["instruction"] != "COMMENT"]
    assert kinds == [
        ("ARG", 'BASE="debian:bookworm"'),
        ("FROM", "${BASE} AS one"),
        ("WORKDIR", "/w"),
        ("RUN", 'touch "a b"  && echo ok > /w/log'),
        ("FROM", "one AS two"),
        ("COPY", "--from=one /w/ /v/"),
    ]
