"""The Dockerfile and .dockerignore, checked statically (no container engine needed): a pinned slim
Python base that satisfies requires-python, a multi-stage build whose dependency layer installs
exactly pyproject's [project.dependencies] and no extras, COPY sources that exist and survive
.dockerignore, a fixed non-root user matching the Deployment's runAsUser, and an ENTRYPOINT/CMD
that the real CLI accepts, on the server's default port.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from extender.cli import _parser
from extender.server import ServerSettings
from tests.deploy.render import DEPLOY, ROOT, container, find, render

DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Instruction:
    keyword: str
    value: str
    stage: int  # index of the FROM it belongs to; -1 before the first FROM


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with line continuations joined and comments dropped."""
    instructions: list[Instruction] = []
    logical = ""
    stage = -1
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if logical and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            logical += line[:-1].rstrip() + " "
            continue
        logical += line
        keyword, _, value = logical.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, value.strip(), stage))
        logical = ""
    assert not logical, "dangling line continuation"
    return instructions


INSTRUCTIONS = parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


def _args() -> dict[str, str]:
    args = {}
    for ins in INSTRUCTIONS:
        if ins.keyword == "ARG" and "=" in ins.value:
            name, _, default = ins.value.partition("=")
            args[name] = default
    return args


def _expand(text: str) -> str:
    for name, value in _args().items():
        text = text.replace("${" + name + "}", value).replace("$" + name, value)
    return text


def _stages() -> list[tuple[str, str | None]]:
    """(image, stage name) of every FROM."""
    stages = []
    for ins in INSTRUCTIONS:
        if ins.keyword == "FROM":
            words = ins.value.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append((_expand(words[0]), name))
    return stages


def _final(keyword: str) -> list[Instruction]:
    last = len(_stages()) - 1
    return [i for i in INSTRUCTIONS if i.keyword == keyword and i.stage == last]


def _exec_form(value: str) -> list[str]:
    parsed = json.loads(value)
    assert isinstance(parsed, list) and all(isinstance(x, str) for x in parsed), f"not exec form: {value}"
    return parsed


def test_parser_joins_continuations() -> None:
    parsed = parse_dockerfile('FROM a AS b\n# c\nRUN x \\\n    # inner\n    y\nCMD ["z"]\n')
    assert [(i.keyword, i.value, i.stage) for i in parsed] == [
        ("FROM", "a AS b", 0),
        ("RUN", "x y", 0),
        ("CMD", '["z"]', 0),
    ]


def test_multi_stage_on_a_pinned_slim_python() -> None:
    stages = _stages()
    assert len(stages) >= 2, "build and runtime stages"
    for image, _ in stages:
        match = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?", image)
        assert match, f"{image}: not a version-pinned slim Python image"
        python = Version(f"{match[1]}.{match[2]}.{match[3]}")
        assert python in SpecifierSet(PYPROJECT["project"]["requires-python"])
    assert len({image for image, _ in stages}) == 1, "build and run on the same Python"


def test_copy_from_names_an_earlier_stage() -> None:
    names = [name for _, name in _stages()]
    for ins in INSTRUCTIONS:
        if ins.keyword == "COPY" and ins.value.startswith("--from="):
            source = ins.value.split()[0].removeprefix("--from=")
            assert source in names[: ins.stage], f"COPY --from={source} in stage {ins.stage}"


# --- what the image installs ------------------------------------------------------------------------


def _pip_installs() -> list[list[str]]:
    """The argument lists of every ``pip install`` in the Dockerfile's RUN instructions."""
    installs = []
    for ins in INSTRUCTIONS:
        if ins.keyword != "RUN":
            continue
        for command in re.split(r"&&|;", ins.value):
            words = shlex.split(command)
            if len(words) >= 2 and words[0].endswith("pip") and words[1] == "install":
                installs.append(words[2:])
    return installs


def _canonical(requirement: str) -> tuple[str, str, frozenset[str]]:
    req = Requirement(requirement)
    return re.sub(r"[-_.]+", "-", req.name).lower(), str(req.specifier), frozenset(req.extras)


def test_dependency_layer_matches_pyproject() -> None:
    wanted = {_canonical(r) for r in PYPROJECT["project"]["dependencies"]}
    layers = [args for args in _pip_installs() if not any(a.startswith(("/", ".")) for a in args)]
    assert len(layers) == 1, "one layer with the runtime dependencies"
    (layer,) = layers
    assert {_canonical(r) for r in layer if not r.startswith("-")} == wanted


def test_the_package_is_installed_from_its_wheel_without_extras() -> None:
    wheels = [args for args in _pip_installs() if any(a.startswith("/wheels/") for a in args)]
    assert wheels, "the built wheel is installed"
    for args in _pip_installs():
        for arg in args:
            assert "[" not in arg, f"extras installed: {arg}"
    runs = " ".join(i.value for i in INSTRUCTIONS if i.keyword == "RUN")
    assert re.search(r"pip wheel --no-deps --wheel-dir /wheels \.", runs)
    assert "pip check" in runs, "the installed set is consistent"
    name = PYPROJECT["project"]["name"].replace("-", "_")
    assert any(a.startswith(f"/wheels/{name}-") for a in wheels[0])


