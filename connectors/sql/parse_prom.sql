-- Prometheus text exposition with sample timestamps (ms) -> samples.
-- {files}: relation (filename, content). $refs: list of bundle-relative names, parallel to $paths.
-- Host identity comes from the first host-like label present (DCGM exporter: Hostname;
-- node_exporter: instance without port; others: host / node / hostname).
CREATE OR REPLACE TEMP TABLE prom_parsed AS
WITH f AS (
    SELECT filename, string_split(content, chr(10)) AS l FROM {files}
), p AS (
    SELECT filename,
           len(list_filter(l, x -> trim(x) != '' AND NOT starts_with(ltrim(x), '#'))) AS n_data,
           list_filter(
               list_transform(l, (x, i) -> {'n': i, 'raw': rtrim(x, chr(13)), 'm': regexp_extract(rtrim(x, chr(13)),
                   '^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+(-?\d+))?\s*$',
                   ['name', 'labels', 'value', 'ts'])}),
               s -> s.m.name != '') AS parsed
    FROM f
), u AS (
    SELECT filename, n_data, unnest(parsed) AS s FROM p
)
SELECT filename, n_data, s.n AS lineno, s.m.name AS metric,
       map_from_entries(list_zip(
           regexp_extract_all(s.m.labels, '([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', 1),
           regexp_extract_all(s.m.labels, '([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', 2))) AS labels,
       s.m.labels AS label_text, s.raw AS raw,
       TRY_CAST(s.m.value AS DOUBLE) AS value,
       CASE WHEN s.m.ts != '' THEN make_timestamp(TRY_CAST(s.m.ts AS BIGINT) * 1000) END AS time
FROM u;
