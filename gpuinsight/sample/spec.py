"""The sample fleet's specification and its scenario (one "cell").

Everything here is static data: instance facts, node pools, Volcano queues, the workloads
with their placement, and the utilisation profile each one follows.  `fleet.py` turns a
`FleetSpec` plus this scenario into a concrete, seeded fleet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

# --------------------------------------------------------------------------- instance facts
# GPU count/model/memory, vCPU and memory from the aws/karpenter-provider-aws instance-type
# reference; on-demand prices are Karpenter's generated us-east-1 table (generated
# 2026-07-20T13:44:30Z).  Power envelopes (idle, board max) are the usual NVIDIA figures.


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpu_count: int
    gpu_model: str  # short model as in the price catalog: H100, A100, L4
    model_name: str  # DCGM `modelName`
    product: str  # GFD `nvidia.com/gpu.product`
    family: str  # GFD `nvidia.com/gpu.family`
    fb_mib: int  # per GPU, FB_USED + FB_FREE
    vcpu: int
    memory_mib: int
    on_demand_usd: float
    idle_w: float
    max_w: float
    mig_capable: bool
    pci_bus_ids: tuple[str, ...]


_P5_BUS = ("53", "64", "75", "86", "97", "A8", "B9", "CA")
_P4_BUS = ("10:1C", "10:1D", "20:1C", "20:1D", "90:1C", "90:1D", "A0:1C", "A0:1D")

INSTANCE_TYPES: dict[str, InstanceType] = {
    it.name: it
    for it in (
        InstanceType("p5.48xlarge", 8, "H100", "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", "hopper",
                     81920, 192, 2097152, 55.04, 70.0, 700.0, True,
                     tuple(f"00000000:{b}:00.0" for b in _P5_BUS)),
        InstanceType("p4de.24xlarge", 8, "A100", "NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", "ampere",
                     81920, 96, 1179648, 27.44705, 55.0, 400.0, True,
                     tuple(f"00000000:{b}.0" for b in _P4_BUS)),
        InstanceType("p5.4xlarge", 1, "H100", "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", "hopper",
                     81920, 16, 262144, 6.88, 70.0, 700.0, True, ("00000000:53:00.0",)),
        InstanceType("g6.xlarge", 1, "L4", "NVIDIA L4", "NVIDIA-L4", "ada-lovelace",
                     22888, 4, 16384, 0.8048, 16.0, 72.0, False, ("00000000:31:00.0",)),
        InstanceType("g6.12xlarge", 4, "L4", "NVIDIA L4", "NVIDIA-L4", "ada-lovelace",
                     22888, 48, 196608, 4.6016, 16.0, 72.0, False,
                     tuple(f"00000000:{b}:00.0" for b in ("38", "3A", "3C", "3E"))),
    )
}

#: Spot nodes are priced at this fraction of on-demand (the reference catalog has no spot
#: prices; 35 % is an assumption of the sample, stated in ground_truth.json).
SPOT_PRICE_FRACTION = 0.35
PRICE_SOURCE = ("aws-gpu-prices.csv: Karpenter InitialOnDemandPricesAWS us-east-1 "
                "(generated 2026-07-20T13:44:30Z); spot = 35% of on-demand (assumed)")

MIG_PROFILE = "1g.10gb"
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
MIG_FB_MIB = 9984  # FB_USED + FB_FREE of one H100 1g.10gb instance
MIG_FIRST_GI_ID = 7  # all-1g.10gb on an H100 gives GPU instance ids 7..13
MIG_INSTANCES = 7


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True)
class NodeDef:
    name: str
    pool: str
    pool_kind: str  # "karpenter" | "eks"
    instance_type: str
    capacity_type: str  # "on-demand" | "spot"
    zone: str
    hostname_label: str  # "Hostname" (released dcgm-exporter) or "hostname" (main)
    honor_labels: bool  # False: DCGM pod labels arrive as exported_*
    driver: str
    mig: bool = False
    # the training pool's exporter uses dcgm-exporter's default counters (PCIe RX/TX), its
    # kubelets are scraped for cAdvisor, and Volcano HyperNodes describe its racks
    pcie: bool = False
    cadvisor: bool = False
    rack: str = ""  # the tier-1 HyperNode (leaf switch) holding the node


_H = ("Hostname", True, "550.127.05")
NODES: tuple[NodeDef, ...] = (
    *(NodeDef(f"h100-od-{i}", "gpu-h100-od", "karpenter", "p5.48xlarge", "on-demand", "us-east-1a", *_H)
      for i in range(1, 5)),
    NodeDef("a100-od-1", "gpu-a100-od", "karpenter", "p4de.24xlarge", "on-demand", "us-east-1a",
            "Hostname", False, "550.127.05"),
    NodeDef("h100-mig-1", "gpu-h100-mig", "karpenter", "p5.4xlarge", "on-demand", "us-east-1a",
            "hostname", True, "550.127.05", mig=True),
    *(NodeDef(f"l4-od-{i}", "gpu-l4-od", "eks", "g6.xlarge", "on-demand", "us-east-1b",
              "hostname", True, "535.216.03") for i in range(1, 7)),
    NodeDef("l4-spot-1", "gpu-l4-spot", "karpenter", "g6.12xlarge", "spot", "us-east-1b",
            "hostname", False, "535.216.03"),
    # the training pool (input-starved, topology and checkpoint-aware spot scenarios)
    *(NodeDef(f"l4-train-{i}", "gpu-l4-train", "karpenter", "g6.12xlarge", "on-demand", "us-east-1b",
              "hostname", True, "535.216.03", pcie=True, cadvisor=True, rack=rack)
      for i, rack in ((1, "rack-a"), (2, "rack-a"), (3, "rack-b"))),
)
# KubeRay clusters (pool gpu-l4-ray) and the services that sleep at night (EKS group gpu-l4-od).
# Their random facts come from a generator of their own, so the nodes above keep theirs.
BASE_NODE_COUNT = len(NODES)
NODES += (
    *(NodeDef(f"ray-l4-{i}", "gpu-l4-ray", "karpenter", "g6.12xlarge", "on-demand", "us-east-1b",
              "hostname", True, "535.216.03") for i in range(1, 4)),
    *(NodeDef(f"l4-od-{i}", "gpu-l4-od", "eks", "g6.xlarge", "on-demand", "us-east-1b",
              "hostname", True, "535.216.03") for i in range(7, 10)),
)

# Karpenter NodePool facts: pool -> (instance type, capacity type, zone, consolidation, after)
NODE_POOLS: dict[str, tuple[str, str, str, str, str]] = {
    "gpu-h100-od": ("p5.48xlarge", "on-demand", "us-east-1a", "WhenEmpty", "30m"),
    "gpu-a100-od": ("p4de.24xlarge", "on-demand", "us-east-1a", "WhenEmpty", "30m"),
    "gpu-h100-mig": ("p5.4xlarge", "on-demand", "us-east-1a", "WhenEmpty", "1h"),
    "gpu-l4-spot": ("g6.12xlarge", "spot", "us-east-1b", "WhenEmpty", "Never"),
    "gpu-l4-train": ("g6.12xlarge", "on-demand", "us-east-1b", "WhenEmpty", "30m"),
}
NODE_POOLS["gpu-l4-ray"] = ("g6.12xlarge", "on-demand", "us-east-1b", "WhenEmpty", "30m")
# Volcano HyperNodes of the training pool: tier 1 = a leaf switch (rack, NodeDef.rack), tier 2 = the spine
SPINE = "spine-1"
EKS_NODEGROUP = "gpu-l4-od"

# --------------------------------------------------------------------------- queues


@dataclass(frozen=True)
class QueueDef:
    name: str
    weight: int
    deserved: dict[str, int]
    capability: dict[str, int]


QUEUES: tuple[QueueDef, ...] = (
    QueueDef("training", 4, {"nvidia.com/gpu": 16}, {"nvidia.com/gpu": 18}),
    QueueDef("inference", 3, {"nvidia.com/gpu": 8, MIG_RESOURCE: 7}, {"nvidia.com/gpu": 12, MIG_RESOURCE: 7}),
    QueueDef("batch", 2, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8}),
    QueueDef("research", 4, {"nvidia.com/gpu": 24}, {"nvidia.com/gpu": 32}),
    QueueDef("dev", 1, {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 6}),
    QueueDef("ml", 2, {"nvidia.com/gpu": 12}, {"nvidia.com/gpu": 12}),
)

# --------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    """How a workload's GPUs behave while it holds them (ratios 0..1, memory in MiB)."""

    gr_base: float
    gr_amp: float = 0.0  # diurnal amplitude (cosine, peak at gr_peak_h UTC)
    gr_peak_h: float = 16.0
    gr_smooth: float = 0.0  # slowly varying noise amplitude (30-minute knots)
    gr_white: float = 0.0  # per-sample noise amplitude
    gr_lo: float = 0.0
    gr_hi: float = 1.0
    sm_ratio: float = 0.8  # SM activity relative to GR activity
    fb_base: float = 0.0
    fb_smooth: float = 0.0
    fb_white: float = 0.0
    fb_lo: float = 0.0
    fb_hi: float = 0.0
    burst_p: float = 0.0  # probability that a 30-minute block is a burst (notebook cell run)
    burst_lo: float = 0.0
    burst_hi: float = 0.0
    # quiet: the GPU does nothing (GR about 0.001) in a daily UTC window [quiet_from_h, quiet_to_h)
    # (wrapping midnight; equal = never), on the UTC weekdays of the quiet_days bitmask (Monday =
    # 1), and from quiet_after_h hours after the window start on (a job that ended)
    quiet_from_h: float = 0.0
    quiet_to_h: float = 0.0
    quiet_days: int = 0
    quiet_after_h: float = float("inf")
    # input starvation: a cycle of cycle_s seconds, busy for its first cycle_busy_s, else stall_level
    cycle_s: float = 0.0
    cycle_busy_s: float = 0.0
    stall_level: float = 0.0
    # interconnect (bytes/s per GPU) and container CPU (cores per pod), when busy and when stalled
    rx_busy: float = 2e4
    rx_stall: float = 2e4
    tx_base: float = 1.75e5
    ckpt_s: float = 0.0  # a checkpoint every ckpt_s seconds: a PCIe TX burst of ckpt_tx bytes/s
    ckpt_tx: float = 0.0
    cpu_busy: float = 0.5
    cpu_stall: float = 0.5


