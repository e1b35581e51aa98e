-- Warehouse schema v6: fleet memory (warehouse/memory.py). One row per subject a diagnosis blamed
-- (role root: its affected hosts, their switch ports, the ports its verdict names) or that only
-- showed its cascade (role cascade: the other hosts with cascade symptoms, and their ports); the
-- rows of a diagnosis go and come with it. Diagnoses already stored are remembered from their
-- hosts, cascade hosts and named ports (the ports of their hosts need the attempt's topology).
-- Numbered 6: 4 and 5 are taken by other branches' migrations in flight.

CREATE TABLE IF NOT EXISTS blame_history (
    cluster VARCHAR NOT NULL, kind VARCHAR NOT NULL, subject VARCHAR NOT NULL, role VARCHAR NOT NULL,
    end_time TIMESTAMPTZ, scheduler VARCHAR, job_id VARCHAR NOT NULL, attempt INTEGER,
    diagnosis_id VARCHAR NOT NULL, symptom VARCHAR
);

INSERT INTO blame_history
SELECT * FROM (
    SELECT d.cluster, 'node', a.node, 'root', d.end_time, d.scheduler, d.job_id, d.attempt, d.diagnosis_id, d.root_symptom
    FROM diagnoses d JOIN diagnosis_affected_nodes a USING (diagnosis_id)
    UNION
    SELECT d.cluster, 'switch_port', c.component, 'root', d.end_time, d.scheduler, d.job_id, d.attempt, d.diagnosis_id,
           d.root_symptom
    FROM diagnoses d JOIN diagnosis_affected_components c USING (diagnosis_id)
    WHERE regexp_full_match(c.component, '[^\s:]+:[^\s:]+')
    UNION
    SELECT d.cluster, 'node', s.node, 'cascade', d.end_time, d.scheduler, d.job_id, d.attempt, d.diagnosis_id,
           d.root_symptom
    FROM diagnoses d JOIN diagnosis_symptoms s USING (diagnosis_id)
    WHERE s.role = 'cascade' AND s.node IS NOT NULL
      AND s.node NOT IN (SELECT node FROM diagnosis_affected_nodes a WHERE a.diagnosis_id = d.diagnosis_id)
)
ORDER BY 1, 3, 5;
