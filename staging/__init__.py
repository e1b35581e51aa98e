"""Layer 1, staging: one attempt's evidence on its way to the rules. The per-attempt DuckDB database
(schema, connections, the one made ahead), files read safely, raw lines and structured
observations staged, lines normalised (prefixes, timestamps, ranks). Imports only contracts."""
