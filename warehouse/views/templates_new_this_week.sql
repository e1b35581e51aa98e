-- templates_new_this_week: log templates the fleet first logged this week (since Monday 00:00 UTC), by host and job.
-- From attempt_templates (kept for doubtful and completed attempts, schema v8): a template is new
-- when no attempt that ended before this week logged it. One row per new template and attempt that
-- logged it this week: the host of its first line there, the job, its count and that line; how many
-- attempts of the week logged it. Errors first, then the most widespread.
CREATE OR REPLACE VIEW templates_new_this_week AS
WITH week AS (
    SELECT date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS since
),
before AS (
    SELECT DISTINCT template FROM attempt_templates WHERE end_time < (SELECT since FROM week)
)
SELECT t.template, t.level, t.node AS host, t.cluster, t.job_id, t.attempt, t.job_name, t.terminal_state,
       t.end_time, t.count, t.first_ref || ':' || t.first_line AS first, t.first_text,
       count(*) OVER (PARTITION BY t.template) AS attempts_this_week
FROM attempt_templates t ANTI JOIN before USING (template)
WHERE t.end_time >= (SELECT since FROM week)
ORDER BY list_position(['error', 'warning', 'info'], t.level), attempts_this_week DESC, t.template, t.end_time,
         t.cluster, t.job_id, t.attempt;
