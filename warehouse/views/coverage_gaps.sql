-- coverage_gaps: which sources, through which connectors, did not deliver, per cluster.
CREATE OR REPLACE VIEW coverage_gaps AS
WITH c AS (
    SELECT d.cluster, c.source, c.connector, c.status, c.error
    FROM diagnosis_coverage c JOIN diagnoses d USING (diagnosis_id)
), g AS (
    SELECT cluster, source, connector, status, count(*) AS attempts, min(error) AS example_error
    FROM c GROUP BY cluster, source, connector, status
), p AS (  -- the share is of all attempts that configured the source, so computed before filtering
    SELECT *, round(100.0 * attempts / sum(attempts) OVER (PARTITION BY cluster, source), 1) AS pct_of_source FROM g
)
SELECT cluster, source, connector, status, attempts, pct_of_source, example_error
FROM p WHERE status NOT IN ('ok', 'skipped')
ORDER BY attempts DESC;
