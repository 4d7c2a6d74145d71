"""Triton's Python backend: models written as `model.py` with `TritonPythonModel`, and the
`triton_python_backend_utils` module they import (pb_utils.py)."""
