-- name: 014_pod_steps
-- description: gpu_pod_steps, a rollup of gpu_samples per pod and step (the pod's whole GPUs
--   averaged, their receive rates summed), kept like gpu_hourly: every load rebuilds it for the
--   hours it touched, in the same transaction (warehouse/rollup.py), so workload_input_profile
--   reads pod-steps instead of grouping every raw sample on each refresh. Pods are numbered in
--   pod_keys (one integer per cluster, namespace and pod name that held a whole GPU; never
--   renumbered), so the pod-step rows carry no strings and the models join them on an integer.
--   The two table macros are the one definition of both (the loads call them for the hours they
--   touched; this migration calls them once for the samples already stored): a later change to
--   them is a new migration that replaces the macros and rebuilds the table.
--   new_pod_keys(ts_from, ts_to, only_cluster): the pods of the samples in [ts_from, ts_to)
--   (NULL: unbounded; only_cluster NULL: every cluster) without a key yet, numbered after the
--   largest key. pod_steps_of(...): their pod-steps, from the samples of whole GPUs held by a pod
--   with a GR activity reading (what workload_input_profile describes).

CREATE TABLE IF NOT EXISTS pod_keys (
    pod_key      INTEGER PRIMARY KEY,
    cluster      VARCHAR NOT NULL,
    namespace    VARCHAR NOT NULL,
    pod          VARCHAR NOT NULL,
    UNIQUE (cluster, namespace, pod)
);

CREATE TABLE IF NOT EXISTS gpu_pod_steps (
    pod_key          INTEGER NOT NULL,  -- pod_keys.pod_key
    ts               TIMESTAMP NOT NULL,
    step_s           INTEGER NOT NULL,  -- the longest step of the pod's samples at ts
    gpus             INTEGER NOT NULL,  -- samples (whole GPUs) of the pod at ts
    gr               DOUBLE,            -- GR activity, mean over the pod's GPUs
    gr_max           DOUBLE,            -- max of the GPUs' per-step max
    gr_min           DOUBLE,            -- min of the GPUs' per-step min (the mean where no min)
    min_below_mean   BOOLEAN,           -- some GPU's per-step min is below its mean (min pushed down)
    fb_mib           DOUBLE,            -- framebuffer used, mean over the GPUs
    pcie_rx_bps      DOUBLE,            -- summed over the GPUs
    nvlink_rx_bps    DOUBLE             -- summed over the GPUs
    -- natural key (pod_key, ts); rebuilt by whole hours, so no index
);

CREATE OR REPLACE MACRO new_pod_keys(ts_from, ts_to, only_cluster) AS TABLE
SELECT (SELECT coalesce(max(pod_key), 0) FROM pod_keys)
       + row_number() OVER (ORDER BY s.cluster, s.namespace, s.pod) AS pod_key,
       s.cluster, s.namespace, s.pod
FROM (SELECT DISTINCT cluster, namespace, pod
      FROM gpu_samples
      WHERE pod <> '' AND mig_instance < 0 AND gr_active IS NOT NULL
        AND ts >= coalesce(ts_from, '-infinity'::TIMESTAMP) AND ts < coalesce(ts_to, 'infinity'::TIMESTAMP)
        AND (only_cluster IS NULL OR cluster = only_cluster)) s
ANTI JOIN pod_keys k ON k.cluster = s.cluster AND k.namespace = s.namespace AND k.pod = s.pod;

CREATE OR REPLACE MACRO pod_steps_of(ts_from, ts_to, only_cluster) AS TABLE
SELECT k.pod_key, g.ts,
       max(g.step_s) AS step_s,
       count(*) AS gpus,
       avg(g.gr_active) AS gr,
       max(g.gr_active_max) AS gr_max,
       min(coalesce(g.gr_active_min, g.gr_active)) AS gr_min,
       bool_or(g.gr_active_min < g.gr_active - 1e-9) AS min_below_mean,
       avg(g.fb_used_mib) AS fb_mib,
       sum(g.pcie_rx_bps) AS pcie_rx_bps,
       sum(g.nvlink_rx_bps) AS nvlink_rx_bps
FROM gpu_samples g
JOIN pod_keys k ON k.cluster = g.cluster AND k.namespace = g.namespace AND k.pod = g.pod
WHERE g.pod <> '' AND g.mig_instance < 0 AND g.gr_active IS NOT NULL
  AND g.ts >= coalesce(ts_from, '-infinity'::TIMESTAMP) AND g.ts < coalesce(ts_to, 'infinity'::TIMESTAMP)
  AND (only_cluster IS NULL OR g.cluster = only_cluster)
GROUP BY k.pod_key, g.ts;

INSERT INTO pod_keys SELECT * FROM new_pod_keys(NULL, NULL, NULL);
INSERT INTO gpu_pod_steps SELECT * FROM pod_steps_of(NULL, NULL, NULL);
