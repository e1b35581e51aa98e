-- Warehouse schema v8: an attempt's log templates (tasks/templates.py: every line of its bundle's
-- text sources, what varies masked), one row per template, kept for the attempts whose diagnosis
-- is doubtful (sub_domain insufficient_evidence or ambiguous, or confidence low) and for those that
-- ended well (completed): the baseline a later attempt of the same job is compared with, and the
-- fleet's record of which templates are rare (tasks/novelty.py). A confident failure diagnosis keeps
-- none (it pays nothing for them). At most 2,000 rows an attempt (the most frequent, then the
-- earliest: novelty.STORED_TEMPLATES); lines_read and templates_total say what they were taken from.
-- Keyed like blame_history: the attempt key and the diagnosis the rows go and come with.
CREATE TABLE IF NOT EXISTS attempt_templates (
    cluster VARCHAR NOT NULL, scheduler VARCHAR NOT NULL, job_id VARCHAR NOT NULL, attempt INTEGER NOT NULL,
    diagnosis_id VARCHAR NOT NULL, job_name VARCHAR, end_time TIMESTAMPTZ,
    terminal_state VARCHAR NOT NULL,   -- the diagnosis' verdict: completed rows are baselines
    template VARCHAR NOT NULL, level VARCHAR NOT NULL, count BIGINT NOT NULL,
    source VARCHAR, node VARCHAR,      -- the first line's source and host (its file's host, when it names one)
    first_ref VARCHAR, first_line BIGINT, first_time TIMESTAMPTZ, first_text VARCHAR,
    lines_read BIGINT, templates_total INTEGER
);
