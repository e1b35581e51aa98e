-- The lines of one piece of a source file (lines $first .. of the file, staging/files.py
-- read_pieces) that are around its lines carrying no time of their own, for inherit_time.sql.
-- $n: the line numbers wanted in this piece; $ref: how log_lines names the file.
INSERT INTO line_window
WITH f AS (
    SELECT string_split($content, chr(10)) AS l
)
SELECT $ref, n.lineno, left(rtrim(f.l[n.lineno - $first + 1], chr(13)), {max_text})
FROM (SELECT unnest($n::BIGINT[]) AS lineno) n, f
WHERE n.lineno - $first + 1 <= len(f.l)
