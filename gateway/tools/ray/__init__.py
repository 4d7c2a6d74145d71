"""The gateway on Ray Serve (`accel-gateway ray serve`): each model of a repository a
deployment of its own, and the gateway's V2 HTTP and gRPC fronts as the ingress.

deployments.py turns a repository into a Serve application (options from each model's
config); replica.py is one replica of one model, with the gateway's own repository,
batcher and instance inside; board.py collects the replicas' statistics; ingress.py
serves the V2 protocol and hands every model call to the model's deployment;
command.py is the command line.
"""
