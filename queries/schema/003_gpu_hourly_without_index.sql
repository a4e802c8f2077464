-- name: 003_gpu_hourly_without_index
-- description: gpu_hourly loses its primary-key index. The rollup always deletes and rebuilds
--   whole hours in one statement, so the index only cost load time (about 2 s per million
--   rows rebuilt); the natural key stays (cluster, hour, gpu_uuid, mig_instance, namespace, pod),
--   with mig_profile taken from the samples (a MIG reconfiguration inside an hour keeps the last).

CREATE TABLE gpu_hourly_new AS SELECT * FROM gpu_hourly;
DROP TABLE gpu_hourly;
ALTER TABLE gpu_hourly_new RENAME TO gpu_hourly;
