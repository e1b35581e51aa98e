-- Warehouse schema v5: what the action sinks decided and did about each diagnosis (actions/,
-- contracts/actions.py): one row per sink, operation and node; a reversal (undo, a re-diagnosis'
-- resolve) is a row of its own naming the row it reverses. Rows are never replaced with the
-- diagnosis: they are the audit of what was done to the fleet. (No comment may end the line
-- before PRIMARY KEY: a lake's copy of this file drops the key by pattern, schema.py.)
CREATE TABLE IF NOT EXISTS actions (
    action_id VARCHAR NOT NULL,
    decided_at TIMESTAMPTZ NOT NULL, seq INTEGER NOT NULL,   -- seq: the row's place among those decided together
    finished_at TIMESTAMPTZ,
    cluster VARCHAR NOT NULL, scheduler VARCHAR NOT NULL, job_id VARCHAR NOT NULL, attempt INTEGER NOT NULL,
    diagnosis_id VARCHAR NOT NULL, rules_version VARCHAR NOT NULL,
    terminal_state VARCHAR NOT NULL, sub_domain VARCHAR NOT NULL, confidence VARCHAR,
    recommended_action VARCHAR, root_symptom VARCHAR,
    sink VARCHAR NOT NULL,        -- slurm | kubernetes | alertmanager | webhook
    operation VARCHAR NOT NULL,   -- drain, cordon, alert, notify; resume, uncordon, resolve, withdraw; flag_undo
    isolates BOOLEAN NOT NULL,    -- the operation takes a node out of service
    node VARCHAR,                 -- NULL: about the attempt, not one node
    dry_run BOOLEAN NOT NULL,
    outcome VARCHAR NOT NULL,     -- pending | done | dry_run | skipped | failed | flagged
    reason VARCHAR,               -- why skipped, the last error, what a flag means
    tries INTEGER,
    reverts VARCHAR,              -- the action_id this row reverses or flags
    -- details: what was sent (the alert's labels, the drain's reason), what an undo needs
    details JSON,
    PRIMARY KEY (action_id)
);
