"""Builders for the example Triton-layout model repository.

Every model is generated here from our own code with fixed seeds and nothing downloaded:
``simple`` (Triton's classic add/sub example), one ``identity_<datatype>`` model per KServe V2
datatype, ``digits``, a small MLP trained on scikit-learn's bundled digits data, and ``mlp``, an
untrained 784->1024->1024->10 MLP served with dynamic batching (its 8192-wide sibling
``mlp_wide`` is built only on request: ``python -m models.mlp DEST --wide``). ONNX graphs are
written with ``onnx.helper`` directly and ``config.pbtxt`` files as plain text, so building needs
neither a converter nor protobuf's text format. Entry points live in :mod:`models.build`.
"""
