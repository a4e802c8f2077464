-- name: serving_memory
-- grain: one row per serving workload (cluster, namespace, workload) whose pods held GPUs
-- description: what sizes an inference server's memory (rules/serving.py, docs/rules.md
--   "Serving memory"): the server its metrics name; the KV cache's peak use over every step
--   measured (kv_cache_peak: the largest per-step maximum of vllm:kv_cache_usage_perc,
--   sglang:token_usage or TensorRT-LLM's used / max blocks, 0..1) and the clock hours it was
--   measured in (kv_hours); from vllm:cache_config_info (serving_config) the memory fraction its
--   pods started with (the largest), the KV cache's size in bytes where --kv-cache-memory-bytes
--   set it (the smallest of its pods), the KV capacity in blocks and tokens per block; and the
--   values of the pods' gpuinsight.io/kv-cache-bytes annotation (the KV cache size the server's
--   log states, an explicit input), parsed and checked by the rule. Pods map to workloads
--   through their GPU allocations, as in serving_latency.
WITH w AS (
    SELECT cluster, namespace, pod, arg_max(workload_kind, end_ts) AS workload_kind,
           arg_max(workload, end_ts) AS workload,
           arg_max(json_extract_string(annotations, '$."gpuinsight.io/kv-cache-bytes"'), end_ts) AS kv_annotation
    FROM pod_gpu_allocations
    GROUP BY ALL
),
s AS (
    SELECT w.cluster, w.namespace, w.workload_kind, w.workload,
           string_agg(DISTINCT s.server, ',' ORDER BY s.server) AS servers,
           max(s.kv_cache_usage_max) AS kv_cache_peak,
           count(DISTINCT date_trunc('hour', s.ts)) FILTER (WHERE s.kv_cache_usage_max IS NOT NULL) AS kv_hours
    FROM serving_samples s
    JOIN w ON w.cluster = s.cluster AND w.namespace = s.namespace AND w.pod = s.pod
    GROUP BY ALL
),
c AS (
    SELECT w.cluster, w.namespace, w.workload_kind, w.workload,
           max(c.gpu_memory_utilization) AS gpu_memory_utilization,
           min(c.kv_cache_memory_bytes) AS kv_cache_memory_bytes,
           min(c.num_gpu_blocks) AS num_gpu_blocks, max(c.block_size) AS block_size,
           any_value(c.cache_dtype) AS cache_dtype
    FROM serving_config c
    JOIN w ON w.cluster = c.cluster AND w.namespace = c.namespace AND w.pod = c.pod
    GROUP BY ALL
),
a AS (
    SELECT cluster, namespace, workload_kind, workload,
           list(DISTINCT kv_annotation ORDER BY kv_annotation) FILTER (WHERE kv_annotation IS NOT NULL)
               AS kv_cache_bytes_annotations
    FROM w
    GROUP BY ALL
)
SELECT s.cluster, s.namespace, s.workload_kind, s.workload, s.servers AS server, s.kv_cache_peak, s.kv_hours,
       c.gpu_memory_utilization, c.kv_cache_memory_bytes, c.num_gpu_blocks, c.block_size, c.cache_dtype,
       a.kv_cache_bytes_annotations
FROM s
LEFT JOIN c USING (cluster, namespace, workload_kind, workload)
LEFT JOIN a USING (cluster, namespace, workload_kind, workload)
ORDER BY s.cluster, s.namespace, s.workload
