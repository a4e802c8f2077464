"""What an earlier finding does is a named effect a later rule reads through a typed question
(gpuinsight/rules/effects.py), keyed by cluster-aware keys; the rules read typed rows of the
models' declared columns (gpuinsight/sql/rows.py)."""

from __future__ import annotations

import polars as pl
import pytest

from gpuinsight.keys import BudgetKey, BudgetKind, NodeKey, PodKey, WorkloadKey
from gpuinsight.rules.context import PlanContext
from gpuinsight.rules.effects import (
    GpusPartitioned,
    PodLeaves,
    PodsMoved,
    Recorded,
    SharingHost,
    WorkloadLeaves,
)
from gpuinsight.rules.engine import evaluate_plan
from gpuinsight.sql import load_registry
from gpuinsight.sql.rows import make_row, row_type, typed_rows
from tests.rule_fleets import Fleet, Node, Pod, Usage

IDLE = Usage(gr_mean=0.0, gr_p50=0.0, gr_p95=0.0, gr_max=0.01, active_fraction=0.0)


def idle_beside_a_pool(cluster: str, *, idle: bool = True) -> Fleet:
    """Two 3-GPU nodes holding 2 GPUs each: with the notebook on ``a`` scaled away, ``a``'s last
    pod fits on ``b`` (``a``'s returned GPU is not refilled) and ``a`` can be released."""
    f = Fleet([Node("a", gpus=3, price=30.0), Node("b", gpus=3, price=30.0)],
              [Pod("nb-0", "a", "nb"), Pod("w1-0", "a", "w1"), Pod("w2-0", "b", "w2"), Pod("w3-0", "b", "w3")],
              cluster=cluster)
    if idle:
        f.usage[("ns", "nb")] = IDLE
    return f


def test_binpack_plans_around_the_pods_an_idle_finding_scales_away() -> None:
    recs, ctx = evaluate_plan(idle_beside_a_pool("c").frames())
    (idle,) = [r for r in recs if r.rule == "idle"]
    (binpack,) = [r for r in recs if r.rule == "binpack"]
    nb, w1 = WorkloadKey("c", "ns", "nb"), WorkloadKey("c", "ns", "w1")
    # the effects, in order, each with the finding that causes it
    assert ctx.effects == (Recorded(idle.id, WorkloadLeaves(nb)),
                           Recorded(binpack.id, PodsMoved(w1, (PodKey("c", "ns", "w1-0"),), "a", "b", ())))
    # ... read by the later rule through the typed questions
    assert ctx.workload_leaves(nb) == idle.id and ctx.leaves_by(PodKey("c", "ns", "nb-0"), nb) == idle.id
    assert ctx.is_gone(PodKey("c", "ns", "nb-0"), nb) and not ctx.is_gone(PodKey("c", "ns", "w1-0"), w1)
    assert binpack.proposed["nodes_freed"] == ["a"]
    assert binpack.proposed["pods_leaving"] == [{"namespace": "ns", "pod": "nb-0", "finding": idle.id}]
    assert ctx.node_after_moves(PodKey("c", "ns", "w1-0"), "a") == "b" and ctx.was_moved(PodKey("c", "ns", "w1-0"))
    assert ctx.relocation(w1) == {"a": "b"} and ctx.relocation(nb) == {}
    # without the idle finding binpack has nothing to release: the effect is what made room
    alone, _ = evaluate_plan(idle_beside_a_pool("c").frames(), only={"binpack"})
    assert alone == []


def _two_clusters(east: Fleet, west: Fleet) -> dict[str, pl.DataFrame]:
    fe, fw = east.frames(), west.frames()
    out = {}
    for name, frame in fe.items():
        if name == "mig_catalog":  # the catalog is the fleet's, not a cluster's
            out[name] = frame
        else:
            out[name] = pl.concat([frame, fw[name]], how="diagonal_relaxed")
    return out


