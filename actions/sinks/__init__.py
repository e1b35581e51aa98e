"""The action sinks: one module per kind, each registering its configuration and its builder with
actions/registry.py. Adding a sink is adding its module here."""
