"""Small valid file inputs of every kind gpuinsight reads, the loader the CLI runs for each, and a
warehouse fingerprint: shared by the bad-value tests and the fuzz test.

Every input is loaded in-process through the function the CLI command calls, and its exception
mapped to an exit code and message by :func:`gpuinsight.cli.error_outcome`, the function the
CLI itself uses.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuinsight.cli import error_outcome
from gpuinsight.config import Config
from gpuinsight.sources.alibaba import import_openb
from gpuinsight.sources.kubernetes import load_dump_dir
from gpuinsight.sources.openmetrics import load_openmetrics
from gpuinsight.sources.prices import load_catalog
from gpuinsight.warehouse import Warehouse

REAL = Path(__file__).parent / "fixtures" / "real"
T_S = 1793491200  # 2026-11-01T00:00:00Z


def openmetrics_seed() -> str:
    """Two H100s of dcgm-exporter issue #490 and kube-state-metrics lines in the v2.10 format:
    six scrapes 30 s apart, one GPU pod, one GPU node."""
    gpu = ('{gpu="%d",UUID="%s",modelName="NVIDIA H100 80GB HBM3",Hostname="computeinstance-e00c1p6dpy98xytphp"'
           '%s}')
    gpus = [(0, "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b", ',container="c",namespace="default",pod="train-0"'),
            (1, "GPU-15338f3e-5fd9-962d-921a-979b820520f0", "")]
    fields = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": "0.42", "DCGM_FI_DEV_GPU_UTIL": "55", "DCGM_FI_DEV_FB_USED": "30000",
              "DCGM_FI_DEV_FB_FREE": "51000", "DCGM_FI_DEV_POWER_USAGE": "410.5"}
    lines = []
    for name, value in fields.items():
        lines.append(f"# TYPE {name} gauge")
        for i, uuid, pod in gpus:
            lines += [f"{name}{gpu % (i, uuid, pod)} {value} {T_S + 30 * k}" for k in range(6)]
    who = 'namespace="default",pod="train-0",uid="u-train-0"'
    ksm = [f'kube_pod_info{{created_by_kind="",created_by_name="",host_ip="10.0.0.5",{who},'
           'node="computeinstance-e00c1p6dpy98xytphp",pod_ip="10.1.0.5",priority_class="",host_network="false"} 1',
           f'kube_pod_owner{{{who},owner_is_controller="",owner_kind="",owner_name=""}} 1',
           f'kube_pod_created{{{who}}} 1793480000',
           f'kube_pod_status_phase{{{who},phase="Running"}} 1',
           f'kube_pod_container_resource_requests{{container="c",{who},node="computeinstance-e00c1p6dpy98xytphp",'
           'resource="nvidia_com_gpu",unit="integer"} 1',
           'kube_node_info{node="computeinstance-e00c1p6dpy98xytphp",provider_id=""} 1',
           'kube_node_status_capacity{node="computeinstance-e00c1p6dpy98xytphp",resource="nvidia_com_gpu",'
           'unit="integer"} 8']
    for k in range(6):
        lines += [f"{line} {T_S + 30 * k}" for line in ksm]
    return "\n".join(lines) + "\n# EOF\n"


def dump_seed(folder: Path) -> Path:
    """A kubectl dump: two real nodes, a GPU pod, the real Volcano queues and Job, a PodGroup."""
    folder.mkdir(parents=True, exist_ok=True)
    nodes = [json.loads((REAL / "k8s" / f).read_text()) for f in ("karpenter-v0-node.json", "eks-node.json")]
    (folder / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}, indent=1))
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "worker-0", "namespace": "ml", "uid": "p-1", "creationTimestamp": "2026-11-01T00:00:00Z",
                        "labels": {"volcano.sh/job-name": "tensorflow-benchmark-gpu"},
                        "annotations": {"scheduling.k8s.io/group-name": "tf-pg"}},
           "spec": {"nodeName": "ip-10-32-136-67.eu-west-1.compute.internal", "schedulerName": "volcano",
                    "containers": [{"name": "tensorflow", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                                                        "limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Running", "startTime": "2026-11-01T00:00:05Z"}}
    (folder / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}, indent=1))
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "tf-pg", "namespace": "ml", "uid": "g-1", "creationTimestamp": "2026-11-01T00:00:00Z"},
             "spec": {"minMember": 4, "queue": "root-sci-prod", "minResources": {"nvidia.com/gpu": "3"}},
             "status": {"phase": "Running"}}
    (folder / "podgroups.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [group]}, indent=1))
    shutil.copy(REAL / "k8s" / "volcano-queues.yaml", folder / "queues.yaml")
    shutil.copy(REAL / "k8s" / "volcano-tf-example-gpu.yaml", folder / "vcjobs.yaml")
    return folder


PRICES_SEED = ("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour\n"
               "g5.xlarge,A10G,1,1.006,0.35\np5.48xlarge,H100,8,55.04,\n,L4,,0.70,0.25\n")
OPENB_NODES_SEED = "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,P100\nn-1,96000,786432,8,V100M32\n"
OPENB_PODS_SEED = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                   "scheduled_time\np-0,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
                   "p-1,6000,12288,1,460,,LS,Running,427061,12902960,427061\n")


@dataclass(frozen=True)
class InputKind:
    """One kind of file input: where its seed goes and the loader the CLI runs for it."""

    name: str
    write_seed: Callable[[Path], Path]          # writes a valid input under a folder, returns the path mutated
    load: Callable[[Warehouse, Config, Path], object]


def _write(name: str, text: str) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(text, encoding="utf-8")
        return path
    return write


def _openb_nodes(folder: Path) -> Path:
    _write("pods.csv", OPENB_PODS_SEED)(folder)
    return _write("nodes.csv", OPENB_NODES_SEED)(folder)


def _openb_pods(folder: Path) -> Path:
    _write("nodes.csv", OPENB_NODES_SEED)(folder)
    return _write("pods.csv", OPENB_PODS_SEED)(folder)


def _dump_file(name: str) -> Callable[[Path], Path]:
    """A dump folder holding only ``name`` (what a test mutates; a smaller load)."""
    def write(folder: Path) -> Path:
        full = dump_seed(folder / "_all")
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(full / name, folder / name)
        shutil.rmtree(full)
        return folder / name
    return write


def _load_dump(wh: Warehouse, cfg: Config, path: Path) -> object:
    return load_dump_dir(wh, cfg, path.parent)


KINDS: dict[str, InputKind] = {
    "openmetrics": InputKind("openmetrics", _write("metrics.om", openmetrics_seed()),
                             lambda wh, cfg, p: load_openmetrics(wh, cfg, p)),
    "dump-pods": InputKind("dump-pods", _dump_file("pods.json"), _load_dump),
    "dump-nodes": InputKind("dump-nodes", _dump_file("nodes.json"), _load_dump),
    "dump-podgroups": InputKind("dump-podgroups", _dump_file("podgroups.json"), _load_dump),
    "dump-queues": InputKind("dump-queues", _dump_file("queues.yaml"), _load_dump),
    "dump-vcjobs": InputKind("dump-vcjobs", _dump_file("vcjobs.yaml"), _load_dump),
    "prices": InputKind("prices", _write("catalog.csv", PRICES_SEED), lambda wh, cfg, p: load_catalog(wh, cfg, p)),
    "openb-nodes": InputKind("openb-nodes", _openb_nodes,
                             lambda wh, cfg, p: import_openb(wh, cfg, p.parent / "pods.csv", p)),
    "openb-pods": InputKind("openb-pods", _openb_pods,
                            lambda wh, cfg, p: import_openb(wh, cfg, p, p.parent / "nodes.csv")),
}


def fingerprint(wh: Warehouse) -> dict[str, tuple[int, int]]:
    """Row count and an order-independent hash of every table (one statement): equal means unchanged."""
    tables = [r[0] for r in wh.con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' AND table_type = 'BASE TABLE' "
        "ORDER BY 1").fetchall()]
    sql = " UNION ALL ".join(f"SELECT '{t}', count(*), coalesce(sum(hash(x)), 0) FROM \"{t}\" x" for t in tables)
    return {r[0]: (int(r[1]), int(r[2])) for r in wh.con.execute(sql).fetchall()}


def outcome(kind: InputKind, wh: Warehouse, cfg: Config, path: Path) -> tuple[int, str]:
    """(exit code, message) the CLI would give for loading ``path``; (0, "") on success."""
    try:
        kind.load(wh, cfg, path)
    except BaseException as exc:  # noqa: BLE001 - every failure is classified, as the CLI does
        if isinstance(exc, KeyboardInterrupt):
            raise
        return error_outcome(exc)
    return 0, ""
