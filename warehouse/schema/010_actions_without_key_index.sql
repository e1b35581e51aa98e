-- backend: file
-- Warehouse schema v10: `actions` again, without its PRIMARY KEY (action_id), for the reason v9
-- took `diagnoses`' (009_diagnoses_without_key_index.sql): its index made each checkpoint after an
-- acting write rewrite the table's last row group whole, every action's details in it (152 ms
-- beside 50,000 actions; 31 ms without). Action ids are made unique where they are made, and a
-- decision's rows are inserted in one transaction, never twice (warehouse/actions.py). A DuckDB
-- file only: a lake's tables never had the key.
CREATE TABLE actions_v10 (
    action_id VARCHAR NOT NULL,
    decided_at TIMESTAMPTZ NOT NULL, seq INTEGER NOT NULL,
    finished_at TIMESTAMPTZ,
    cluster VARCHAR NOT NULL, scheduler VARCHAR NOT NULL, job_id VARCHAR NOT NULL, attempt INTEGER NOT NULL,
    diagnosis_id VARCHAR NOT NULL, rules_version VARCHAR NOT NULL,
    terminal_state VARCHAR NOT NULL, sub_domain VARCHAR NOT NULL, confidence VARCHAR,
    recommended_action VARCHAR, root_symptom VARCHAR,
    sink VARCHAR NOT NULL,
    operation VARCHAR NOT NULL,
    isolates BOOLEAN NOT NULL,
    node VARCHAR,
    dry_run BOOLEAN NOT NULL,
    outcome VARCHAR NOT NULL,
    reason VARCHAR,
    tries INTEGER,
    reverts VARCHAR,
    details JSON
);
INSERT INTO actions_v10 SELECT * FROM actions;
DROP TABLE actions;
ALTER TABLE actions_v10 RENAME TO actions;
