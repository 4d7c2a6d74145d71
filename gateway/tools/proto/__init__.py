"""The regeneration of the protocol bindings; the generated modules live in accel_base.proto."""
