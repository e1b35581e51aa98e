-- actions_in_force: what the action sinks did to the fleet that still stands (not reversed), one row per sink and node.
-- Every column of `actions`, and flagged_for_undo: a later diagnosis of the attempt no longer blames the node
-- (`attribution actions undo DIAGNOSIS_ID`). dry_run rows are what a cluster in dry run would have in force.
-- The guard reads this view too (warehouse/actions.py): what stands is defined here only.
CREATE OR REPLACE VIEW actions_in_force AS
SELECT a.*,
       EXISTS (SELECT 1 FROM actions f WHERE f.reverts = a.action_id AND f.outcome = 'flagged') AS flagged_for_undo
FROM actions a
WHERE a.outcome IN ('pending', 'done', 'dry_run') AND a.reverts IS NULL
  AND NOT EXISTS (SELECT 1 FROM actions r WHERE r.reverts = a.action_id AND r.outcome IN ('pending', 'done', 'dry_run'));
