-- scan_text.sql for pieces holding a container runtime's partial records: a line the runtime split
-- (containerd and CRI-O at 16 KiB: records tagged "P" until the one tagged "F"; Docker's json-file
-- at 16 KiB: a `log` without its final newline until the one with it) is joined again, before the
-- pre-filter, so a message cut in two is read whole. The parts of a line are the consecutive
-- records of its stream (the other stream's records may come between), joined in their order and
-- numbered at the first; the joined line reads as the runtime's full record would: "<time of the
-- first part> <stream> F <line>", or {"log": "<line>", "stream": ..., "time": ...} (a record not split
-- is kept as written). A run of parts the file ends in is joined too. Lines that are not records are
-- kept as scan_text.sql keeps them.
-- The pieces are a relation (file_id, first, content); the pre-filter a boolean expression over x.
INSERT INTO raw_lines
SELECT file_id, lineno, left(x, {max_line}), NULL, NULL
FROM (
    SELECT file_id, min(lineno) AS lineno,
           CASE WHEN stream IS NULL OR count(*) = 1 THEN any_value(raw)
                WHEN starts_with(stream, 'cri:')
                THEN arg_min(cri_time, lineno) || ' ' || substr(stream, 5) || ' F ' || string_agg(part, '' ORDER BY lineno)
                ELSE json_object('log', string_agg(part, '' ORDER BY lineno), 'stream', substr(stream, 8),
                                 'time', arg_min(docker_time, lineno))::VARCHAR END AS x
    FROM (
        SELECT *,
               -- a record's line: how many records of its stream ended before it
               count(*) FILTER (WHERE NOT partial) OVER (
                   PARTITION BY file_id, stream ORDER BY lineno ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS part_of
        FROM (
            SELECT file_id, lineno, raw, cri['time'] AS cri_time,
                   json_extract_string(env, '$.time') AS docker_time,
                   CASE WHEN cri['tag'] <> '' THEN 'cri:' || cri['stream']
                        WHEN env IS NOT NULL THEN 'docker:' || coalesce(json_extract_string(env, '$.stream'), '') END AS stream,
                   CASE WHEN cri['tag'] <> '' THEN cri['tag'] = 'P'
                        WHEN env IS NOT NULL THEN NOT ends_with(coalesce(json_extract_string(env, '$.log'), ''), chr(10))
                        ELSE false END AS partial,
                   CASE WHEN cri['tag'] <> '' THEN substr(raw, length(cri['time']) + length(cri['stream']) + 5)
                        WHEN env IS NOT NULL THEN json_extract_string(env, '$.log') END AS part
            FROM (
                SELECT file_id, lineno, raw,
                       CASE WHEN regexp_matches(raw, '^\S+ std(?:out|err) [PF](?: |$)')
                            THEN regexp_extract(raw, '^(\S+) (std(?:out|err)) ([PF])(?: |$)', ['time', 'stream', 'tag']) END AS cri,
                       CASE WHEN starts_with(raw, '{"log":') AND json_valid(raw) THEN raw END AS env
                FROM (
                    SELECT file_id, first + i - 1 AS lineno, rtrim(x, chr(13)) AS raw
                    FROM (
                        SELECT file_id, first, unnest(l) AS x, generate_subscripts(l, 1) AS i
                        FROM (SELECT file_id, first, string_split(content, chr(10)) AS l FROM {pieces})
                    )
                )
            )
        )
    )
    GROUP BY file_id, stream, part_of, CASE WHEN stream IS NULL THEN lineno END
)
WHERE {prefilter}
