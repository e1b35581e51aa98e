-- prom_parsed (parse_prom.sql) -> samples, with the bundle-relative file name ($ref) as evidence path.
-- A sample repeated (same series, same time) is stored once: the first line that gave it.
INSERT INTO samples
SELECT nextval('obs_seq'), 'metrics', $connector,
       coalesce(labels['Hostname'], labels['hostname'], split_part(labels['instance'], ':', 1),
                labels['host'], labels['node'], labels['nodename']),
       metric, labels, metric || label_text, value, time,
       $ref, lineno, raw
FROM prom_parsed
WHERE value IS NOT NULL AND time IS NOT NULL AND labels IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY metric, label_text, time ORDER BY lineno) = 1;
