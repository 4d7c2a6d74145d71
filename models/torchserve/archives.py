"""TorchServe archives made by the real `torch-model-archiver`, from our own models.

- "digits": the digits classifier trained in PyTorch (models/digits_torch.py), its state
  dict with digits_model.py as the architecture and digits_handler.py (a BaseHandler);
- "function": function_handler.py, a module-level `handle(data, context)`;
- "failing": failing_handler.py, PredictionException and a crash on chosen inputs;
- "streaming": streaming_handler.py, intermediate responses (a word at a time);
- "deps": deps_handler.py, which imports a package only its requirementsFile brings (a
  wheel built here, in the archive beside the requirements file);
- "rows": rows_handler.py, each row back (what a request envelope hands a handler).

`model_config` becomes the archive's model-config.yaml (batchSize, maxBatchDelay, ...).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
HANDLERS = {"digits": "digits_handler.py", "function": "function_handler.py",
            "failing": "failing_handler.py", "streaming": "streaming_handler.py",
            "deps": "deps_handler.py", "rows": "rows_handler.py"}  # fmt: skip
SUFFIXES = {"default": ".mar", "zip-store": ".mar", "tgz": ".tar.gz", "no-archive": ""}


def archiver() -> str:
    """The torch-model-archiver beside this Python (the virtual environment's)."""
    return str(Path(sys.executable).parent / "torch-model-archiver")


def _digits_state(directory: Path) -> Path:
    import torch

    from models import digits_torch

    path = directory / "digits.pt"
    torch.save(digits_torch.train().state_dict(), path)
    return path


def _tiny_wheel(directory: Path) -> Path:
    """A wheel of one module, `tinydep` (VALUE = 42), written by hand: a wheel is a zip
    with its metadata, and pip installs it from a file with nothing fetched."""
    import zipfile

    path = directory / "tinydep-1.0-py3-none-any.whl"
    files = {
        "tinydep/__init__.py": "VALUE = 42\n",
        "tinydep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
        "tinydep-1.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: accel-gateway\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
    }
    record = [f"{name},," for name in files] + ["tinydep-1.0.dist-info/RECORD,,"]
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr("tinydep-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def build_archive(
    kind: str, export: Path, *, name: str | None = None, archive_format: str = "default",
    version: str = "1.0", model_config: dict[str, Any] | None = None,
) -> Path:  # fmt: skip
    """Write the archive of `kind` into `export`; returns its path."""
    name = name or kind
    export.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        args = [archiver(), "--model-name", name, "--version", version,
                "--handler", str(HERE / HANDLERS[kind]), "--export-path", str(export),
                "--archive-format", archive_format, "--force"]  # fmt: skip
        if kind == "digits":
            args += ["--model-file", str(HERE / "digits_model.py"),
                     "--serialized-file", str(_digits_state(Path(work)))]  # fmt: skip
        if kind == "deps":
            wheel = _tiny_wheel(Path(work))
            (Path(work) / "requirements.txt").write_text(f"./{wheel.name}\n")
            args += ["--requirements-file", str(Path(work) / "requirements.txt"),
                     "--extra-files", str(wheel)]  # fmt: skip
        if model_config:
            import yaml

            config = Path(work) / "model-config.yaml"
            config.write_text(yaml.safe_dump(model_config))
            args += ["--config-file", str(config)]
        subprocess.run(args, check=True, capture_output=True)
    return export / f"{name}{SUFFIXES[archive_format]}"
