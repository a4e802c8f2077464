-- name: ray_jobs
-- grain: one row per RayJob
-- param: since TIMESTAMP = NULL -- start of the window (inclusive)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- columns: cluster, namespace, name, ray_cluster, uses_existing, shutdown_after_finish, ttl_after_finish_s,
--   deletion_strategy, submission_mode, job_status, deployment_status, start_time, end_time,
--   first_post_hour, gpu_hours, cost_usd, post_hours, post_gpu_hours, post_cost_usd, post_node_gpu_hours,
--   post_gr_hourly_max_p95, post_gr_max, alive_at_end
-- description: each RayJob, its Ray cluster (status.rayClusterName, else the RayCluster it
--   owns) and what that cluster's GPUs did after the job ended (status.endTime): the whole
--   clock hours after the end (post_hours, from first_post_hour on) with their GPU-hours, list
--   cost, node split (post_node_gpu_hours) and GR activity (p95 and max of the hourly max), and
--   whether the cluster still held GPUs in the last hour of the window (alive_at_end).
--   shutdown_after_finish / ttl_after_finish_s / uses_existing / deletion_strategy say how KubeRay
--   would clean it up: a job on an existing cluster (clusterSelector) never deletes it.
WITH w AS (SELECT cluster, window_end FROM analysis_window),
j AS (
    SELECT j.*,
           coalesce(j.ray_cluster, (SELECT min(rc.name) FROM rayclusters rc
                                    WHERE rc.cluster = j.cluster AND rc.namespace = j.namespace
                                      AND rc.owner_kind = 'RayJob' AND rc.owner_name = j.name)) AS cluster_name,
           date_trunc('hour', j.end_time)
               + CASE WHEN j.end_time = date_trunc('hour', j.end_time) THEN INTERVAL 0 HOUR ELSE INTERVAL 1 HOUR END
               AS first_post_hour
    FROM rayjobs j
),
pods AS (
    SELECT pa.cluster, pa.namespace, pa.uid,
           coalesce(json_extract_string(pa.labels, '$."ray.io/cluster"'),
                    json_extract_string(pa.labels, '$.ray_io_cluster'),
                    CASE WHEN pa.workload_kind = 'RayCluster' THEN pa.workload END) AS ray_cluster
    FROM pod_gpu_allocations pa
),
held AS (
    SELECT j.cluster, j.namespace, j.name, ah.hour, ah.node, ah.gpu_hours, ah.list_usd, ah.gr_active_max,
           ah.hour >= j.first_post_hour AS post
    FROM j
    JOIN pods p ON p.cluster = j.cluster AND p.namespace = j.namespace AND p.ray_cluster = j.cluster_name
    JOIN allocation_hourly ah ON ah.cluster = p.cluster AND ah.uid = p.uid
    WHERE ah.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND ah.hour < coalesce($until, 'infinity'::TIMESTAMP)
),
hourly AS (
    SELECT cluster, namespace, name, hour, bool_or(post) AS post, max(gr_active_max) AS act_max
    FROM held GROUP BY ALL
),
post_act AS (
    SELECT cluster, namespace, name, count(*) AS post_hours,
           quantile_cont(act_max, 0.95) AS post_gr_hourly_max_p95, max(act_max) AS post_gr_max
    FROM hourly WHERE post GROUP BY ALL
),
totals AS (
    SELECT cluster, namespace, name, sum(gpu_hours) AS gpu_hours, sum(list_usd) AS cost_usd,
           sum(gpu_hours) FILTER (WHERE post) AS post_gpu_hours, sum(list_usd) FILTER (WHERE post) AS post_cost_usd,
           max(hour) AS last_hour
    FROM held GROUP BY ALL
),
post_nodes AS (
    SELECT cluster, namespace, name,
           list({'node': node, 'gpu_hours': gh, 'cost_usd': usd} ORDER BY node) AS post_node_gpu_hours
    FROM (SELECT cluster, namespace, name, node, sum(gpu_hours) AS gh, sum(list_usd) AS usd
          FROM held WHERE post GROUP BY ALL)
    GROUP BY ALL
)
SELECT j.cluster, j.namespace, j.name, j.cluster_name AS ray_cluster, j.uses_existing, j.shutdown_after_finish,
       j.ttl_after_finish_s, j.deletion_strategy, j.submission_mode, j.job_status, j.deployment_status,
       j.start_time, j.end_time, j.first_post_hour,
       coalesce(t.gpu_hours, 0) AS gpu_hours, coalesce(t.cost_usd, 0) AS cost_usd,
       coalesce(pa.post_hours, 0) AS post_hours, coalesce(t.post_gpu_hours, 0) AS post_gpu_hours,
       coalesce(t.post_cost_usd, 0) AS post_cost_usd, pn.post_node_gpu_hours,
       pa.post_gr_hourly_max_p95, pa.post_gr_max,
       t.last_hour IS NOT NULL AND t.last_hour + INTERVAL 1 HOUR >= w.window_end AS alive_at_end
FROM j
LEFT JOIN totals t ON t.cluster = j.cluster AND t.namespace = j.namespace AND t.name = j.name
LEFT JOIN post_act pa ON pa.cluster = j.cluster AND pa.namespace = j.namespace AND pa.name = j.name
LEFT JOIN post_nodes pn ON pn.cluster = j.cluster AND pn.namespace = j.namespace AND pn.name = j.name
LEFT JOIN w ON w.cluster = j.cluster
ORDER BY post_cost_usd DESC, j.namespace, j.name
