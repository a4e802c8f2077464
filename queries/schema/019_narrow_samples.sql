-- name: 019_narrow_samples
-- description: the DCGM samples and their hourly rollup are stored narrow: the GPU's identity
--   (cluster, UUID, MIG instance), its holder pod (cluster, namespace, pod; '' for none) and its
--   node are integer keys into the dimension tables gpu_keys, pod_keys and node_keys, the other
--   labels of a sample (MIG profile, GPU index, model name, container) one key into
--   sample_labels; the measures keep their types (DOUBLE: a step's mean of a gauge is any real,
--   and FLOAT would change figures). gpu_sample_facts holds the samples, gpu_hourly_facts the
--   hourly rollup; the views gpu_samples and gpu_hourly show them with every column and name as
--   before, so queries, exports and notebooks read what they read. Why: storing 8 string columns
--   per sample was most of a load's CPU (docs/performance.md); keys are numbered once per GPU,
--   pod, node and label set and never renumbered. This migration converts a warehouse in place:
--   every stored sample keeps its values (its labels are looked up in the dimensions), pod_keys
--   keeps its numbers and gains the holders it lacked (pods of MIG instances, '' for none), and
--   the hourly rollup is rebuilt from the samples by gpu_hourly_of (the one definition of it: the
--   loads call it for the hours they touch). In gpu_hourly, mig_profile and model_name are those
--   of the newest sample of the GPU, pod and hour, node the newest known one.
--   pod_steps_of (014) reads the keyed samples; new_pod_keys is gone (loads number every holder).

CREATE TABLE IF NOT EXISTS gpu_keys (
    gpu_key       INTEGER PRIMARY KEY,
    cluster       VARCHAR NOT NULL,
    gpu_uuid      VARCHAR NOT NULL,
    mig_instance  INTEGER NOT NULL,          -- GPU_I_ID, -1 for a whole GPU
    UNIQUE (cluster, gpu_uuid, mig_instance)
);

CREATE TABLE IF NOT EXISTS node_keys (
    node_key      INTEGER PRIMARY KEY,
    cluster       VARCHAR NOT NULL,
    node          VARCHAR NOT NULL,
    UNIQUE (cluster, node)
);

CREATE TABLE IF NOT EXISTS sample_labels (
    label_key     INTEGER PRIMARY KEY,
    mig_profile   VARCHAR NOT NULL,          -- '' for a whole GPU
    gpu_index     INTEGER,
    model_name    VARCHAR,
    container     VARCHAR NOT NULL
);

-- One row per GPU (or MIG instance) per sample step per holder pod; natural key
-- (gpu_key, ts, pod_key), enforced by the loads (no index: see 001).
CREATE TABLE IF NOT EXISTS gpu_sample_facts (
    gpu_key          INTEGER NOT NULL,       -- gpu_keys
    ts               TIMESTAMP NOT NULL,
    pod_key          INTEGER NOT NULL,       -- pod_keys (namespace and pod '' when no pod holds the GPU)
    node_key         INTEGER,                -- node_keys; NULL when the node is not known
    label_key        INTEGER NOT NULL,       -- sample_labels
    gr_active        DOUBLE,
    gr_active_max    DOUBLE,
    sm_active        DOUBLE,
    sm_active_max    DOUBLE,
    gpu_util         DOUBLE,
    fb_used_mib      DOUBLE,
    fb_used_max_mib  DOUBLE,
    fb_free_mib      DOUBLE,
    power_w          DOUBLE,
    step_s           INTEGER NOT NULL,
    gr_active_min    DOUBLE,
    pcie_rx_bps      DOUBLE,
    pcie_tx_bps      DOUBLE,
    pcie_tx_max_bps  DOUBLE,
    nvlink_rx_bps    DOUBLE
);

