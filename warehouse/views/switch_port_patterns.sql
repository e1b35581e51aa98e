-- switch_port_patterns: leaf switch ports under which failed attempts keep landing (their root host, an affected host, or a blamed port), most attempts first.
-- Hosts are placed with the topology of the attempt's time (topology_history), so a port that keeps failing whichever host is cabled to it stands out.
-- UNION ALL, not UNION: every aggregate below is DISTINCT or a min/max, so duplicates change nothing, and removing
-- them first cost as much as the rest of the view (measured at a year of a 50k-host fleet: tests/bench/fleet_lake.py).
CREATE OR REPLACE VIEW switch_port_patterns AS
WITH blamed AS (
    SELECT diagnosis_id, cluster, end_time, sub_domain, root_node AS node FROM diagnoses WHERE root_node IS NOT NULL
    UNION ALL
    SELECT d.diagnosis_id, d.cluster, d.end_time, d.sub_domain, a.node
    FROM diagnoses d JOIN diagnosis_affected_nodes a USING (diagnosis_id)
), placed AS (
    SELECT b.diagnosis_id, b.cluster, b.end_time, b.sub_domain, b.node, t.switch, t.port
    FROM blamed b JOIN topology_history t
      ON t.cluster = b.cluster AND t.peer_kind = 'host' AND t.peer = b.node
     AND b.end_time >= t.valid_from AND (t.valid_to IS NULL OR b.end_time < t.valid_to)
    UNION ALL
    SELECT d.diagnosis_id, d.cluster, d.end_time, d.sub_domain, NULL, split_part(c.component, ':', 1),
           split_part(c.component, ':', 2)
    FROM diagnoses d JOIN diagnosis_affected_components c USING (diagnosis_id)
    WHERE c.component LIKE '%:%'
)
SELECT cluster, switch, port, count(DISTINCT diagnosis_id) AS attempts, count(DISTINCT node) AS hosts,
       list(DISTINCT node ORDER BY node) FILTER (WHERE node IS NOT NULL) AS host_list,
       list(DISTINCT sub_domain ORDER BY sub_domain) AS sub_domains,
       min(end_time) AS first_failure, max(end_time) AS last_failure
FROM placed
GROUP BY cluster, switch, port
ORDER BY attempts DESC, last_failure DESC, switch, port;
