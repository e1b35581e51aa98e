-- mtbf_by_sub_domain: per cluster and failure kind, how many attempts failed and the mean time
-- between consecutive failures of that kind (hours).
CREATE OR REPLACE VIEW mtbf_by_sub_domain AS
WITH f AS (
    SELECT cluster, terminal_state, sub_domain, end_time,
           lag(end_time) OVER (PARTITION BY cluster, terminal_state, sub_domain ORDER BY end_time) AS previous
    FROM diagnoses WHERE terminal_state NOT IN ('completed')
)
SELECT cluster, terminal_state, sub_domain, count(*) AS failures,
       round(avg(epoch(end_time) - epoch(previous)) / 3600.0, 2) AS mtbf_hours
FROM f GROUP BY ALL ORDER BY failures DESC;
