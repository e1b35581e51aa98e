-- topology_history: which host or switch each switch port connected to, from when until when (valid_to NULL: still).
-- A link ends when its port is next seen cabled elsewhere, or (hosts) when its host is next seen under another port.
CREATE OR REPLACE VIEW topology_history AS
WITH port_changes AS (
    SELECT *, lag(peer || coalesce(':' || hca, '')) OVER (PARTITION BY cluster, switch, port ORDER BY valid_from) AS prev
    FROM topology_links
), port_spans AS (
    SELECT cluster, switch, port, peer, peer_kind, hca, valid_from,
           lead(valid_from) OVER (PARTITION BY cluster, switch, port ORDER BY valid_from) AS port_until
    FROM port_changes
    WHERE prev IS DISTINCT FROM peer || coalesce(':' || hca, '')
)
SELECT s.cluster, s.switch, s.port, s.peer, s.peer_kind, s.hca, s.valid_from,
       CASE WHEN s.peer_kind = 'host' THEN least(s.port_until, (
           SELECT min(o.valid_from) FROM topology_links o
           WHERE o.cluster = s.cluster AND o.peer = s.peer AND o.peer_kind = 'host' AND o.valid_from > s.valid_from
             AND (o.switch != s.switch OR o.port != s.port)))
       ELSE s.port_until END AS valid_to
FROM port_spans s;
