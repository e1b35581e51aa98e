-- xids_by_week: XID reports by code, host and week, whatever role they played (root or cascade).
-- Attempts are counted after a first grouping by attempt (cheaper than count(DISTINCT) per group).
CREATE OR REPLACE VIEW xids_by_week AS
WITH per_attempt AS (
    SELECT date_trunc('week', s.first_seen) AS week, TRY_CAST(replace(s.symptom, 'xid_', '') AS INTEGER) AS xid,
           s.node, s.role, s.diagnosis_id, sum(s.count) AS reports
    FROM diagnosis_symptoms s
    WHERE s.symptom LIKE 'xid\_%' ESCAPE '\'
    GROUP BY ALL
)
SELECT week, xid, node, role, sum(reports) AS reports, count(*) AS attempts
FROM per_attempt
GROUP BY week, xid, node, role;