IDLE = Profile(0.0)

# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class ServingDef:
    """What an inference server in the sample publishes (sources/serving.py reads it back).

    Tokens per second follow the GPU's activity: ``peak_tps`` at GR activity 1, a share
    ``prompt_share`` of them prompt tokens, ``tokens_per_request`` per finished request. Time to
    first token grows with the load: its median ``ttft_s`` at GR 0 and ``ttft_s x (1 + 2 x GR)``
    under load. ``args`` are the container's (vLLM: ``--gpu-memory-utilization``). vLLM publishes
    its cache configuration (``vllm:cache_config_info``): the memory fraction of its args (vLLM's
    default 0.9 without one) and its KV capacity in blocks of 16 tokens, ``kv_gib`` of KV cache
    at ``kv_bytes_per_token`` (the model's layers x KV heads x head size x 2 x 2 bytes)."""

    server: str                 # vllm | tgi | triton | sglang
    model: str
    peak_tps: float
    prompt_share: float = 0.6
    tokens_per_request: float = 600.0
    ttft_s: float = 0.08
    kv_usage: float = 0.5       # KV-cache use at GR activity 1 (0..1)
    args: tuple[str, ...] = ()
    kv_gib: float = 0.0         # KV cache per GPU the server's log states
    kv_bytes_per_token: int = 131072  # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 x 2 bytes

    @property
    def memory_fraction(self) -> str:
        args = list(self.args)
        flag = "--gpu-memory-utilization"
        return args[args.index(flag) + 1] if flag in args[:-1] else "0.9"

    @property
    def kv_blocks(self) -> int:
        return int(self.kv_gib * 2**30 // (self.kv_bytes_per_token * 16))


@dataclass(frozen=True)
class WorkloadDef:
    namespace: str
    name: str
    kind: str  # Deployment | StatefulSet | VolcanoJob
    queue: str
    pods: tuple[tuple[str, tuple[int, ...]], ...]  # (node, GPU indices or MIG instance indices)
    profile: Profile
    lifecycle: str = "steady"  # steady | restart | nightly
    planted: str | None = None
    task: str = "worker"  # Volcano task name
    resource: str = "nvidia.com/gpu"
    image: str = "registry.example.com/ml/serving:1.8.2"
    container: str = ""  # container name; defaults to the workload name
    cpu: str = "4"
    memory: str = "16Gi"
    app: str = ""
    age_days: float = 5.0
    pdb: dict[str, int] = field(default_factory=dict)
    # KubeRay: the pods of a RayCluster group (name = the RayCluster); "headgroup" is the head
    ray_group: str = ""
    ray_job: str = ""  # the RayJob that created the RayCluster, if any
    scaled_object: bool = False  # KEDA already scales it (scaledobjects.json)
    annotations: dict[str, str] = field(default_factory=dict)  # extra pod and job annotations
    job_policy: str = ""  # "RestartTask": a Volcano Job that restarts an evicted task (else by lifecycle)
    serving: ServingDef | None = None  # an inference server's metrics (unit economics, issue 24)
    # a planted mig finding's slice and the share of a GPU the workload pays after it (default: one
    # 1g.10gb of an H100, 1/7)
    mig_target: tuple[str, float] = (MIG_PROFILE, 1 / MIG_INSTANCES)

    @property
    def production(self) -> bool:
        return self.namespace.startswith("prod-")

    @property
    def env(self) -> str:
        return "production" if self.production else ("dev" if self.namespace.startswith("dev-") else "")

    @property
    def priority_class(self) -> str:
        return "production-high" if self.production else ("dev-low" if self.env == "dev" else "")

    @property
    def container_name(self) -> str:
        return self.container or self.name

    @property
    def finding_workload(self) -> str:
        """The workload a finding names: the RayJob for its cluster, else the workload itself."""
        return self.ray_job or self.name

    @property
    def gpus_per_pod(self) -> int:
        return len(self.pods[0][1])


def _dev(ns: str, name: str, node: str, gr: float, fb: float) -> WorkloadDef:
    return WorkloadDef(ns, name, "Deployment", "dev", ((node, (0,)),),
                       Profile(gr, 0.012, 15.0, 0.012, 0.01, 0.008, 0.1, 0.85, fb, 120, 40, fb - 400, fb + 400),
                       planted="timeslice", image=f"registry.example.com/dev/{name}:0.4.1", cpu="2",
                       memory="8Gi", age_days=9.0)


def _search(name: str, node: str, fb: float) -> WorkloadDef:
    return WorkloadDef("prod-search", name, "Deployment", "inference", ((node, (0,)),),
                       Profile(0.085, 0.03, 17.0, 0.012, 0.01, 0.03, 0.14, 0.95, fb, 120, 40, fb - 350, fb + 300),
                       planted="mps", image=f"registry.example.com/search/{name}:2.3.0", cpu="3",
                       memory="12Gi", age_days=12.0, pdb={"minAvailable": 1})


WORKLOADS: tuple[WorkloadDef, ...] = (
    WorkloadDef("training", "llm-pretrain", "VolcanoJob", "training",
                (("h100-od-1", tuple(range(8))), ("h100-od-2", tuple(range(8)))),
                Profile(0.90, 0, 0, 0.025, 0.012, 0.84, 0.965, 0.83, 73500, 1300, 300, 71600, 77500),
                image="nvcr.io/nvidia/pytorch:24.10-py3", container="pytorch", cpu="160", memory="1800Gi", age_days=3.0),
    WorkloadDef("prod-inference", "llm-serving", "Deployment", "inference",
                (("h100-od-3", (0, 1)), ("h100-od-3", (2, 3))),
                Profile(0.60, 0.25, 16.0, 0.03, 0.015, 0.33, 0.88, 0.72, 66300, 400, 120, 65200, 67600),
                image="vllm/vllm-openai:v0.6.3", container="vllm", cpu="16", memory="128Gi", age_days=6.0,
                pdb={"maxUnavailable": 1},
                serving=ServingDef("vllm", "meta-llama/Llama-3.1-70B-Instruct", 2600.0, 0.55, 700.0, 0.35, 0.7,
                                   ("--tensor-parallel-size", "2"), kv_gib=26.5, kv_bytes_per_token=163840)),
    WorkloadDef("prod-inference", "recsys-ranker", "Deployment", "inference", (("h100-od-3", (4,)),),
                Profile(0.06, 0.012, 17.0, 0.015, 0.008, 0.02, 0.115, 0.78, 6000, 250, 60, 5650, 6450),
                planted="mig", image="registry.example.com/recsys/ranker:3.1.0", container="ranker", cpu="4", memory="24Gi",
                age_days=11.0),
    WorkloadDef("research", "jupyter-bob", "StatefulSet", "research", (("h100-od-3", (5,)),),
                Profile(0.002, 0, 0, 0.0, 0.002, 0.0, 0.008, 0.8, 3300, 40, 10, 3200, 3400,
                        burst_p=0.025, burst_lo=0.3, burst_hi=0.6),
                planted="idle", image="quay.io/jupyter/pytorch-notebook:cuda12-2024-10-14", container="notebook", cpu="8",
                memory="64Gi", age_days=17.0),
    WorkloadDef("research", "jupyter-alice", "StatefulSet", "research", (("l4-od-6", (0,)),),
                Profile(0.002, 0, 0, 0.0, 0.002, 0.0, 0.008, 0.8, 2150, 30, 10, 2050, 2250,
                        burst_p=0.025, burst_lo=0.3, burst_hi=0.55),
                planted="idle", image="quay.io/jupyter/pytorch-notebook:cuda12-2024-10-14", container="notebook", cpu="2",
                memory="12Gi", age_days=8.0),
    WorkloadDef("vision", "detector-train", "VolcanoJob", "training", (("h100-od-4", (0, 1)),),
                Profile(0.80, 0, 0, 0.03, 0.015, 0.70, 0.90, 0.81, 52000, 1500, 300, 48500, 56000),
                planted="binpack", task="trainer", image="nvcr.io/nvidia/pytorch:24.10-py3", container="pytorch", cpu="24",
                memory="256Gi", age_days=1.5),
    WorkloadDef("data", "feature-extract", "VolcanoJob", "batch",
                tuple(("a100-od-1", (i,)) for i in range(8)),
                Profile(0.70, 0, 0, 0.05, 0.02, 0.55, 0.85, 0.78, 30000, 3000, 400, 24000, 36000),
                lifecycle="restart", planted="spot", image="registry.example.com/data/feature-extract:5.0.2", container="extract",
                cpu="10", memory="120Gi", age_days=4.0),
    WorkloadDef("prod-inference", "text-embed", "Deployment", "inference",
                tuple(("h100-mig-1", (i,)) for i in range(5)),
                Profile(0.60, 0.06, 16.0, 0.05, 0.02, 0.45, 0.75, 0.84, 7600, 300, 60, 7100, 8150),
                resource=MIG_RESOURCE, image="registry.example.com/nlp/text-embed:1.12.0", container="embed", cpu="2",
                memory="8Gi", age_days=7.0),
    _dev("dev-alice", "tokenizer-svc", "l4-od-1", 0.038, 2200),
    _dev("dev-bob", "eval-api", "l4-od-2", 0.048, 2900),
    _dev("dev-carol", "feature-preview", "l4-od-3", 0.04, 3150),
    _search("query-encoder", "l4-od-4", 3900),
    _search("reranker-small", "l4-od-5", 4600),
    WorkloadDef("batch", "nightly-eval", "VolcanoJob", "research",
                tuple(("l4-spot-1", (i,)) for i in range(4)),
                Profile(0.85, 0, 0, 0.03, 0.015, 0.75, 0.95, 0.85, 17000, 1200, 200, 14500, 19500),
                lifecycle="nightly", task="eval", image="registry.example.com/eval/harness:0.9.7", container="eval", cpu="10",
                memory="40Gi", age_days=0.0),
    # -- the training pool (issue 14): input-starved, topology-spread gang, checkpointing jobs
    WorkloadDef("cv-train", "resnet50-train", "VolcanoJob", "ml", (("l4-train-2", (0, 1)),),
                Profile(0.88, 0, 0, 0.0, 0.01, 0.0, 1.0, 0.8, 17200, 150, 40, 16900, 17500,
                        cycle_s=1800, cycle_busy_s=1200, stall_level=0.015, rx_busy=4e9, rx_stall=1.5e8,
                        tx_base=5e7, cpu_busy=5.0, cpu_stall=7.8),
                planted="input_starved", task="trainer", image="nvcr.io/nvidia/pytorch:24.10-py3",
                container="pytorch", cpu="8", memory="48Gi", age_days=2.5),
    WorkloadDef("nlp", "bert-ddp", "VolcanoJob", "ml", (("l4-train-1", (0, 1)), ("l4-train-3", (0, 1))),
                Profile(0.86, 0, 0, 0.02, 0.01, 0.8, 0.95, 0.82, 18500, 500, 100, 17500, 19500,
                        rx_busy=3e9, rx_stall=3e9, tx_base=3e9, cpu_busy=9.0, cpu_stall=9.0),
                planted="topology", image="nvcr.io/nvidia/pytorch:24.10-py3", container="pytorch", cpu="12",
                memory="64Gi", age_days=1.0),
    WorkloadDef("finetune", "llama-sft", "VolcanoJob", "ml", (("l4-train-1", (2, 3)),),
                Profile(0.84, 0, 0, 0.02, 0.012, 0.78, 0.95, 0.8, 19000, 400, 100, 18200, 19800,
                        rx_busy=1.2e9, rx_stall=1.2e9, tx_base=5e7, ckpt_s=1800, ckpt_tx=7e9, cpu_busy=6.0,
                        cpu_stall=6.0),
                planted="spot", image="registry.example.com/llm/sft:2.1.0", container="trainer", cpu="10",
                memory="64Gi", age_days=3.0, annotations={"gpuinsight.io/checkpoint-interval": "30m"},
                job_policy="RestartTask"),
    WorkloadDef("finetune", "mistral-lora", "VolcanoJob", "ml", (("l4-train-3", (2, 3)),),
                Profile(0.82, 0, 0, 0.02, 0.012, 0.76, 0.95, 0.8, 16500, 400, 100, 15700, 17300,
                        rx_busy=1.0e9, rx_stall=1.0e9, tx_base=4e7, ckpt_s=1200, ckpt_tx=6e9, cpu_busy=5.0,
                        cpu_stall=5.0),
                planted="spot", image="registry.example.com/llm/lora:0.7.3", container="trainer", cpu="10",
                memory="64Gi", age_days=2.0, job_policy="RestartTask"),
)

# KubeRay (ml-platform) and scale-to-zero (ml-demo, prod-assist) workloads, issue 14
WEEKEND = 32 | 64  # Saturday and Sunday (Monday = 1)
_QUIET_NIGHT = dict(quiet_from_h=19.0, quiet_to_h=7.0, quiet_days=WEEKEND)


def _serving(ns: str, name: str, node: str, **extra: object) -> WorkloadDef:
    """A small inference service busy on weekdays 07:00-19:00 UTC and idle otherwise."""
    return WorkloadDef(ns, name, "Deployment", "inference", ((node, (0,)),),
                       Profile(0.42, 0.18, 13.0, 0.05, 0.03, 0.2, 0.85, 0.8, 9200, 150, 40, 8900, 9500, **_QUIET_NIGHT),
                       image="vllm/vllm-openai:v0.6.3", container="vllm", cpu="4", memory="16Gi", age_days=20.0,
                       serving=ServingDef("vllm", "Qwen/Qwen2.5-1.5B-Instruct", 1800.0, 0.7, 500.0, 0.05, 0.3,
                                          kv_gib=4.1, kv_bytes_per_token=28672),
                       **extra)  # type: ignore[arg-type]


def _ray(name: str, group: str, node: str, slots: tuple[int, ...], profile: Profile, **extra: object) -> WorkloadDef:
    head = group == "headgroup"
    return WorkloadDef("ml-platform", name, "RayCluster", "", tuple((node, (s,)) for s in slots), profile,
                       ray_group=group, image="rayproject/ray:2.52.0-gpu", container="ray-head" if head else "ray-worker",
                       cpu="8", memory="32Gi", age_days=extra.pop("age_days", 9.0), **extra)  # type: ignore[arg-type]


BASE_WORKLOAD_COUNT = len(WORKLOADS)
RAY_JOB_END_H = 3.0 + 10 / 60  # nightly-embed finished at 03:10 UTC on the first day
WORKLOADS += (
    # batch inference every night 02:00-04:00; the autoscaler is on, but minReplicas 4 keeps all four
    _ray("batch-infer", "gpu-workers", "ray-l4-1", (0, 1, 2, 3),
         Profile(0.85, 0, 0, 0.03, 0.015, 0.7, 0.95, 0.8, 15000, 800, 100, 13500, 16500, quiet_from_h=4.0,
                 quiet_to_h=2.0), planted="ray"),
    # fine-tuning: three busy workers, and a head that holds a GPU it never uses
    _ray("llm-finetune", "headgroup", "ray-l4-2", (0,),
         Profile(0.001, 0, 0, 0.0, 0.0008, 0.0, 0.004, 0.8, 1200, 20, 5, 1150, 1250), planted="ray"),
    _ray("llm-finetune", "trainers", "ray-l4-2", (1, 2, 3),
         Profile(0.82, 0, 0, 0.03, 0.015, 0.7, 0.95, 0.82, 19000, 600, 100, 17500, 20500)),
    # a RayJob that finished at 03:10 on the first day; without shutdownAfterJobFinishes its cluster stays
    _ray("nightly-embed-tmq6z", "gpu", "ray-l4-3", (0, 1, 2, 3),
         Profile(0.8, 0, 0, 0.03, 0.015, 0.65, 0.95, 0.8, 14000, 500, 100, 13000, 15000,
                 quiet_after_h=RAY_JOB_END_H), planted="ray", ray_job="nightly-embed", age_days=0.0),
    # inference that sleeps on nights and weekends: a demo service (planted), a production one (left
    # alone: cold starts would hit its first requests), one KEDA already scales (left alone)
    _serving("ml-demo", "summarizer-preview", "l4-od-7", planted="scale_to_zero"),
    _serving("prod-assist", "chat-router", "l4-od-8"),
    _serving("ml-demo", "translate-preview", "l4-od-9", scaled_object=True),
)

# Unit economics (issue 24): a vLLM chat service alone on a one-GPU H100 node. It started with
# --gpu-memory-utilization 0.40, so its framebuffer holds 40 % of the GPU, and at peak it uses
# about a quarter of the GPU's compute; a safety classifier, as busy at peak and with less memory,
# holds a whole H100 on another node. Each needs three compute slices (a peak between 2/7 and 3/7 of
# the compute target), so one GPU split 3g.40gb + 3g.40gb holds both: each pays half a GPU (its
# slices over the slices in use), so the chat service's cost per token halves (planted: mig, both). Its nodes and workloads draw from a generator
# of their own, so everything above keeps its facts.
SERVING_NODE_COUNT = len(NODES)
SERVING_WORKLOAD_COUNT = len(WORKLOADS)
NODES += (
    NodeDef("h100-od-5", "gpu-h100-single", "karpenter", "p5.4xlarge", "on-demand", "us-east-1a", *_H),
    NodeDef("h100-od-6", "gpu-h100-single", "karpenter", "p5.4xlarge", "on-demand", "us-east-1a", *_H),
)
NODE_POOLS["gpu-h100-single"] = ("p5.4xlarge", "on-demand", "us-east-1a", "WhenEmpty", "30m")
WORKLOADS += (
    WorkloadDef("prod-chat", "assistant-8b", "Deployment", "inference", (("h100-od-5", (0,)),),
                Profile(0.17, 0.05, 15.0, 0.02, 0.015, 0.06, 0.29, 0.8, 33150, 120, 40, 32900, 33450),
                planted="mig", image="vllm/vllm-openai:v0.6.3", container="vllm", cpu="8", memory="32Gi",
                age_days=9.0, mig_target=("3g.40gb", 0.5),
                serving=ServingDef("vllm", "meta-llama/Llama-3.1-8B-Instruct", 5200.0, 0.6, 650.0, 0.06, 0.4,
                                   ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization",
                                    "0.40"), kv_gib=12.9)),
    WorkloadDef("prod-chat", "safety-guard", "Deployment", "inference", (("h100-od-6", (0,)),),
                Profile(0.24, 0.04, 15.0, 0.02, 0.015, 0.14, 0.33, 0.8, 14200, 150, 40, 13900, 14500),
                planted="mig", image="registry.example.com/chat/safety-guard:1.4.0", container="guard", cpu="4",
                memory="16Gi", age_days=9.0, mig_target=("3g.40gb", 0.5)),
)

