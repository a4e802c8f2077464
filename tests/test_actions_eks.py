"""Spot migration on EKS managed node groups, against a moto server (loopback, free port)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuinsight.actions import ApplyFailed, ClusterState, Eks, Kube, apply_plan, attach_actions, rollback
from gpuinsight.actions.audit import rows
from gpuinsight.errors import BadInput
from gpuinsight.plan import Plan, Recommendation
from gpuinsight.warehouse import Warehouse
from tests.k8s_apply_server import ApplyKubeAPI, _deployment, live_state

CLUSTER, OD, SPOT = "prod", "gpu-a100-od", "gpu-a100-spot"


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture()
def eks(moto_url: str) -> Eks:
    import boto3

    client = boto3.client("eks", region_name="us-east-1", endpoint_url=moto_url, aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    for name in client.list_clusters()["clusters"]:
        for group in client.list_nodegroups(clusterName=name)["nodegroups"]:
            client.delete_nodegroup(clusterName=name, nodegroupName=group)
        client.delete_cluster(name=name)
    client.create_cluster(name=CLUSTER, roleArn="arn:aws:iam::123456789012:role/eks",
                          resourcesVpcConfig={"subnetIds": ["subnet-a", "subnet-b"]})
    client.create_nodegroup(clusterName=CLUSTER, nodegroupName=OD, capacityType="ON_DEMAND",
                            instanceTypes=["p4d.24xlarge"], subnets=["subnet-a", "subnet-b"],
                            nodeRole="arn:aws:iam::123456789012:role/node", labels={"gpu": "a100"},
                            scalingConfig={"minSize": 2, "maxSize": 6, "desiredSize": 4})
    return Eks(client)


@pytest.fixture()
def api() -> Iterator[ApplyKubeAPI]:
    server = ApplyKubeAPI()
    server.add("deployments", _deployment("ml", "bert-train", gpus=8))
    with server:
        yield server


def state_for(api: ApplyKubeAPI, *, full_spec: dict[str, Any] | None = None) -> ClusterState:
    state = live_state(api)
    spec = full_spec or {"clusterName": CLUSTER, "instanceTypes": ["p4d.24xlarge"],
                         "scalingConfig": {"minSize": 2, "maxSize": 6, "desiredSize": 4}}
    state.node_pools[OD] = {"name": OD, "kind": "eks-nodegroup", "spec": spec}
    for n in ("a100-1", "a100-2"):
        state.nodes[n] = {"node": n, "node_pool": OD, "node_pool_kind": "eks-nodegroup", "gpu_count": 8, "labels": {}}
    state.pods = [{"namespace": "ml", "name": "bert-train-abc", "node": "a100-1", "workload_kind": "Deployment",
                   "workload": "bert-train", "gpu_request": 8.0},
                  {"namespace": "ml", "name": "other-xyz", "node": "a100-2", "workload_kind": "Deployment",
                   "workload": "other", "gpu_request": 8.0}]
    return state


def spot_plan(state: ClusterState) -> Plan:
    rec = Recommendation(rule="spot", title="bert-train to spot", namespace="ml", workload="bert-train",
                         target={"kind": "Deployment", "namespace": "ml", "name": "bert-train"},
                         proposed={"capacity_type": "spot", "node_pool": SPOT, "from_node_pool": OD,
                                   "node_pool_kind": "eks-nodegroup", "instance_types": ["p4d.24xlarge", None],
                                   "gpu_model": "A100-40GB"})
    plan = Plan("plan-eks", datetime.now(UTC), None, (None, None), [rec])
    attach_actions(plan, state, strict=True)
    return plan


def test_spot_node_group_created_scaled_and_rolled_back(api: ApplyKubeAPI, eks: Eks, tmp_path: Path) -> None:
    plan = spot_plan(state_for(api))
    create, scale, pin = plan.recommendations[0].actions  # builder order; apply sorts by phase
    assert create["call"] == "create_nodegroup" and create["args"]["capacityType"] == "SPOT"
    assert create["args"]["instanceTypes"] == ["p4d.24xlarge"] and "subnets" not in create["args"]
    assert create["copy_from"] == OD
    assert scale["call"] == "update_nodegroup_config"
    assert scale["args"]["scalingConfig"] == {"minSize": 2, "desiredSize": 3}  # a100-1 only ran bert-train
    assert pin["object"]["spec"]["template"]["spec"]["nodeSelector"] == {"eks.amazonaws.com/capacityType": "SPOT",
                                                                          "eks.amazonaws.com/nodegroup": SPOT}
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        with pytest.raises(BadInput, match="EKS client"):
            apply_plan(plan, Kube(api.client()), wh)
        result = apply_plan(plan, Kube(api.client()), wh, eks=eks)
        assert [s.operation for s in result.steps] == ["eks:create_nodegroup", "apply", "eks:update_nodegroup_config"]
        spot = eks.describe(CLUSTER, SPOT)
        assert spot is not None and spot["capacityType"] == "SPOT" and spot["instanceTypes"] == ["p4d.24xlarge"]
        assert spot["subnets"] == ["subnet-a", "subnet-b"] and spot["nodeRole"].endswith("role/node")
        assert {"key": "gpuinsight.io/spot", "value": "true", "effect": "NO_SCHEDULE"} in spot["taints"]
        assert spot["labels"] == {"gpu": "a100"}
        assert eks.describe(CLUSTER, OD)["scalingConfig"]["desiredSize"] == 3
        tol = api.get_obj("deployments", "ml", "bert-train")["spec"]["template"]["spec"]["tolerations"]
        assert tol == [{"key": "gpuinsight.io/spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
        audit = rows(wh, plan.plan_id)
        assert audit[2]["previous"]["scalingConfig"]["desiredSize"] == 4 and audit[0]["previous"] is None

        undone = rollback(plan.plan_id, Kube(api.client()), wh, eks=eks)
        assert [s.operation for s in undone.steps] == ["eks:update_nodegroup_config", "apply", "eks:create_nodegroup"]
        assert eks.describe(CLUSTER, OD)["scalingConfig"] == {"minSize": 2, "maxSize": 6, "desiredSize": 4}
        gone = eks.describe(CLUSTER, SPOT)
        assert gone is None or gone["status"] == "DELETING"
        spec = api.get_obj("deployments", "ml", "bert-train")["spec"]["template"]["spec"]
        assert "tolerations" not in spec and "nodeSelector" not in spec


def test_eks_drift_and_bad_arguments_are_refused(api: ApplyKubeAPI, eks: Eks, tmp_path: Path) -> None:
    plan = spot_plan(state_for(api))
    eks.client.update_nodegroup_config(clusterName=CLUSTER, nodegroupName=OD, scalingConfig={"desiredSize": 5})
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        with pytest.raises(ApplyFailed, match=r"gpu-a100-od scalingConfig.desiredSize is 5, the plan saw 4"):
            apply_plan(plan, Kube(api.client()), wh, eks=eks)
        assert eks.describe(CLUSTER, SPOT) is None
        plan = spot_plan(state_for(api, full_spec={**eks.describe(CLUSTER, OD)}))
        create = plan.recommendations[0].actions[0]
        assert create["args"]["subnets"] == ["subnet-a", "subnet-b"]  # copied at build time when known
        create["args"]["scalingConfig"]["desiredSize"] = "many"  # a hand edit
        with pytest.raises(BadInput, match=r"actions\[0\]\.args\.scalingConfig\.desiredSize: 'many'"):
            apply_plan(plan, Kube(api.client()), wh, eks=eks)
        create["args"]["scalingConfig"]["desiredSize"] = 1
        create["args"]["instanceTypes"] = "p4d.24xlarge"  # botocore's own validation (the EKS dry run)
        with pytest.raises(ApplyFailed, match=r"dry run: aws-eks create_nodegroup args: .*instanceTypes"):
            apply_plan(plan, Kube(api.client()), wh, eks=eks)
        assert eks.describe(CLUSTER, SPOT) is None and not [w for w in api.writes() if not w[2]]
