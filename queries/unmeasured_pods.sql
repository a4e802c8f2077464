-- name: unmeasured_pods
-- grain: one row per pod that held GPUs but had no DCGM series attributed to it
-- columns: cluster, namespace, pod, uid, workload_kind, workload, node, gpus, gpu_hours, list_usd,
--   first_hour, last_hour
-- description: pods whose GPU use is unknown (dcgm-exporter not running on the node, pod
--   attribution off, or labels lost in relabeling). Their cost is in the 'unmeasured' bucket,
--   never silently dropped; this lists them so the gap can be fixed.
SELECT cluster, namespace, pod, uid, workload_kind, workload, node, gpus,
       sum(gpu_hours) AS gpu_hours, sum(list_usd) AS list_usd, min(hour) AS first_hour, max(hour) AS last_hour
FROM allocation_hourly
GROUP BY cluster, namespace, pod, uid, workload_kind, workload, node, gpus
HAVING max(gpus_seen) IS NULL
ORDER BY gpu_hours DESC
