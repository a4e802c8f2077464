-- name: 012_ray_keda
-- description: KubeRay (RayCluster, RayJob, RayService) and KEDA ScaledObject objects, as the
--   Kubernetes source reads them (kubectl dumps or the API). Ray pods are tied to their cluster
--   and group by their own labels (ray.io/cluster, ray.io/group, ray.io/node-type, kept in
--   pods.labels), so no pod column is added; these tables say what each Ray cluster and group
--   was configured to hold, which RayJob or RayService owns it, and which workloads KEDA
--   already scales.

CREATE TABLE IF NOT EXISTS rayclusters (
    cluster              VARCHAR NOT NULL,
    namespace            VARCHAR NOT NULL,
    name                 VARCHAR NOT NULL,
    uid                  VARCHAR,
    owner_kind           VARCHAR,          -- RayJob | RayService | NULL (standalone)
    owner_name           VARCHAR,
    autoscaling          BOOLEAN,          -- spec.enableInTreeAutoscaling
    autoscaler_version   VARCHAR,          -- spec.autoscalerOptions.version (v1 | v2 | NULL)
    idle_timeout_s       INTEGER,          -- spec.autoscalerOptions.idleTimeoutSeconds (NULL: Ray's 60 s)
    upgrade_strategy     VARCHAR,          -- spec.upgradeStrategy.type (Recreate | None | NULL)
    suspend              BOOLEAN,
    head_gpus            DOUBLE,           -- GPUs the head pod template requests
    worker_groups        JSON,             -- [{group, index, replicas, min_replicas, max_replicas, gpus_per_pod,
                                           --   num_of_hosts, idle_timeout_s, suspend}]
    state                VARCHAR,          -- status.state (ready, suspended, ...)
    created              TIMESTAMP,
    last_seen            TIMESTAMP,
    spec                 JSON,             -- the whole spec, for the action builders
    PRIMARY KEY (cluster, namespace, name)
);

CREATE TABLE IF NOT EXISTS rayjobs (
    cluster              VARCHAR NOT NULL,
    namespace            VARCHAR NOT NULL,
    name                 VARCHAR NOT NULL,
    uid                  VARCHAR,
    ray_cluster          VARCHAR,          -- status.rayClusterName
    uses_existing        BOOLEAN,          -- spec.clusterSelector set: the job runs on a cluster it does not own
    shutdown_after_finish BOOLEAN,         -- spec.shutdownAfterJobFinishes
    ttl_after_finish_s   INTEGER,          -- spec.ttlSecondsAfterFinished
    deletion_strategy    BOOLEAN,          -- spec.deletionStrategy set (its own cleanup rules)
    submission_mode      VARCHAR,
    job_status           VARCHAR,          -- status.jobStatus (SUCCEEDED, FAILED, RUNNING ...)
    deployment_status    VARCHAR,          -- status.jobDeploymentStatus (Running, Complete, Failed ...)
    start_time           TIMESTAMP,
    end_time             TIMESTAMP,        -- status.endTime: when the job finished
    created              TIMESTAMP,
    last_seen            TIMESTAMP,
    spec                 JSON,             -- the spec without rayClusterSpec (kept in rayclusters)
    PRIMARY KEY (cluster, namespace, name)
);

CREATE TABLE IF NOT EXISTS rayservices (
    cluster              VARCHAR NOT NULL,
    namespace            VARCHAR NOT NULL,
    name                 VARCHAR NOT NULL,
    uid                  VARCHAR,
    active_cluster       VARCHAR,          -- status.activeServiceStatus.rayClusterName
    pending_cluster      VARCHAR,          -- status.pendingServiceStatus.rayClusterName
    worker_groups        JSON,             -- as rayclusters.worker_groups, from spec.rayClusterConfig
    created              TIMESTAMP,
    last_seen            TIMESTAMP,
    PRIMARY KEY (cluster, namespace, name)
);

CREATE TABLE IF NOT EXISTS scaled_objects (
    cluster              VARCHAR NOT NULL,
    namespace            VARCHAR NOT NULL,
    name                 VARCHAR NOT NULL,
    target_api_version   VARCHAR,          -- spec.scaleTargetRef.apiVersion (apps/v1 when unset)
    target_kind          VARCHAR,          -- spec.scaleTargetRef.kind (Deployment when unset)
    target_name          VARCHAR,
    min_replicas         INTEGER,          -- spec.minReplicaCount (KEDA's default 0)
    max_replicas         INTEGER,          -- spec.maxReplicaCount (KEDA's default 100)
    idle_replicas        INTEGER,          -- spec.idleReplicaCount
    trigger_types        JSON,             -- ["prometheus", "cron", ...]
    paused               BOOLEAN,          -- autoscaling.keda.sh/paused annotation
    created              TIMESTAMP,
    last_seen            TIMESTAMP,
    PRIMARY KEY (cluster, namespace, name)
);
