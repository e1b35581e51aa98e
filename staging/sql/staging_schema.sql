-- Staging database of one attempt: what the connectors collected, before and after normalisation.
-- It lives for one diagnosis (a named in-memory DuckDB, or a temporary file for large attempts).

CREATE SEQUENCE IF NOT EXISTS obs_seq START 1;

-- The attempt's scope as one row, so SQL rules can join against its window and nodes.
CREATE TABLE IF NOT EXISTS attempt (
    cluster VARCHAR, scheduler VARCHAR, job_id VARCHAR, attempt INTEGER,
    nodes VARCHAR[], start_time TIMESTAMP, end_time TIMESTAMP,
    state VARCHAR, exit_code VARCHAR, reason VARCHAR, timezone VARCHAR, gpus_per_node INTEGER
);

-- One row per text file read (or per Loki stream), with what could not be read faithfully, and
-- its first and last lines (cut at 4 KiB).
CREATE TABLE IF NOT EXISTS source_files (
    file_id INTEGER, source VARCHAR, connector VARCHAR, node VARCHAR, path VARCHAR,
    lines BIGINT, bad_lines BIGINT, truncated_lines BIGINT, tail VARCHAR[], head VARCHAR[]
);

-- Lines that passed the literal pre-filter, with the lines before them for time inheritance.
CREATE TABLE IF NOT EXISTS raw_lines (
    file_id INTEGER, lineno BIGINT, line VARCHAR, ctx VARCHAR[], collector_time TIMESTAMP
);

-- Normalised log observations: UTC time (own, inherited from the line before, or none), rank, body.
-- [time_lo, time_hi] is when the line can have been written: its own time twice; for a line with
-- none (a traceback's frames), the stamps of the lines of its stream (file, and rank when it has
-- one) just before and just after it, NULL where no such line was found (unbounded on that side).
CREATE TABLE IF NOT EXISTS log_lines (
    obs_id BIGINT, source VARCHAR, connector VARCHAR, node VARCHAR, path VARCHAR, lineno BIGINT,
    time TIMESTAMP, time_quality VARCHAR, rank INTEGER, text VARCHAR, body VARCHAR, ctx VARCHAR[],
    time_lo TIMESTAMP, time_hi TIMESTAMP
);

-- Metric samples (Prometheus exposition with timestamps, or query_range results).
CREATE TABLE IF NOT EXISTS samples (
    obs_id BIGINT, source VARCHAR, connector VARCHAR, node VARCHAR, metric VARCHAR,
    labels MAP(VARCHAR, VARCHAR), series VARCHAR, value DOUBLE, time TIMESTAMP,
    path VARCHAR, lineno BIGINT, raw VARCHAR
);

-- Structured scheduler / orchestrator records (sacct job and steps, Workload conditions, pods, events, nodes).
CREATE TABLE IF NOT EXISTS records (
    obs_id BIGINT, source VARCHAR, connector VARCHAR, node VARCHAR, kind VARCHAR,
    time TIMESTAMP, text VARCHAR, attrs JSON, path VARCHAR, lineno BIGINT
);

-- Fabric topology: switch port -> host (HCA) or peer switch.
CREATE TABLE IF NOT EXISTS topology (
    switch VARCHAR, port VARCHAR, peer VARCHAR, peer_kind VARCHAR, hca VARCHAR
);
