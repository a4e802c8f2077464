-- name: waste_hourly
-- grain: one row per node per clock hour per holder (namespace, workload) per cost bucket
--   (queue: the Volcano queue; cluster_queue: the Kueue ClusterQueue)
-- param: hour_from TIMESTAMP = NULL -- the first hour to build (a refresh rebuilds the hours a load touched)
-- param: hour_to TIMESTAMP = NULL -- the hour after the last to build
-- materialize: table
-- partition: hour
-- depends: allocation_hourly, node_hours
-- columns: cluster, hour, node, node_pool, capacity_type, gpu_model, namespace, workload_kind, workload,
--   queue, cluster_queue, team, bucket, gpu_hours, usd, price_missing
-- description: every dollar of node cost in exactly one bucket. For each node-hour the GPU
--   capacity is split among the pods holding GPUs (shares scaled down when a node is
--   oversubscribed, e.g. time-slicing) and the rest is 'unallocated'. A holder's share is
--   'idle' when its GPUs' GR engine activity averaged under 5 % that hour, else split into
--   'used' (x activity) and 'underused' (x 1 - activity); 'unmeasured' when no DCGM series
--   was attributed to the pod. Buckets of a node-hour add up to its cost_usd exactly.
WITH ah AS (
    SELECT * FROM allocation_hourly
    WHERE hour >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND hour < coalesce($hour_to, 'infinity'::TIMESTAMP)
),
tot AS (
    SELECT cluster, node, hour, sum(gpu_hours) AS alloc_gh
    FROM ah
    GROUP BY cluster, node, hour
),
cap AS (
    SELECT nh.*, coalesce(t.alloc_gh, 0) AS alloc_gh, greatest(nh.gpu_hours, coalesce(t.alloc_gh, 0)) AS denom
    FROM node_hours nh
    LEFT JOIN tot t ON t.cluster = nh.cluster AND t.node = nh.node AND t.hour = nh.hour
    WHERE nh.hour >= coalesce($hour_from, '-infinity'::TIMESTAMP) AND nh.hour < coalesce($hour_to, 'infinity'::TIMESTAMP)
),
held AS (
    SELECT
        a.cluster, a.hour, a.node, coalesce(c.node_pool, a.node_pool) AS node_pool,
        coalesce(c.capacity_type, a.capacity_type) AS capacity_type, coalesce(c.gpu_model, a.gpu_model) AS gpu_model, a.namespace, a.workload_kind,
        a.workload, a.queue, a.cluster_queue, a.team, a.gr_active_avg AS gr,
        -- a pod on a node with no inventory row keeps its GPU-hours, with no price
        coalesce(a.gpu_hours * c.gpu_hours / nullif(c.denom, 0), a.gpu_hours) AS gh,
        c.cost_usd * a.gpu_hours / nullif(c.denom, 0) AS usd,
        coalesce(c.price_missing, true) AS price_missing
    FROM ah a
    LEFT JOIN cap c ON c.cluster = a.cluster AND c.node = a.node AND c.hour = a.hour
),
split AS (
    -- each holder-hour's buckets in one pass over held (four filtered passes kept a copy of it);
    -- idle or not by the mean settled to 9 decimals (plan.model.SETTLE_DIGITS): a mean at the
    -- threshold is summed in parallel, in a different order each run, and its last bit decided
    SELECT *, unnest(CASE
        WHEN gr IS NULL THEN [{'bucket': 'unmeasured', 'gpu_hours': gh, 'bucket_usd': usd}]
        WHEN round(gr, 9) < 0.05 THEN [{'bucket': 'idle', 'gpu_hours': gh, 'bucket_usd': usd}]
        WHEN round(gr, 9) >= 0.05 THEN [{'bucket': 'used', 'gpu_hours': gh * gr, 'bucket_usd': usd * gr},
                              {'bucket': 'underused', 'gpu_hours': gh * (1 - gr), 'bucket_usd': usd * (1 - gr)}]
        ELSE [] END) AS b
    FROM held
),
rows AS (
    SELECT * EXCLUDE (b), b.bucket, b.gpu_hours, b.bucket_usd FROM split
    UNION ALL
    SELECT cluster, hour, node, node_pool, capacity_type, gpu_model, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           gpu_hours - alloc_gh, cost_usd * (gpu_hours - alloc_gh) / nullif(denom, 0), price_missing,
           'unallocated', gpu_hours - alloc_gh, cost_usd * (gpu_hours - alloc_gh) / nullif(denom, 0)
    FROM cap
    WHERE gpu_hours - alloc_gh > 1e-9
)
SELECT cluster, hour, node, node_pool, capacity_type, gpu_model, namespace, workload_kind, workload, queue,
       cluster_queue, team, bucket, gpu_hours, bucket_usd AS usd, price_missing
FROM rows
