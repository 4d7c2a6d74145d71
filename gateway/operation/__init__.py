"""Running the server: metrics, logging, tracing, overload protection, drain, memory
and security checks."""
