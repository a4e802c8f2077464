-- name: kueue_quota_usage
-- grain: one row per Kueue ClusterQueue, flavor and resource it holds a quota for
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- columns: cluster, cluster_queue, cohort, flavor, resource, gpu_resource, gpus_per_unit, nominal_quota,
--   borrowing_limit, lending_limit, used_avg, used_p95, used_max, hours_used, source, reserved_now,
--   borrowed_now, largest_workload_need, largest_pending_need, live_workloads, pending_workloads,
--   flavors_of_resource, api_version
-- description: each ClusterQueue's quota (nominalQuota, borrowingLimit, lendingLimit, cohort)
--   against what its workloads used, in the resource's own unit (nvidia.com/gpu devices, HAMi
--   gpucores %, gpumem MiB ...): per hour the quota its pods held (a pod's share of its admitted
--   Workload's usage, else its own requests), mean, p95 and max over the hours it held any, or
--   Kueue's kueue_cluster_queue_resource_usage series where they were collected (source). A pod
--   belongs to a ClusterQueue as kueue_pod_queues says; to a flavor by its Workload's assignment,
--   else the queue's only flavor of that resource, else the flavor whose nodeLabels its node
--   carries. Floors a resize must keep:
--   largest_workload_need, the most one live Workload needs of the resource (live: in the newest
--   snapshot of Workloads and not Finished; its admitted usage, else its resourceRequests, else
--   its pod sets' minCount or count x per-pod requests), in any flavor; reserved_now, the quota
--   the queue reserves now (status.flavorsReservation, else flavorsUsage). gpus_per_unit: the
--   physical GPUs one unit stands for (a MIG slice its compute fraction; nvidia.com/gpu what the
--   queue's pods held per device, below 1 where it counts HAMi vGPUs or time-slicing replicas;
--   NULL for cores and memory).
WITH quotas AS (
    SELECT cq.cluster, cq.name AS cluster_queue, cq.cohort, cq.api_version,
           q->>'flavor' AS flavor, q->>'resource' AS resource,
           try_cast(q->>'nominal' AS DOUBLE) AS nominal_quota,
           try_cast(q->>'borrowing_limit' AS DOUBLE) AS borrowing_limit,
           try_cast(q->>'lending_limit' AS DOUBLE) AS lending_limit
    FROM kueue_cluster_queues cq, unnest(CAST(cq.quotas AS JSON[])) AS t(q)
    WHERE cq.quotas IS NOT NULL
),
status_rows AS (
    SELECT cq.cluster, cq.name AS cluster_queue, 'reservation' AS what, u->>'flavor' AS flavor,
           u->>'resource' AS resource, try_cast(u->>'total' AS DOUBLE) AS total, try_cast(u->>'borrowed' AS DOUBLE) AS borrowed
    FROM kueue_cluster_queues cq, unnest(CAST(cq.reservation AS JSON[])) AS t(u)
    WHERE cq.reservation IS NOT NULL
    UNION ALL
    SELECT cq.cluster, cq.name, 'usage', u->>'flavor', u->>'resource', try_cast(u->>'total' AS DOUBLE),
           try_cast(u->>'borrowed' AS DOUBLE)
    FROM kueue_cluster_queues cq, unnest(CAST(cq.usage AS JSON[])) AS t(u)
    WHERE cq.usage IS NOT NULL
),
status_now AS (
    SELECT cluster, cluster_queue, flavor, resource,
           coalesce(max(total) FILTER (WHERE what = 'reservation'), max(total) FILTER (WHERE what = 'usage')) AS reserved_now,
           coalesce(max(borrowed) FILTER (WHERE what = 'reservation'), max(borrowed) FILTER (WHERE what = 'usage')) AS borrowed_now
    FROM status_rows
    GROUP BY ALL
),
newest AS (
    SELECT cluster, observed_at FROM k8s_snapshots WHERE kind = 'workloads'
),
wl AS (
    SELECT w.*, coalesce(w.cluster_queue, lq.cluster_queue) AS cq,
           w.state <> 'Finished' AND coalesce(w.snapshot_at >= s.observed_at, true) AS live
    FROM kueue_workloads w
    LEFT JOIN kueue_local_queues lq ON lq.cluster = w.cluster AND lq.namespace = w.namespace AND lq.name = w.queue_name
    LEFT JOIN newest s ON s.cluster = w.cluster
),
-- what each workload needs per resource: admitted usage, else Kueue's resourceRequests, else pod sets
ps AS (
    SELECT wl.cluster, wl.namespace, wl.name, wl.cq, wl.live, wl.state, p AS ps
    FROM wl, unnest(CAST(wl.pod_sets AS JSON[])) AS t(p)
    WHERE wl.pod_sets IS NOT NULL
),
ps_need AS (
    SELECT ps.cluster, ps.namespace, ps.name, ps.cq, ps.live, ps.state, k AS resource,
           coalesce(try_cast(json_extract_string(ps.ps, '$.totals."' || k || '"') AS DOUBLE),
                    coalesce(try_cast(ps.ps->>'min_count' AS DOUBLE), try_cast(ps.ps->>'count' AS DOUBLE), 1)
                    * try_cast(json_extract_string(ps.ps, '$.requests."' || k || '"') AS DOUBLE)) AS quantity
    FROM ps, unnest(list_distinct(list_concat(coalesce(json_keys(ps.ps, '$.requests'), []::VARCHAR[]),
                                              coalesce(json_keys(ps.ps, '$.totals'), []::VARCHAR[])))) AS t(k)
),
used_by_wl AS (
    SELECT wl.cluster, wl.namespace, wl.name, wl.cq, wl.live, wl.state, u->>'pod_set' AS pod_set, u->>'flavor' AS flavor,
           u->>'resource' AS resource, try_cast(u->>'quantity' AS DOUBLE) AS quantity
    FROM wl, unnest(CAST(wl.usage AS JSON[])) AS t(u)
    WHERE wl.usage IS NOT NULL AND json_array_length(wl.usage) > 0
),
need AS (
    SELECT cluster, namespace, name, cq, live, state, resource, sum(quantity) AS quantity
    FROM used_by_wl GROUP BY ALL
    UNION ALL
    SELECT n.cluster, n.namespace, n.name, n.cq, n.live, n.state, n.resource, sum(n.quantity)
    FROM ps_need n
    WHERE NOT EXISTS (SELECT 1 FROM used_by_wl u WHERE u.cluster = n.cluster AND u.namespace = n.namespace AND u.name = n.name)
    GROUP BY ALL
),
floors AS (
    SELECT cluster, cq AS cluster_queue, resource,
           max(quantity) FILTER (WHERE live) AS largest_workload_need,
           max(quantity) FILTER (WHERE live AND state NOT IN ('Admitted', 'QuotaReserved')) AS largest_pending_need
    FROM need
    WHERE cq IS NOT NULL
    GROUP BY ALL
),
counts AS (
    SELECT cluster, cq AS cluster_queue,
           count(*) FILTER (WHERE live) AS live_workloads,
           count(*) FILTER (WHERE live AND state NOT IN ('Admitted', 'QuotaReserved')) AS pending_workloads
    FROM wl WHERE cq IS NOT NULL GROUP BY ALL
),
kq_pods AS (
    SELECT a.cluster, a.uid, a.namespace, a.node, p.gpu_requests, k.cluster_queue, k.workload,
           k.podset AS podset_label
    FROM kueue_pod_queues k
    JOIN pod_gpu_allocations a ON a.cluster = k.cluster AND a.uid = k.uid
    JOIN pods p ON p.cluster = k.cluster AND p.uid = k.uid
),
wl_pods AS (
    SELECT cluster, namespace, name, sum(coalesce(try_cast(ps->>'count' AS DOUBLE), 1)) AS pods
    FROM ps GROUP BY ALL
),
-- a pod's part of its Workload's admitted usage (its pod set's, when the pod says which)
pod_use_wl AS (
    SELECT k.cluster, k.uid, k.cluster_queue, u.flavor, u.resource,
           sum(u.quantity / CASE WHEN k.podset_label IS NOT NULL
                                 THEN coalesce(try_cast(ps_row.ps->>'count' AS DOUBLE), 1) ELSE wp.pods END) AS quantity
    FROM kq_pods k
    JOIN used_by_wl u ON u.cluster = k.cluster AND u.namespace = k.namespace AND u.name = k.workload
                     AND (k.podset_label IS NULL OR u.pod_set = k.podset_label)
    JOIN wl_pods wp ON wp.cluster = k.cluster AND wp.namespace = k.namespace AND wp.name = k.workload
    LEFT JOIN ps ps_row ON ps_row.cluster = k.cluster AND ps_row.namespace = k.namespace AND ps_row.name = k.workload
                       AND ps_row.ps->>'name' = k.podset_label
    GROUP BY ALL
),
-- else its own requests, in the flavor its queue or node gives it
pod_req AS (
    SELECT k.cluster, k.uid, k.cluster_queue, k.node, r AS resource,
           try_cast(json_extract_string(k.gpu_requests, '$."' || r || '"') AS DOUBLE) AS quantity
    FROM kq_pods k, unnest(coalesce(json_keys(k.gpu_requests), []::VARCHAR[])) AS t(r)
    WHERE NOT EXISTS (SELECT 1 FROM pod_use_wl w WHERE w.cluster = k.cluster AND w.uid = k.uid)
),
flavor_fit AS (
    SELECT q.cluster, q.cluster_queue, q.resource, q.flavor, n.node
    FROM quotas q
    JOIN kueue_resource_flavors rf ON rf.cluster = q.cluster AND rf.name = q.flavor
    JOIN nodes n ON n.cluster = q.cluster
    WHERE list_bool_and([json_extract_string(n.labels, '$."' || k || '"') IS NOT DISTINCT FROM
                         json_extract_string(rf.node_labels, '$."' || k || '"')
                         FOR k IN coalesce(json_keys(rf.node_labels), []::VARCHAR[])]) IS NOT false
),
pod_use AS (
    SELECT cluster, uid, cluster_queue, flavor, resource, quantity FROM pod_use_wl
    UNION ALL
    SELECT r.cluster, r.uid, r.cluster_queue,
           coalesce(CASE WHEN count(*) OVER w = 1 THEN q.flavor END, ff.flavor, q.flavor) AS flavor,
           r.resource, r.quantity
    FROM pod_req r
    JOIN quotas q ON q.cluster = r.cluster AND q.cluster_queue = r.cluster_queue AND q.resource = r.resource
    LEFT JOIN flavor_fit ff ON ff.cluster = r.cluster AND ff.cluster_queue = r.cluster_queue
                           AND ff.resource = r.resource AND ff.flavor = q.flavor AND ff.node = r.node
    WINDOW w AS (PARTITION BY r.cluster, r.uid, r.resource)
    QUALIFY count(*) OVER w = 1 OR ff.flavor IS NOT NULL
),
pod_hourly AS (
    SELECT u.cluster, u.cluster_queue, u.flavor, u.resource, a.hour,
           sum(u.quantity * a.covered_s / 3600.0) AS held
    FROM pod_use u
    JOIN allocation_hourly a ON a.cluster = u.cluster AND a.uid = u.uid
    WHERE a.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND a.hour < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY ALL
),
device_share AS (
    -- what one nvidia.com/gpu of the queue's pods held of a physical GPU (below 1 under HAMi or
    -- time-slicing, where the resource counts vGPUs or replicas)
    SELECT u.cluster, u.cluster_queue, u.flavor,
           sum(a.gpus * a.covered_s) / nullif(sum(u.quantity * a.covered_s), 0) AS gpus_per_device
    FROM pod_use u
    JOIN allocation_hourly a ON a.cluster = u.cluster AND a.uid = u.uid
    WHERE u.resource = 'nvidia.com/gpu'
    GROUP BY ALL
),
metric_hourly AS (
    SELECT cluster, cluster_queue, flavor, resource, date_trunc('hour', ts) AS hour, avg(usage) AS held
    FROM kueue_quota_samples
    WHERE usage IS NOT NULL
      AND ts >= coalesce($since, '-infinity'::TIMESTAMP) AND ts < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY ALL
),
hourly AS (
    -- Kueue's own series where collected for the queue, else its pods
    SELECT *, 'metrics' AS source FROM metric_hourly
    UNION ALL
    SELECT p.*, 'pods' FROM pod_hourly p
    WHERE NOT EXISTS (SELECT 1 FROM metric_hourly m WHERE m.cluster = p.cluster AND m.cluster_queue = p.cluster_queue)
),
span AS (
    SELECT cluster, count(DISTINCT hour) AS hours FROM node_hours
    WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY ALL
),
use AS (
    SELECT h.cluster, h.cluster_queue, h.flavor, h.resource, any_value(h.source) AS source,
           sum(h.held) / nullif(any_value(sp.hours), 0) AS used_avg,
           quantile_cont(h.held, 0.95) AS used_p95, max(h.held) AS used_max, count(DISTINCT h.hour) AS hours_used
    FROM hourly h LEFT JOIN span sp ON sp.cluster = h.cluster
    GROUP BY ALL
)
SELECT
    q.cluster, q.cluster_queue, q.cohort, q.flavor, q.resource,
    (lower(q.resource) LIKE 'nvidia.com/%' OR lower(q.resource) LIKE '%gpu%') AS gpu_resource,
    CASE WHEN q.resource = 'nvidia.com/gpu' THEN least(1.0, coalesce(ds.gpus_per_device, 1.0))
         WHEN q.resource LIKE 'nvidia.com/mig-%'
         THEN try_cast(regexp_extract(q.resource, 'mig-(\d+)g', 1) AS INTEGER) / 7.0 END AS gpus_per_unit,
    q.nominal_quota, q.borrowing_limit, q.lending_limit,
    coalesce(u.used_avg, 0) AS used_avg, coalesce(u.used_p95, 0) AS used_p95, coalesce(u.used_max, 0) AS used_max,
    coalesce(u.hours_used, 0) AS hours_used, coalesce(u.source, 'pods') AS source,
    st.reserved_now, st.borrowed_now,
    coalesce(f.largest_workload_need, 0) AS largest_workload_need,
    coalesce(f.largest_pending_need, 0) AS largest_pending_need,
    coalesce(c.live_workloads, 0) AS live_workloads, coalesce(c.pending_workloads, 0) AS pending_workloads,
    count(*) OVER (PARTITION BY q.cluster, q.cluster_queue, q.resource) AS flavors_of_resource,
    q.api_version
FROM quotas q
LEFT JOIN use u ON u.cluster = q.cluster AND u.cluster_queue = q.cluster_queue AND u.flavor = q.flavor
               AND u.resource = q.resource
LEFT JOIN status_now st ON st.cluster = q.cluster AND st.cluster_queue = q.cluster_queue AND st.flavor = q.flavor
                       AND st.resource = q.resource
LEFT JOIN floors f ON f.cluster = q.cluster AND f.cluster_queue = q.cluster_queue AND f.resource = q.resource
LEFT JOIN counts c ON c.cluster = q.cluster AND c.cluster_queue = q.cluster_queue
LEFT JOIN device_share ds ON ds.cluster = q.cluster AND ds.cluster_queue = q.cluster_queue AND ds.flavor = q.flavor
ORDER BY q.cluster, q.cluster_queue, q.flavor, q.resource
