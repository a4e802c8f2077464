"""One savings ledger per plan: every node's cost and every GPU-hour is claimed at most once.

Rules run in a fixed order (docs/rules.md, "Savings ledger"): idle reclaim, consolidation
(MIG / MPS / time-slicing), binpack on what is left, spot, queues. Each saving is a set of
claims on nodes (dollars per hour, and GPUs for savings that return GPUs to the pool); a claim
is granted only up to what is left of the node, so a later finding never counts what an
earlier one took. GPUs returned to the pool on a node stay reserved: binpack may not fill them
with moved work (that would count them twice). :meth:`check` verifies the invariants on every
plan: the claims on a node never exceed its cost, and the plan's total never exceeds the spend.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpuinsight.rules.common import monthly, num

EPS_USD_H = 1e-6

NodeKey = tuple[str, str]  # (cluster, node)


class LedgerError(AssertionError):
    """A plan broke a savings invariant: a bug in a rule, never bad input."""


@dataclass
class Claim:
    finding: str
    node: NodeKey
    usd_per_hour: float
    gpus: float = 0.0


@dataclass
class NodeAccount:
    usd_per_hour: float          # what the node costs per hour (its current price, else its window average)
    gpu_count: float
    current: bool                # present at the end of the window
    claimed_usd_per_hour: float = 0.0
    gpus_returned: float = 0.0   # GPUs given back to the pool by earlier findings (reserved)
    released_by: str | None = None
    provisional: bool = False    # cost not known from node_costs (see Ledger.account)


@dataclass
class Ledger:
    nodes: dict[NodeKey, NodeAccount] = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    claimed_workloads: dict[tuple[str, str, str], str] = field(default_factory=dict)  # -> finding id
    _by_finding: dict[str, list[Claim]] = field(default_factory=dict, repr=False)
    _by_finding_n: int = field(default=-1, repr=False)

    @classmethod
    def from_frames(cls, frames: dict[str, Any]) -> Ledger:
        """Node costs from ``node_costs``: the larger of the current price and the window average."""
        from gpuinsight.sql.rows import typed_rows

        ledger = cls()
        for n in typed_rows("node_costs", frames.get("node_costs")):
            ledger.nodes[n.node_key] = NodeAccount(max(num(n.usd_per_hour), num(n.avg_usd_per_hour)),
                                            num(n.gpu_count), bool(n.present_at_end))
        return ledger

    def account(self, key: NodeKey, usd_per_hour: float = 0.0, gpu_count: float = 0.0, *,
                price_known: bool = False) -> NodeAccount:
        """The node's account. A node ``node_costs`` did not list is opened on first use: at its
        price when the caller knows it, else provisionally, its cost growing by each workload's
        own share (each workload is claimed once, so the node is never over-claimed)."""
        acc = self.nodes.get(key)
        if acc is None:
            acc = self.nodes[key] = NodeAccount(usd_per_hour, gpu_count, False, provisional=not price_known)
        elif acc.provisional:
            if price_known:
                acc.usd_per_hour, acc.provisional = max(usd_per_hour, acc.claimed_usd_per_hour), False
            else:
                acc.usd_per_hour += usd_per_hour
            acc.gpu_count = max(acc.gpu_count, gpu_count)
        return acc

    def claim(self, finding: str, key: NodeKey, usd_per_hour: float, gpus: float = 0.0) -> float:
        """Claim up to ``usd_per_hour`` of the node for ``finding``; returns what was granted."""
        acc = self.account(key)
        granted = max(0.0, min(usd_per_hour, acc.usd_per_hour - acc.claimed_usd_per_hour))
        if granted <= 0:
            return 0.0
        share = granted / usd_per_hour if usd_per_hour > 0 else 0.0
        acc.claimed_usd_per_hour += granted
        acc.gpus_returned += gpus * share
        self.claims.append(Claim(finding, key, granted, gpus * share))
        return granted

    def release(self, finding: str, key: NodeKey) -> float:
        """Release a whole node: claims what earlier findings left of its cost."""
        acc = self.account(key)
        acc.released_by = finding
        return self.claim(finding, key, acc.usd_per_hour - acc.claimed_usd_per_hour)

    def reserved_gpus(self, key: NodeKey) -> float:
        acc = self.nodes.get(key)
        return 0.0 if acc is None else acc.gpus_returned

    def is_released(self, key: NodeKey) -> bool:
        acc = self.nodes.get(key)
        return acc is not None and acc.released_by is not None

    def claim_workload(self, cluster: str, namespace: str, workload: str, finding: str) -> None:
        self.claimed_workloads[(cluster, namespace, workload)] = finding

    def workload_claimed(self, cluster: Any, namespace: Any, workload: Any) -> bool:
        return (str(cluster or ""), str(namespace), str(workload)) in self.claimed_workloads

    # -- totals and invariants -------------------------------------------------------------
    def spend_monthly_usd(self) -> float:
        return monthly(sum(a.usd_per_hour for a in self.nodes.values()))

    def claims_by_finding(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for c in self.claims:
            out[c.finding] += c.usd_per_hour
        return dict(out)

    def evidence_for(self, finding: str) -> list[dict[str, Any]]:
        """The claims behind one finding, per node, as its evidence shows them."""
        if self._by_finding_n != len(self.claims):  # index once per batch of claims
            index: dict[str, list[Claim]] = defaultdict(list)
            for c in self.claims:
                index[c.finding].append(c)
            self._by_finding, self._by_finding_n = index, len(self.claims)
        per: dict[NodeKey, list[float]] = {}
        for c in self._by_finding.get(finding, []):
            acc = per.setdefault(c.node, [0.0, 0.0])
            acc[0] += c.usd_per_hour
            acc[1] += c.gpus
        return [{"node": node, "usd_per_hour": round(usd, 4), "gpus": round(gpus, 3),
                 "node_usd_per_hour": round(self.nodes[(cluster, node)].usd_per_hour, 4)}
                for (cluster, node), (usd, gpus) in sorted(per.items())]

    def check(self, savings: dict[str, float]) -> None:
        """Raise :class:`LedgerError` if a saving exceeds its claims, a node is over-claimed or
        the plan's total exceeds the spend. ``savings`` maps finding id -> monthly dollars."""
        per_node: dict[NodeKey, float] = defaultdict(float)
        for c in self.claims:
            per_node[c.node] += c.usd_per_hour
        for key, total in per_node.items():
            cost = self.nodes[key].usd_per_hour
            if total > cost + EPS_USD_H:
                raise LedgerError(f"node {key[1]}: claims of ${total:.4f}/h exceed its cost of ${cost:.4f}/h")
        claimed = self.claims_by_finding()
        for finding, usd in savings.items():
            if usd > monthly(claimed.get(finding, 0.0)) + 0.01:
                raise LedgerError(f"finding {finding}: ${usd:.2f}/month exceeds its claims "
                                  f"(${monthly(claimed.get(finding, 0.0)):.2f}/month)")
        total, spend = sum(savings.values()), self.spend_monthly_usd()
        if total > spend + 0.01:
            raise LedgerError(f"plan total ${total:.2f}/month exceeds the spend ${spend:.2f}/month")
