-- name: 025_samples_and_pods_without_index
-- description: the per-step sample tables lose their primary-key indexes (gpu_energy_samples,
--   serving_samples, pod_cpu_samples and kueue_quota_samples), and so does pods. Their natural keys stay as they
--   were (in the comments below), enforced by the loads: every write is Warehouse.merge, which
--   keeps a batch's last row of a key and deletes the stored rows of the batch's keys first, as
--   for gpu_sample_facts (019) and gpu_hourly (003). Why: a row per GPU (or pod) and step makes
--   the index larger than the data and every load pay to keep it. A month of energy samples at
--   1,000 GPUs (8.6 M rows) took 584 MB with the index against 70 MB without, and a day's insert
--   0.83 CPU-s against 0.20; merging 953,947 pods into an empty table 5.8 CPU-s against 3.0
--   (docs/performance.md). Each table is copied as it is (its columns, their order and types,
--   as the migrations before made them) and its NOT NULL columns set again (a copy drops every
--   constraint); the rows are kept.

-- natural key (cluster, gpu_uuid, ts)
CREATE TABLE gpu_energy_samples_new AS SELECT * FROM gpu_energy_samples;
ALTER TABLE gpu_energy_samples_new ALTER COLUMN cluster SET NOT NULL;
ALTER TABLE gpu_energy_samples_new ALTER COLUMN gpu_uuid SET NOT NULL;
ALTER TABLE gpu_energy_samples_new ALTER COLUMN ts SET NOT NULL;
ALTER TABLE gpu_energy_samples_new ALTER COLUMN step_s SET NOT NULL;
DROP TABLE gpu_energy_samples;
ALTER TABLE gpu_energy_samples_new RENAME TO gpu_energy_samples;

-- natural key (cluster, namespace, pod, model_name, server, ts)
CREATE TABLE serving_samples_new AS SELECT * FROM serving_samples;
ALTER TABLE serving_samples_new ALTER COLUMN cluster SET NOT NULL;
ALTER TABLE serving_samples_new ALTER COLUMN ts SET NOT NULL;
ALTER TABLE serving_samples_new ALTER COLUMN namespace SET NOT NULL;
ALTER TABLE serving_samples_new ALTER COLUMN pod SET NOT NULL;
ALTER TABLE serving_samples_new ALTER COLUMN model_name SET NOT NULL;
ALTER TABLE serving_samples_new ALTER COLUMN server SET NOT NULL;
ALTER TABLE serving_samples_new ALTER COLUMN step_s SET NOT NULL;
DROP TABLE serving_samples;
ALTER TABLE serving_samples_new RENAME TO serving_samples;

-- natural key (cluster, namespace, pod, ts)
CREATE TABLE pod_cpu_samples_new AS SELECT * FROM pod_cpu_samples;
ALTER TABLE pod_cpu_samples_new ALTER COLUMN cluster SET NOT NULL;
ALTER TABLE pod_cpu_samples_new ALTER COLUMN ts SET NOT NULL;
ALTER TABLE pod_cpu_samples_new ALTER COLUMN namespace SET NOT NULL;
ALTER TABLE pod_cpu_samples_new ALTER COLUMN pod SET NOT NULL;
ALTER TABLE pod_cpu_samples_new ALTER COLUMN step_s SET NOT NULL;
DROP TABLE pod_cpu_samples;
ALTER TABLE pod_cpu_samples_new RENAME TO pod_cpu_samples;

-- natural key (cluster, cluster_queue, flavor, resource, ts)
CREATE TABLE kueue_quota_samples_new AS SELECT * FROM kueue_quota_samples;
ALTER TABLE kueue_quota_samples_new ALTER COLUMN cluster SET NOT NULL;
ALTER TABLE kueue_quota_samples_new ALTER COLUMN ts SET NOT NULL;
ALTER TABLE kueue_quota_samples_new ALTER COLUMN cluster_queue SET NOT NULL;
ALTER TABLE kueue_quota_samples_new ALTER COLUMN flavor SET NOT NULL;
ALTER TABLE kueue_quota_samples_new ALTER COLUMN resource SET NOT NULL;
DROP TABLE kueue_quota_samples;
ALTER TABLE kueue_quota_samples_new RENAME TO kueue_quota_samples;

-- natural key (cluster, uid)
CREATE TABLE pods_new AS SELECT * FROM pods;
ALTER TABLE pods_new ALTER COLUMN cluster SET NOT NULL;
ALTER TABLE pods_new ALTER COLUMN uid SET NOT NULL;
ALTER TABLE pods_new ALTER COLUMN namespace SET NOT NULL;
ALTER TABLE pods_new ALTER COLUMN name SET NOT NULL;
DROP TABLE pods;
ALTER TABLE pods_new RENAME TO pods;
