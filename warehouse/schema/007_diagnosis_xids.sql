-- Warehouse schema v7: the XID symptoms of each diagnosis (xid_<code>) again, in a table of their
-- own with the code as a number, written with the diagnosis and replaced with it. xids_by_week
-- reads them here: a year of a 50k-host fleet holds 20M symptoms, under a million of them XIDs,
-- and finding those among the rest read every symptom's diagnosis, host, role and time (2.0-2.7 s
-- for the view from a lake in S3; DuckDB reads a filtered scan's other columns whole, and
-- DuckLake's partitioning, which would skip them, failed writes after maintenance in the version
-- used here: docs/warehouse.md, At fleet scale).
CREATE TABLE IF NOT EXISTS diagnosis_xids (
    diagnosis_id VARCHAR NOT NULL, xid INTEGER NOT NULL, node VARCHAR, role VARCHAR,
    first_seen TIMESTAMPTZ, count INTEGER
);
INSERT INTO diagnosis_xids
SELECT diagnosis_id, CAST(regexp_extract(symptom, '^xid_(\d+)$', 1) AS INTEGER), node, role, first_seen, count
FROM diagnosis_symptoms WHERE regexp_full_match(symptom, 'xid_\d+');