def test_two_clusters_with_the_same_names_keep_their_effects_apart() -> None:
    """The same stack in ``east`` and ``west``: only east's notebook is idle. Its effect says
    nothing about west's pod of the same namespace and name, and west's pool is not planned as
    if its notebook had left."""
    recs, ctx = evaluate_plan(_two_clusters(idle_beside_a_pool("east"), idle_beside_a_pool("west", idle=False)))
    assert sorted((r.rule, r.cluster) for r in recs) == [("binpack", "east"), ("idle", "east")]
    east_nb, west_nb = WorkloadKey("east", "ns", "nb"), WorkloadKey("west", "ns", "nb")
    (idle,) = [r for r in recs if r.rule == "idle"]
    assert ctx.workload_leaves(east_nb) == idle.id and ctx.workload_leaves(west_nb) is None
    assert not ctx.is_gone(PodKey("west", "ns", "nb-0"), west_nb)
    assert ctx.node_after_moves(PodKey("west", "ns", "w1-0"), "a") == "a"  # east's w1 moved; west's did not
    assert ctx.node_after_moves(PodKey("east", "ns", "w1-0"), "a") == "b"
    assert {type(r.effect).__name__ for r in ctx.effects} == {"WorkloadLeaves", "PodsMoved"}
    assert all(getattr(r.effect, "workload", None) is None or r.effect.workload.cluster == "east" for r in ctx.effects)


def test_effects_answer_per_cluster_and_per_budget() -> None:
    ctx = PlanContext()
    east_pdb = BudgetKey(BudgetKind.PDB, "east", "ns", "api")
    west_pdb = east_pdb._replace(cluster="west")
    gang = BudgetKey(BudgetKind.GANG, "east", "ns", "api")
    pod = PodKey("east", "ns", "api-0")
    ctx.record("mig-1", PodLeaves(PodKey("east", "ns", "small-0")), GpusPartitioned(NodeKey("east", "a"), 1.0),
               SharingHost(NodeKey("east", "h")))
    ctx.record("mig-1", GpusPartitioned(NodeKey("east", "a"), 2.0))
    ctx.record("binpack-1", PodsMoved(WorkloadKey("east", "ns", "api"), (pod,), "a", "b", (east_pdb, gang)))
    assert ctx.evictions_used(east_pdb) == 1 and ctx.evictions_used(gang) == 1 and ctx.evictions_used(west_pdb) == 0
    assert str(east_pdb) == "pdb:east/ns/api" and str(gang) == "gang:east/ns/api" and east_pdb != gang
    assert ctx.partitioned_gpus(NodeKey("east", "a")) == 3.0 and ctx.partitioned_gpus(NodeKey("west", "a")) == 0.0
    assert ctx.is_sharing_host(NodeKey("east", "h")) and not ctx.is_sharing_host(NodeKey("west", "h"))
    assert ctx.pod_leaves(PodKey("east", "ns", "small-0")) == "mig-1"
    assert ctx.pod_leaves(PodKey("west", "ns", "small-0")) is None
    assert ctx.leaves_by(pod, WorkloadKey("east", "ns", "api")) == "binpack-1"
    assert [type(e).__name__ for e in ctx.effects_of("mig-1")] == [
        "PodLeaves", "GpusPartitioned", "SharingHost", "GpusPartitioned"]
    with pytest.raises(TypeError, match="not an effect"):
        ctx.record("x", ("east", "a"))  # type: ignore[arg-type]


def test_rows_are_typed_by_the_models_declared_columns() -> None:
    frame = pl.DataFrame({"cluster": ["east"], "namespace": ["ns"], "pod": ["p-0"], "workload": ["p"],
                          "node": ["a"], "not_declared": [1]})
    (row,) = typed_rows("placement_current", frame)
    assert type(row) is row_type("placement_current") and row.model == "placement_current"
    assert row.pod_key == PodKey("east", "ns", "p-0") and row.node_key == NodeKey("east", "a")
    assert row.workload_key == WorkloadKey("east", "ns", "p")
    assert row.gang is None  # declared, absent from a hand-built frame
    with pytest.raises(AttributeError, match="declares no column 'not_declared'"):
        _ = row.not_declared  # a column the model does not declare is an error where it is read
    with pytest.raises(AttributeError):
        _ = make_row("nodes_current", node="a").pod_key  # no pod column: no pod key
    with pytest.raises(TypeError, match="declares no column"):
        make_row("nodes_current", gpu_product="H100")
    with pytest.raises(AttributeError):
        row.node = "b"  # type: ignore[misc]  # frozen


def test_every_model_a_plan_reads_has_a_row_type() -> None:
    from gpuinsight.rules.engine import needed_frames

    registry = load_registry()
    for model in sorted(needed_frames()):
        cls = row_type(model)
        assert cls.model == model and cls._fields == registry.get(model).columns, model
