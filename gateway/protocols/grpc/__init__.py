"""The gRPC front: V2's GRPCInferenceService on grpc.aio, plus grpc.health.v1."""
