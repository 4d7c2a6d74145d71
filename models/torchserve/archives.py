"""TorchServe archives made by the real `torch-model-archiver`, from our own models.

- "digits": the digits classifier trained in PyTorch (models/digits_torch.py), its state
  dict with digits_model.py as the architecture and digits_handler.py (a BaseHandler);
- "function": function_handler.py, a module-level `handle(data, context)`;
- "failing": failing_handler.py, PredictionException and a crash on chosen inputs;
- "streaming": streaming_handler.py, intermediate responses (a word at a time);
- "deps": deps_handler.py, which imports a package only its requirementsFile brings (a
  wheel built here, in the archive beside the requirements file);
- "rows": rows_handler.py, each row back (what a request envelope hands a handler);
- "vision": TorchServe's built-in `image_classifier` handler on vision_model.py's small
  network (its weights from a fixed seed) with the digits' names in index_to_name.json.
  The handler imports torchvision (and captum): it runs where those import.

`model_config` becomes the archive's model-config.yaml (batchSize, maxBatchDelay, ...).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
HANDLERS = {"digits": "digits_handler.py", "function": "function_handler.py",
            "failing": "failing_handler.py", "streaming": "streaming_handler.py",
            "deps": "deps_handler.py", "rows": "rows_handler.py",
            "vision": "image_classifier"}  # fmt: skip
BUILT_IN = {"image_classifier"}  # handlers named, not files
SUFFIXES = {"default": ".mar", "zip-store": ".mar", "tgz": ".tar.gz", "no-archive": ""}


def archiver() -> list[str]:
    """The torch-model-archiver beside this Python (the virtual environment's), else its
    module run by this Python (a package installed with --target has no script)."""
    script = Path(sys.executable).parent / "torch-model-archiver"
    if script.exists():
        return [str(script)]
    entry = "from model_archiver.model_packaging import generate_model_archive as g; g()"
    return [sys.executable, "-c", entry]


def _vision_state(directory: Path) -> Path:
    import torch

    from models.torchserve.vision_model import DigitsCNN

    torch.manual_seed(0)
    path = directory / "vision.pt"
    torch.save(DigitsCNN().state_dict(), path)
    return path


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
        handler = HANDLERS[kind]
        args = [*archiver(), "--model-name", name, "--version", version,
                "--handler", handler if handler in BUILT_IN else str(HERE / handler),
                "--export-path", str(export),
                "--archive-format", archive_format, "--force"]  # fmt: skip
        if kind == "digits":
            args += ["--model-file", str(HERE / "digits_model.py"),
                     "--serialized-file", str(_digits_state(Path(work)))]  # fmt: skip
        if kind == "vision":
            names = Path(work) / "index_to_name.json"
            names.write_text(json.dumps({str(d): f"digit {d}" for d in range(10)}))
            args += ["--model-file", str(HERE / "vision_model.py"),
                     "--serialized-file", str(_vision_state(Path(work))),
                     "--extra-files", str(names)]  # fmt: skip
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
