"""OpenTelemetry tracing of requests, and Triton's trace extension that steers it.

settings.py  which requests are traced (level, rate, count; server-wide and per model)
tracer.py    the Tracing object a core holds, --trace-config, the OTLP exporter
spans.py     a traced request's spans (imported, with OpenTelemetry, once one is traced)
calls.py     the extension's calls on a core
"""
