-- name: idle_stretches
-- grain: one row per workload (cluster, namespace, kind, name) and Ray group ('' outside Ray) that held GPUs
-- param: since TIMESTAMP = NULL -- start of the window (inclusive)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- materialize: default
-- columns: cluster, namespace, workload_kind, workload, ray_group, hours_held, idle_hours, unmeasured_hours,
--   gpu_hours, cost_usd, pods_max, pods_active_min, days_observed, weeks_observed, first_hour, last_hour,
--   stretches, hour_of_week, node_gpu_hours
-- description: when each workload's GPUs sat idle, hour by hour. An hour is idle when the
--   workload held GPUs all through it (covered_s 3600 on each pod-hour row) and DCGM measured
--   all of them and none went above 1 % GR engine activity in any step (the hourly max: the
--   idle rule's "does nothing" level, applied to every step rather than to the median); an
--   hour without a measurement is never idle. Consecutive idle hours form stretches (start, hours, their
--   list cost and GPU-hours, and whether the workload woke up after: a later held hour
--   follows). hour_of_week is the profile over the 168 hours of a UTC week, Monday 00:00 = 0:
--   time-weighted mean GR activity, hourly max, and the share of the observed hours that were
--   idle, for the week hours observed. Ray pods are split by their group (labels ray.io/group,
--   or kube-state-metrics' label_ray_io_group): head and each worker group separately.
--   pods_active_min: the fewest pods active (hourly max above 1 %) in any held hour, i.e. how
--   many the work never went below. Read by the scale_to_zero and ray rules.
WITH groups AS (
    -- each pod's Ray group, read from its labels once per pod (not once per pod-hour)
    SELECT cluster, uid,
           coalesce(json_extract_string(labels, '$."ray.io/group"'),
                    json_extract_string(labels, '$.ray_io_group'), '') AS ray_group
    FROM pod_gpu_allocations
),
a AS (
    SELECT ah.cluster, ah.namespace, ah.workload_kind, ah.workload, ah.uid, ah.hour, ah.node,
           ah.gpu_hours, ah.list_usd, ah.covered_s, ah.gr_active_avg, ah.gr_active_max, pa.ray_group
    FROM allocation_hourly ah
    JOIN groups pa ON pa.cluster = ah.cluster AND pa.uid = ah.uid
    WHERE ah.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND ah.hour < coalesce($until, 'infinity'::TIMESTAMP)
),
h AS (
    -- allocation_hourly has one row per pod (cluster, uid) and hour, and a pod is in one group:
    -- count(*) counts the distinct pods of a group's hour (a DISTINCT count sorted 5 M pod-hours twice)
    SELECT cluster, namespace, workload_kind, workload, ray_group, hour,
           sum(gpu_hours) AS gpu_hours, sum(list_usd) AS usd, count(*) AS pods,
           count(*) FILTER (WHERE gr_active_max > 0.01) AS pods_active,
           max(gr_active_max) AS act_max,
           sum(gr_active_avg * covered_s) / nullif(sum(covered_s) FILTER (WHERE gr_active_avg IS NOT NULL), 0)
               AS act_avg,
           bool_and(gr_active_max IS NOT NULL AND covered_s >= 3599.0) AS whole_and_measured
    FROM a
    GROUP BY ALL
),
f AS (
    SELECT *, whole_and_measured AND act_max <= 0.01 AS idle,
           epoch(hour)::BIGINT // 3600 AS hour_index,
           (isodow(hour) - 1) * 24 + hour(hour) AS how
    FROM h
),
isl AS (
    SELECT *, hour_index - row_number() OVER (
        PARTITION BY cluster, namespace, workload_kind, workload, ray_group, idle ORDER BY hour) AS island
    FROM f
),
last_held AS (
    SELECT cluster, namespace, workload_kind, workload, ray_group, max(hour) AS last_hour, min(hour) AS first_hour
    FROM f GROUP BY ALL
),
st AS (
    SELECT i.cluster, i.namespace, i.workload_kind, i.workload, i.ray_group,
           min(i.hour) AS start, count(*) AS hours, sum(i.usd) AS usd, sum(i.gpu_hours) AS gpu_hours,
           max(i.pods) AS pods
    FROM isl i
    WHERE i.idle
    GROUP BY i.cluster, i.namespace, i.workload_kind, i.workload, i.ray_group, i.island
),
stretches AS (
    SELECT st.cluster, st.namespace, st.workload_kind, st.workload, st.ray_group,
           list({'start': st.start, 'hours': st.hours, 'usd': st.usd, 'gpu_hours': st.gpu_hours, 'pods': st.pods,
                 'woke': st.start + to_hours(st.hours) <= lh.last_hour} ORDER BY st.start) AS stretches
    FROM st
    JOIN last_held lh USING (cluster, namespace, workload_kind, workload, ray_group)
    GROUP BY ALL
),
week AS (
    SELECT cluster, namespace, workload_kind, workload, ray_group,
           list({'how': how, 'gr_avg': gr_avg, 'gr_max': gr_max, 'idle_share': idle_share, 'hours': n}
                ORDER BY how) AS hour_of_week
    FROM (SELECT cluster, namespace, workload_kind, workload, ray_group, how,
                 avg(act_avg) AS gr_avg, max(act_max) AS gr_max, avg(idle::INTEGER) AS idle_share, count(*) AS n
          FROM f GROUP BY ALL)
    GROUP BY ALL
),
by_node AS (
    SELECT cluster, namespace, workload_kind, workload, ray_group,
           list({'node': node, 'gpu_hours': gh, 'cost_usd': usd} ORDER BY node) AS node_gpu_hours
    FROM (SELECT cluster, namespace, workload_kind, workload, ray_group, node, sum(gpu_hours) AS gh,
                 sum(list_usd) AS usd
          FROM a GROUP BY ALL)
    GROUP BY ALL
),
tot AS (
    SELECT cluster, namespace, workload_kind, workload, ray_group,
           count(*) AS hours_held, count(*) FILTER (WHERE idle) AS idle_hours,
           count(*) FILTER (WHERE NOT whole_and_measured) AS unmeasured_hours,
           sum(gpu_hours) AS gpu_hours, sum(usd) AS cost_usd, max(pods) AS pods_max,
           min(pods_active) AS pods_active_min,
           count(DISTINCT date_trunc('day', hour)) AS days_observed,
           count(DISTINCT date_trunc('week', hour)) AS weeks_observed,
           min(hour) AS first_hour, max(hour) AS last_hour
    FROM f
    GROUP BY ALL
)
SELECT tot.*,
       coalesce(stretches.stretches, []) AS stretches,
       week.hour_of_week, by_node.node_gpu_hours
FROM tot
LEFT JOIN stretches USING (cluster, namespace, workload_kind, workload, ray_group)
LEFT JOIN week USING (cluster, namespace, workload_kind, workload, ray_group)
LEFT JOIN by_node USING (cluster, namespace, workload_kind, workload, ray_group)
ORDER BY tot.cost_usd DESC NULLS LAST, tot.namespace, tot.workload, tot.ray_group
