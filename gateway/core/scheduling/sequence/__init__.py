"""The sequence batcher for stateful models (batcher.py), its controls and state
(controls.py), and its live sequences (registry.py)."""
