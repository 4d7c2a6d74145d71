"""Builders for the example Triton-layout model repository.

Every model is generated here from our own code with fixed seeds and nothing downloaded:
``simple`` (Triton's classic add/sub example), one ``identity_<datatype>`` model per KServe V2
datatype, and ``digits``, a small MLP trained on scikit-learn's bundled digits data. ONNX graphs
are written with ``onnx.helper`` directly and ``config.pbtxt`` files as plain text, so building
needs neither a converter nor protobuf's text format. Entry points live in :mod:`models.build`.
"""
