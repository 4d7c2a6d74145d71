"""Ensembles (`platform: "ensemble"`): a DAG of the repository's models run per request."""
