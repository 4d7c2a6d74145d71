"""Builders for the example Triton-layout model repository.

Every model is generated here from our own code with fixed seeds and nothing downloaded:
``simple`` (Triton's classic add/sub example), one ``identity_<datatype>`` model per KServe V2
datatype, ``digits``, a small MLP trained on scikit-learn's bundled digits data, and ``mlp``, an
untrained 784->1024->1024->10 MLP served with dynamic batching (its 8192-wide sibling
``mlp_wide`` is built only on request: ``python -m models.mlp DEST --wide``). Those ONNX graphs
are written with ``onnx.helper`` directly and ``config.pbtxt`` files as plain text, so building
them needs neither a converter nor protobuf's text format.

Where the frameworks are installed, the same digits classifier is also trained in PyTorch
(:mod:`models.digits_torch`: TorchScript, torch.export, torch.compile, ONNX), Keras
(:mod:`models.digits_keras`: SavedModel) and JAX (:mod:`models.digits_jax`: jax.export), all from
one set of initial weights and one full-batch optimizer (:mod:`models.digits_training`) so that
they agree; :mod:`models.mixed_precision` writes an FP16/FP32 model per framework, and
:mod:`models.minilm` the packaged all-MiniLM-L6-v2 sentence embedder. :mod:`models.accuracy`
re-computes any digits model's accuracy from its artifact. Entry points live in
:mod:`models.build`.
"""
