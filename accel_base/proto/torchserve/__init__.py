"""TorchServe's gRPC inference and management services (its package names, messages and
field numbers), and the google.rpc messages they use; generated from protos/torchserve/
by gateway.tools.proto.regenerate into accel_base.proto.POOL."""
