"""The gateway's own HTTP/2 server for gRPC (`--grpc-server gateway`): frames, headers,
calls and flow control on asyncio, in front of grpc's generated service handlers."""
