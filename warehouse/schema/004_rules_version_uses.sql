-- Warehouse schema v4: which rules versions made diagnoses, and when, as an append-only record:
-- one row per diagnosis written. (Before: a row per version whose first/last use every write
-- updated; on a DuckLake that update made every two concurrent writers conflict, whatever their
-- attempts.) The view rules_versions (warehouse/views/) answers first and last use per version.
CREATE TABLE IF NOT EXISTS rules_version_uses (version VARCHAR NOT NULL, used_at TIMESTAMPTZ NOT NULL);
INSERT INTO rules_version_uses
SELECT version, first_used FROM rules_versions UNION ALL SELECT version, last_used FROM rules_versions;
DROP TABLE rules_versions;
