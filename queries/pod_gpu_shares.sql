-- name: pod_gpu_shares
-- grain: one row per pod (uid) and kind of share it holds (per physical GPU where that GPU is known)
-- materialize: table
-- columns: cluster, uid, kind, device_key, share, devices, gpus, basis
-- key: cluster, uid
-- description: what part of a physical GPU each pod holds, whatever granted it (docs/models.md,
--   "GPU shares"). share is the part of one GPU, devices how many GPUs hold that part, gpus =
--   share x devices. whole: nvidia.com/gpu, one per GPU, divided by the node's replicas per GPU
--   under time-slicing or MPS (nvidia.com/gpu.replicas, GKE's max-shared-clients-per-gpu);
--   nvidia.com/gpu.shared likewise; a GKE MIG partition (gke-gpu-partition-size) and
--   nvidia.com/mig-* count compute_slices / 7. HAMi and Volcano vGPU bill the larger of the cores
--   and the memory they hold (cores / the device's cores, MiB / the device's memory, or the
--   memory percentage): the scheduler admits a vGPU only where both fit, so the larger is what
--   it takes from the others; memory of an unknown device counts it whole. KAI bills its
--   fraction of the device's memory (gpu-fraction, or gpu-memory MiB); its reservation pod is a
--   placeholder and holds nothing. A DRA ResourceClaim's devices are split evenly among the
--   pods it is reserved for. device_key names the physical GPU (HAMi/Volcano UUID, KAI GPU group,
--   DRA driver/pool/device) so that allocation_hourly caps the shares of one GPU at that GPU;
--   NULL where the device is unknown (then the node's capacity caps them).
WITH p AS (
    SELECT p.cluster, p.uid, p.namespace, p.node, coalesce(p.gpu_request, 0) AS gpu_request,
           p.mig_profile, coalesce(p.mig_request, 0) AS mig_request, p.gpu_requests, p.gpu_shares,
           n.gpu_model, n.gpu_replicas, n.gpu_partition, n.gpu_count, n.sharing_strategy,
           coalesce(n.gpu_memory_mib, m.memory_mib) AS gpu_memory_mib
    FROM pods p
    LEFT JOIN nodes n ON n.cluster = p.cluster AND n.node = p.node
    -- the GPUs DCGM measured on the node (used + free framebuffer) where its labels say nothing
    LEFT JOIN (SELECT cluster, node, max(memory_mib) AS memory_mib FROM gpus GROUP BY ALL) m
      ON m.cluster = p.cluster AND m.node = p.node
),
claims AS (
    SELECT p.*, unnest(CAST(p.gpu_shares AS JSON[])) AS c
    FROM p
    WHERE p.gpu_shares IS NOT NULL
),
registered AS (
    SELECT n.cluster, n.node, d->>'id' AS id, try_cast(d->>'memory_mib' AS DOUBLE) AS memory_mib,
           try_cast(d->>'cores' AS DOUBLE) AS cores
    FROM nodes n, unnest(CAST(n.gpu_devices AS JSON[])) AS t(d)
    WHERE n.gpu_devices IS NOT NULL
),
vgpu AS (
    SELECT c.cluster, c.uid, c.node, c.c->>'device' AS device,
           coalesce(try_cast(c.c->>'count' AS DOUBLE), 1) AS devices,
           coalesce(try_cast(c.c->>'cores' AS DOUBLE), 0) / coalesce(r.cores, 100) AS core_share,
           coalesce(try_cast(c.c->>'mem_mib' AS DOUBLE) / nullif(coalesce(r.memory_mib, c.gpu_memory_mib), 0),
                    try_cast(c.c->>'mem_pct' AS DOUBLE) / 100.0,
                    1.0) AS mem_share
    FROM claims c
    LEFT JOIN registered r ON r.cluster = c.cluster AND r.node = c.node AND r.id = c.c->>'device'
    WHERE c.c->>'kind' = 'vgpu'
),
kai AS (
    SELECT cluster, uid, node, c->>'group' AS grp,
           coalesce(try_cast(c->>'count' AS DOUBLE), 1) AS devices,
           coalesce(try_cast(c->>'fraction' AS DOUBLE),
                    try_cast(c->>'mem_mib' AS DOUBLE) / nullif(gpu_memory_mib, 0),
                    1.0) AS share
    FROM claims
    WHERE c->>'kind' = 'kai'
),
shared_by AS (
    -- pods whose claims replace their device requests (a HAMi vGPU asks nvidia.com/gpu too)
    SELECT DISTINCT cluster, uid FROM claims WHERE c->>'kind' IN ('vgpu', 'kai', 'kai-reservation')
),
whole AS (
    SELECT p.*,
           CASE WHEN p.gpu_replicas > 1 THEN p.gpu_replicas ELSE 1 END AS replicas,
           coalesce(try_cast(p.gpu_requests->>'$."nvidia.com/gpu.shared"' AS DOUBLE), 0) AS shared_request
    FROM p
    ANTI JOIN shared_by s ON s.cluster = p.cluster AND s.uid = p.uid
),
claim_devices AS (
    SELECT rc.cluster, rc.namespace, rc.name, d->>'driver' AS driver, d->>'pool' AS pool, d->>'device' AS device
    FROM resource_claims rc, unnest(CAST(rc.devices AS JSON[])) AS t(d)
    -- GPU drivers (gpu.nvidia.com, the examples' gpu.example.com); other devices cost nothing here
    WHERE rc.devices IS NOT NULL AND lower(d->>'driver') LIKE '%gpu%'
),
claim_pods AS (
    SELECT rc.cluster, rc.namespace, rc.name, r->>'uid' AS uid, count(*) OVER (PARTITION BY rc.cluster, rc.namespace, rc.name) AS pods
    FROM resource_claims rc, unnest(CAST(rc.reserved_for AS JSON[])) AS t(r)
    WHERE rc.reserved_for IS NOT NULL AND r->>'uid' IS NOT NULL
),
rows AS (
    SELECT cluster, uid, 'gpu' AS kind, NULL::VARCHAR AS device_key, 1.0 AS share, gpu_request AS devices,
           'whole device' AS basis
    FROM whole WHERE gpu_request > 0 AND replicas = 1 AND gpu_partition IS NULL
    UNION ALL
    SELECT cluster, uid, CASE WHEN lower(coalesce(sharing_strategy, '')) = 'mps' THEN 'mps' ELSE 'timeslice' END,
           NULL, 1.0 / replicas, gpu_request, 'one of ' || replicas::INTEGER || ' replicas per GPU'
    FROM whole WHERE gpu_request > 0 AND replicas > 1 AND gpu_partition IS NULL
    UNION ALL
    SELECT w.cluster, w.uid, 'mig', NULL,
           coalesce(mp.compute_slices, try_cast(regexp_extract(w.gpu_partition, '^(\d+)g', 1) AS INTEGER), 7) / 7.0,
           w.gpu_request, 'GKE MIG partition ' || w.gpu_partition
    FROM whole w
    LEFT JOIN mig_profiles mp ON mp.gpu_model = w.gpu_model AND mp.profile = w.gpu_partition
    WHERE w.gpu_request > 0 AND w.gpu_partition IS NOT NULL
    UNION ALL
    -- the node's replicas; without a sharing node in the inventory, the shared request counts whole
    SELECT cluster, uid, CASE WHEN lower(coalesce(sharing_strategy, '')) = 'mps' THEN 'mps' ELSE 'timeslice' END,
           NULL, 1.0 / replicas, shared_request, 'one of ' || replicas::INTEGER || ' replicas per GPU (gpu.shared)'
    FROM whole WHERE shared_request > 0
    UNION ALL
    SELECT w.cluster, w.uid, 'mig', NULL,
           coalesce(mp.compute_slices, try_cast(regexp_extract(w.mig_profile, '^(\d+)g', 1) AS INTEGER), 1) / 7.0,
           w.mig_request, 'MIG ' || w.mig_profile
    FROM whole w
    LEFT JOIN mig_profiles mp ON mp.gpu_model = w.gpu_model AND mp.profile = w.mig_profile
    WHERE w.mig_request > 0
    UNION ALL
    SELECT cluster, uid, 'vgpu', device, least(1.0, greatest(core_share, mem_share)), devices,
           CASE WHEN core_share >= mem_share THEN 'cores' ELSE 'memory' END
    FROM vgpu
    UNION ALL
    SELECT cluster, uid, 'kai', CASE WHEN grp IS NOT NULL THEN 'kai:' || node || ':' || grp END,
           least(1.0, share), devices, 'fraction of the memory'
    FROM kai
    UNION ALL
    SELECT cp.cluster, cp.uid, 'dra', cd.driver || '/' || cd.pool || '/' || cd.device,
           1.0 / cp.pods, 1.0, CASE WHEN cp.pods > 1 THEN 'claim shared by ' || cp.pods || ' pods' ELSE 'claim' END
    FROM claim_pods cp
    JOIN claim_devices cd ON cd.cluster = cp.cluster AND cd.namespace = cp.namespace AND cd.name = cp.name
)
SELECT cluster, uid, kind, device_key, share, devices, share * devices AS gpus, basis
FROM rows
WHERE share * devices > 0
