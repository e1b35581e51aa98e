-- Tables the rule engine adds to an attempt's staging database.

CREATE SEQUENCE IF NOT EXISTS event_seq START 1;

-- One symptom instance: what a rule recognised in one observation.
CREATE TABLE IF NOT EXISTS events (
    event_id BIGINT, rule_id VARCHAR, symptom VARCHAR, obs_id BIGINT, source VARCHAR,
    node VARCHAR, time TIMESTAMP, rank INTEGER, component VARCHAR, peer_node VARCHAR, attrs JSON,
    -- semantics, from symptom definitions and early-phase annotations
    title VARCHAR, role_hint VARCHAR, terminal_state VARCHAR, sub_domain VARCHAR, action VARCHAR,
    interesting BOOLEAN, blame VARCHAR,
    -- final-phase outcome
    role VARCHAR, demoted_by VARCHAR
);

-- Candidate verdicts from final-phase rules; the one first in the pack's precedence (pack.yaml) wins.
CREATE TABLE IF NOT EXISTS verdicts (
    rule_id VARCHAR, terminal_state VARCHAR, sub_domain VARCHAR, confidence VARCHAR,
    root_event_id BIGINT, blamed_nodes VARCHAR[], components VARCHAR[], candidate_event_ids BIGINT[],
    action VARCHAR, reason VARCHAR
);
CREATE TABLE IF NOT EXISTS verdict AS SELECT * FROM verdicts WHERE false;

CREATE TABLE IF NOT EXISTS symptom_defs (
    symptom VARCHAR, rule_id VARCHAR, title VARCHAR, role VARCHAR, terminal_state VARCHAR,
    sub_domain VARCHAR, action VARCHAR, interesting BOOLEAN, blame VARCHAR, failure_signal BOOLEAN
);

CREATE TABLE IF NOT EXISTS coverage (
    source VARCHAR, connector VARCHAR, status VARCHAR, observations BIGINT, nodes VARCHAR[],
    unparsed BIGINT, error VARCHAR
);

CREATE TABLE IF NOT EXISTS settings (
    skew_tolerance_s DOUBLE, default_collective_timeout_s DOUBLE, lookback_margin_s DOUBLE,
    burst_window_s DOUBLE
);

