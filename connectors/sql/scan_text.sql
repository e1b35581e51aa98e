-- The pre-filter hits of pieces of text files (connectors/text.py) into raw_lines: each piece is
-- split into lines and a line is kept if it passes the rules' literal pre-filter, with its 1-based
-- line number in the file; a kept line longer than the limit (max_line) is cut there.
-- The pieces are a relation (file_id, first, content): `first` is the number of the piece's first
-- line; the pre-filter is a boolean expression over x (one line). (Placeholders are not named in
-- these comments: what fills them could end a comment line.)
-- Lines flow as rows, not lists: the filter keeps the hits by a selection, and nothing is built for
-- the lines it drops (a list pass per fact cost three times as much). A line is trimmed and cut
-- only when it may need it (no more bytes than the limit: no more characters): rtrim and left
-- walk every kept line's characters, ~0.5 us a line where the tests cost nothing.
INSERT INTO raw_lines
SELECT file_id, first + i - 1,
       CASE WHEN ends_with(x, chr(13)) OR strlen(x) > {max_line} THEN left(rtrim(x, chr(13)), {max_line}) ELSE x END,
       NULL, NULL
FROM (
    SELECT file_id, first, unnest(l) AS x, generate_subscripts(l, 1) AS i
    FROM (SELECT file_id, first, string_split(content, chr(10)) AS l FROM {pieces})
)
WHERE {prefilter}
