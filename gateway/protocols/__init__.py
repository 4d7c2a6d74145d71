"""The protocol fronts, one package per protocol; each talks to the server through
gateway.core.service.interface.Core only."""
