-- The pre-filter hits of text files (connectors/text.py) into raw_lines: a line is kept if it
-- passes the rules' literal pre-filter, with its 1-based line number in the file; a kept line longer
-- than the limit (max_line) is cut there.
-- The lines are a relation (file_id, lineno, x): each line of pieces of text split in SQL, or the
-- lines Hyperscan kept, numbered already (splitting each again as a piece of one line cost ~0.3 us
-- a line); the pre-filter is a boolean expression over x (one line). (Placeholders are not named
-- in these comments: what fills them could end a comment line.) A line is trimmed and cut only
-- when it may need it (no more bytes than the limit: no more characters): rtrim and left walk
-- every kept line's characters, ~0.5 us a line where the tests cost nothing.
INSERT INTO raw_lines
SELECT file_id, lineno,
       CASE WHEN ends_with(x, chr(13)) OR strlen(x) > {max_line} THEN left(rtrim(x, chr(13)), {max_line}) ELSE x END,
       NULL, NULL
FROM {lines}
WHERE {prefilter}