-- Every observation, whatever its kind, with what evidence needs. [time_lo, time_hi] is when it can
-- have happened: a line with no time of its own (a traceback's frame) lies between the stamped
-- lines of its stream around it (NULL: unbounded); everything else at its time.
CREATE OR REPLACE VIEW observations AS
    SELECT obs_id, source, connector, node, time, rank, text, path, lineno, NULL AS series, 'line' AS kind,
           time_lo, time_hi
    FROM log_lines
    UNION ALL
    SELECT obs_id, source, connector, node, time, NULL, coalesce(raw, series || ' ' || value), path, lineno, series, 'sample',
           time, time
    FROM samples
    UNION ALL
    SELECT obs_id, source, connector, node, time, NULL, text, path, lineno, NULL, kind, time, time
    FROM records;

-- Where and when each observation was: the columns of `observations` that an event takes from its
-- observation when its rule does not say them (rules/outputs.py) and that place a root candidate
-- (root_candidates), nothing else, so that what reads them plans and reads less (a tiny attempt's
-- statements run unoptimised: nothing prunes a view's other columns).
CREATE OR REPLACE VIEW observation_places AS
    SELECT obs_id, source, node, time, rank, time_lo, time_hi FROM log_lines
    UNION ALL
    SELECT obs_id, source, node, time, NULL, time, time FROM samples
    UNION ALL
    SELECT obs_id, source, node, time, NULL, time, time FROM records;

-- What a diagnosis cites of each observation (rules/report.py: an event's evidence line), the
-- time quality of a log line with it: one join, where `observations` and a subquery of log_lines
-- for the quality, unoptimised, cost twice as much.
CREATE OR REPLACE VIEW observation_evidence AS
    SELECT obs_id, 'line' AS kind, text, path, lineno, NULL AS series, connector, time_quality FROM log_lines
    UNION ALL
    SELECT obs_id, 'sample', coalesce(raw, series || ' ' || value), path, lineno, series, connector, NULL FROM samples
    UNION ALL
    SELECT obs_id, kind, text, path, lineno, NULL, connector, NULL FROM records;

-- When did the attempt start failing, and how far back may its root lie?
-- failure_time: the first failure signal (a cascade symptom: collective timeout, NCCL error ...; or a
-- symptom defined with failure_signal: true, e.g. torchrun seeing a worker die), or the attempt's end.
-- lookback: the collective timeout printed by the watchdog (else the configured default) + margin.
CREATE OR REPLACE VIEW failure_window AS
WITH a AS (SELECT * FROM attempt), s AS (SELECT * FROM settings),
c AS (
    SELECT min(e.time) AS first_cascade,
           max(TRY_CAST(json_extract_string(e.attrs, '$.timeout_ms') AS DOUBLE)) / 1000.0 AS timeout_s
    FROM events e CROSS JOIN a LEFT JOIN symptom_defs d ON d.symptom = e.symptom
    WHERE coalesce(d.failure_signal, e.role_hint = 'cascade') AND e.time IS NOT NULL
      AND e.time >= a.start_time - to_seconds((SELECT skew_tolerance_s FROM s))
      AND e.time <= a.end_time + to_seconds((SELECT skew_tolerance_s FROM s))
)
SELECT a.start_time, a.end_time,
       least(coalesce(c.first_cascade, a.end_time), a.end_time) AS failure_time,
       coalesce(c.timeout_s, s.default_collective_timeout_s) + s.lookback_margin_s AS lookback_s,
       greatest(a.start_time,
                least(coalesce(c.first_cascade, a.end_time), a.end_time)
                - to_seconds(coalesce(c.timeout_s, s.default_collective_timeout_s) + s.lookback_margin_s)) AS window_start,
       a.end_time + to_seconds(s.skew_tolerance_s) AS window_end,
       s.skew_tolerance_s, s.burst_window_s
FROM a, s, c;

-- The scheduler's own final word on the attempt: its record (sacct, Kueue, any other scheduler's)
-- beats attempt.yaml. terminal_state, sub_domain: what that word means by itself, from the
-- scheduler's table (connectors/data/<scheduler>_states.csv); NULL: the evidence decides.
CREATE OR REPLACE VIEW scheduler_final AS
SELECT event_id, source, upper(json_extract_string(attrs, '$.state')) AS state,
       json_extract_string(attrs, '$.terminal_state') AS terminal_state,
       json_extract_string(attrs, '$.sub_domain') AS sub_domain, attrs
FROM events WHERE symptom = 'scheduler_state'
ORDER BY CASE source WHEN 'sacct' THEN 0 WHEN 'kueue' THEN 1 WHEN 'scheduler_record' THEN 2 ELSE 3 END, event_id
LIMIT 1;

-- Root candidates that may explain this attempt: inside the failure window, never before the
-- attempt started (earlier events are context of this attempt, not its root).
-- Candidates whose time is unknown (a traceback with no timestamp of its rank) count only when no
-- timed candidate exists: they cannot be ordered against anything. A quarantined line (its stamp
-- outside any plausible range, or no time at all: staging/sql/normalize_lines.sql) is never one.
-- [time_lo, time_hi]: when the candidate can have happened (its observation's interval, when the
-- event took its time from the observation; else its own time). A candidate known only by such an
-- interval (a traceback's line between two stamps, time = the earlier one) that overlaps the time of
-- a hardware fault on the same host may have been written after the fault, maybe because of it:
-- it cannot be ordered before it. order_time is the earliest time it can be ordered at (its time,
-- or the latest such fault's), yields_to that fault; order candidates by
-- (order_time, yields_to IS NOT NULL, event_id).
CREATE OR REPLACE VIEW root_candidates AS
WITH timed AS (
    SELECT e.* FROM events e, failure_window w
    WHERE e.role_hint = 'root_candidate' AND e.time IS NOT NULL
      AND e.time >= w.window_start - to_seconds(w.skew_tolerance_s)
      AND e.time >= w.start_time
      AND e.time <= w.window_end
), c AS (
    SELECT * FROM timed
    UNION ALL
    SELECT e.* FROM events e
    WHERE e.role_hint = 'root_candidate' AND e.time IS NULL AND NOT EXISTS (SELECT 1 FROM timed)
      AND e.obs_id NOT IN (SELECT obs_id FROM log_lines WHERE time_quality = 'quarantined')
), spans AS (
    SELECT c.*,
           CASE WHEN c.time IS NOT DISTINCT FROM o.time THEN o.time_lo ELSE c.time END AS time_lo,
           CASE WHEN c.time IS NOT DISTINCT FROM o.time THEN o.time_hi ELSE c.time END AS time_hi
    FROM c LEFT JOIN observation_places o USING (obs_id)
), hardware AS (
    SELECT event_id, node, time, coalesce(time_lo, time) AS lo, coalesce(time_hi, time) AS hi
    FROM spans WHERE terminal_state = 'hardware_failure' AND time IS NOT NULL
), yielding AS (
    SELECT s.event_id, max(h.time) AS after_time, arg_max(h.event_id, (h.time, h.event_id)) AS yields_to
    FROM spans s JOIN hardware h ON h.node = s.node AND h.event_id <> s.event_id
    WHERE s.terminal_state IS DISTINCT FROM 'hardware_failure'
      AND s.time IS NOT NULL AND (s.time_hi IS NULL OR s.time_hi > s.time_lo)   -- only an interval
      AND s.time_lo <= h.hi AND (s.time_hi IS NULL OR s.time_hi >= h.lo)         -- overlapping the fault
      AND h.time >= s.time
    GROUP BY s.event_id
)
SELECT s.*, greatest(s.time, y.after_time) AS order_time, y.yields_to
FROM spans s LEFT JOIN yielding y USING (event_id);
