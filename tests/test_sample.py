"""Tests of the deterministic sample fleet generator and the committed sample_data/."""

from __future__ import annotations

import csv
import gzip
import json
import re
import shutil
import subprocess
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import jsonschema
import polars as pl
import pytest
import yaml

from tests.crds import REFERENCE
from tests.samplegen import (
    GENERATED_FILES,
    GPU_SAMPLES_SCHEMA,
    GPUS_PER_CELL,
    FleetSpec,
    build_fleet,
    gpu_sample_frames,
    write_sample,
)
from tests.samplegen.__main__ import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "sample_data"
LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_labels(s: str) -> dict[str, str]:
    return dict(LABEL_RE.findall(s))


def read_om(path: Path) -> tuple[dict[str, dict[str, list[tuple[int, str]]]], list[str]]:
    """family -> label string -> [(ts, value)], checking the OpenMetrics layout on the way."""
    fams: dict[str, dict[str, list[tuple[int, str]]]] = {}
    meta: dict[str, list[str]] = defaultdict(list)
    problems: list[str] = []
    order: list[str] = []
    current, last_series = None, None
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    if lines[-2:] != ["# EOF", ""]:
        problems.append("does not end with # EOF")
    for line in lines[:-2]:
        if line.startswith("#"):
            kind, name = line.split(" ", 3)[1:3]
            meta[name].append(kind)
            if name in fams:
                problems.append(f"{kind} for {name} after its samples")
            continue
        brace = line.index("{")
        name, rest = line[:brace], line[brace + 1:]
        labels, tail = rest.rsplit("} ", 1)
        value, ts = tail.split(" ")
        if name != current:
            if name in fams:
                problems.append(f"family {name} not contiguous")
            fams[name] = {}
            order.append(name)
            current, last_series = name, None
        series = fams[name]
        if labels != last_series:
            if labels in series:
                problems.append(f"series of {name} not contiguous")
            series[labels] = []
            last_series = labels
        pts = series[labels]
        if pts and int(ts) <= pts[-1][0]:
            problems.append(f"{name} samples out of order")
        pts.append((int(ts), value))
    for name in fams:
        # an OpenMetrics counter's family drops the _total its samples carry
        family = name.removesuffix("_total") if name.endswith("_total") and name not in meta else name
        if sorted(meta[family]) != ["HELP", "TYPE"]:
            problems.append(f"{name}: HELP/TYPE {meta[family]}")
    return fams, problems[:10]


@pytest.fixture(scope="module")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample(tmp_path_factory.mktemp("sample") / "out")


@pytest.fixture(scope="module")
def om(sample_dir: Path) -> dict[str, dict[str, list[tuple[int, str]]]]:
    fams, problems = read_om(sample_dir / "metrics.om.gz")
    assert not problems
    return fams


@pytest.fixture(scope="module")
def truth(sample_dir: Path) -> dict:
    return json.loads((sample_dir / "ground_truth.json").read_text())


def _file_bytes(d: Path, rel: str) -> bytes:
    data = (d / rel).read_bytes()
    return gzip.decompress(data) if rel.endswith(".gz") else data


def test_same_seed_is_byte_identical(sample_dir: Path, tmp_path: Path) -> None:
    again = write_sample(tmp_path / "again")
    for rel in GENERATED_FILES:
        assert (sample_dir / rel).read_bytes() == (again / rel).read_bytes(), rel


def test_different_seed_differs(tmp_path: Path) -> None:
    a = write_sample(tmp_path / "a", FleetSpec(days=0.25, seed=7))
    b = write_sample(tmp_path / "b", FleetSpec(days=0.25, seed=8))
    for rel in ("metrics.om.gz", "ground_truth.json", "kubectl/pods.json"):
        assert _file_bytes(a, rel) != _file_bytes(b, rel), rel