def _included(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore semantics, enough for our file: last matching pattern wins; a pattern
    matches the path or any of its parent directories; ``!`` re-includes."""
    included = True
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern.removeprefix("!").rstrip("/")
        regex = fnmatch.translate(body).replace(".*", "[^/]*")
        if body.startswith("**/"):
            regex = "(.*/)?" + fnmatch.translate(body[3:]).replace(".*", "[^/]*")
        if any(re.fullmatch(regex, c) for c in candidates):
            included = negate
    return included


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def test_dockerignore_semantics() -> None:
    patterns = ["*", "!pkg/", "!a/b.txt", "**/__pycache__"]
    assert _included("pkg/mod.py", patterns)
    assert not _included("pkg/__pycache__/mod.pyc", patterns)
    assert _included("a/b.txt", patterns) and not _included("a/c.txt", patterns)
    assert not _included("tests/x.py", patterns)


def _copy_sources() -> list[str]:
    sources = []
    for ins in INSTRUCTIONS:
        if ins.keyword in ("COPY", "ADD") and not ins.value.startswith("--from="):
            words = [w for w in ins.value.split() if not w.startswith("--")]
            sources += words[:-1]
    return sources


def test_copied_paths_exist_and_are_in_the_context() -> None:
    patterns = _dockerignore()
    assert _copy_sources(), "the Dockerfile copies the source"
    for source in _copy_sources():
        assert not any(ch in source for ch in "*?["), f"{source}: copy named paths, not globs"
        path = ROOT / source
        assert path.exists(), f"COPY {source}: no such path in the repository"
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            if "__pycache__" not in relative:
                assert _included(relative, patterns), f"{relative} is copied but excluded by .dockerignore"


def test_build_has_what_setuptools_needs() -> None:
    """pyproject's readme and the packages it finds must be copied, or the wheel build fails."""
    sources = set(_copy_sources())
    assert "pyproject.toml" in sources
    assert PYPROJECT["project"]["readme"] in sources
    for include in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]:
        assert include.rstrip("*") in sources


def test_context_leaves_out_the_rest() -> None:
    patterns = _dockerignore()
    for path in ("tests/conftest.py", ".git/config", "bench/run.py", "docs/deploy.md", ".venv/bin/python",
                 "deploy/base/deployment.yaml", "extender/__pycache__/cli.cpython-311.pyc"):  # fmt: skip
        assert not _included(path, patterns), path


# --- how it runs --------------------------------------------------------------------------------------


def test_runs_as_the_fixed_non_root_user_of_the_deployment() -> None:
    (user,) = _final("USER")
    uid, _, gid = user.value.partition(":")
    assert uid.isdigit() and int(uid) > 0, "numeric, so runAsNonRoot can verify it"
    pod_security = find(render(DEPLOY), "Deployment", "dra-extender-scheduler")["spec"]["template"]["spec"][
        "securityContext"
    ]
    assert int(uid) == pod_security["runAsUser"]
    assert not gid or int(gid) == pod_security["runAsGroup"]
    runs = " ".join(i.value for i in _final("RUN"))
    assert f"--uid {uid}" in runs, "the user exists in /etc/passwd"


def test_exposes_the_default_port() -> None:
    (expose,) = _final("EXPOSE")
    assert expose.value == str(ServerSettings().port)


def test_entrypoint_and_cmd_are_the_cli() -> None:
    (entrypoint,) = _final("ENTRYPOINT")
    (cmd,) = _final("CMD")
    assert _exec_form(entrypoint.value) == ["dra-extender"]
    assert "dra-extender" in PYPROJECT["project"]["scripts"]
    args: Any = _parser().parse_args(_exec_form(cmd.value))
    assert args.command == "serve"
    assert args.listen == (ServerSettings().host, ServerSettings().port), "loopback by default"


def test_deployment_uses_the_entrypoint() -> None:
    extender = container(find(render(DEPLOY), "Deployment", "dra-extender-scheduler"), "extender")
    assert "command" not in extender
    assert extender["args"][0] == "serve"


@pytest.mark.parametrize("path", ["/usr/share/dra-extender/demo-cluster.yaml"])
def test_demo_cluster_ships_in_the_image(path: str) -> None:
    copies = [i.value.split() for i in _final("COPY") if not i.value.startswith("--from=")]
    assert [DEPLOY.relative_to(ROOT).as_posix() + "/examples/demo-cluster.yaml", path] in copies
    assert (ROOT / "deploy" / "examples" / "demo-cluster.yaml").is_file()
    assert Path(path).name == "demo-cluster.yaml"
