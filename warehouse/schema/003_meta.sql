-- Warehouse schema v3: what the code keeps about the warehouse itself (e.g. the digest of the
-- analyst views last installed, so views are replaced once per change, not on every write).
CREATE TABLE IF NOT EXISTS warehouse_meta (key VARCHAR NOT NULL, value VARCHAR);
