-- xids_by_week: XID reports by code, host and week, whatever role they played (root or cascade).
-- Read from diagnosis_xids (schema v7), the XID symptoms alone, not from every symptom.
-- Attempts are counted after a first grouping by attempt (cheaper than count(DISTINCT) per group).
CREATE OR REPLACE VIEW xids_by_week AS
WITH per_attempt AS (
    SELECT date_trunc('week', x.first_seen) AS week, x.xid, x.node, x.role, x.diagnosis_id, sum(x.count) AS reports
    FROM diagnosis_xids x
    GROUP BY ALL
)
SELECT week, xid, node, role, sum(reports) AS reports, count(*) AS attempts
FROM per_attempt
GROUP BY week, xid, node, role;
