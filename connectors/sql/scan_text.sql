-- Scan whole text files in DuckDB: split into lines, keep the lines that pass the rules' literal
-- pre-filter (with their 1-based line numbers), and per-file facts for coverage.
-- {files} is a relation (filename, content); {prefilter} a boolean expression over x (one line).
WITH f AS (
    SELECT filename, string_split(content, chr(10)) AS l FROM {files}
), m AS (
    SELECT filename, l, list_transform(l, x -> {prefilter}) AS mask FROM f
)
SELECT
    filename,
    len(l) - CASE WHEN l[-1] = '' THEN 1 ELSE 0 END                    AS n_lines,
    len(list_filter(l, x -> strlen(x) > {max_line}))                     AS n_long,
    list_transform(l[greatest(1, len(l) - 8):], x -> rtrim(x, chr(13)))  AS tail,
    list_where(range(1, len(l) + 1), mask)                               AS hit_lineno,
    list_transform(list_where(l, mask), x -> rtrim(x, chr(13)))          AS hit_line
FROM m
