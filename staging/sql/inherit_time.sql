-- Continuation lines (a traceback's frames and exception, wrapped messages) carry no time of their
-- own. They were written between the stamped lines of their stream around them: the nearest
-- earlier and the nearest later line that has a time, of the same file and, when the line has a
-- rank prefix, of the same rank (interleaved ranks' lines say nothing about this rank's). The
-- earlier one gives `time` ('inherited', as before), both give [time_lo, time_hi]; a side with no
-- stamped line within {context} lines stays NULL (unbounded).
-- line_window(path, lineno, line) holds the lines around each such line (line_window.sql); the
-- lines before it are kept on the observation as ctx, oldest first (rules read traceback frames
-- from it). Window frames over line numbers do the searching: no join fans a line out to its
-- neighbours.
UPDATE log_lines AS l
SET ctx = c.ctx,
    time = coalesce(c.lo, l.time),
    time_quality = CASE WHEN c.lo IS NOT NULL THEN 'inherited' ELSE l.time_quality END,
    time_lo = c.lo,
    time_hi = c.hi
FROM (
    WITH need AS (
        SELECT path, lineno, rank FROM log_lines
        WHERE time_quality = 'none' AND path IN (SELECT DISTINCT path FROM line_window)
    ), window_lines AS (
        SELECT {'path': path, 'lineno': lineno} AS k, line FROM line_window
    ), stamped AS (
        -- each window line parsed once, however many windows hold it: the table macro over all of
        -- them (parse_log_line per line is a correlated subquery, parse_lines.sql)
        SELECT k['path'] AS path, k['lineno'] AS lineno, p['ts'] AS ts, p['rank'] AS rank
        FROM parse_log_lines(window_lines, $tz, $ref)
        WHERE p['ts'] >= TIMESTAMP '1970-01-02' AND p['ts'] < TIMESTAMP '2200-01-01'  -- a far stamp is none
    ), marks AS (
        -- the stamps and the lines looking for them, in file order
        SELECT path, lineno, rank, ts, false AS needy FROM stamped
        UNION ALL
        SELECT path, lineno, rank, NULL, true FROM need
    ), bounds AS (
        SELECT path, lineno, rank, needy,
               -- a line of no rank: any stamped line of the file
               last_value(ts IGNORE NULLS) OVER (PARTITION BY path ORDER BY lineno
                                                 RANGE BETWEEN {context} PRECEDING AND 1 PRECEDING) AS lo_any,
               first_value(ts IGNORE NULLS) OVER (PARTITION BY path ORDER BY lineno
                                                  RANGE BETWEEN 1 FOLLOWING AND {context} FOLLOWING) AS hi_any,
               -- a line with a rank: its rank's stamped lines only
               last_value(ts IGNORE NULLS) OVER (PARTITION BY path, rank ORDER BY lineno
                                                 RANGE BETWEEN {context} PRECEDING AND 1 PRECEDING) AS lo_rank,
               first_value(ts IGNORE NULLS) OVER (PARTITION BY path, rank ORDER BY lineno
                                                  RANGE BETWEEN 1 FOLLOWING AND {context} FOLLOWING) AS hi_rank
        FROM marks
    ), before AS (
        SELECT path, lineno,
               list(line ORDER BY lineno) OVER (PARTITION BY path ORDER BY lineno
                                                RANGE BETWEEN {context} PRECEDING AND 1 PRECEDING) AS ctx
        FROM line_window
    )
    SELECT b.path, b.lineno, coalesce(w.ctx, []::VARCHAR[]) AS ctx,
           CASE WHEN b.rank IS NULL THEN b.lo_any ELSE b.lo_rank END AS lo,
           CASE WHEN b.rank IS NULL THEN b.hi_any ELSE b.hi_rank END AS hi
    FROM bounds b LEFT JOIN before w USING (path, lineno)
    WHERE b.needy
) AS c
WHERE l.path = c.path AND l.lineno = c.lineno AND l.time_quality = 'none'
