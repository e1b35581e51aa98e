"""Connectors: get an attempt's evidence from a source into its staging database.

Each source is one module that registers its configuration model and its `collect(context)` with
`connectors.registry`; see registry.py for the protocol and docs/connectors.md ("Add a source").
Each scheduler is one module (and its states table, data/) that registers with
`connectors.schedulers` (docs/connectors.md, "Add a scheduler").
"""
