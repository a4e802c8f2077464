-- name: 017_shares_kueue_snapshots
-- description: every way a GPU is shared, Kueue, and which objects the newest snapshot holds.
--   pods gain gpu_shares (the share claims of sources/k8s/shares.py: HAMi / Volcano vGPU devices
--   with memory and cores, KAI fractions and reservation pods); nodes gain the sharing facts the
--   pod_gpu_shares model reads (replicas per GPU, GKE MIG partition, one GPU's memory, the
--   devices a vGPU device plugin registered) and their taints. resource_claims holds DRA
--   ResourceClaims (the devices allocated and the pods they are reserved for). The kueue_* tables
--   hold Kueue's ClusterQueues (quotas per flavor and resource, cohort, usage), LocalQueues,
--   ResourceFlavors and Workloads; kueue_quota_samples the kueue_cluster_queue_* series.
--   k8s_snapshots records, per cluster and kind, when its newest snapshot was read (a live read, or
--   the dump's --as-of); object rows carry snapshot_at, the read that last listed them, so "in the
--   newest snapshot of its kind" does not depend on any timestamp inside the objects.

ALTER TABLE pods ADD COLUMN IF NOT EXISTS gpu_shares JSON;        -- share claims (HAMi, Volcano vGPU, KAI)
ALTER TABLE pods ADD COLUMN IF NOT EXISTS snapshot_at TIMESTAMP;  -- the read that last listed the pod
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS gpu_replicas DOUBLE;   -- devices advertised per GPU (time-slicing, MPS, GKE)
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS gpu_partition VARCHAR; -- GKE MIG partition (1g.5gb): one nvidia.com/gpu each
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS gpu_memory_mib DOUBLE; -- one GPU's memory
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS gpu_devices JSON;      -- HAMi / Volcano vGPU register: [{id, memory_mib, cores, split}]
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS taints JSON;           -- [{key, value, effect}]
ALTER TABLE podgroups ADD COLUMN IF NOT EXISTS snapshot_at TIMESTAMP;
ALTER TABLE vcjobs ADD COLUMN IF NOT EXISTS snapshot_at TIMESTAMP;
ALTER TABLE queues ADD COLUMN IF NOT EXISTS snapshot_at TIMESTAMP;

CREATE TABLE IF NOT EXISTS k8s_snapshots (
    cluster      VARCHAR NOT NULL,
    kind         VARCHAR NOT NULL,     -- the dump file stem: pods, vcjobs, workloads ...
    observed_at  TIMESTAMP NOT NULL,   -- when the newest snapshot of this kind was read
    source       VARCHAR,              -- kubernetes | dump
    PRIMARY KEY (cluster, kind)
);

CREATE TABLE IF NOT EXISTS resource_claims (
    cluster      VARCHAR NOT NULL,
    namespace    VARCHAR NOT NULL,
    name         VARCHAR NOT NULL,
    uid          VARCHAR,
    devices      JSON,                 -- status.allocation.devices.results: [{request, driver, pool, device}]
    reserved_for JSON,                 -- status.reservedFor: [{resource, name, uid}]
    created      TIMESTAMP,
    last_seen    TIMESTAMP,
    snapshot_at  TIMESTAMP,
    PRIMARY KEY (cluster, namespace, name)
);

CREATE TABLE IF NOT EXISTS kueue_cluster_queues (
    cluster      VARCHAR NOT NULL,
    name         VARCHAR NOT NULL,
    cohort       VARCHAR,              -- spec.cohort (v1beta1) / spec.cohortName (v1beta2)
    quotas       JSON,                 -- [{group, flavor, resource, nominal, borrowing_limit, lending_limit}]
    usage        JSON,                 -- status.flavorsUsage: [{flavor, resource, total, borrowed}]
    reservation  JSON,                 -- status.flavorsReservation, same shape
    pending_workloads  INTEGER,
    admitted_workloads INTEGER,
    stop_policy  VARCHAR,
    api_version  VARCHAR,              -- the version it was read in (emitted changes use it)
    spec         JSON,
    last_seen    TIMESTAMP,
    snapshot_at  TIMESTAMP,
    PRIMARY KEY (cluster, name)
);

CREATE TABLE IF NOT EXISTS kueue_local_queues (
    cluster        VARCHAR NOT NULL,
    namespace      VARCHAR NOT NULL,
    name           VARCHAR NOT NULL,
    cluster_queue  VARCHAR,
    last_seen      TIMESTAMP,
    snapshot_at    TIMESTAMP,
    PRIMARY KEY (cluster, namespace, name)
);

CREATE TABLE IF NOT EXISTS kueue_resource_flavors (
    cluster      VARCHAR NOT NULL,
    name         VARCHAR NOT NULL,
    node_labels  JSON,
    node_taints  JSON,
    last_seen    TIMESTAMP,
    snapshot_at  TIMESTAMP,
    PRIMARY KEY (cluster, name)
);

CREATE TABLE IF NOT EXISTS kueue_workloads (
    cluster        VARCHAR NOT NULL,
    namespace      VARCHAR NOT NULL,
    name           VARCHAR NOT NULL,
    uid            VARCHAR,
    queue_name     VARCHAR,            -- spec.queueName: the LocalQueue
    cluster_queue  VARCHAR,            -- status.admission.clusterQueue
    state          VARCHAR,            -- Pending | QuotaReserved | Admitted | Finished | Evicted | Inactive
    pod_sets       JSON,               -- [{name, count, min_count, requests: {resource: per pod}}]
    usage          JSON,               -- admitted: [{pod_set, flavor, resource, quantity}] (all pods of the set)
    owner_kind     VARCHAR,
    owner_name     VARCHAR,
    owner_uid      VARCHAR,
    priority       INTEGER,
    created        TIMESTAMP,
    admitted_at    TIMESTAMP,
    finished_at    TIMESTAMP,
    last_seen      TIMESTAMP,
    snapshot_at    TIMESTAMP,
    PRIMARY KEY (cluster, namespace, name)
);

-- kueue_cluster_queue_* series (Kueue's own metrics): one row per queue, flavor, resource and step
CREATE TABLE IF NOT EXISTS kueue_quota_samples (
    cluster        VARCHAR NOT NULL,
    ts             TIMESTAMP NOT NULL,
    cluster_queue  VARCHAR NOT NULL,
    flavor         VARCHAR NOT NULL,
    resource       VARCHAR NOT NULL,
    usage          DOUBLE,             -- kueue_cluster_queue_resource_usage
    reservation    DOUBLE,             -- kueue_cluster_queue_resource_reservation
    nominal_quota  DOUBLE,             -- kueue_cluster_queue_nominal_quota
    step_s         INTEGER,
    PRIMARY KEY (cluster, cluster_queue, flavor, resource, ts)
);

-- cost_group gains the Kueue ClusterQueue a holder's pods were admitted to ('cluster_queue')
CREATE OR REPLACE MACRO cost_group(by_dim, g_namespace, g_queue, g_workload, g_node_pool, g_node, g_team,
                                   g_cluster_queue) AS
    CASE by_dim
        WHEN 'namespace' THEN g_namespace
        WHEN 'queue' THEN coalesce(g_queue, CASE WHEN g_namespace IS NOT NULL THEN '(no queue)' END)
        WHEN 'cluster_queue' THEN coalesce(g_cluster_queue, CASE WHEN g_namespace IS NOT NULL THEN '(no ClusterQueue)' END)
        WHEN 'workload' THEN g_namespace || '/' || g_workload
        WHEN 'node_pool' THEN coalesce(g_node_pool, '(no pool)')
        WHEN 'node' THEN g_node
        WHEN 'team' THEN g_team
        ELSE error('by must be one of namespace, queue, cluster_queue, workload, node_pool, node, team')
    END;
