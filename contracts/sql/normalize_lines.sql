-- raw_lines -> log_lines: parse each line's prefix (timestamp, rank, body).
-- A collector's own timestamp (Loki) wins over anything printed in the line.
-- A line with a time of its own was written then: its interval [time_lo, time_hi] is that instant.
-- Parameters: $tz (zone for zone-less forms), $ref (reference time for year-less forms).
INSERT INTO log_lines
WITH parsed AS (
    SELECT r.file_id, r.lineno, r.line, coalesce(r.collector_time, p['ts']) AS t, p
    FROM (SELECT *, parse_log_line(line, $tz, $ref) AS p FROM raw_lines) r
)
SELECT nextval('obs_seq'), s.source, s.connector, s.node, s.path, t.lineno,
       t.t,
       CASE WHEN t.t IS NULL THEN 'none' ELSE 'own' END,
       t.p['rank'],
       left(t.line, {max_text}),
       left(t.p['body'], {max_text}),
       NULL,
       t.t,
       t.t
FROM parsed t JOIN source_files s USING (file_id)
ORDER BY s.file_id, t.lineno
