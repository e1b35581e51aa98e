-- repeat_offenders: hosts with two or more hardware roots within 14 days of each other
-- (candidates for replacement rather than another reset).
-- "Another job's hardware root within 14 days" is counted by two windows (the host's roots within
-- +-336 h, less its own job's): a pairwise comparison grows with the square of a bad host's roots.
CREATE OR REPLACE VIEW repeat_offenders AS
WITH hw AS (
    SELECT a.node, d.end_time, d.sub_domain, d.root_symptom, d.cluster, d.job_id
    FROM diagnoses d JOIN diagnosis_affected_nodes a USING (diagnosis_id)
    WHERE d.terminal_state = 'hardware_failure' AND d.end_time IS NOT NULL
), near AS (
    SELECT *,
           count(*) OVER (PARTITION BY node ORDER BY end_time
                          RANGE BETWEEN INTERVAL 336 HOURS PRECEDING AND INTERVAL 336 HOURS FOLLOWING)
         - count(*) OVER (PARTITION BY node, job_id ORDER BY end_time
                          RANGE BETWEEN INTERVAL 336 HOURS PRECEDING AND INTERVAL 336 HOURS FOLLOWING) AS other_jobs
    FROM hw
)
SELECT node, count(*) AS hardware_roots, min(end_time) AS first_seen, max(end_time) AS last_seen,
       list(DISTINCT sub_domain ORDER BY sub_domain) AS sub_domains,
       list(DISTINCT root_symptom ORDER BY root_symptom) AS root_symptoms
FROM near
WHERE other_jobs > 0
GROUP BY node
HAVING count(*) >= 2
ORDER BY hardware_roots DESC, last_seen DESC;
