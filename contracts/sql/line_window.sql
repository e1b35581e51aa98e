-- The lines of one source file around its lines that carry no time of their own ({context} before
-- and after each), for inherit_time.sql: the file is split in DuckDB and only the windows are kept.
-- {files} is a relation (content) holding the file; $ref is how log_lines names it.
INSERT INTO line_window
WITH need AS (
    SELECT DISTINCT unnest(range(greatest(1, lineno - {context}), lineno + {context} + 1)) AS lineno
    FROM log_lines WHERE path = $ref AND time_quality = 'none'
), f AS (
    SELECT string_split(content, chr(10)) AS l FROM {files}
)
SELECT $ref, need.lineno, left(rtrim(f.l[need.lineno], chr(13)), {max_text})
FROM need, f
WHERE need.lineno <= len(f.l)
