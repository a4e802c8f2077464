"""Loads that cannot move figures silently, and parsers with bounds (docs/collectors.md, "Bad input").

* two objects with one key and different content are refused naming both items; the same object
  listed twice is loaded once with a counted note;
* a time centuries ahead (wherever in the object) and a node with more GPUs than any instance type
  are refused naming the item and field;
* YAML: an alias bomb is refused before it expands (also under an address-space limit, where
  it used to crash the process), a document that contains itself too, and a document too large
  to parse; a few anchors in hand-written YAML are fine.
"""

from __future__ import annotations

import copy
import json
import resource
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuinsight.config import Config
from gpuinsight.errors import BadInput
from gpuinsight.paths import sample_data_dir
from gpuinsight.sources.kubernetes import load_dump_dir
from gpuinsight.warehouse import Warehouse
from tests.faults import GPUINSIGHT
from tests.input_cases import fingerprint

SAMPLE_DUMP = sample_data_dir() / "kubectl"


def dump(tmp_path: Path, stem: str, edit: Callable[[list[dict[str, Any]]], None]) -> Path:
    folder = tmp_path / "dump"
    folder.mkdir(exist_ok=True)
    doc = json.loads((SAMPLE_DUMP / f"{stem}.json").read_text())
    edit(doc["items"])
    (folder / f"{stem}.json").write_text(json.dumps(doc))
    return folder


def load(tmp_path: Path, folder: Path) -> Any:
    with Warehouse(tmp_path / "w.duckdb") as wh:
        return load_dump_dir(wh, Config(db_path=wh.path, cluster="c"), folder)


def test_two_pods_with_one_uid_and_different_content_are_refused_naming_both(tmp_path: Path) -> None:
    def twin(items: list[dict[str, Any]]) -> None:
        other = copy.deepcopy(items[1])
        other["metadata"]["uid"] = items[0]["metadata"]["uid"]
        items.append(other)

    folder = dump(tmp_path, "pods", twin)
    twin_at = len(json.loads((SAMPLE_DUMP / "pods.json").read_text())["items"])  # appended last
    with pytest.raises(BadInput) as info:
        load(tmp_path, folder)
    assert str(info.value) == (f"{folder / 'pods.json'}: items 0 (training/llm-pretrain-worker-0) and {twin_at} "
                               "(training/llm-pretrain-worker-1) are the same Pod (uid b74d82bc-7edc-47dd-b022-ed58d6e48adb) "
                               "with different content (first: annotations); a dump lists each object once: which "
                               "one is true is unknown")
    with Warehouse(tmp_path / "w.duckdb", read_only=True) as wh:
        assert wh.count("pods") == 0


def test_the_same_object_listed_twice_is_loaded_once_with_a_note(tmp_path: Path) -> None:
    folder = dump(tmp_path, "queues", lambda items: items.append(copy.deepcopy(items[2])))
    report = load(tmp_path, folder)
    assert report.rows["queues"] == 7
    assert f"{folder / 'queues.json'}: 1 item(s) listed twice with the same content, loaded once" in report.notes


@pytest.mark.parametrize(("stem", "edit", "where"), [
    ("pods", lambda items: items[0]["status"].update(startTime="2999-01-01T00:00:00Z"),
     r"item 0 \(training/llm-pretrain-worker-0\): status.startTime: implausible time: 2999-01-01T00:00:00 is in the "
     "future"),
    ("pods", lambda items: items[3]["metadata"].update(creationTimestamp="2399-06-01T00:00:00Z"),
     r"item 3 \(.*\): metadata.creationTimestamp: implausible time: 2399-06-01T00:00:00 is in the future"),
    ("nodes", lambda items: (items[0]["metadata"].update(labels={}),
                             items[0]["status"]["capacity"].update({"nvidia.com/gpu": "4096"})),
     r"item 0 \(h100-od-1\): 4,096 physical GPUs on one node .* is more than any instance type has \(16\)"),
])
def test_absurd_but_parseable_values_are_refused_naming_item_and_field(tmp_path: Path, stem: str, edit: Any,
                                                                       where: str) -> None:
    with pytest.raises(BadInput, match=rf"{stem}.json: {where}"):
        load(tmp_path, dump(tmp_path, stem, edit))


def test_a_catalog_listing_a_larger_node_type_raises_the_gpu_bound(tmp_path: Path) -> None:
    from gpuinsight.sources.prices import load_catalog

    def twenty(items: list[dict[str, Any]]) -> None:
        items[0]["metadata"]["labels"] = {"node.kubernetes.io/instance-type": "dense-l4-20"}
        items[0]["status"]["capacity"]["nvidia.com/gpu"] = "20"

    catalog = tmp_path / "onprem.csv"
    catalog.write_text("instance_type,gpu_model,gpu_count,on_demand_usd_per_hour,spot_usd_per_hour\n"
                       "dense-l4-20,L4,20,9.5,\n")
    folder = dump(tmp_path, "nodes", twenty)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        cfg = Config(db_path=wh.path, cluster="c")
        with pytest.raises(BadInput, match="20 physical GPUs on one node"):
            load_dump_dir(wh, cfg, folder)
        load_catalog(wh, cfg, catalog)
        load_dump_dir(wh, cfg, folder)
        assert wh.sql("SELECT gpu_count FROM nodes WHERE instance_type = 'dense-l4-20'").item() == 20


