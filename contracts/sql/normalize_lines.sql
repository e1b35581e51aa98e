-- raw_lines -> log_lines: parse each line's prefix (timestamp, rank, body).
-- A collector's own timestamp (Loki) wins over anything printed in the line.
-- A line with a time of its own was written then: its interval [time_lo, time_hi] is that instant.
-- A stamp outside 1970..2200 (year 10000 in UTC, year 1, 1969) is no log's: the line gets no time
-- and time_quality 'far' (contracts/lines.py counts those lines, then treats them as lines without one).
-- Parameters: $tz (zone for zone-less forms), $ref (reference time for year-less forms).
INSERT INTO log_lines
WITH parsed AS (
    SELECT r.file_id, r.lineno, r.line, coalesce(r.collector_time, p['ts']) AS stamp, p
    FROM (SELECT *, parse_log_line(line, $tz, $ref) AS p FROM raw_lines) r
), ranged AS (
    SELECT *, CASE WHEN stamp >= TIMESTAMP '1970-01-02' AND stamp < TIMESTAMP '2200-01-01' THEN stamp END AS t
    FROM parsed
)
SELECT nextval('obs_seq'), s.source, s.connector, s.node, s.path, t.lineno,
       t.t,
       CASE WHEN t.t IS NOT NULL THEN 'own' WHEN t.stamp IS NOT NULL THEN 'far' ELSE 'none' END,
       t.p['rank'],
       left(t.line, {max_text}),
       left(t.p['body'], {max_text}),
       NULL,
       t.t,
       t.t
FROM ranged t JOIN source_files s USING (file_id)
ORDER BY s.file_id, t.lineno
