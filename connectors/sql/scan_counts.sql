-- What connectors/text.py cannot tell cheaply of a piece of a text file, asked only of pieces that
-- may have some: lines holding U+FFFD (the piece had bytes that were not UTF-8, or NULs: `lenient`),
-- lines longer than the limit, max_line characters (`long`: the piece has a run that long without
-- a line break) and the bytes cut from them.
-- The pieces are a relation (k, content, lenient, long); k says which piece a row is.
WITH f AS (SELECT k, lenient, long, string_split(content, chr(10)) AS l FROM {pieces})
SELECT
    k,
    CASE WHEN lenient THEN len(list_filter(l, x -> contains(x, chr(65533)))) ELSE 0 END AS n_bad,
    CASE WHEN long THEN len(list_filter(l, x -> strlen(x) > {max_line} AND length(x) > {max_line})) ELSE 0 END
        AS n_long,
    CASE WHEN long THEN list_sum(list_transform(list_filter(l, x -> strlen(x) > {max_line} AND length(x) > {max_line}),
                                                x -> strlen(x) - strlen(left(x, {max_line})))) ELSE 0 END AS cut_bytes
FROM f