# Reserved memory is not used memory (issue 24): a lightly used vLLM FAQ bot on a one-GPU H100 node
# runs with vLLM's default --gpu-memory-utilization (0.9), so DCGM shows the GPU nearly full
# (about 72 GB) while its KV cache (53.75 GiB, as its log states and its pod annotation
# gpuinsight.io/kv-cache-bytes says) is at most about 5 % used; an embedding service (12 GB: more
# than the free 1g.10gb instances of h100-mig-1 hold) holds a whole H100 on another node. Sized on
# its framebuffer the bot fits no slice; sized on its weights and the KV cache it used at peak
# (x 1.5) it needs about 24 GB: one GPU split 3g.40gb + 1g.20gb holds both (each pays its compute
# slices over the four in use), the bot's server started with --gpu-memory-utilization set for its
# 40 GB slice (planted: mig, both; the setting in the ground truth). Drawn from a generator of their own.
SERVING_MEMORY_NODE_COUNT = len(NODES)
SERVING_MEMORY_WORKLOAD_COUNT = len(WORKLOADS)
NODES += (
    NodeDef("h100-od-7", "gpu-h100-support", "karpenter", "p5.4xlarge", "on-demand", "us-east-1a", *_H),
    NodeDef("h100-od-8", "gpu-h100-support", "karpenter", "p5.4xlarge", "on-demand", "us-east-1a", *_H),
)
NODE_POOLS["gpu-h100-support"] = ("p5.4xlarge", "on-demand", "us-east-1a", "WhenEmpty", "30m")
KV_ANNOTATION = "gpuinsight.io/kv-cache-bytes"
WORKLOADS += (
    WorkloadDef("prod-support", "faq-bot", "Deployment", "inference", (("h100-od-7", (0,)),),
                Profile(0.08, 0.04, 15.0, 0.015, 0.01, 0.02, 0.18, 0.8, 73900, 15, 5, 73860, 73940),
                planted="mig", image="vllm/vllm-openai:v0.6.3", container="vllm", cpu="8", memory="32Gi",
                age_days=12.0, mig_target=("3g.40gb", 3 / 4), annotations={KV_ANNOTATION: "53.75Gi"},
                serving=ServingDef("vllm", "meta-llama/Llama-3.1-8B-Instruct", 4000.0, 0.7, 450.0, 0.05, 0.3,
                                   ("--model", "meta-llama/Llama-3.1-8B-Instruct"), kv_gib=53.75)),
    WorkloadDef("prod-support", "ticket-embedder", "Deployment", "inference", (("h100-od-8", (0,)),),
                Profile(0.05, 0.02, 15.0, 0.01, 0.01, 0.01, 0.09, 0.8, 11800, 40, 20, 11700, 11900),
                planted="mig", image="registry.example.com/support/embedder:2.0.1", container="embedder", cpu="4",
                memory="8Gi", age_days=12.0, mig_target=("1g.20gb", 1 / 4)),
)
GPUS_PER_CELL = sum(INSTANCE_TYPES[n.instance_type].gpu_count for n in NODES)