def test_committed_sample_data_is_current(sample_dir: Path) -> None:
    for rel in GENERATED_FILES:
        assert (COMMITTED / rel).exists(), f"sample_data/{rel} missing: run python -m tests.samplegen --out sample_data"
        assert _file_bytes(COMMITTED, rel) == _file_bytes(sample_dir, rel), f"sample_data/{rel} is stale"
    assert (COMMITTED / "README.md").exists()


def test_openmetrics_families(om: dict) -> None:
    for fam in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL",
                "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE", "kube_pod_info",
                "kube_pod_owner", "kube_replicaset_owner", "kube_pod_labels", "kube_pod_annotations",
                "kube_pod_container_resource_requests", "kube_pod_created", "kube_pod_start_time",
                "kube_pod_status_scheduled_time", "kube_pod_completion_time", "kube_pod_status_phase",
                "kube_node_labels", "kube_node_info", "kube_node_status_capacity", "kube_node_status_allocatable",
                "kube_node_created"):
        assert om.get(fam), fam
    for fam, series in om.items():
        for labels in series:
            lab = parse_labels(labels)
            # inference servers are scraped from their pods (Prometheus Operator: job namespace/service,
            # the pod's own namespace and pod labels)
            serving = fam.startswith("vllm:") and lab["job"] == f"{lab['namespace']}/{lab['job'].split('/')[-1]}"
            assert "instance" in lab and (serving or lab["job"] in ("dcgm-exporter", "kube-state-metrics", "kubelet")), fam


