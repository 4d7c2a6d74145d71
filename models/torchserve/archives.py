"""TorchServe archives made by the real `torch-model-archiver`, from our own models.

- "digits": the digits classifier trained in PyTorch (models/digits_torch.py), its state
  dict with digits_model.py as the architecture and digits_handler.py (a BaseHandler);
- "function": function_handler.py, a module-level `handle(data, context)`;
- "failing": failing_handler.py, PredictionException and a crash on chosen inputs;
- "streaming": streaming_handler.py, intermediate responses (a word at a time).

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
            "failing": "failing_handler.py", "streaming": "streaming_handler.py"}  # fmt: skip
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
        if model_config:
            import yaml

            config = Path(work) / "model-config.yaml"
            config.write_text(yaml.safe_dump(model_config))
            args += ["--config-file", str(config)]
        subprocess.run(args, check=True, capture_output=True)
    return export / f"{name}{SUFFIXES[archive_format]}"
