-- switch_port_patterns: leaf switch ports under which failed attempts keep landing (their root host, an affected host, or a blamed port), most attempts first.
-- Hosts are placed with the topology of the attempt's time (topology_history), so a port that keeps failing whichever host is cabled to it stands out.
-- Duplicates (an attempt placed at a port by its root host and again by an affected host) are removed once each for
-- attempts and for hosts, grouped, not by UNION or DISTINCT aggregates: those cost most of the view at a year of a
-- 50k-host fleet (tests/bench/fleet_lake.py). sub_domain and end_time are the attempt's own, so any_value is exact.
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
), attempts AS (
    SELECT cluster, switch, port, diagnosis_id, any_value(sub_domain) AS sub_domain, any_value(end_time) AS end_time
    FROM placed GROUP BY cluster, switch, port, diagnosis_id
), per_port AS (
    SELECT cluster, switch, port, count(*) AS attempts, list_sort(list_distinct(list(sub_domain))) AS sub_domains,
           min(end_time) AS first_failure, max(end_time) AS last_failure
    FROM attempts GROUP BY cluster, switch, port
), hosts AS (
    SELECT cluster, switch, port, count(*) AS hosts, list(node ORDER BY node) AS host_list
    FROM (SELECT DISTINCT cluster, switch, port, node FROM placed WHERE node IS NOT NULL)
    GROUP BY cluster, switch, port
)
SELECT p.cluster, p.switch, p.port, p.attempts, coalesce(h.hosts, 0) AS hosts, h.host_list, p.sub_domains,
       p.first_failure, p.last_failure
FROM per_port p LEFT JOIN hosts h ON h.cluster = p.cluster AND h.switch = p.switch AND h.port = p.port
ORDER BY attempts DESC, last_failure DESC, switch, port;
