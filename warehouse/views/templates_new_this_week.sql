-- templates_new_this_week: log templates the fleet first logged this week (since Monday 00:00 UTC), by host, switch port and job.
-- From attempt_templates (kept for doubtful and completed attempts, schema v8): a template is new
-- when no attempt that ended before this week logged it. One row per new template and attempt that
-- logged it this week: the host of its first line there and the switch ports that host was cabled to
-- when the line was logged (topology_history: `switch:port`, sorted; NULL when the topology does not
-- place the host then), the job, its count and that line; how many attempts of the week logged it.
-- Errors first, then the most widespread. Only the week's new rows are placed under ports.
CREATE OR REPLACE VIEW templates_new_this_week AS
WITH week AS (
    SELECT date_trunc('week', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS since
),
before AS (
    SELECT DISTINCT template FROM attempt_templates WHERE end_time < (SELECT since FROM week)
),
new AS MATERIALIZED (
    SELECT t.*, coalesce(t.first_time, t.end_time) AS logged_at
    FROM attempt_templates t ANTI JOIN before USING (template)
    WHERE t.end_time >= (SELECT since FROM week)
),
ports AS (
    SELECT n.diagnosis_id, n.template, list_sort(list_distinct(list(h.switch || ':' || h.port))) AS switch_ports
    FROM new n JOIN topology_history h
      ON h.cluster = n.cluster AND h.peer_kind = 'host' AND h.peer = n.node
     AND n.logged_at >= h.valid_from AND (h.valid_to IS NULL OR n.logged_at < h.valid_to)
    GROUP BY n.diagnosis_id, n.template
)
SELECT t.template, t.level, t.node AS host, p.switch_ports, t.cluster, t.job_id, t.attempt, t.job_name,
       t.terminal_state, t.end_time, t.count, t.first_ref || ':' || t.first_line AS first, t.first_text,
       count(*) OVER (PARTITION BY t.template) AS attempts_this_week
FROM new t LEFT JOIN ports p USING (diagnosis_id, template)
ORDER BY list_position(['error', 'warning', 'info'], t.level), attempts_this_week DESC, t.template, t.end_time,
         t.cluster, t.job_id, t.attempt;