-- One row per GPU (or MIG instance) per clock hour per holder pod (natural key gpu_key, hour, pod_key).
CREATE TABLE IF NOT EXISTS gpu_hourly_facts (
    gpu_key          INTEGER NOT NULL,
    hour             TIMESTAMP NOT NULL,
    pod_key          INTEGER NOT NULL,
    node_key         INTEGER,                -- the newest sample's known node
    label_key        INTEGER NOT NULL,       -- the newest sample's labels
    samples          INTEGER,
    covered_s        DOUBLE,                 -- seconds of the hour covered by samples
    gr_active_avg    DOUBLE,
    gr_active_max    DOUBLE,
    sm_active_avg    DOUBLE,
    sm_active_max    DOUBLE,
    gpu_util_avg     DOUBLE,
    fb_used_avg_mib  DOUBLE,
    fb_used_max_mib  DOUBLE,
    fb_free_min_mib  DOUBLE,
    power_avg_w      DOUBLE
);

-- the dimensions of the samples stored so far, numbered in a fixed order
INSERT INTO gpu_keys
SELECT row_number() OVER (ORDER BY cluster, gpu_uuid, mig_instance), cluster, gpu_uuid, mig_instance
FROM (SELECT DISTINCT cluster, gpu_uuid, mig_instance FROM gpu_samples);

INSERT INTO node_keys
SELECT row_number() OVER (ORDER BY cluster, node), cluster, node
FROM (SELECT DISTINCT cluster, node FROM gpu_samples WHERE node IS NOT NULL);

INSERT INTO sample_labels
SELECT row_number() OVER (ORDER BY mig_profile, gpu_index, model_name, container), *
FROM (SELECT DISTINCT mig_profile, gpu_index, model_name, container FROM gpu_samples);

INSERT INTO pod_keys
SELECT (SELECT coalesce(max(pod_key), 0) FROM pod_keys) + row_number() OVER (ORDER BY cluster, namespace, pod),
       cluster, namespace, pod
FROM (SELECT DISTINCT cluster, namespace, pod FROM gpu_samples) s
ANTI JOIN pod_keys k USING (cluster, namespace, pod);

INSERT INTO gpu_sample_facts
SELECT g.gpu_key, s.ts, p.pod_key, n.node_key, l.label_key,
       s.gr_active, s.gr_active_max, s.sm_active, s.sm_active_max, s.gpu_util, s.fb_used_mib, s.fb_used_max_mib,
       s.fb_free_mib, s.power_w, s.step_s, s.gr_active_min, s.pcie_rx_bps, s.pcie_tx_bps, s.pcie_tx_max_bps,
       s.nvlink_rx_bps
FROM gpu_samples s
JOIN gpu_keys g USING (cluster, gpu_uuid, mig_instance)
JOIN pod_keys p USING (cluster, namespace, pod)
LEFT JOIN node_keys n USING (cluster, node)
JOIN sample_labels l
  ON l.mig_profile = s.mig_profile AND l.gpu_index IS NOT DISTINCT FROM s.gpu_index
 AND l.model_name IS NOT DISTINCT FROM s.model_name AND l.container = s.container;

DROP TABLE gpu_samples;
DROP TABLE gpu_hourly;

CREATE VIEW gpu_samples AS
SELECT g.cluster, f.ts, g.gpu_uuid, g.mig_instance, l.mig_profile, n.node, l.gpu_index, l.model_name,
       p.namespace, p.pod, l.container, f.gr_active, f.gr_active_max, f.sm_active, f.sm_active_max, f.gpu_util,
       f.fb_used_mib, f.fb_used_max_mib, f.fb_free_mib, f.power_w, f.step_s, f.gr_active_min, f.pcie_rx_bps,
       f.pcie_tx_bps, f.pcie_tx_max_bps, f.nvlink_rx_bps
FROM gpu_sample_facts f
JOIN gpu_keys g USING (gpu_key)
JOIN pod_keys p USING (pod_key)
JOIN sample_labels l USING (label_key)
LEFT JOIN node_keys n USING (node_key);

CREATE VIEW gpu_hourly AS
SELECT g.cluster, h.hour, g.gpu_uuid, g.mig_instance, l.mig_profile, p.namespace, p.pod, n.node, l.model_name,
       h.samples, h.covered_s, h.gr_active_avg, h.gr_active_max, h.sm_active_avg, h.sm_active_max, h.gpu_util_avg,
       h.fb_used_avg_mib, h.fb_used_max_mib, h.fb_free_min_mib, h.power_avg_w
