-- mtbf_by_sub_domain: per cluster and failure kind, how many attempts failed and the mean time
-- between consecutive failures of that kind (hours).
-- The mean of consecutive gaps is (last - first) / (failures with an end time - 1): the gaps sum to
-- last - first, so no sort by time (a window over every failure) is needed.
CREATE OR REPLACE VIEW mtbf_by_sub_domain AS
SELECT cluster, terminal_state, sub_domain, count(*) AS failures,
       round((epoch(max(end_time)) - epoch(min(end_time))) / nullif(count(end_time) - 1, 0) / 3600.0, 2) AS mtbf_hours
FROM diagnoses WHERE terminal_state NOT IN ('completed')
GROUP BY ALL ORDER BY failures DESC;
