"""TF Serving's SavedModels as the gateway reads them without TensorFlow (signatures.py)."""
