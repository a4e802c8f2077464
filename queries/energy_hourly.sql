-- name: energy_hourly
-- grain: one row per cluster, clock hour, node and holder (namespace, workload; NULL = no holder)
-- param: hour_from TIMESTAMP = NULL -- the first hour to build (a refresh rebuilds the hours a load touched)
-- param: hour_to TIMESTAMP = NULL -- the hour after the last to build
-- materialize: table
-- partition: hour
-- depends: pod_gpu_allocations, pod_gpu_shares
-- columns: cluster, hour, node, namespace, workload_kind, workload, queue, cluster_queue, team,
--   energy_kwh, energy_kwh_from_counter, gpus
-- description: GPU energy per holder and hour. A GPU-step's joules come from DCGM's energy counter
--   (gpu_energy_samples, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) where scraped, else its power
--   reading x the step (DCGM_FI_DEV_POWER_USAGE; MIG instances repeat their GPU's, so the GPU
--   counts once). The pods holding it share it as they share its cost: a MIG instance its compute
--   slices / 7, a pod holding part of a GPU by time-slicing, MPS, a vGPU (HAMi, Volcano), a KAI
--   fraction or a shared DRA claim its share (pod_gpu_shares), other pods measured on one GPU
--   equal parts; never more than the GPU between them, and the rest (an idle GPU, free MIG
--   instances, shares nobody holds) has no holder. A holder is the pod DCGM names; its workload,
--   queue, team and share are those of the pod of that name that held GPUs for most of the hour
--   (pod_gpu_allocations; a name reused by a restart is the incarnation running then, the tie
--   to the one holding it later in the hour, then the larger uid); a pod no allocation covers that hour is
--   its own workload (kind Pod, team its namespace). So an hour's rows depend only on that
--   hour's samples and the allocations covering it: the refresh rebuilds only the hours a load
--   changed. The node's region (energy_rates) is looked up by energy_by. How: a GPU-hour whose
--   samples are all of one GPU key and one holder (most of them) has one row per step and the
--   same share all hour, so its joules are summed per hour and then shared; the others (MIG
--   instances, pods sharing a GPU, a holder changing within the hour) are shared step by step.
WITH gk AS (
    -- the samples' GPU keys (a GPU or one of its MIG instances) and, as gid, the physical GPU:
    -- everything below joins and partitions integers, the names are looked up at the end
    SELECT gpu_key, cluster, gpu_uuid, mig_instance, dense_rank() OVER (ORDER BY cluster, gpu_uuid) AS gid
    FROM gpu_keys
),
gpus AS (
    SELECT DISTINCT gid, cluster, gpu_uuid FROM gk
),
s AS NOT MATERIALIZED (
    SELECT k.gid, f.gpu_key, k.mig_instance, f.ts, f.node_key, f.pod_key, f.label_key, f.step_s, f.power_w
    FROM gpu_sample_facts f JOIN gk k USING (gpu_key)
    WHERE f.ts >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND f.ts < coalesce($hour_to, 'infinity'::TIMESTAMP)
),
c AS NOT MATERIALIZED (
    SELECT g.gid, c.ts, c.energy_j
    FROM gpu_energy_samples c JOIN gpus g USING (cluster, gpu_uuid)
    WHERE c.ts >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND c.ts < coalesce($hour_to, 'infinity'::TIMESTAMP)
),
rows_hourly AS MATERIALIZED (
    -- each sample row's joules (its GPU-step's counter reading, else its power x the step) summed
    -- per GPU key, hour, holder, node and labels: one aggregate of a few groups per GPU-hour
    SELECT s.gpu_key, date_trunc('hour', s.ts) AS hour, s.pod_key, s.node_key, s.label_key,
           any_value(s.gid) AS gid, any_value(s.mig_instance) AS mig_instance,
           sum(coalesce(c.energy_j, s.power_w * s.step_s)) AS joules, sum(c.energy_j) AS joules_from_counter
    FROM s LEFT JOIN c ON c.gid = s.gid AND c.ts = s.ts
    GROUP BY s.gpu_key, date_trunc('hour', s.ts), s.pod_key, s.node_key, s.label_key
),
gpu_hours AS MATERIALIZED (
    -- a GPU-hour whose samples are of one GPU key and one holder has one sample row per step
    -- (the samples' natural key is gpu_key, ts, pod_key): every step's joules go to that row, its
    -- share is the same all hour, and its rows are summed per hour without a step's partition.
    -- The others (MIG instances, pods sharing a GPU, a holder changing within the hour) are split
    -- step by step below.
    SELECT gid, hour, min(gpu_key) = max(gpu_key) AND min(pod_key) = max(pod_key) AS single
    FROM rows_hourly
    GROUP BY gid, hour
),
pod_hours AS MATERIALIZED (
    SELECT DISTINCT pod_key, hour FROM rows_hourly
),
held_by AS MATERIALIZED (
    -- per pod name and hour, the pod of that name whose allocation covered most of the hour (every
    -- order key clipped to the hour, so only the allocations covering it decide). Each allocation
    -- is spread over its hours within those of the samples and matched to its name's hours by
    -- hour: a name every restart of a job reuses has many allocations, and matching each of them
    -- against every hour of its name was most of this model's time.
    SELECT a.pod_key, a.hour, a.cluster, a.uid, a.workload_kind, a.workload, a.queue, a.cluster_queue, a.team
    FROM (
        SELECT k.pod_key, a.cluster, a.uid, a.workload_kind, a.workload, a.queue, a.cluster_queue, a.team,
               a.start_ts, a.end_ts,
               unnest(span_hours(a.start_ts, coalesce(a.end_ts, 'infinity'::TIMESTAMP), b.lo, b.hi)) AS hour
        FROM pod_gpu_allocations a
        JOIN pod_keys k ON k.cluster = a.cluster AND k.namespace = a.namespace AND k.pod = a.pod
        CROSS JOIN (SELECT min(hour) AS lo, max(hour) + INTERVAL 1 HOUR AS hi FROM pod_hours) b
        WHERE a.start_ts < b.hi AND coalesce(a.end_ts, 'infinity'::TIMESTAMP) > b.lo
    ) a
    SEMI JOIN pod_hours ph ON ph.pod_key = a.pod_key AND ph.hour = a.hour
    QUALIFY row_number() OVER (
        PARTITION BY a.pod_key, a.hour
        ORDER BY least(coalesce(a.end_ts, 'infinity'::TIMESTAMP), a.hour + INTERVAL 1 HOUR)
                     - greatest(a.start_ts, a.hour) DESC,
                 least(coalesce(a.end_ts, 'infinity'::TIMESTAMP), a.hour + INTERVAL 1 HOUR) DESC,
                 greatest(a.start_ts, a.hour) DESC, a.uid DESC) = 1
),
fractional AS (
    -- the part of one GPU that pod holds where it holds part of one (pod_gpu_shares)
    SELECT b.pod_key, b.hour, max(sh.share) AS share
    FROM held_by b
    JOIN pod_gpu_shares sh ON sh.cluster = b.cluster AND sh.uid = b.uid
    WHERE sh.kind IN ('timeslice', 'mps', 'vgpu', 'kai') OR (sh.kind = 'dra' AND sh.share < 1)
    GROUP BY ALL
),
mig AS (
    SELECT label_key, coalesce(try_cast(regexp_extract(mig_profile, '^(\d+)g', 1) AS INTEGER), 1) / 7.0 AS share
    FROM sample_labels
),
nobody AS (
    SELECT pod_key FROM pod_keys WHERE pod = ''
),
single AS (
    -- the GPU-hours of one row per step: the holder's part (as h and hn below would give each step)
    SELECT r.gid, r.hour, r.node_key, r.pod_key, r.joules, r.joules_from_counter,
           CASE WHEN r.pod_key IN (SELECT pod_key FROM nobody) THEN 0.0
                ELSE least(1.0, CASE WHEN r.mig_instance >= 0 THEN m.share ELSE coalesce(f.share, 1.0) END) END AS part
    FROM rows_hourly r
    JOIN gpu_hours USING (gid, hour)
    JOIN mig m USING (label_key)
    LEFT JOIN fractional f ON f.pod_key = r.pod_key AND f.hour = r.hour
    WHERE gpu_hours.single AND r.joules IS NOT NULL
),
sx AS NOT MATERIALIZED (
    -- the samples of the other GPU-hours
    SELECT s.* FROM s SEMI JOIN gpu_hours g ON g.gid = s.gid AND g.hour = date_trunc('hour', s.ts) AND NOT g.single
),
e AS MATERIALIZED (
    SELECT s.gid, s.ts, any_value(s.node_key) AS node_key, max(s.step_s) AS step_s,
           coalesce(any_value(c.energy_j), max(s.power_w) * max(s.step_s)) AS joules,
           any_value(c.energy_j) IS NOT NULL AS from_counter
    FROM sx s
    LEFT JOIN c ON c.gid = s.gid AND c.ts = s.ts
    GROUP BY s.gid, s.ts
),
h AS (
    SELECT g.gid, g.ts, g.pod_key,
           CASE WHEN g.mig_instance >= 0 THEN m.share
                WHEN f.share IS NOT NULL THEN f.share
                ELSE 1.0 / count(*) OVER (PARTITION BY g.gpu_key, g.ts) END AS share
    FROM sx g
    JOIN mig m USING (label_key)
    LEFT JOIN fractional f ON f.pod_key = g.pod_key AND f.hour = date_trunc('hour', g.ts)
    WHERE g.pod_key NOT IN (SELECT pod_key FROM nobody)
),
hn AS MATERIALIZED (
    -- never more than the whole GPU, whatever the labels say
    SELECT gid, ts, pod_key, share / greatest(1.0, sum(share) OVER (PARTITION BY gid, ts)) AS part FROM h
),
held AS (
    SELECT gid, ts, sum(part) AS part FROM hn GROUP BY gid, ts
),
parts AS (
    SELECT e.gid, e.ts, e.node_key, e.from_counter, hn.pod_key, e.joules * hn.part AS joules
    FROM e JOIN hn ON hn.gid = e.gid AND hn.ts = e.ts
    UNION ALL
    SELECT e.gid, e.ts, e.node_key, e.from_counter, NULL, e.joules * greatest(0.0, 1.0 - coalesce(held.part, 0))
    FROM e LEFT JOIN held ON held.gid = e.gid AND held.ts = e.ts
),
hourly AS (
    -- each GPU's joules per hour, node and holder (summed again by name below)
    SELECT gid, date_trunc('hour', ts) AS hour, node_key, pod_key, sum(joules) AS joules,
           sum(joules) FILTER (WHERE from_counter) AS joules_from_counter
    FROM parts
    WHERE joules IS NOT NULL
    GROUP BY ALL
    UNION ALL
    SELECT gid, hour, node_key, pod_key, joules * part, joules_from_counter * part
    FROM single WHERE pod_key NOT IN (SELECT pod_key FROM nobody)
    UNION ALL
    SELECT gid, hour, node_key, NULL, joules * (1.0 - part), joules_from_counter * (1.0 - part)
    FROM single
),
per_gpu AS (
    -- per holder-hour and GPU first, so the GPUs are counted without a DISTINCT aggregate (which
    -- DuckDB computes apart and joins back on every grouping column)
    SELECT g.cluster, p.hour, nk.node, pk.namespace,
           coalesce(b.workload_kind, CASE WHEN pk.pod IS NOT NULL THEN 'Pod' END) AS workload_kind,
           coalesce(b.workload, pk.pod) AS workload, b.queue, b.cluster_queue, coalesce(b.team, pk.namespace) AS team,
           p.gid, sum(p.joules) AS joules, sum(p.joules_from_counter) AS joules_from_counter
    FROM hourly p
    JOIN gpus g USING (gid)
    LEFT JOIN node_keys nk USING (node_key)
    LEFT JOIN pod_keys pk USING (pod_key)
    LEFT JOIN held_by b ON b.pod_key = p.pod_key AND b.hour = p.hour
    GROUP BY ALL
)
SELECT cluster, hour, node, namespace, workload_kind, workload, queue, cluster_queue, team,
       sum(joules) / 3.6e6 AS energy_kwh,
       sum(joules_from_counter) / 3.6e6 AS energy_kwh_from_counter,
       count(*) AS gpus
FROM per_gpu
GROUP BY ALL
