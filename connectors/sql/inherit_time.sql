-- Continuation lines (a traceback's frames and exception, wrapped messages) carry no time of their
-- own: they take the time of the nearest earlier line that has one. line_context(path, lineno, ctx)
-- holds, for each such line, the lines before it (oldest first), fetched from the source file; the
-- context is kept on the observation too (rules read traceback frames from it).
UPDATE log_lines AS l
SET ctx = c.ctx,
    time = coalesce(c.t, l.time),
    time_quality = CASE WHEN c.t IS NOT NULL THEN 'inherited' ELSE l.time_quality END
FROM (
    SELECT path, lineno, ctx,
           list_filter(list_transform(ctx, x -> log_time(x, $tz, $ref)), t -> t IS NOT NULL)[-1] AS t
    FROM line_context
) AS c
WHERE l.path = c.path AND l.lineno = c.lineno AND l.time_quality = 'none'
