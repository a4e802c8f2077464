-- name: 018_serving_energy
-- description: unit economics of inference and GPU energy (docs/collectors.md "Serving metrics",
--   "Energy"; docs/models.md "Unit economics", "Energy").
--   serving_samples holds what an inference server (vLLM, Hugging Face TGI, NVIDIA Triton / NIM,
--   SGLang) reported per pod, model and step: tokens and requests counted in the step (from the
--   counters' increase, resets handled), latency percentiles of the step (from the histogram
--   buckets' increase) and the KV cache's use (mean and maximum of the gauge).
--   serving_config holds, per serving pod, the cache configuration vLLM reported
--   (vllm:cache_config_info): the memory fraction it reserved, its KV capacity in blocks and the
--   KV cache's size in bytes where --kv-cache-memory-bytes set it.
--   gpu_energy_samples holds each physical GPU's energy per step from DCGM's
--   DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (a counter in mJ; a reset restarts it).
--   energy_rates prices a kWh and states its carbon intensity per region (the node's zone without
--   its letter: us-east-1a -> us-east-1), with '*' for any region not listed; the defaults and
--   their sources are in docs/models.md ("Energy"); GpuInsight.set_energy_rate and
--   `gpuinsight collect energy-rates --csv FILE` set them.

CREATE TABLE IF NOT EXISTS serving_samples (
    cluster             VARCHAR NOT NULL,
    ts                  TIMESTAMP NOT NULL,   -- start of the step
    namespace           VARCHAR NOT NULL,
    pod                 VARCHAR NOT NULL,
    model_name          VARCHAR NOT NULL,     -- '' when the server does not name it (TGI)
    server              VARCHAR NOT NULL,     -- vllm | tgi | triton | sglang | nim
    prompt_tokens       DOUBLE,               -- prompt (prefill) tokens processed in the step
    generation_tokens   DOUBLE,               -- tokens generated in the step
    requests            DOUBLE,               -- requests finished successfully in the step
    ttft_p50_s          DOUBLE,               -- time to first token, median of the step's requests
    ttft_p95_s          DOUBLE,
    itl_p50_s           DOUBLE,               -- inter-token latency (time per output token)
    itl_p95_s           DOUBLE,
    kv_cache_usage      DOUBLE,               -- 0..1, mean over the step
    kv_cache_usage_max  DOUBLE,               -- 0..1, maximum within the step
    step_s              INTEGER NOT NULL,
    PRIMARY KEY (cluster, namespace, pod, model_name, server, ts)
);

CREATE TABLE IF NOT EXISTS serving_config (
    cluster                 VARCHAR NOT NULL,
    namespace               VARCHAR NOT NULL,
    pod                     VARCHAR NOT NULL,
    server                  VARCHAR NOT NULL,   -- vllm
    gpu_memory_utilization  DOUBLE,             -- --gpu-memory-utilization it started with (0..1]
    kv_cache_memory_bytes   DOUBLE,             -- KV cache size per GPU when --kv-cache-memory-bytes set it
    num_gpu_blocks          DOUBLE,             -- KV capacity in blocks of block_size tokens
    block_size              DOUBLE,
    cache_dtype             VARCHAR,
    first_seen              TIMESTAMP,
    last_seen               TIMESTAMP,
    PRIMARY KEY (cluster, namespace, pod, server)
);

CREATE TABLE IF NOT EXISTS gpu_energy_samples (
    cluster      VARCHAR NOT NULL,
    gpu_uuid     VARCHAR NOT NULL,             -- the physical GPU (MIG instances repeat its counter)
    ts           TIMESTAMP NOT NULL,           -- start of the step
    energy_j     DOUBLE,                       -- joules used in the step
    step_s       INTEGER NOT NULL,
    PRIMARY KEY (cluster, gpu_uuid, ts)
);

CREATE TABLE IF NOT EXISTS energy_rates (
    region            VARCHAR PRIMARY KEY,     -- e.g. us-east-1; '*' = every other region
    usd_per_kwh       DOUBLE NOT NULL,
    kg_co2e_per_kwh   DOUBLE NOT NULL,
    source            VARCHAR
);

-- Defaults (docs/models.md, "Energy"): grid carbon intensity per AWS region from the Cloud Carbon
-- Footprint methodology's AWS emission factors. Electricity: where AWS hosts a region in a US
-- state, that state's 2023 average industrial price (EIA, Electric Power Annual 2023, average
-- revenue per kWh by state and sector); elsewhere, and for '*', a placeholder of 0.08 $/kWh
-- (about the US industrial average) that users set to their own contract's price.
INSERT INTO energy_rates VALUES
    ('*',              0.08,   0.379069, 'placeholder price (set your own); CCF us-east-1 intensity'),
    ('us-east-1',      0.0892, 0.379069, 'EIA 2023 industrial, Virginia; CCF AWS emission factor'),
    ('us-east-2',      0.0703, 0.410608, 'EIA 2023 industrial, Ohio; CCF AWS emission factor'),
    ('us-west-1',      0.1864, 0.322167, 'EIA 2023 industrial, California; CCF AWS emission factor'),
    ('us-west-2',      0.0752, 0.322167, 'EIA 2023 industrial, Oregon; CCF AWS emission factor'),
    ('ca-central-1',   0.08,   0.12,     'placeholder price (set your own); CCF AWS emission factor'),
    ('eu-west-1',      0.08,   0.2786,   'placeholder price (set your own); CCF AWS emission factor'),
    ('eu-west-2',      0.08,   0.225,    'placeholder price (set your own); CCF AWS emission factor'),
    ('eu-central-1',   0.08,   0.311,    'placeholder price (set your own); CCF AWS emission factor'),
    ('ap-northeast-1', 0.08,   0.4658,   'placeholder price (set your own); CCF AWS emission factor'),
    ('ap-southeast-1', 0.08,   0.408,    'placeholder price (set your own); CCF AWS emission factor'),
    ('ap-southeast-2', 0.08,   0.76,     'placeholder price (set your own); CCF AWS emission factor'),
    ('ap-south-1',     0.08,   0.7082,   'placeholder price (set your own); CCF AWS emission factor')
ON CONFLICT DO NOTHING;
