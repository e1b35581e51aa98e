-- failures_per_host: which hosts were blamed, per day and kind of failure.
-- One row per (day, node, terminal_state, sub_domain) with the number of attempts that blamed the node.
CREATE OR REPLACE VIEW failures_per_host AS
SELECT date_trunc('day', d.end_time) AS day, a.node, d.terminal_state, d.sub_domain, count(*) AS attempts,
       list(DISTINCT d.cluster ORDER BY d.cluster) AS clusters
FROM diagnoses d JOIN diagnosis_affected_nodes a USING (diagnosis_id)
GROUP BY ALL;
