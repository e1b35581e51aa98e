-- Prometheus text exposition with sample timestamps (ms) -> prom_parsed, one piece of a file at a
-- time (staging/files.py read_pieces): $content holds lines $first .. of the file.
-- A timestamp outside 1970..2200 (or past BIGINT) is no time: the sample is counted, not stored.
CREATE OR REPLACE TEMP TABLE prom_parsed AS
WITH f AS (
    SELECT string_split($content, chr(10)) AS l
), p AS (
    SELECT len(list_filter(l, x -> trim(x) != '' AND NOT starts_with(ltrim(x), '#'))) AS n_data,
           CASE WHEN $lenient THEN len(list_filter(l, x -> contains(x, chr(65533)))) ELSE 0 END AS n_bad,
           list_filter(
               list_transform(l, (x, i) -> {'n': i, 'raw': rtrim(x, chr(13)), 'm': regexp_extract(rtrim(x, chr(13)),
                   '^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+(-?\d+))?\s*$',
                   ['name', 'labels', 'value', 'ts'])}),
               s -> s.m.name != '') AS parsed
    FROM f
), u AS (
    -- one more row with no sample, so a piece with no sample line still tells its counts
    SELECT n_data, n_bad, unnest(list_append(parsed, NULL)) AS s FROM p
), k AS (
    -- labels parsed once per distinct label set (a range export repeats each series' set on every line)
    SELECT label_text,
           regexp_extract_all(label_text, '([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', 1) AS keys,
           regexp_extract_all(label_text, '([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', 2) AS vals
    FROM (SELECT DISTINCT s.m.labels AS label_text FROM u)
), l AS (
    -- a label named twice makes no series: the sample is counted, not stored
    SELECT label_text, CASE WHEN len(list_distinct(keys)) = len(keys) THEN map_from_entries(list_zip(keys, vals)) END AS labels
    FROM k
)
SELECT n_data, n_bad, $first + s.n - 1 AS lineno, s.m.name AS metric,
       l.labels,
       s.m.labels AS label_text, left(s.raw, 16384) AS raw,
       TRY_CAST(s.m.value AS DOUBLE) AS value,
       CASE WHEN TRY_CAST(s.m.ts AS BIGINT) BETWEEN 86400000 AND 7258118400000
            THEN make_timestamp(TRY_CAST(s.m.ts AS BIGINT) * 1000) END AS time
FROM u LEFT JOIN l ON l.label_text IS NOT DISTINCT FROM s.m.labels;
