-- Warehouse schema v1: one row per attempt in `diagnoses`, its parts in child tables.
-- Key: (cluster, scheduler, job_id, attempt). Re-diagnosing replaces all rows of that key.

CREATE TABLE IF NOT EXISTS diagnoses (
    cluster VARCHAR NOT NULL, scheduler VARCHAR NOT NULL, job_id VARCHAR NOT NULL, attempt INTEGER NOT NULL,
    diagnosis_id VARCHAR NOT NULL,
    job_name VARCHAR, user_name VARCHAR, state VARCHAR, exit_code VARCHAR,
    start_time TIMESTAMPTZ, end_time TIMESTAMPTZ, nodes VARCHAR[],
    terminal_state VARCHAR NOT NULL, sub_domain VARCHAR NOT NULL, confidence VARCHAR,
    root_symptom VARCHAR, root_node VARCHAR, root_component VARCHAR, root_first_seen TIMESTAMPTZ,
    recommended_action VARCHAR, explanation VARCHAR,
    rules_version VARCHAR NOT NULL, rules_failed INTEGER,
    created_at TIMESTAMPTZ NOT NULL,
    diagnosis JSON NOT NULL,
    PRIMARY KEY (cluster, scheduler, job_id, attempt)
);

CREATE TABLE IF NOT EXISTS diagnosis_symptoms (
    diagnosis_id VARCHAR NOT NULL, symptom VARCHAR, role VARCHAR, node VARCHAR, rank INTEGER,
    component VARCHAR, first_seen TIMESTAMPTZ, last_seen TIMESTAMPTZ, count INTEGER,
    demoted_by VARCHAR, interesting BOOLEAN, rule_id VARCHAR
);

CREATE TABLE IF NOT EXISTS diagnosis_affected_nodes (
    diagnosis_id VARCHAR NOT NULL, node VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS diagnosis_coverage (
    diagnosis_id VARCHAR NOT NULL, source VARCHAR, connector VARCHAR, status VARCHAR,
    observations BIGINT, unparsed BIGINT, error VARCHAR, duration_ms BIGINT
);

CREATE TABLE IF NOT EXISTS diagnosis_evidence (
    diagnosis_id VARCHAR NOT NULL, evidence_id VARCHAR, source VARCHAR, node VARCHAR,
    time TIMESTAMPTZ, ref VARCHAR, text VARCHAR
);
