"""SavedModels laid out as TF Serving serves them (savedmodels.py)."""
