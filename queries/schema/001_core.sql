-- name: 001_core
-- description: core warehouse tables: inventory (clusters, nodes, GPUs), DCGM samples,
--   scheduling history (pods, podgroups, Volcano jobs and queues, node pools), prices,
--   recommendations, applied actions and per-source ingest state.
-- Conventions: timestamps are UTC (TIMESTAMP, no zone); natural keys are primary keys so
-- every load is an upsert; '' (not NULL) marks "none" inside keys.

CREATE TABLE IF NOT EXISTS clusters (
    cluster     VARCHAR PRIMARY KEY,
    first_seen  TIMESTAMP,
    last_seen   TIMESTAMP
);

CREATE TABLE IF NOT EXISTS nodes (
    cluster          VARCHAR NOT NULL,
    node             VARCHAR NOT NULL,
    instance_type    VARCHAR,
    capacity_type    VARCHAR,          -- on-demand | spot | reserved | NULL (unknown)
    node_pool        VARCHAR,          -- karpenter.sh/nodepool or eks.amazonaws.com/nodegroup
    node_pool_kind   VARCHAR,          -- karpenter | eks-nodegroup | NULL
    gpu_model        VARCHAR,          -- canonical model, e.g. H100-80GB, A100-80GB, L4
    gpu_product      VARCHAR,          -- nvidia.com/gpu.product as labelled
    gpu_count        INTEGER,          -- physical GPUs
    mig_config       VARCHAR,          -- nvidia.com/mig.config
    sharing_strategy VARCHAR,          -- none | mps | time-slicing
    zone             VARCHAR,
    provider_id      VARCHAR,
    labels           JSON,
    capacity         JSON,             -- extended resources, e.g. {"nvidia.com/gpu": 8}
    first_seen       TIMESTAMP,
    last_seen        TIMESTAMP,
    PRIMARY KEY (cluster, node)
);

CREATE TABLE IF NOT EXISTS gpus (
    cluster     VARCHAR NOT NULL,
    gpu_uuid    VARCHAR NOT NULL,
    node        VARCHAR,
    gpu_index   INTEGER,
    model_name  VARCHAR,               -- modelName label, e.g. "NVIDIA H100 80GB HBM3"
    gpu_model   VARCHAR,               -- canonical, e.g. H100-80GB
    memory_mib  DOUBLE,                -- FB used + free
    mig_mode    BOOLEAN,
    first_seen  TIMESTAMP,
    last_seen   TIMESTAMP,
    PRIMARY KEY (cluster, gpu_uuid)
);

-- One row per GPU (or MIG instance) per sample step. With server-side reduction a row
-- stands for step_s seconds: the *_max columns are the max within the step.
CREATE TABLE IF NOT EXISTS gpu_samples (
    cluster          VARCHAR NOT NULL,
    ts               TIMESTAMP NOT NULL,
    gpu_uuid         VARCHAR NOT NULL,
    mig_instance     INTEGER NOT NULL,  -- GPU_I_ID, -1 for a whole GPU
    mig_profile      VARCHAR NOT NULL,  -- GPU_I_PROFILE as reported, '' for a whole GPU
    node             VARCHAR,
    gpu_index        INTEGER,
    model_name       VARCHAR,
    namespace        VARCHAR NOT NULL,  -- '' when no pod holds the GPU
    pod              VARCHAR NOT NULL,
    container        VARCHAR NOT NULL,
    gr_active        DOUBLE,            -- 0..1
    gr_active_max    DOUBLE,
    sm_active        DOUBLE,            -- 0..1
    sm_active_max    DOUBLE,
    gpu_util         DOUBLE,            -- 0..100, NULL on MIG instances
    fb_used_mib      DOUBLE,
    fb_used_max_mib  DOUBLE,
    fb_free_mib      DOUBLE,
    power_w          DOUBLE,
    step_s           INTEGER NOT NULL
    -- natural key (cluster, gpu_uuid, mig_instance, ts, namespace, pod): pods sharing a GPU by
    -- time-slicing or MPS each get the GPU's row; enforced by merge loads rather than
    -- an index: a primary-key index on tens of millions of rows costs memory and load time.
);

