"""`accel-gateway compare`: the same inputs through several variants of a model, in
process or against a running gateway, reported as agreement, accuracy, latency,
throughput, load time and memory, in a table, a JSON file and an HTML page."""
