"""Commands and helpers beside serving: compare, compile, loadtest, the Ray deployment,
the CLI reference, protobuf regeneration."""