def test_label_variations(om: dict, truth: dict) -> None:
    gr = {ls: parse_labels(ls) for ls in om["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]}
    host = {lab.get("Hostname") or lab.get("hostname"): lab for lab in gr.values()}
    assert "Hostname" in host["h100-od-1"] and "Hostname" in host["a100-od-1"]
    assert "hostname" in host["l4-od-1"] and "hostname" in host["h100-mig-1"]
    assert all("DCGM_FI_DRIVER_VERSION" in lab for lab in gr.values())
    for lab in gr.values():
        node = lab.get("Hostname") or lab.get("hostname")
        if node in ("a100-od-1", "l4-spot-1"):
            assert "exported_pod" in lab and lab["namespace"] == "gpu-operator"
            assert re.fullmatch(r"dcgm-exporter-[a-z0-9]{5}", lab["pod"])
        else:
            assert "exported_pod" not in lab and "pod" in lab
    assert any(lab.get("exported_pod", "").startswith("feature-extract-worker-") for lab in gr.values())
    mig = [lab for lab in gr.values() if "GPU_I_ID" in lab]
    assert {lab["GPU_I_ID"] for lab in mig} == {str(i) for i in range(7, 14)}
    assert {lab["GPU_I_PROFILE"] for lab in mig} == {"1g.10gb"}
    assert sum(lab["pod"].startswith("text-embed-") for lab in mig) == 5
    assert not any("GPU_I_ID" in ls for ls in om["DCGM_FI_DEV_GPU_UTIL"])
    # unallocated GPUs carry empty attribution labels
    idle = [lab for lab in gr.values() if lab.get("Hostname") == "h100-od-4" and lab["pod"] == ""]
    assert len(idle) == 6 and all(lab["namespace"] == lab["container"] == "" for lab in idle)
    # 30-minute exporter gap on h100-od-2 on the first day
    gap = truth["dcgm_gap"]
    g0 = int(datetime.fromisoformat(gap["start"]).timestamp())
    per_device: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for ls, pts in om["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].items():
        lab = gr[ls]
        node = lab.get("Hostname") or lab.get("hostname")
        per_device[(node, lab["UUID"], lab.get("GPU_I_ID", ""))].extend(t for t, _ in pts)
    assert len(per_device) == GPUS_PER_CELL - 1 + 7  # the MIG GPU shows as its 7 instances
    steps = truth["window"]["steps"]
    inside = set(range(g0, g0 + 1800, 300))
    for (node, _, _), ts in per_device.items():
        assert len(ts) == len(set(ts))  # one sample per device and step, whoever holds the GPU
        if node == "h100-od-2":
            assert not set(ts) & inside and len(ts) == steps - len(inside)
        else:
            assert len(ts) == steps


def _ksm_allocations(om: dict, w0: int, w1: int) -> dict[tuple[str, str], dict[str, float]]:
    """Allocated GPU-hours per workload recomputed only from kube-state-metrics series."""
    pods: dict[str, dict] = defaultdict(dict)
    for fam, key in (("kube_pod_start_time", "start"), ("kube_pod_completion_time", "done")):
        for ls, pts in om[fam].items():
            pods[parse_labels(ls)["uid"]][key] = float(pts[0][1])
    for ls in om["kube_pod_owner"]:
        lab = parse_labels(ls)
        pods[lab["uid"]].update(ns=lab["namespace"], kind=lab["owner_kind"], owner=lab["owner_name"])
    rs = {}
    for ls in om["kube_replicaset_owner"]:
        lab = parse_labels(ls)
        rs[(lab["namespace"], lab["replicaset"])] = lab["owner_name"]
    for ls, pts in om["kube_pod_container_resource_requests"].items():
        lab = parse_labels(ls)
        if lab["resource"] in ("nvidia_com_gpu", "nvidia_com_mig_1g_10gb"):
            pods[lab["uid"]][lab["resource"]] = float(pts[0][1])
    out: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in pods.values():
        wl = rs[(p["ns"], p["owner"])] if p["kind"] == "ReplicaSet" else p["owner"]
        hours = max(0.0, min(p.get("done", w1), w1) - max(p["start"], w0)) / 3600
        for res in ("nvidia_com_gpu", "nvidia_com_mig_1g_10gb"):
            out[(p["ns"], wl)][res] += p.get(res, 0.0) * hours
    return out


def test_gpu_hours_match_kube_state_metrics(om: dict, truth: dict) -> None:
    w0 = int(datetime.fromisoformat(truth["window"]["start"]).timestamp())
    w1 = int(datetime.fromisoformat(truth["window"]["end"]).timestamp())
    ksm = _ksm_allocations(om, w0, w1)
    want = _per_workload(truth, "allocated_gpu_hours", "allocated_mig_instance_hours")
    assert len(ksm) == len(want) == 28  # the head and the trainers of a Ray cluster are one workload
    for key, (gpu_h, mig_h) in want.items():
        assert ksm[key]["nvidia_com_gpu"] == pytest.approx(gpu_h, abs=1e-5), key
        assert ksm[key]["nvidia_com_mig_1g_10gb"] == pytest.approx(mig_h, abs=1e-5)
    for w in truth["workloads"]:
        assert w["allocated_mig_slice_hours"] == pytest.approx(w["allocated_mig_instance_hours"] / 7, abs=1e-5)
    by = {w["workload"]: w for w in truth["workloads"]}
    assert by["llm-pretrain"]["allocated_gpu_hours"] == 16 * 48
    assert by["text-embed"]["allocated_mig_instance_hours"] == 5 * 48
    assert 20 < by["nightly-eval"]["allocated_gpu_hours"] < 32  # 4 GPUs x ~3.8 h x 2 nights


def test_sampled_hours_match_dcgm_series(om: dict, truth: dict) -> None:
    owner = {}
    for ls in om["kube_pod_owner"]:
        lab = parse_labels(ls)
        owner[(lab["namespace"], lab["pod"])] = lab["owner_name"]
    rs = {parse_labels(ls)["replicaset"]: parse_labels(ls)["owner_name"] for ls in om["kube_replicaset_owner"]}
    samples: dict[str, int] = defaultdict(int)
    for ls, pts in om["DCGM_FI_DEV_FB_USED"].items():
        lab = parse_labels(ls)
        pod = lab.get("exported_pod", lab.get("pod"))
        ns = lab.get("exported_namespace", lab.get("namespace"))
        if pod:
            o = owner[(ns, pod)]
            samples[rs.get(o, o)] += len(pts)
    step_h = truth["window"]["interval_s"] / 3600
    for (_, name), (gpu_h, mig_h) in _per_workload(truth, "allocated_gpu_hours_sampled",
                                                   "allocated_mig_instance_hours_sampled").items():
        assert samples[name] * step_h == pytest.approx(gpu_h + mig_h, abs=1e-5), name


def _per_workload(truth: dict, *fields: str) -> dict[tuple[str, str], tuple[float, ...]]:
    """Truth figures summed per workload (a Ray cluster's groups are entries of their own)."""
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * len(fields))
    for w in truth["workloads"]:
        acc = out[(w["namespace"], w["workload"])]
        for i, f in enumerate(fields):
            acc[i] += w[f]
    return {k: tuple(v) for k, v in out.items()}


def _strict(schema: object) -> object:
    """Reject fields the API server would prune (structural schema), like `kubectl apply --validate`."""
    if isinstance(schema, dict):
        s = {k: _strict(v) for k, v in schema.items()}
        if (s.get("type") == "object" and "properties" in s and "additionalProperties" not in s
                and not s.get("x-kubernetes-preserve-unknown-fields")):
            s["additionalProperties"] = False
        return s
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    return schema


@pytest.mark.parametrize("crd,dump,kind", [
    ("volcano/batch.volcano.sh_jobs.yaml.gz", "vcjobs.json", "Job"),
    ("volcano/scheduling.volcano.sh_podgroups.yaml", "podgroups.json", "PodGroup"),
    ("volcano/scheduling.volcano.sh_queues.yaml", "queues.json", "Queue"),
    ("karpenter/karpenter.sh_nodepools.yaml", "nodepools.json", "NodePool"),
    ("kuberay/ray.io_rayclusters.yaml.gz", "rayclusters.json", "RayCluster"),
    ("fixtures/kuberay/ray.io_rayjobs.yaml.gz", "rayjobs.json", "RayJob"),
    ("keda/keda.sh_scaledobjects.yaml", "scaledobjects.json", "ScaledObject"),
])
def test_crd_objects_validate(sample_dir: Path, crd: str, dump: str, kind: str) -> None:
    path = ROOT / "tests" / crd if crd.startswith("fixtures/") else REFERENCE / crd
    text = gzip.decompress(path.read_bytes()).decode() if crd.endswith(".gz") else path.read_text()
    doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = next(v for v in doc["spec"]["versions"] if v.get("storage"))
    validator = jsonschema.Draft202012Validator(_strict(version["schema"]["openAPIV3Schema"]),
                                                format_checker=jsonschema.FormatChecker())
    items = json.loads((sample_dir / "kubectl" / dump).read_text())["items"]
    assert items
    for obj in items:
        assert obj["apiVersion"] == f"{doc['spec']['group']}/{version['name']}" and obj["kind"] == kind
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
        assert not errors, (obj["metadata"]["name"], errors[:3])


def test_kubectl_dumps(sample_dir: Path, truth: dict) -> None:
    for name in ("nodes", "pods", "events", "queues", "podgroups", "vcjobs", "nodepools", "pdbs"):
        doc = json.loads((sample_dir / "kubectl" / f"{name}.json").read_text())
        assert doc["apiVersion"] == "v1" and doc["kind"] == "List" and doc["metadata"] == {"resourceVersion": ""}
        assert doc["items"], name
    pods = json.loads((sample_dir / "kubectl" / "pods.json").read_text())["items"]
    gpu_pods = 0
    for p in pods:
        req = p["spec"]["containers"][0]["resources"]["requests"]
        gpu_pods += "nvidia.com/gpu" in req or "nvidia.com/mig-1g.10gb" in req
        ray = "ray.io/cluster" in p["metadata"]["labels"]  # KubeRay pods here are not scheduled by Volcano
        assert p["spec"]["schedulerName"] == ("default-scheduler" if ray else "volcano") and p["spec"]["nodeName"]
        assert p["metadata"]["ownerReferences"] and p["status"]["phase"] in ("Running", "Failed")
    assert gpu_pods == len(pods) >= 20
    prod = [p for p in pods if p["metadata"]["namespace"].startswith("prod-")]
    assert all(p["spec"]["priorityClassName"] == "production-high" for p in prod)
    assert all(p["metadata"]["labels"]["env"] == "production" for p in prod)
    mig = [p for p in pods if "nvidia.com/mig-1g.10gb" in p["spec"]["containers"][0]["resources"]["limits"]]
    assert len(mig) == 5
    nodes = {n["metadata"]["name"]: n for n in json.loads((sample_dir / "kubectl/nodes.json").read_text())["items"]}
    assert nodes["h100-mig-1"]["status"]["capacity"]["nvidia.com/mig-1g.10gb"] == "7"
    assert nodes["l4-spot-1"]["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot"
    assert nodes["l4-od-1"]["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] == "gpu-l4-od"
    pdbs = {p["metadata"]["name"] for p in json.loads((sample_dir / "kubectl/pdbs.json").read_text())["items"]}
    assert {"query-encoder", "reranker-small"} <= pdbs
    job = next(j for j in json.loads((sample_dir / "kubectl/vcjobs.json").read_text())["items"]
               if j["metadata"]["name"] == "feature-extract")
    assert job["spec"]["maxRetry"] == 10 and {p["event"] for p in job["spec"]["policies"]} == {"PodEvicted", "PodFailed"}


def test_ground_truth(truth: dict) -> None:
    got = {(f["rule"], f["workload"]) for f in truth["expected_findings"]}
    assert got == {("mig", "recsys-ranker"), ("idle", "jupyter-bob"), ("idle", "jupyter-alice"),
                   ("binpack", "detector-train"), ("spot", "feature-extract"), ("timeslice", "tokenizer-svc"),
                   ("timeslice", "eval-api"), ("timeslice", "feature-preview"), ("mps", "query-encoder"),
                   ("mps", "reranker-small"), ("queue", None), ("ray", "batch-infer"), ("ray", "llm-finetune"),
                   ("ray", "nightly-embed"), ("scale_to_zero", "summarizer-preview"),
                   # issue 14: the training pool
                   ("input_starved", "resnet50-train"), ("topology", "bert-ddp"), ("spot", "llama-sft"),
                   ("spot", "mistral-lora"),
                   # issue 24: two small services share one H100 split 3g.40gb + 3g.40gb; a vLLM bot whose
                   # reservation fills its GPU and an embedder share one split 3g.40gb + 1g.20gb
                   ("mig", "assistant-8b"), ("mig", "safety-guard"), ("mig", "faq-bot"),
                   ("mig", "ticket-embedder")}
    assert {w["workload"] for w in truth["must_not_flag"]} == {"llm-pretrain", "llm-serving", "text-embed",
                                                              "nightly-eval", "chat-router", "translate-preview"}
    obs = {w["workload"]: w["observed"] for w in truth["workloads"]}
    assert obs["recsys-ranker"]["gr_active_max"] < 0.12 and obs["recsys-ranker"]["fb_used_max_mib"] < 9984
    assert obs["jupyter-bob"]["idle_fraction"] > 0.9 and obs["jupyter-alice"]["idle_fraction"] > 0.9
    assert obs["llm-pretrain"]["gr_active_p95"] > 0.85
    with open(REFERENCE / "aws-gpu-prices.csv", newline="") as fh:
        catalog = {r["instance_type"]: float(r["on_demand_usd_per_hour_us_east_1"]) for r in csv.DictReader(fh)
                   if r["on_demand_usd_per_hour_us_east_1"]}
    for n in truth["nodes"]:
        assert n["on_demand_usd_per_hour"] == pytest.approx(catalog[n["instance_type"]])
        factor = 0.35 if n["capacity_type"] == "spot" else 1.0
        assert n["hourly_usd"] == pytest.approx(catalog[n["instance_type"]] * factor, abs=1e-6)


def test_frames_match_openmetrics(sample_dir: Path, om: dict, truth: dict) -> None:
    fleet = build_fleet(FleetSpec())
    df = pl.concat(list(gpu_sample_frames(fleet, chunk_hours=7)))
    assert dict(df.schema) == GPU_SAMPLES_SCHEMA
    devices = fleet.devices.height  # 50 whole GPUs + 7 MIG instances
    assert df.height == devices * truth["window"]["steps"] - 8 * truth["dcgm_gap"]["missing_samples_per_gpu"]
    assert df.filter(pl.col("mig_instance") >= 0)["gpu_util"].null_count() == 7 * truth["window"]["steps"]
    for fam, col in (("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gr_active"), ("DCGM_FI_DEV_FB_USED", "fb_used_mib"),
                     ("DCGM_FI_DEV_POWER_USAGE", "power_w"), ("DCGM_FI_DEV_GPU_UTIL", "gpu_util")):
        total = sum(float(v) for pts in om[fam].values() for _, v in pts)
        assert df[col].sum() == pytest.approx(total, rel=1e-12), fam
    bob = df.filter(pl.col("pod") == "jupyter-bob-0")
    assert bob.height == truth["window"]["steps"] and bob["gr_active"].equals(bob["gr_active_max"])


def test_promtool_accepts_openmetrics(sample_dir: Path, tmp_path: Path) -> None:
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    plain = tmp_path / "metrics.om"
    plain.write_bytes(gzip.decompress((sample_dir / "metrics.om.gz").read_bytes()))
    res = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=48h",
                          str(plain), str(tmp_path / "tsdb")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert list((tmp_path / "tsdb").iterdir())


def test_fleet_scales_to_10000_gpus() -> None:
    spec = FleetSpec.for_gpus(10000, days=1)
    assert abs(spec.gpu_count - 10000) <= GPUS_PER_CELL
    fleet = build_fleet(spec)
    assert fleet.devices.height == spec.cell_count * (GPUS_PER_CELL - 1 + 7)
    assert fleet.nodes["name"].n_unique() == fleet.nodes.height
    first = next(gpu_sample_frames(fleet, chunk_hours=1))
    assert first.height == fleet.devices.height * (3600 // spec.interval_s)


def test_cli(tmp_path: Path) -> None:
    assert cli_main(["--out", str(tmp_path / "o"), "--days", "0.1", "--interval", "600", "--no-gzip"]) == 0
    assert (tmp_path / "o" / "metrics.om").read_text().endswith("# EOF\n")
    assert json.loads((tmp_path / "o" / "ground_truth.json").read_text())["window"]["interval_s"] == 600
    assert cli_main(["--out", str(tmp_path / "x"), "--days", "0"]) == 2


def test_two_events_of_one_object_in_one_second_are_two_objects() -> None:
    # a Volcano job restarting two failed pods in the same second (seen at 10,000 GPUs): the dump
    # loader rejects two events of one uid that say different things, as two real events never are
    from tests.samplegen.kubectl import _event

    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "ml", "uid": "u-1", "resourceVersion": "7"}}

    class Snap:
        rv = staticmethod(lambda: "1")
        uid = staticmethod(lambda *parts: "/".join(map(str, parts)))

    a, b = (_event(Snap(), job, 1_700_000_000, "ExecuteAction", f"Start to execute action RestartTask for pod {p}",
                   "vc-controller-manager") for p in ("train-w-0", "train-w-1"))
    assert a["metadata"]["name"] != b["metadata"]["name"] and a["metadata"]["uid"] != b["metadata"]["uid"]


def test_dump_objects_have_unique_uids(sample_dir: Path) -> None:
    for path in sorted((sample_dir / "kubectl").glob("*.json")):
        uids = [o["metadata"]["uid"] for o in json.loads(path.read_text()).get("items", [])]
        assert len(uids) == len(set(uids)), path.name
