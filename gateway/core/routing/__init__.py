"""Router models: a model name that forwards each request to one of several variant
models by weight (A/B, canary), optionally by a sticky key, and copies a sample of
requests to shadow variants whose outputs are compared with the served ones."""
