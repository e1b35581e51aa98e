-- Warehouse schema v2: affected components (switch / switch:port), topology snapshots and the
-- rules versions that produced diagnoses.

CREATE TABLE IF NOT EXISTS diagnosis_affected_components (
    diagnosis_id VARCHAR NOT NULL, component VARCHAR NOT NULL
);
INSERT INTO diagnosis_affected_components
SELECT diagnosis_id, unnest(from_json(diagnosis -> 'affected_components', '["VARCHAR"]'))
FROM diagnoses;

-- What each switch port was seen cabled to, and since when (an observation: a bundle's
-- topology.yaml at its attempt's start, or `attribution topology load`). How long each link held
-- is derived in the topology_history view, so snapshots may arrive in any order.
CREATE TABLE IF NOT EXISTS topology_links (
    cluster VARCHAR NOT NULL, switch VARCHAR NOT NULL, port VARCHAR NOT NULL,
    peer VARCHAR NOT NULL, peer_kind VARCHAR NOT NULL,     -- 'host' or 'switch'
    hca VARCHAR,                                           -- host side: mlx5_0 ...
    valid_from TIMESTAMPTZ NOT NULL, source VARCHAR,
    PRIMARY KEY (cluster, switch, port, valid_from)
);

CREATE TABLE IF NOT EXISTS rules_versions (
    version VARCHAR PRIMARY KEY, first_used TIMESTAMPTZ NOT NULL, last_used TIMESTAMPTZ NOT NULL
);
INSERT INTO rules_versions SELECT rules_version, min(created_at), max(created_at) FROM diagnoses GROUP BY rules_version;
