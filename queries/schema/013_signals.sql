-- name: 013_signals
-- description: what the input-starved, topology and checkpoint-aware spot findings read.
--   gpu_samples gains the per-step minimum of GR activity (min_over_time on the Prometheus path:
--   with the per-step max it tells a step holding both a burst and a stall) and the interconnect
--   rates dcgm-exporter publishes as gauges in bytes per second: PCIe RX and TX (TX with its
--   per-step max: a checkpoint copies the weights to the host in a short burst) and NVLink RX.
--   pod_cpu_samples holds each GPU pod's container CPU use (cAdvisor
--   container_cpu_usage_seconds_total as a rate, summed over the pod's containers) per step;
--   pods gain the pod's CPU request (kube-state-metrics or the pod spec, cores, summed over its
--   containers); vcjobs gain the Job's spec.networkTopology. hypernodes holds Volcano HyperNode objects (topology.volcano.sh/v1alpha1: tier
--   and members), the network topology a gang's placement is judged against.

ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS gr_active_min DOUBLE;      -- 0..1, min within the step
ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS pcie_rx_bps DOUBLE;        -- bytes/s host -> GPU
ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS pcie_tx_bps DOUBLE;        -- bytes/s GPU -> host
ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS pcie_tx_max_bps DOUBLE;    -- max within the step
ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS nvlink_rx_bps DOUBLE;      -- bytes/s over NVLink

ALTER TABLE pods ADD COLUMN IF NOT EXISTS cpu_request DOUBLE;               -- cores, all containers
ALTER TABLE vcjobs ADD COLUMN IF NOT EXISTS network_topology JSON;          -- spec.networkTopology, if set

CREATE TABLE IF NOT EXISTS pod_cpu_samples (
    cluster      VARCHAR NOT NULL,
    ts           TIMESTAMP NOT NULL,   -- start of the step
    namespace    VARCHAR NOT NULL,
    pod          VARCHAR NOT NULL,
    cpu_cores    DOUBLE,               -- mean CPU use over the step (cores), all containers of the pod
    step_s       INTEGER NOT NULL,
    PRIMARY KEY (cluster, namespace, pod, ts)
);

CREATE TABLE IF NOT EXISTS hypernodes (
    cluster      VARCHAR NOT NULL,
    name         VARCHAR NOT NULL,
    tier         INTEGER,              -- 1 = the tightest network domain above a node (e.g. a rack)
    tier_name    VARCHAR,
    members      JSON,                 -- spec.members as given: [{type, selector}]
    last_seen    TIMESTAMP,
    PRIMARY KEY (cluster, name)
);
