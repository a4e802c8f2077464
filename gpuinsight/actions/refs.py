"""References to single Kubernetes objects (the kinds: :mod:`gpuinsight.plan.vocabulary`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuinsight.plan.vocabulary import KindInfo, kind_info


@dataclass(frozen=True)
class Ref:
    """One object: ``Ref("Queue", None, "team-a")``; ``kind`` is the alias (VolcanoJob)."""

    kind: str
    namespace: str | None
    name: str

    @property
    def info(self) -> KindInfo:
        return kind_info(self.kind)

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"

    @property
    def path(self) -> str:
        return f"{self.info.collection_path(self.namespace)}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"apiVersion": self.info.api_version, "kind": self.info.kind,
                "namespace": self.namespace, "name": self.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ref:
        info = kind_info(str(data.get("kind")), data.get("apiVersion"))
        return cls(info.alias, data.get("namespace") if info.namespaced else None, str(data["name"]))

    @classmethod
    def of(cls, obj: dict[str, Any]) -> Ref:
        info = kind_info(str(obj.get("kind")), obj.get("apiVersion"))
        meta = obj.get("metadata") or {}
        return cls(info.alias, meta.get("namespace") if info.namespaced else None, str(meta.get("name")))

    def skeleton(self) -> dict[str, Any]:
        """``apiVersion``/``kind``/``metadata`` of an apply configuration for this object."""
        meta: dict[str, Any] = {"name": self.name}
        if self.namespace:
            meta["namespace"] = self.namespace
        return {"apiVersion": self.info.api_version, "kind": self.info.kind, "metadata": meta}
