-- xids_by_week: XID reports by code, host and week, whatever role they played (root or cascade).
CREATE OR REPLACE VIEW xids_by_week AS
SELECT date_trunc('week', s.first_seen) AS week, TRY_CAST(replace(s.symptom, 'xid_', '') AS INTEGER) AS xid,
       s.node, s.role, sum(s.count) AS reports, count(DISTINCT s.diagnosis_id) AS attempts
FROM diagnosis_symptoms s
WHERE s.symptom LIKE 'xid\_%' ESCAPE '\'
GROUP BY ALL;
