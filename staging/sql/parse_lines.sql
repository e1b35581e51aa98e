-- Every raw line's prefix parsed (timestamp, rank, body), and the first and last lines of each
-- scanned file (source_files.head/tail: is the file within the attempt's window?), in one
-- statement: the grammar is a large macro, bound once per statement, so one pass for all. It is
-- the table macro parse_log_lines over all lines at once, not parse_log_line per line: that is a
-- correlated subquery, which DuckDB runs as a join of every line with its distinct lines (~30% of
-- the grammar's time at 100k lines). Each line's other columns ride through the grammar as `k`.
-- A collector's own timestamp (Loki) wins over anything printed in the line.
-- Parameters: $tz (zone for zone-less forms), $ref (reference time for year-less forms).
CREATE OR REPLACE TEMP TABLE parsed_lines AS
WITH l AS (
    SELECT file_id, lineno, line, collector_time, 'raw' AS kind FROM raw_lines
    UNION ALL
    SELECT file_id, NULL, unnest(head), NULL, 'head' FROM source_files WHERE head IS NOT NULL
    UNION ALL
    SELECT file_id, NULL, unnest(tail), NULL, 'tail' FROM source_files WHERE head IS NOT NULL
),
lines AS (SELECT {'file_id': file_id, 'lineno': lineno, 'line': line, 'kind': kind, 'collector_time': collector_time} AS k, line
          FROM l)
SELECT k['file_id'] AS file_id, k['lineno'] AS lineno, k['line'] AS line, k['kind'] AS kind,
       coalesce(k['collector_time'], p['ts']) AS stamp, p['rank'] AS rank, p['body'] AS body
FROM parse_log_lines(lines, $tz, $ref)
