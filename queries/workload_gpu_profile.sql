-- name: workload_gpu_profile
-- grain: one row per workload (cluster, namespace, kind, name) that held GPUs in the window
-- param: since TIMESTAMP = NULL -- start of the window (inclusive; ISO-8601 or relative like 7d)
-- param: until TIMESTAMP = NULL -- end of the window (exclusive)
-- param: namespace VARCHAR = NULL -- only this namespace
-- materialize: default
-- columns: cluster, namespace, workload_kind, workload, queue, vcjob, podgroup, gpu_model, node_pool,
--   capacity_type, instance_type, zone, pods, gpus_per_pod, gpu_request_per_pod, mig_profile, gpu_hours,
--   cost_usd, usd_per_gpu_hour, hours_held, avg_gpus_held, first_hour, last_hour, priority_class, labels,
--   annotations, node_gpu_hours, samples, gr_mean, gr_p50, gr_p95, gr_p99, gr_max, sm_mean, sm_p95, sm_p99,
--   sm_max, peak_p95, step_s, max_pushed_down, fb_p95_mib, fb_p99_mib, fb_max_mib, gpu_memory_mib,
--   active_fraction, diurnal_swing, peak_hour_utc, recurring_hours_utc, stray_active_hours, days_observed,
--   finished_pods, runtime_p50_s, runtime_p90_s, pending_p95_s
-- description: how each workload uses the GPUs it holds: GPU-hours allocated and their list
--   cost, and how they split over nodes (node_gpu_hours); GR and SM activity mean, p50/p95/p99
--   and max over samples (0..1; on a MIG instance relative to the instance); the peak-aware
--   figure peak_p95: the p95 over steps of the per-step max of GR and SM activity (a
--   short-window p95 at the step step_s; max_pushed_down when the source gave a max within
--   each step, e.g. max_over_time, rather than one sample per step); the statistics come from
--   workload_sample_stats (sample_stats_of, migration 015) or, with since/until, from the raw
--   samples of that window; framebuffer used p95/p99/max (MiB) and
--   the GPU's memory; active fraction (share of samples above 5 % GR active); diurnal swing of
--   the hour-of-day profile ((max - min) / mean) and the UTC hours active on at least half of
--   the days seen (and at least two; recurring_hours_utc) with the active hours outside them
--   (stray_active_hours); pod runtimes of finished pods; GPU model, pool, capacity type, queue,
--   and the priority class, labels and annotations the production classifier reads.
--   The input of every rule.
WITH a AS (
    SELECT * FROM allocation_hourly
    WHERE hour >= coalesce($since, '-infinity'::TIMESTAMP) AND hour < coalesce($until, 'infinity'::TIMESTAMP) AND ($namespace IS NULL OR namespace = $namespace)
),
alloc AS (
    SELECT
        cluster, namespace, workload_kind, workload,
        min(queue) AS queue,
        min(vcjob) AS vcjob,
        min(podgroup) AS podgroup,
        mode(gpu_model ORDER BY gpu_model) AS gpu_model,
        mode(node_pool ORDER BY node_pool) AS node_pool,
        mode(capacity_type ORDER BY capacity_type) AS capacity_type,
        mode(instance_type ORDER BY instance_type) AS instance_type,
        mode(zone ORDER BY zone) AS zone,
        count(DISTINCT uid) AS pods,
        max(gpus) AS gpus_per_pod,
        max(gpu_request) AS gpu_request_per_pod,
        min(mig_profile) AS mig_profile,
        sum(gpu_hours) AS gpu_hours,
        sum(list_usd) AS cost_usd,
        sum(list_usd) / nullif(sum(gpu_hours), 0) AS usd_per_gpu_hour,
        count(DISTINCT hour) AS hours_held,
        sum(gpu_hours) / nullif(count(DISTINCT hour), 0) AS avg_gpus_held,
        min(hour) AS first_hour,
        max(hour) AS last_hour
    FROM a
    GROUP BY cluster, namespace, workload_kind, workload
),
by_node AS (
    SELECT cluster, namespace, workload_kind, workload,
           list({'node': node, 'gpu_hours': gh, 'cost_usd': usd} ORDER BY node) AS node_gpu_hours
    FROM (SELECT cluster, namespace, workload_kind, workload, node, sum(gpu_hours) AS gh, sum(list_usd) AS usd
          FROM a GROUP BY ALL)
    GROUP BY ALL
),
names AS (
    -- a pod name reused by another workload: the newest pod's
    SELECT cluster, namespace, pod, arg_max(workload_kind, (start_ts, uid)) AS workload_kind,
           arg_max(workload, (start_ts, uid)) AS workload
    FROM pod_gpu_allocations
    WHERE ($namespace IS NULL OR namespace = $namespace)
    GROUP BY cluster, namespace, pod
),
meta AS (
    -- what the production classifier reads: the newest pod's labels and annotations
    SELECT cluster, namespace, workload_kind, workload, mode(priority_class ORDER BY priority_class) AS priority_class,
           arg_max(labels, (start_ts, uid)) AS labels, arg_max(annotations, (start_ts, uid)) AS annotations
    FROM pod_gpu_allocations
    WHERE ($namespace IS NULL OR namespace = $namespace)
    GROUP BY ALL
),
windowed AS NOT MATERIALIZED (
    -- the window's samples, read twice by the two aggregates below and not stored
    SELECT n.cluster, n.namespace, n.workload_kind, n.workload, g.gr_active, g.gr_active_max, g.sm_active,
           g.sm_active_max, g.fb_used_mib, g.fb_used_max_mib, g.fb_free_mib, g.step_s
    FROM gpu_sample_facts g
    JOIN pod_keys k USING (pod_key)
    JOIN names n ON n.cluster = k.cluster AND n.namespace = k.namespace AND n.pod = k.pod
    WHERE NOT ($since IS NULL AND $until IS NULL)
      AND g.ts >= coalesce($since, '-infinity'::TIMESTAMP) AND g.ts < coalesce($until, 'infinity'::TIMESTAMP)
),
st AS (
    -- the sample statistics (sample_stats_core/_tails/_of, migration 015): over everything
    -- loaded from the materialized workload_sample_stats, else over the window (the branch not
    -- taken is empty)
    SELECT cluster, namespace, workload_kind, workload, st FROM workload_sample_stats
    WHERE $since IS NULL AND $until IS NULL AND ($namespace IS NULL OR namespace = $namespace)
    UNION ALL
    SELECT cluster, namespace, workload_kind, workload, sample_stats_of(core, tails) AS st
    FROM (SELECT cluster, namespace, workload_kind, workload,
                 sample_stats_core(gr_active, gr_active_max, sm_active, sm_active_max, fb_used_mib,
                                   fb_used_max_mib, fb_free_mib, step_s) AS core
          FROM windowed GROUP BY cluster, namespace, workload_kind, workload)
    JOIN (SELECT cluster, namespace, workload_kind, workload,
                 sample_stats_tails(gr_active, gr_active_max, sm_active, sm_active_max, fb_used_mib) AS tails
          FROM windowed GROUP BY cluster, namespace, workload_kind, workload)
    USING (cluster, namespace, workload_kind, workload)
),
hod_day AS (
    -- the hour-of-day profile from the hourly rollup (time-weighted), not from raw samples
    SELECT n.cluster, n.namespace, n.workload_kind, n.workload, hour(h.hour) AS hod, date_trunc('day', h.hour) AS day,
           sum(h.gr_active_avg * h.covered_s) AS gs, sum(h.covered_s) AS cs
    FROM gpu_hourly_facts h
    JOIN pod_keys k USING (pod_key)
    JOIN names n ON n.cluster = k.cluster AND n.namespace = k.namespace AND n.pod = k.pod
    WHERE h.hour >= coalesce($since, '-infinity'::TIMESTAMP) AND h.hour < coalesce($until, 'infinity'::TIMESTAMP)
    GROUP BY ALL
),
hod AS (
    SELECT cluster, namespace, workload_kind, workload, hod,
           sum(gs) / nullif(sum(cs), 0) AS g,
           count(*) AS days_seen,
           count(*) FILTER (WHERE round(gs / nullif(cs, 0), 9) > 0.05) AS days_active  -- settled: SETTLE_DIGITS
    FROM hod_day
    GROUP BY ALL
),
diurnal AS (
    SELECT cluster, namespace, workload_kind, workload,
           (max(g) - min(g)) / nullif(avg(g), 0) AS diurnal_swing,
           -- ties (an idle workload's hours all 0) go to the earliest hour: the same answer every run
           arg_max(hod, CASE WHEN g IS NOT NULL THEN [g, -hod] END) AS peak_hour_utc,
           coalesce(list(hod ORDER BY hod) FILTER (WHERE days_active >= 2 AND days_active >= 0.5 * days_seen),
                    []::INTEGER[]) AS recurring_hours_utc,
           coalesce(sum(days_active) FILTER (WHERE NOT (days_active >= 2 AND days_active >= 0.5 * days_seen)), 0)
               AS stray_active_hours,
           max(days_seen) AS days_observed
    FROM hod
    GROUP BY ALL
),
rt AS (
    SELECT cluster, namespace, workload_kind, workload,
           count(*) FILTER (WHERE finished IS NOT NULL) AS finished_pods,
           quantile_cont(epoch(finished - coalesce(started, scheduled, created)), 0.5)
               FILTER (WHERE finished IS NOT NULL) AS runtime_p50_s,
           quantile_cont(epoch(finished - coalesce(started, scheduled, created)), 0.9)
               FILTER (WHERE finished IS NOT NULL) AS runtime_p90_s,
           quantile_cont(epoch(scheduled - created), 0.95) FILTER (WHERE scheduled IS NOT NULL) AS pending_p95_s
    FROM pod_gpu_allocations
    WHERE ($namespace IS NULL OR namespace = $namespace)
    GROUP BY ALL
)
SELECT
    alloc.*,
    meta.priority_class, meta.labels, meta.annotations, by_node.node_gpu_hours,
    st.st.samples, st.st.gr_mean, st.st.grq[1] AS gr_p50, st.st.grq[2] AS gr_p95, st.st.grq[3] AS gr_p99,
    st.st.gr_max, st.st.sm_mean, st.st.smq[1] AS sm_p95, st.st.smq[2] AS sm_p99, st.st.sm_max,
    st.st.peak_p95, st.st.step_s, st.st.max_pushed_down,
    st.st.fbq[1] AS fb_p95_mib, st.st.fbq[2] AS fb_p99_mib, st.st.fb_max_mib,
    coalesce(st.st.gpu_memory_mib, gm.memory_mib) AS gpu_memory_mib,
    st.st.active_fraction,
    diurnal.diurnal_swing, diurnal.peak_hour_utc, diurnal.recurring_hours_utc, diurnal.stray_active_hours,
    diurnal.days_observed,
    rt.finished_pods, rt.runtime_p50_s, rt.runtime_p90_s, rt.pending_p95_s
FROM alloc
LEFT JOIN meta USING (cluster, namespace, workload_kind, workload)
LEFT JOIN by_node USING (cluster, namespace, workload_kind, workload)
LEFT JOIN st USING (cluster, namespace, workload_kind, workload)
LEFT JOIN diurnal USING (cluster, namespace, workload_kind, workload)
LEFT JOIN rt USING (cluster, namespace, workload_kind, workload)
LEFT JOIN (SELECT gpu_model, max(memory_mib) AS memory_mib FROM gpus GROUP BY gpu_model) gm
  ON gm.gpu_model = alloc.gpu_model
ORDER BY alloc.cost_usd DESC NULLS LAST, alloc.namespace, alloc.workload