# -- YAML ----------------------------------------------------------------------------------------

def alias_bomb(kind: str, api: str, levels: int = 9, namespaced: bool = True) -> str:
    """A billion-element alias chain (10**levels) in the object's spec, a few hundred bytes."""
    lines = ["apiVersion: v1", "kind: List", "items:", f"- apiVersion: {api}", f"  kind: {kind}", "  metadata:",
             "    name: bomb", *(["    namespace: ml"] if namespaced else []), "  spec:",
             "    a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


BOMBS = [("queues", "Queue", "scheduling.volcano.sh/v1beta1", False),
         ("podgroups", "PodGroup", "scheduling.volcano.sh/v1beta1", True),
         ("nodepools", "NodePool", "karpenter.sh/v1", False),
         ("rayjobs", "RayJob", "ray.io/v1", True),
         ("rayclusters", "RayCluster", "ray.io/v1", True)]


@pytest.mark.parametrize(("stem", "kind", "api", "namespaced"), BOMBS, ids=[b[0] for b in BOMBS])
def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path, stem: str, kind: str, api: str,
                                                        namespaced: bool) -> None:
    folder = tmp_path / "dump"
    folder.mkdir()
    (folder / f"{stem}.yaml").write_text(alias_bomb(kind, api, namespaced=namespaced))
    with pytest.raises(BadInput, match=rf"{stem}.yaml: document 1: YAML aliases: expands to more than 1,048,576 bytes"):
        load(tmp_path, folder)


def test_a_yaml_alias_bomb_under_a_memory_limit_is_exit_2_and_changes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "dump"
    folder.mkdir()
    (folder / "rayjobs.yaml").write_text(alias_bomb("RayJob", "ray.io/v1"))
    shutil.copy(SAMPLE_DUMP / "nodes.json", folder / "nodes.json")
    db = tmp_path / "w.duckdb"
    Warehouse(db).close()
    with Warehouse(db, read_only=True) as wh:
        before = fingerprint(wh)
    limit = 1536 << 20  # address space: 1.5 GiB (the expanded document alone would need hundreds of GB)

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    res = subprocess.run([GPUINSIGHT, "collect", "kubernetes", "--from-dir", str(folder), "--db", str(db)],
                         capture_output=True, text=True, timeout=120, preexec_fn=capped)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert res.stderr.startswith(f"gpuinsight: error: {folder / 'rayjobs.yaml'}: document 1: YAML aliases: expands")
    with Warehouse(db, read_only=True) as wh:
        assert fingerprint(wh) == before


def test_a_yaml_document_that_contains_itself_or_is_too_large_is_refused(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuinsight.sources.k8s import dumpfile

    folder = tmp_path / "dump"
    folder.mkdir()
    path = folder / "queues.yaml"
    path.write_text("apiVersion: v1\nkind: List\nitems:\n- &q\n  apiVersion: scheduling.volcano.sh/v1beta1\n"
                    "  kind: Queue\n  metadata: {name: loop}\n  spec: {weight: 1, again: *q}\n")
    with pytest.raises(BadInput, match="queues.yaml: document 1: YAML aliases: an alias refers to a node that contains it"):
        dumpfile.read_objects(path)
    monkeypatch.setattr(dumpfile, "MAX_YAML_DOCUMENT_BYTES", 2000)
    queue = "- apiVersion: scheduling.volcano.sh/v1beta1\n  kind: Queue\n  metadata: {name: q%d}\n  spec: {weight: 1}\n"
    path.write_text("items:\n" + "".join(queue % i for i in range(10)) + "---\nitems:\n"
                    + "".join(queue % i for i in range(10, 40)))
    with pytest.raises(BadInput, match=r"queues.yaml: line 42: a YAML document of 0 MiB is more than gpuinsight parses"):
        dumpfile.read_objects(path)


def test_a_few_anchors_in_hand_written_yaml_are_fine(tmp_path: Path) -> None:
    folder = tmp_path / "dump"
    folder.mkdir()
    (folder / "queues.yaml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: scheduling.volcano.sh/v1beta1\n  kind: Queue\n  metadata: {name: a}\n"
        "  spec: &spec {weight: 2, capability: {nvidia.com/gpu: '16'}}\n"
        "- apiVersion: scheduling.volcano.sh/v1beta1\n  kind: Queue\n  metadata: {name: b}\n  spec: *spec\n")
    assert load(tmp_path, folder).rows["queues"] == 2
