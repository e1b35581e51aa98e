-- backend: file
-- Warehouse schema v9: `diagnoses` again, without its PRIMARY KEY (cluster, scheduler, job_id,
-- attempt). DuckDB keeps a primary key as an index, and a checkpoint of a table with one rewrote
-- the table's last row group whole (up to 122,880 rows), each diagnosis' JSON included: a
-- diagnosis written into a file of 14,000 cost its checkpoint 0.8 s where 14 cost 40 ms, growing
-- with every write until the row group fills (docs/benchmarks.md, 2026-12-07). The key is kept as
-- a lake keeps it: by the writer's delete-then-insert transaction (warehouse/writer.py), one
-- writing process holding the file and one write at a time in it (warehouse/store.py WRITE_LOCK).
-- A DuckDB file only (`backend: file`): a lake's tables never had the key.
CREATE TABLE diagnoses_v9 (
    cluster VARCHAR NOT NULL, scheduler VARCHAR NOT NULL, job_id VARCHAR NOT NULL, attempt INTEGER NOT NULL,
    diagnosis_id VARCHAR NOT NULL,
    job_name VARCHAR, user_name VARCHAR, state VARCHAR, exit_code VARCHAR,
    start_time TIMESTAMPTZ, end_time TIMESTAMPTZ, nodes VARCHAR[],
    terminal_state VARCHAR NOT NULL, sub_domain VARCHAR NOT NULL, confidence VARCHAR,
    root_symptom VARCHAR, root_node VARCHAR, root_component VARCHAR, root_first_seen TIMESTAMPTZ,
    recommended_action VARCHAR, explanation VARCHAR,
    rules_version VARCHAR NOT NULL, rules_failed INTEGER,
    created_at TIMESTAMPTZ NOT NULL,
    diagnosis JSON NOT NULL
);
INSERT INTO diagnoses_v9 SELECT * FROM diagnoses;
DROP TABLE diagnoses;
ALTER TABLE diagnoses_v9 RENAME TO diagnoses;
