-- Continuation lines (a traceback's frames and exception, wrapped messages) carry no time of their
-- own: they take the time of the nearest earlier line that has one. line_context(path, lineno, ctx)
-- holds, for each such line, the lines before it (oldest first), fetched from the source file; the
-- context is kept on the observation too (rules read traceback frames from it).
UPDATE log_lines AS l
SET ctx = c.ctx,
    time = coalesce(c.t, l.time),
    time_quality = CASE WHEN c.t IS NOT NULL THEN 'inherited' ELSE l.time_quality END
FROM (
    WITH u AS (
        SELECT path, lineno, unnest(ctx) AS x, generate_subscripts(ctx, 1) AS i FROM line_context
    ), p AS (
        SELECT path, lineno, i, parse_log_line(x, $tz, $ref) AS q FROM u
    ), best AS (
        -- with a rank prefix, only that rank's earlier lines count: interleaved ranks' lines do not
        SELECT p.path, p.lineno, arg_max(q['ts'], i) FILTER (WHERE q['ts'] IS NOT NULL
                   AND (l.rank IS NULL OR q['rank'] IS NOT DISTINCT FROM l.rank)) AS t
        FROM p JOIN log_lines l USING (path, lineno) GROUP BY p.path, p.lineno
    )
    SELECT lc.path, lc.lineno, lc.ctx, best.t
    FROM line_context lc LEFT JOIN best USING (path, lineno)
) AS c
WHERE l.path = c.path AND l.lineno = c.lineno AND l.time_quality = 'none'