FROM gpu_hourly_facts h
JOIN gpu_keys g USING (gpu_key)
JOIN pod_keys p USING (pod_key)
JOIN sample_labels l USING (label_key)
LEFT JOIN node_keys n USING (node_key);

-- The hourly rollup of the samples in [ts_from, ts_to) (NULL: unbounded) of one cluster (NULL:
-- every cluster): a sample row stands for [ts, ts + step_s), so it belongs to its ts's hour; means
-- are weighted by each sample's step (weighted_avg skips NULL values with their weights);
-- covered_s is capped at the hour; loaders fill the *_max columns (the value itself for raw
-- samples), so the max is taken over them alone.
CREATE OR REPLACE MACRO gpu_hourly_of(ts_from, ts_to, only_cluster) AS TABLE
SELECT f.gpu_key, date_trunc('hour', f.ts) AS hour, f.pod_key,
       arg_max(f.node_key, f.ts) AS node_key,
       arg_max(f.label_key, f.ts) AS label_key,
       count(*)::INTEGER AS samples,
       least(sum(f.step_s), 3600)::DOUBLE AS covered_s,
       weighted_avg(f.gr_active, f.step_s) AS gr_active_avg,
       max(f.gr_active_max) AS gr_active_max,
       weighted_avg(f.sm_active, f.step_s) AS sm_active_avg,
       max(f.sm_active_max) AS sm_active_max,
       weighted_avg(f.gpu_util, f.step_s) AS gpu_util_avg,
       weighted_avg(f.fb_used_mib, f.step_s) AS fb_used_avg_mib,
       max(f.fb_used_max_mib) AS fb_used_max_mib,
       min(f.fb_free_mib) AS fb_free_min_mib,
       weighted_avg(f.power_w, f.step_s) AS power_avg_w
FROM gpu_sample_facts f
WHERE f.ts >= coalesce(ts_from, '-infinity'::TIMESTAMP) AND f.ts < coalesce(ts_to, 'infinity'::TIMESTAMP)
  AND (only_cluster IS NULL OR f.gpu_key IN (SELECT gpu_key FROM gpu_keys WHERE cluster = only_cluster))
GROUP BY f.gpu_key, date_trunc('hour', f.ts), f.pod_key;

INSERT INTO gpu_hourly_facts SELECT * FROM gpu_hourly_of(NULL, NULL, NULL);

DROP MACRO TABLE IF EXISTS new_pod_keys;

-- 014's definition, on the keyed samples: the steps of pods holding whole GPUs with a GR reading
CREATE OR REPLACE MACRO pod_steps_of(ts_from, ts_to, only_cluster) AS TABLE
SELECT f.pod_key, f.ts,
       max(f.step_s) AS step_s,
       count(*) AS gpus,
       avg(f.gr_active) AS gr,
       max(f.gr_active_max) AS gr_max,
       min(coalesce(f.gr_active_min, f.gr_active)) AS gr_min,
       bool_or(f.gr_active_min < f.gr_active - 1e-9) AS min_below_mean,
       avg(f.fb_used_mib) AS fb_mib,
       sum(f.pcie_rx_bps) AS pcie_rx_bps,
       sum(f.nvlink_rx_bps) AS nvlink_rx_bps
FROM gpu_sample_facts f
WHERE f.gr_active IS NOT NULL
  AND f.ts >= coalesce(ts_from, '-infinity'::TIMESTAMP) AND f.ts < coalesce(ts_to, 'infinity'::TIMESTAMP)
  AND f.pod_key IN (SELECT pod_key FROM pod_keys WHERE pod <> '' AND (only_cluster IS NULL OR cluster = only_cluster))
  AND f.gpu_key IN (SELECT gpu_key FROM gpu_keys WHERE mig_instance < 0 AND (only_cluster IS NULL OR cluster = only_cluster))
GROUP BY f.pod_key, f.ts;
