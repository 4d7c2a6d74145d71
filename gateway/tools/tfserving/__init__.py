"""`accel-gateway tensorflow-model-server`: TF Serving's command line (command.py)."""
