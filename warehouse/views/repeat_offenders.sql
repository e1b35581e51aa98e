-- repeat_offenders: hosts with two or more hardware roots within 14 days of each other
-- (candidates for replacement rather than another reset).
CREATE OR REPLACE VIEW repeat_offenders AS
WITH hw AS (
    SELECT a.node, d.end_time, d.sub_domain, d.root_symptom, d.cluster, d.job_id
    FROM diagnoses d JOIN diagnosis_affected_nodes a USING (diagnosis_id)
    WHERE d.terminal_state = 'hardware_failure'
)
SELECT node, count(*) AS hardware_roots, min(end_time) AS first_seen, max(end_time) AS last_seen,
       list(DISTINCT sub_domain ORDER BY sub_domain) AS sub_domains,
       list(DISTINCT root_symptom ORDER BY root_symptom) AS root_symptoms
FROM hw h
WHERE EXISTS (SELECT 1 FROM hw o WHERE o.node = h.node AND o.job_id != h.job_id
              AND abs(epoch(o.end_time) - epoch(h.end_time)) <= 14 * 86400)
GROUP BY node
HAVING count(*) >= 2
ORDER BY hardware_roots DESC, last_seen DESC;
