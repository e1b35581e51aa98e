-- Every raw line's prefix parsed (timestamp, rank, body), and the first and last lines of each
-- scanned file (source_files.head/tail: is the file within the attempt's window?), in one
-- statement: parse_log_line is a large macro, bound once per statement, so one pass for all.
-- A collector's own timestamp (Loki) wins over anything printed in the line.
-- Parameters: $tz (zone for zone-less forms), $ref (reference time for year-less forms).
CREATE OR REPLACE TEMP TABLE parsed_lines AS
WITH l AS (
    SELECT file_id, lineno, line, collector_time, 'raw' AS kind FROM raw_lines
    UNION ALL
    SELECT file_id, NULL, unnest(head), NULL, 'head' FROM source_files WHERE head IS NOT NULL
    UNION ALL
    SELECT file_id, NULL, unnest(tail), NULL, 'tail' FROM source_files WHERE head IS NOT NULL
)
SELECT file_id, lineno, line, kind, coalesce(collector_time, p['ts']) AS stamp, p['rank'] AS rank, p['body'] AS body
FROM (SELECT *, parse_log_line(line, $tz, $ref) AS p FROM l)
