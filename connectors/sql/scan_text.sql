-- Scan pieces of text files in DuckDB (connectors/text.py): split each into lines, keep the lines
-- that pass the rules' literal pre-filter (with their 1-based line numbers in the file), and the
-- per-piece facts for coverage. A line longer than {max_line} bytes is cut there (counted).
-- {pieces} is a relation (file_id, first, content, lenient): `first` is the number of the piece's
-- first line; `lenient` says invalid bytes were replaced by U+FFFD (those lines are counted).
-- {prefilter} is a boolean expression over x (one line).
WITH f AS (
    SELECT file_id, first, lenient, string_split(content, chr(10)) AS l FROM {pieces}
), m AS (
    SELECT *, list_transform(l, x -> {prefilter}) AS mask FROM f
)
SELECT
    file_id,
    first,
    len(l)                                                                           AS n_lines,
    len(list_filter(l, x -> trim(x, ' ' || chr(9) || chr(11) || chr(12) || chr(13)) = '')) AS n_blank,
    CASE WHEN lenient THEN len(list_filter(l, x -> contains(x, chr(65533)))) ELSE 0 END AS n_bad,
    len(list_filter(l, x -> strlen(x) > {max_line} AND length(x) > {max_line}))      AS n_long,
    list_sum(list_transform(list_filter(l, x -> strlen(x) > {max_line} AND length(x) > {max_line}),
                            x -> strlen(x) - strlen(left(x, {max_line}))))          AS cut_bytes,
    list_transform(l[1:{head}], x -> left(rtrim(x, chr(13)), 4096))                  AS head,
    list_transform(l[greatest(1, len(l) - {head} + 1):], x -> left(rtrim(x, chr(13)), 4096)) AS tail,
    list_where(range(first, first + len(l)), mask)                                   AS hit_lineno,
    list_transform(list_where(l, mask), x -> left(rtrim(x, chr(13)), {max_line}))    AS hit_line
FROM m