# Restart cadence of `restart` workloads and the nightly window (UTC hours) of `nightly` ones.
RESTART_MIN_S, RESTART_MAX_S = 35 * 60, 50 * 60
NIGHTLY_START_H, NIGHTLY_END_H = 1, 5
NIGHTLY_TTL_S = 600  # ttlSecondsAfterFinished of the nightly Volcano Job
GAP_NODE = "h100-od-2"  # dcgm-exporter down for 30 minutes on the first day
GAP_START_H, GAP_LEN_S = 14.0, 1800
DEFAULT_START = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class FleetSpec:
    """What to generate: `cell_count` copies of the scenario over `days` sampled every `interval_s`."""

    cell_count: int = 1
    days: float = 2.0
    interval_s: int = 300
    seed: int = 7
    start: datetime = DEFAULT_START
    cluster: str = "demo"

    def __post_init__(self) -> None:
        if self.cell_count < 1 or self.cell_count > 999:
            raise ValueError("cell_count must be in 1..999")
        if self.interval_s < 1 or self.days <= 0 or self.steps < 1:
            raise ValueError("days and interval_s must give at least one sample")
        if self.start.tzinfo is None:
            raise ValueError("start must be timezone-aware (UTC)")

    @classmethod
    def for_gpus(cls, gpus: int, days: float = 2.0, interval_s: int = 300, seed: int = 7) -> FleetSpec:
        """A fleet of about `gpus` GPUs (the scenario has 51 GPUs per cell)."""
        return cls(cell_count=max(1, round(gpus / GPUS_PER_CELL)), days=days, interval_s=interval_s, seed=seed)

    @property
    def steps(self) -> int:
        return int(self.days * 86400) // self.interval_s

    @property
    def start_s(self) -> int:
        return int(self.start.timestamp())

    @property
    def end_s(self) -> int:
        """Exclusive end of the window: the last sample is at end_s - interval_s."""
        return self.start_s + self.steps * self.interval_s

    @property
    def gpu_count(self) -> int:
        return self.cell_count * GPUS_PER_CELL


def cell_suffix(cell: int) -> str:
    return "" if cell == 0 else f"-c{cell:03d}"
