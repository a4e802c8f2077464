-- name: 025_samples_and_pods_without_index
-- description: the per-step sample tables lose their primary-key indexes (gpu_energy_samples,
--   serving_samples, pod_cpu_samples and kueue_quota_samples), and so does pods. Their natural keys stay as they
--   were (in the comments below), enforced by the loads: every write is Warehouse.merge, which
--   keeps a batch's last row of a key and deletes the stored rows of the batch's keys first, as
--   for gpu_sample_facts (019) and gpu_hourly (003). Why: a row per GPU (or pod) and step makes
--   the index larger than the data and every load pay to keep it. A month of energy samples at
--   1,000 GPUs (8.6 M rows) took 584 MB with the index against 70 MB without, and a day's insert
--   0.83 CPU-s against 0.20; merging 953,947 pods into an empty table 5.8 CPU-s against 3.0
--   (docs/performance.md). The rows are kept as they are; pods keeps its columns in their order
--   and its NOT NULL ones (cluster, uid, namespace, name).

-- natural key (cluster, gpu_uuid, ts)
CREATE TABLE gpu_energy_samples_new (
    cluster      VARCHAR NOT NULL,
    gpu_uuid     VARCHAR NOT NULL,             -- the physical GPU (MIG instances repeat its counter)
    ts           TIMESTAMP NOT NULL,           -- start of the step
    energy_j     DOUBLE,                       -- joules used in the step
    step_s       INTEGER NOT NULL
);
INSERT INTO gpu_energy_samples_new SELECT cluster, gpu_uuid, ts, energy_j, step_s FROM gpu_energy_samples;
DROP TABLE gpu_energy_samples;
ALTER TABLE gpu_energy_samples_new RENAME TO gpu_energy_samples;

-- natural key (cluster, namespace, pod, model_name, server, ts)
CREATE TABLE serving_samples_new (
    cluster             VARCHAR NOT NULL,
    ts                  TIMESTAMP NOT NULL,   -- start of the step
    namespace           VARCHAR NOT NULL,
    pod                 VARCHAR NOT NULL,
    model_name          VARCHAR NOT NULL,     -- '' when the server does not name it (TGI)
    server              VARCHAR NOT NULL,     -- vllm | tgi | triton | sglang | nim
    prompt_tokens       DOUBLE,               -- prompt (prefill) tokens processed in the step
    generation_tokens   DOUBLE,               -- tokens generated in the step
    requests            DOUBLE,               -- requests finished successfully in the step
    ttft_p50_s          DOUBLE,               -- time to first token, median of the step's requests
    ttft_p95_s          DOUBLE,
    itl_p50_s           DOUBLE,               -- inter-token latency (time per output token)
    itl_p95_s           DOUBLE,
    kv_cache_usage      DOUBLE,               -- 0..1, mean over the step
    kv_cache_usage_max  DOUBLE,               -- 0..1, maximum within the step
    step_s              INTEGER NOT NULL
);
INSERT INTO serving_samples_new
SELECT cluster, ts, namespace, pod, model_name, server, prompt_tokens, generation_tokens, requests, ttft_p50_s,
       ttft_p95_s, itl_p50_s, itl_p95_s, kv_cache_usage, kv_cache_usage_max, step_s
FROM serving_samples;
DROP TABLE serving_samples;
ALTER TABLE serving_samples_new RENAME TO serving_samples;

-- natural key (cluster, namespace, pod, ts)
CREATE TABLE pod_cpu_samples_new (
    cluster      VARCHAR NOT NULL,
    ts           TIMESTAMP NOT NULL,   -- start of the step
    namespace    VARCHAR NOT NULL,
    pod          VARCHAR NOT NULL,
    cpu_cores    DOUBLE,               -- mean CPU use over the step (cores), all containers of the pod
    step_s       INTEGER NOT NULL
);
INSERT INTO pod_cpu_samples_new SELECT cluster, ts, namespace, pod, cpu_cores, step_s FROM pod_cpu_samples;
DROP TABLE pod_cpu_samples;
ALTER TABLE pod_cpu_samples_new RENAME TO pod_cpu_samples;

-- natural key (cluster, cluster_queue, flavor, resource, ts)
CREATE TABLE kueue_quota_samples_new (
    cluster        VARCHAR NOT NULL,
    ts             TIMESTAMP NOT NULL,
    cluster_queue  VARCHAR NOT NULL,
    flavor         VARCHAR NOT NULL,
    resource       VARCHAR NOT NULL,
    usage          DOUBLE,             -- kueue_cluster_queue_resource_usage
    reservation    DOUBLE,             -- kueue_cluster_queue_resource_reservation
    nominal_quota  DOUBLE,             -- kueue_cluster_queue_nominal_quota
    step_s         INTEGER
);
INSERT INTO kueue_quota_samples_new
SELECT cluster, ts, cluster_queue, flavor, resource, usage, reservation, nominal_quota, step_s FROM kueue_quota_samples;
DROP TABLE kueue_quota_samples;
ALTER TABLE kueue_quota_samples_new RENAME TO kueue_quota_samples;

-- natural key (cluster, uid); the columns as 001, 013 and 017 made them, in their order
CREATE TABLE pods_new AS SELECT * FROM pods;
ALTER TABLE pods_new ALTER COLUMN cluster SET NOT NULL;
ALTER TABLE pods_new ALTER COLUMN uid SET NOT NULL;
ALTER TABLE pods_new ALTER COLUMN namespace SET NOT NULL;
ALTER TABLE pods_new ALTER COLUMN name SET NOT NULL;
DROP TABLE pods;
ALTER TABLE pods_new RENAME TO pods;
