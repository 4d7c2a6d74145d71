"""The remote backend: a model whose instances are another V2 server (Triton, another
gateway, KServe, MLServer) reached over gRPC or HTTP.

settings.py reads the config's parameters; grpc_client.py and http_client.py speak the
protocol to one endpoint; endpoints.py spreads calls over several, checks their health
and says which calls may be retried; backend.py is the Backend the gateway loads.
"""
