-- parsed_lines (parse_lines.sql) -> log_lines, numbered in file order from $base + 1 (ids that
-- staging/normalize.py took from obs_seq for them). Files in the order of their layer, then path,
-- not of their file_id: the connectors collect in parallel threads and take file ids in whatever
-- order they run, and a tie between two events of the same second falls by these ids
-- (rules/phases.py renumber_events), so the same bundle must number its lines the same way. The
-- layer nearer the hardware first: in one second the kernel's report of a fault (an XID, a machine
-- check) comes before the application's report of what it saw of it.
-- A line with a time of its own was written then: its interval [time_lo, time_hi] is that instant.
-- A stamp outside 1970..2200 (year 10000 in UTC, year 1, 1969), or one whose fields make no time
-- ('-infinity': 11:59:60 on a day with no leap second, hour 25, a 15-digit fraction), is no log's:
-- the line is quarantined: kept as evidence with no time and time_quality 'quarantined', counted
-- (staging/normalize.py), never given its neighbours' time (inherit_time.sql reads 'none' lines
-- only), so never used to order faults nor to choose a root (rules/engine.sql, root_candidates).
-- The rows go in in id order with no ORDER BY of their own: the numbering's window sorts them so
-- and DuckDB keeps a query's order on insert (preserve_insertion_order); a second sort of every
-- line's text cost ~40% of this statement at 100k lines (tests/unit/test_collection_order.py
-- checks the order). A text is cut only when it may be too long (no more bytes than the limit:
-- no more characters): left walks every line's characters, ~0.1 us a line each.
INSERT INTO log_lines
WITH ranged AS (
    SELECT *, CASE WHEN stamp >= TIMESTAMP '1970-01-02' AND stamp < TIMESTAMP '2200-01-01' THEN stamp END AS t
    FROM parsed_lines WHERE kind = 'raw'
),
-- each file's place, worked out over the few files: the lines are then sorted by two integers,
-- not by the source and path strings of every line
files AS (
    SELECT *, row_number() OVER (
        ORDER BY CASE source WHEN 'syslog' THEN 0 WHEN 'fabricmanager' THEN 1 WHEN 'app' THEN 2 ELSE 3 END,
                 source, path, file_id) AS place
    FROM source_files
)
SELECT $base + row_number() OVER (ORDER BY s.place, t.lineno), s.source, s.connector, s.node, s.path, t.lineno,
       t.t,
       CASE WHEN t.t IS NOT NULL THEN 'own' WHEN t.stamp IS NOT NULL THEN 'quarantined' ELSE 'none' END,
       t.rank,
       CASE WHEN strlen(t.line) > {max_text} THEN left(t.line, {max_text}) ELSE t.line END,
       CASE WHEN strlen(t.body) > {max_text} THEN left(t.body, {max_text}) ELSE t.body END,
       NULL,
       t.t,
       t.t
FROM ranged t JOIN files s USING (file_id)