-- Hourly rollup of gpu_samples (rebuilt for the hours a load touched).
CREATE TABLE IF NOT EXISTS gpu_hourly (
    cluster          VARCHAR NOT NULL,
    hour             TIMESTAMP NOT NULL,
    gpu_uuid         VARCHAR NOT NULL,
    mig_instance     INTEGER NOT NULL,
    mig_profile      VARCHAR NOT NULL,
    namespace        VARCHAR NOT NULL,
    pod              VARCHAR NOT NULL,
    node             VARCHAR,
    model_name       VARCHAR,
    samples          INTEGER,
    covered_s        DOUBLE,            -- seconds of the hour covered by samples
    gr_active_avg    DOUBLE,
    gr_active_max    DOUBLE,
    sm_active_avg    DOUBLE,
    sm_active_max    DOUBLE,
    gpu_util_avg     DOUBLE,
    fb_used_avg_mib  DOUBLE,
    fb_used_max_mib  DOUBLE,
    fb_free_min_mib  DOUBLE,
    power_avg_w      DOUBLE,
    PRIMARY KEY (cluster, hour, gpu_uuid, mig_instance, namespace, pod)
);

CREATE TABLE IF NOT EXISTS pods (
    cluster          VARCHAR NOT NULL,
    uid              VARCHAR NOT NULL,
    namespace        VARCHAR NOT NULL,
    name             VARCHAR NOT NULL,
    owner_kind       VARCHAR,          -- direct owner (ReplicaSet, Job, StatefulSet ...)
    owner_name       VARCHAR,
    workload_kind    VARCHAR,          -- resolved owning workload (Deployment, StatefulSet, Job ...)
    workload         VARCHAR,          -- its name; the pod name for bare pods
    node             VARCHAR,
    gpu_request      DOUBLE,           -- whole GPUs (nvidia.com/gpu)
    mig_profile      VARCHAR,          -- e.g. 1g.10gb when MIG slices are requested
    mig_request      DOUBLE,           -- number of MIG instances of that profile
    gpu_requests     JSON,             -- every GPU resource as requested
    queue            VARCHAR,          -- Volcano queue
    podgroup         VARCHAR,
    vcjob            VARCHAR,
    priority_class   VARCHAR,
    scheduler        VARCHAR,
    created          TIMESTAMP,
    scheduled        TIMESTAMP,
    started          TIMESTAMP,
    finished         TIMESTAMP,
    last_seen        TIMESTAMP,        -- last time any source saw the pod alive
    phase            VARCHAR,
    labels           JSON,
    annotations      JSON,
    source           VARCHAR,          -- prometheus | kubernetes | dump | openmetrics
    PRIMARY KEY (cluster, uid)
);

CREATE TABLE IF NOT EXISTS podgroups (
    cluster          VARCHAR NOT NULL,
    namespace        VARCHAR NOT NULL,
    name             VARCHAR NOT NULL,
    uid              VARCHAR,
    queue            VARCHAR,
    min_member       INTEGER,
    min_resources    JSON,
    phase            VARCHAR,
    owner_kind       VARCHAR,
    owner_name       VARCHAR,
    created          TIMESTAMP,
    last_seen        TIMESTAMP,
    spec             JSON,
    PRIMARY KEY (cluster, namespace, name)
);

CREATE TABLE IF NOT EXISTS vcjobs (
    cluster          VARCHAR NOT NULL,
    namespace        VARCHAR NOT NULL,
    name             VARCHAR NOT NULL,
    uid              VARCHAR,
    queue            VARCHAR,
    min_available    INTEGER,
    max_retry        INTEGER,
    policies         JSON,             -- job-level and task-level lifecycle policies
    tasks            JSON,             -- [{name, replicas, gpus_per_pod, policies}]
    phase            VARCHAR,
    retry_count      INTEGER,
    created          TIMESTAMP,
    last_seen        TIMESTAMP,
    PRIMARY KEY (cluster, namespace, name)
);

CREATE TABLE IF NOT EXISTS queues (
    cluster          VARCHAR NOT NULL,
    name             VARCHAR NOT NULL,
    weight           INTEGER,
    capability       JSON,
    deserved         JSON,
    guarantee        JSON,
    capability_gpu   DOUBLE,           -- nvidia.com/gpu in each ResourceList (NULL if unset)
    deserved_gpu     DOUBLE,
    guarantee_gpu    DOUBLE,
    reclaimable      BOOLEAN,
    parent           VARCHAR,
    state            VARCHAR,
    allocated        JSON,
    allocated_gpu    DOUBLE,
    last_seen        TIMESTAMP,
    spec             JSON,
    PRIMARY KEY (cluster, name)
);

