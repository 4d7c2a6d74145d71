"""TorchServe's APIs over models the gateway serves (TorchServe archives among them)."""
