-- rules_versions: each rules pack version that made diagnoses, when first and last used.
CREATE OR REPLACE VIEW rules_versions AS
SELECT version, min(used_at) AS first_used, max(used_at) AS last_used
FROM rules_version_uses
GROUP BY version
ORDER BY first_used;