CREATE TABLE IF NOT EXISTS node_pools (
    cluster          VARCHAR NOT NULL,
    name             VARCHAR NOT NULL,
    kind             VARCHAR NOT NULL,  -- karpenter | eks-nodegroup
    capacity_types   JSON,
    limits           JSON,
    consolidation_policy VARCHAR,
    spec             JSON,
    last_seen        TIMESTAMP,
    PRIMARY KEY (cluster, name, kind)
);

CREATE TABLE IF NOT EXISTS pdbs (
    cluster          VARCHAR NOT NULL,
    namespace        VARCHAR NOT NULL,
    name             VARCHAR NOT NULL,
    selector         JSON,
    min_available    VARCHAR,
    max_unavailable  VARCHAR,
    last_seen        TIMESTAMP,
    PRIMARY KEY (cluster, namespace, name)
);

CREATE TABLE IF NOT EXISTS events (
    cluster          VARCHAR NOT NULL,
    uid              VARCHAR NOT NULL,
    namespace        VARCHAR,
    involved_kind    VARCHAR,
    involved_name    VARCHAR,
    involved_uid     VARCHAR,
    reason           VARCHAR,
    type             VARCHAR,
    message          VARCHAR,
    first_ts         TIMESTAMP,
    last_ts          TIMESTAMP,
    count            INTEGER,
    PRIMARY KEY (cluster, uid)
);

CREATE TABLE IF NOT EXISTS prices (
    catalog                 VARCHAR NOT NULL,   -- catalog name, e.g. aws-us-east-1-2026-07-20
    instance_type           VARCHAR NOT NULL,   -- '' for a per-GPU-model row
    gpu_model               VARCHAR NOT NULL,
    gpu_count               INTEGER,
    on_demand_usd_per_hour  DOUBLE,
    spot_usd_per_hour       DOUBLE,             -- NULL = unknown
    region                  VARCHAR,
    source                  VARCHAR,
    as_of                   DATE,
    loaded_at               TIMESTAMP,
    PRIMARY KEY (catalog, instance_type, gpu_model)
);

CREATE TABLE IF NOT EXISTS recommendations (
    plan_id              VARCHAR NOT NULL,
    id                   VARCHAR NOT NULL,
    rule                 VARCHAR NOT NULL,
    namespace            VARCHAR,
    workload             VARCHAR,
    node                 VARCHAR,
    queue                VARCHAR,
    title                VARCHAR,
    monthly_savings_usd  DOUBLE,
    confidence           DOUBLE,
    body                 JSON,              -- the whole recommendation object
    created_at           TIMESTAMP,
    PRIMARY KEY (plan_id, id)
);

CREATE TABLE IF NOT EXISTS applied_actions (
    plan_id          VARCHAR NOT NULL,
    seq              INTEGER NOT NULL,
    recommendation_id VARCHAR,
    target           VARCHAR,          -- kind/namespace/name or aws:eks/cluster/nodegroup
    operation        VARCHAR,          -- apply | patch | cordon | drain | eks-update ...
    previous         JSON,             -- object state before (for rollback)
    applied          JSON,             -- what was sent
    status           VARCHAR,          -- dry-run-ok | applied | failed | rolled-back
    message          VARCHAR,
    applied_at       TIMESTAMP,
    PRIMARY KEY (plan_id, seq)
);

-- Per-source incremental cursor: the dlt-style "state lives in the warehouse".
CREATE TABLE IF NOT EXISTS ingest_state (
    source       VARCHAR NOT NULL,     -- e.g. prometheus:dcgm
    scope        VARCHAR NOT NULL,     -- e.g. the endpoint or dump dir (no credentials)
    cursor       TIMESTAMP,            -- data complete up to here
    run_id       VARCHAR,
    status       VARCHAR,              -- running | complete | failed
    rows_loaded  BIGINT,
    details      JSON,
    updated_at   TIMESTAMP,
    PRIMARY KEY (source, scope)
);
