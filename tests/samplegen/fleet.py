"""Build the in-memory sample fleet: nodes, GPUs (DCGM entities), workloads and pod incarnations.

`build_fleet` is pure and deterministic in `spec.seed`: each cell draws from its own
`numpy.random.default_rng([seed, cell])`, so cell N looks the same in every fleet size.
Utilisation values are not stored; `signals.cell_values` computes them on demand for any
block of cells and samples (counter-based noise, so the result does not depend on chunking).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .spec import (
    BASE_NODE_COUNT,
    BASE_WORKLOAD_COUNT,
    GAP_LEN_S,
    GAP_NODE,
    GAP_START_H,
    INSTANCE_TYPES,
    MIG_FB_MIB,
    MIG_FIRST_GI_ID,
    MIG_INSTANCES,
    MIG_PROFILE,
    NIGHTLY_END_H,
    NIGHTLY_START_H,
    NIGHTLY_TTL_S,
    NODES,
    RESTART_MAX_S,
    RESTART_MIN_S,
    SERVING_MEMORY_NODE_COUNT,
    SERVING_MEMORY_WORKLOAD_COUNT,
    SERVING_NODE_COUNT,
    SERVING_WORKLOAD_COUNT,
    WORKLOADS,
    FleetSpec,
    cell_suffix,
)

_ALNUM = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of Kubernetes generated name suffixes
INF = float("inf")


def _ceil_div(a: np.ndarray | float, b: int) -> np.ndarray:
    return -np.floor_divide(-np.asarray(a, dtype=np.float64), b)


def uuids(rng: np.random.Generator, n: int, version: bool = True) -> list[str]:
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    if version:
        raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
        raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    h = raw.tobytes().hex()
    return [f"{h[i:i + 8]}-{h[i + 8:i + 12]}-{h[i + 12:i + 16]}-{h[i + 16:i + 20]}-{h[i + 20:i + 32]}"
            for i in range(0, 32 * n, 32)]


def rand_str(rng: np.random.Generator, n: int, length: int) -> list[str]:
    idx = rng.integers(0, len(_ALNUM), size=(n, length))
    return ["".join(_ALNUM[i] for i in row) for row in idx]


@dataclass
class Fleet:
    """The generated fleet.  Tables are polars DataFrames; hot columns are mirrored in numpy."""

    spec: FleetSpec
    nodes: pl.DataFrame  # one row per node
    devices: pl.DataFrame  # one row per DCGM entity: a whole GPU or a MIG instance
    workloads: pl.DataFrame  # one row per (cell, workload)
    pods: pl.DataFrame  # one row per pod incarnation (uid)
    assign_pod: np.ndarray  # (pod row, device row) pairs, sorted by device
    assign_dev: np.ndarray
    dev_offsets: np.ndarray  # first device row of each cell, plus the total

    def __post_init__(self) -> None:
        sp = self.spec
        p = self.pods
        self.pod_profile = p["template"].to_numpy().astype(np.int64)
        self.pod_key = p["key"].to_numpy().astype(np.int64)
        started = p["started_s"].to_numpy()
        completed = p["completed_s"].cast(pl.Float64).fill_null(INF).to_numpy()
        created = p["created_s"].to_numpy()
        deleted = p["deleted_s"].cast(pl.Float64).fill_null(INF).to_numpy()
        rel = lambda a: np.clip(_ceil_div(np.minimum(a, 1e15) - sp.start_s, sp.interval_s), 0, sp.steps)  # noqa: E731
        self.k_run = rel(started).astype(np.int64), rel(completed).astype(np.int64)
        self.k_exist = rel(created).astype(np.int64), rel(deleted).astype(np.int64)
        self.dev_gap = self.devices["gap"].to_numpy()
        g0 = sp.start_s + int(GAP_START_H * 3600)
        self.k_gap = int(rel(np.array([g0]))[0]), int(rel(np.array([g0 + GAP_LEN_S]))[0])

    @property
    def times(self) -> np.ndarray:
        """Sample timestamps (unix seconds) of the whole window."""
        sp = self.spec
        return sp.start_s + sp.interval_s * np.arange(sp.steps, dtype=np.int64)

    def first_devices(self) -> dict[int, int]:
        """Each pod row holding a device -> the first (lowest) device row it holds."""
        first: dict[int, int] = {}
        for row, dev in zip(self.assign_pod.tolist(), self.assign_dev.tolist(), strict=True):
            first.setdefault(row, dev)
        return first

    def holders(self, c0: int, c1: int, k0: int, k1: int) -> np.ndarray:
        """Pod row holding each device of cells [c0, c1) at samples [k0, k1); -1 = unallocated."""
        d0, d1 = int(self.dev_offsets[c0]), int(self.dev_offsets[c1])
        out = np.full((d1 - d0, k1 - k0), -1, dtype=np.int64)
        lo, hi = np.searchsorted(self.assign_dev, [d0, d1])
        ap, ad = self.assign_pod[lo:hi], self.assign_dev[lo:hi] - d0
        ka = np.clip(self.k_run[0][ap], k0, k1) - k0
        kb = np.clip(self.k_run[1][ap], k0, k1) - k0
        n = kb - ka
        keep = n > 0
        ap, ad, ka, n = ap[keep], ad[keep], ka[keep], n[keep]
        if n.size:
            offs = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
            out[np.repeat(ad, n), np.repeat(ka, n) + offs] = np.repeat(ap, n)
        return out

    def gap_mask(self, c0: int, c1: int, k0: int, k1: int) -> np.ndarray:
        """True where the exporter was down (no DCGM sample) for devices of cells [c0, c1)."""
        d0, d1 = int(self.dev_offsets[c0]), int(self.dev_offsets[c1])
        mask = np.zeros((d1 - d0, k1 - k0), dtype=bool)
        g0, g1 = max(self.k_gap[0], k0) - k0, min(self.k_gap[1], k1) - k0
        if g1 > g0:
            mask[self.dev_gap[d0:d1], g0:g1] = True
        return mask


class _Builder:
    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self.nodes: dict[str, list] = {}
        self.devices: dict[str, list] = {}
        self.workloads: dict[str, list] = {}
        self.pod_cols: dict[str, list] = {k: [] for k in _POD_SCHEMA}
        self.n_pods = 0
        self.pod_uids: list[str] = []
        self.container_ids: list[str] = []
        self.assign: list[tuple[int, int]] = []
        self.keys: dict[tuple[str, str, str], int] = {}
        self.dev_offsets = [0]

    @staticmethod
    def _add(table: dict[str, list], **row: object) -> int:
        for k, v in row.items():
            table.setdefault(k, []).append(v)
        return len(next(iter(table.values()))) - 1

    # ------------------------------------------------------------------ one cell
    def add_cell(self, cell: int) -> None:
        sp = self.spec
        node_rows: dict[str, int] = {}
        gpu_rows: dict[str, list[int]] = {}
        # the nodes and workloads added later (KubeRay, scale-to-zero) draw from a generator of
        # their own, so the first ones keep the facts they always had
        for rng, nodes, workloads in (
                (np.random.default_rng([sp.seed, cell]), range(BASE_NODE_COUNT), range(BASE_WORKLOAD_COUNT)),
                (np.random.default_rng([sp.seed, cell, 14]), range(BASE_NODE_COUNT, SERVING_NODE_COUNT),
                 range(BASE_WORKLOAD_COUNT, SERVING_WORKLOAD_COUNT)),
                (np.random.default_rng([sp.seed, cell, 24]), range(SERVING_NODE_COUNT, SERVING_MEMORY_NODE_COUNT),
                 range(SERVING_WORKLOAD_COUNT, SERVING_MEMORY_WORKLOAD_COUNT)),
                (np.random.default_rng([sp.seed, cell, 243]), range(SERVING_MEMORY_NODE_COUNT, len(NODES)),
                 range(SERVING_MEMORY_WORKLOAD_COUNT, len(WORKLOADS)))):
            self._add_nodes(cell, rng, nodes, node_rows, gpu_rows)
            for t in workloads:
                self._add_workload(cell, t, WORKLOADS[t], cell_suffix(cell), rng, node_rows, gpu_rows)
            n_new = self.n_pods - len(self.pod_uids)
            self.pod_uids.extend(uuids(rng, n_new))
            ids = rng.bytes(32 * n_new).hex()
            self.container_ids.extend(ids[i:i + 64] for i in range(0, 64 * n_new, 64))
        self.dev_offsets.append(len(self.devices["cell"]))

    def _add_nodes(self, cell: int, rng: np.random.Generator, which: range, node_rows: dict[str, int],
                   gpu_rows: dict[str, list[int]]) -> None:
        sp = self.spec
        sfx = cell_suffix(cell)
        node_uids = uuids(rng, len(which))
        exporters = rand_str(rng, len(which), 5)
        for j, i in enumerate(which):
            nd = NODES[i]
            it = INSTANCE_TYPES[nd.instance_type]
            row = self._add(
                self.nodes, cell=cell, template=i, name=nd.name + sfx, pool=nd.pool, pool_kind=nd.pool_kind,
                instance_type=nd.instance_type, capacity_type=nd.capacity_type, zone=nd.zone,
                hostname_label=nd.hostname_label, honor_labels=nd.honor_labels, driver=nd.driver, mig=nd.mig,
                gpu_count=it.gpu_count, gpu_model=it.gpu_model, uid=node_uids[j],
                internal_ip=f"10.{20 + cell // 200}.{cell % 200}.{10 + i}",
                instance_id="i-0" + rng.bytes(8).hex()[:16],
                created_s=sp.start_s - int(rng.integers(12 * 86400, 40 * 86400)),
                exporter_pod=f"dcgm-exporter-{exporters[j]}",
                exporter_ip=f"10.{100 + i}.{cell % 250}.{2 + cell // 250}",
                nodeclaim=f"{nd.pool}-{rand_str(rng, 1, 5)[0]}" if nd.pool_kind == "karpenter" else "",
                pcie=nd.pcie, cadvisor=nd.cadvisor, rack=nd.rack,
            )
            node_rows[nd.name] = row
            gpu_uuids = ["GPU-" + u for u in uuids(rng, it.gpu_count, version=False)]
            rows = []
            entities = ([(0, MIG_FIRST_GI_ID + j) for j in range(MIG_INSTANCES)] if nd.mig
                        else [(g, -1) for g in range(it.gpu_count)])
            for g, gi in entities:
                rows.append(self._add(
                    self.devices, cell=cell, node=nd.name + sfx, node_row=row, gpu_index=g,
                    uuid=gpu_uuids[g], pci_bus_id=it.pci_bus_ids[g], device=f"nvidia{g}",
                    model_name=it.model_name, gpu_model=it.gpu_model, mig_instance=gi,
                    mig_profile=MIG_PROFILE if gi >= 0 else "",
                    fb_total=MIG_FB_MIB if gi >= 0 else it.fb_mib, idle_w=it.idle_w, max_w=it.max_w,
                    hash_id=cell * 1000 + len(self.devices.get("cell", [])) - self.dev_offsets[-1],
                    gap=nd.name == GAP_NODE,
                ))
            gpu_rows[nd.name] = rows

    def _add_workload(self, cell: int, t: int, wd, sfx: str, rng: np.random.Generator,
                      node_rows: dict[str, int], gpu_rows: dict[str, list[int]]) -> None:
        sp = self.spec
        name = wd.name + sfx
        wl_uid, owner_uid = uuids(rng, 2)
        created = sp.start_s - int(wd.age_days * 86400) - int(rng.integers(60, 3600))
        rs_hash = rand_str(rng, 1, 10)[0] if wd.kind == "Deployment" else ""
        if wd.kind == "Deployment":
            owner_kind, owner_name, pg = "ReplicaSet", f"{name}-{rs_hash}", f"podgroup-{owner_uid}"
        elif wd.kind == "StatefulSet":
            owner_kind, owner_name, owner_uid, pg = "StatefulSet", name, wl_uid, f"podgroup-{wl_uid}"
        elif wd.kind == "RayCluster":  # every group of one cluster has the same owner
            owner_kind, owner_name, pg = "RayCluster", name, ""
            owner_uid = uuids(np.random.default_rng([self.spec.seed, cell, *name.encode()]), 1)[0]
        else:
            owner_kind, owner_name, owner_uid, pg = "Job", name, wl_uid, f"{name}-{wl_uid}"
        wl = self._add(
            self.workloads, cell=cell, template=t, namespace=wd.namespace, name=name, kind=wd.kind,
            queue=wd.queue, uid=wl_uid, owner_kind=owner_kind, owner_name=owner_name, owner_uid=owner_uid,
            podgroup=pg, rs_hash=rs_hash, created_s=created, revision=rand_str(rng, 1, 10)[0],
        )
        pod_suffixes = rand_str(rng, len(wd.pods), 5)
        for r, (node, slots) in enumerate(wd.pods):
            nrow = node_rows[node]
            devs = [gpu_rows[node][s] for s in slots]
            if wd.kind == "Deployment":
                pod_name = f"{owner_name}-{pod_suffixes[r]}"
            elif wd.kind == "StatefulSet":
                pod_name = f"{name}-{r}"
            elif wd.kind == "RayCluster":  # KubeRay: <cluster>-head-<x>, <cluster>-<group>-worker-<x>
                kind = "head" if wd.ray_group == "headgroup" else f"{wd.ray_group}-worker"
                pod_name = f"{name}-{kind}-{pod_suffixes[r]}"
            else:
                pod_name = f"{name}-{wd.task}-{r}"
            self._add_pods(cell, t, wl, wd, pod_name, r, nrow, devs, self._lifecycle(wd.lifecycle, created, rng))

    def _lifecycle(self, kind: str, created: int, rng: np.random.Generator) -> list[tuple]:
        """(created, scheduled, started, completed|None, deleted|None, final phase) per incarnation.

        Only incarnations that started by the last sample exist; a completion after the last
        sample is treated as "still running at the end of the window" (so every completion is
        visible in at least one kube-state-metrics sample)."""
        sp = self.spec
        s0, end, iv = sp.start_s, sp.end_s, sp.interval_s
        last = end - iv
        out: list[tuple] = []
        if kind == "steady":
            sched = created + 1 + int(rng.integers(0, 900))
            out.append((created + 1, sched, sched + int(rng.integers(5, 120)), None, None, "Running"))
        elif kind == "restart":
            n = (end - s0) // RESTART_MIN_S + 2
            durations = rng.integers(RESTART_MIN_S, RESTART_MAX_S + 1, size=n).tolist()
            delays = rng.integers(2, 8, size=n).tolist()
            started = s0 - int(rng.integers(60, RESTART_MIN_S))
            c = started - int(rng.integers(3, 9))
            for dur, delay in zip(durations, delays, strict=True):
                if started > last:
                    break
                done = started + dur
                if done > last:
                    out.append((c, c + 1, started, None, None, "Running"))
                    break
                # Volcano's RestartTask deletes the failed pod (after the next scrape) and
                # recreates it with the same name and a new uid.
                deleted = s0 + ((done - s0) // iv + 1) * iv + 3
                out.append((c, c + 1, started, done, deleted, "Failed"))
                c = deleted + 1
                started = c + 1 + delay
        else:  # nightly
            for day in range(s0 - s0 % 86400 - 86400, end, 86400):
                c = day + NIGHTLY_START_H * 3600 + 1
                started = c + 1 + int(rng.integers(3, 20))
                done = day + NIGHTLY_END_H * 3600 - int(rng.integers(0, 25 * 60))
                if started > last or done < s0:
                    continue
                if done > last:
                    out.append((c, c + 1, started, None, None, "Running"))
                else:
                    out.append((c, c + 1, started, done, None, "Succeeded"))
        return out

    def _add_pods(self, cell: int, t: int, wl: int, wd, pod_name: str, replica: int, nrow: int,
                  devs: list[int], incs: list[tuple]) -> None:
        """Append the incarnations of one pod name (same name, node and GPUs; new uid each)."""
        n = len(incs)
        if not n:
            return
        key = self.keys.setdefault((wd.namespace, pod_name, wd.container_name), len(self.keys))
        row0 = self.n_pods
        cols = self.pod_cols
        static = {"cell": cell, "template": t, "workload": wl, "namespace": wd.namespace, "name": pod_name,
                  "node": self.nodes["name"][nrow], "node_row": nrow, "replica": replica,
                  "container": wd.container_name, "gpus": len(devs), "resource": wd.resource, "key": key}
        for k, v in static.items():
            cols[k].extend([v] * n)
        for k, v in zip(("created_s", "scheduled_s", "started_s", "completed_s", "deleted_s", "phase"),
                        zip(*incs, strict=True), strict=True):
            cols[k].extend(v)
        net = f"10.{100 + self.nodes['template'][nrow]}.{cell % 250}."
        cols["pod_ip"].extend([f"{net}{10 + row % 240}" for row in range(row0, row0 + n)])
        self.assign.extend((row, d) for row in range(row0, row0 + n) for d in devs)
        self.n_pods += n

    def finish(self) -> Fleet:
        pods = pl.DataFrame(self.pod_cols, schema=_POD_SCHEMA).with_columns(
            uid=pl.Series(self.pod_uids), container_id=pl.Series(self.container_ids))
        # the nightly job and its pods are garbage-collected NIGHTLY_TTL_S after the last pod
        # finished (and after at least one scrape saw them finished)
        nightly = [t for t, w in enumerate(WORKLOADS) if w.lifecycle == "nightly"]
        iv, s0 = self.spec.interval_s, self.spec.start_s
        gone = (
            pods.filter(pl.col("template").is_in(nightly))
            .group_by("workload", "created_s")
            .agg(done=pl.col("completed_s").max(), running=pl.col("completed_s").null_count())
            .filter(pl.col("running") == 0)
            .with_columns(gone=pl.max_horizontal(
                pl.col("done") + NIGHTLY_TTL_S, s0 + (pl.col("done") - s0 + iv - 1) // iv * iv + 3))
            .select("workload", "created_s", "gone")
        )
        pods = (pods.join(gone, on=["workload", "created_s"], how="left", maintain_order="left")
                .with_columns(deleted_s=pl.coalesce("deleted_s", "gone")).drop("gone"))
        a = np.array(self.assign, dtype=np.int64).reshape(-1, 2)
        order = np.argsort(a[:, 1], kind="stable")
        return Fleet(
            spec=self.spec,
            nodes=pl.DataFrame(self.nodes),
            devices=pl.DataFrame(self.devices),
            workloads=pl.DataFrame(self.workloads),
            pods=pods,
            assign_pod=a[order, 0].copy(),
            assign_dev=a[order, 1].copy(),
            dev_offsets=np.array(self.dev_offsets, dtype=np.int64),
        )


_POD_SCHEMA = {
    "cell": pl.Int64, "template": pl.Int64, "workload": pl.Int64, "namespace": pl.String, "name": pl.String,
    "node": pl.String, "node_row": pl.Int64, "replica": pl.Int64, "container": pl.String, "gpus": pl.Int64,
    "resource": pl.String, "created_s": pl.Int64, "scheduled_s": pl.Int64, "started_s": pl.Int64,
    "completed_s": pl.Int64, "deleted_s": pl.Int64, "phase": pl.String, "key": pl.Int64, "pod_ip": pl.String,
}


def build_fleet(spec: FleetSpec | None = None) -> Fleet:
    """Build the fleet described by `spec` (default: one cell, two days, 300 s samples)."""
    spec = spec or FleetSpec()
    b = _Builder(spec)
    for cell in range(spec.cell_count):
        b.add_cell(cell)
    return b.finish()
