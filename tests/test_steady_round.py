"""A plan's figures do not depend on the order the models summed floats in (steady_round): DuckDB
adds in parallel, and an incremental refresh stores rows in another order than a build from
scratch, so a sum's last bits vary between runs of the same data."""

from __future__ import annotations

import random
import re

import polars as pl

from gpuinsight.paths import queries_dir
from gpuinsight.plan import SETTLE_DIGITS, Recommendation, steady_round, steady_round_expr
from gpuinsight.rules.common import pct
from gpuinsight.rules.scale_to_zero import week_profile


def test_a_half_way_figure_rounds_one_way_whatever_the_order_of_its_sum() -> None:
    parts = [0.325, 0.872, 0.9, 0.018]
    forward, backward = sum(parts), sum(reversed(parts))
    assert forward != backward and round(forward, 2) != round(backward, 2)  # what flipped a plan's byte
    assert steady_round(forward, 2) == steady_round(backward, 2) == 2.12
    rng = random.Random(5)
    for _ in range(20_000):  # measured values of a few decimals, summed in two orders
        xs = [round(rng.uniform(0, 3), rng.choice([2, 3, 4])) for _ in range(rng.randint(2, 9))]
        a, b = sum(xs), sum(sorted(xs))
        for digits in (1, 2, 3):
            assert steady_round(a, digits) == steady_round(b, digits), (xs, digits)
        assert abs(steady_round(a, 2) - a) <= 0.005 + 1e-9  # still the figure, to its digits


def test_the_plan_layers_round_steadily() -> None:
    a, b = 0.012950000000000001, 0.01295  # an hour-of-week mean reached in two orders
    assert round(a * 100, 2) != round(b * 100, 2)
    assert week_profile([{"how": 3, "gr_avg": a}], "gr_avg", 100.0) == week_profile([{"how": 3, "gr_avg": b}],
                                                                                      "gr_avg", 100.0)
    assert round(0.021500000000000002 * 100, 1) != round(0.0215 * 100, 1)
    assert pct(0.021500000000000002) == pct(0.0215)
    saving = [Recommendation(rule="idle", title="t", monthly_savings_usd=x).monthly_savings_usd
              for x in (2.1149999999999998, 2.115)]
    assert saving == [2.12, 2.12]


def test_a_chart_column_rounds_steadily_too() -> None:
    rng = random.Random(11)
    forward, backward = [], []
    for _ in range(5_000):
        xs = [round(rng.uniform(0, 1), rng.choice([3, 4])) for _ in range(rng.randint(2, 9))]
        forward.append(sum(xs) / len(xs))
        backward.append(sum(sorted(xs)) / len(xs))
    frame = pl.DataFrame({"a": forward, "b": backward})
    assert (frame["a"] != frame["b"]).any()  # the orders left different last bits
    for digits in (1, 3):
        got = frame.select(steady_round_expr(pl.col("a"), digits).alias("a"),
                           steady_round_expr(pl.col("b"), digits).alias("b"))
        assert got["a"].to_list() == got["b"].to_list()
        assert (got["a"] - frame["a"]).abs().max() <= 0.5 * 10 ** -digits + 1e-9


def test_the_typical_hour_in_sql_settles_to_the_same_decimals() -> None:
    sql = (queries_dir() / "workload_activity_timeline.sql").read_text()
    assert re.search(r"round\(abs\(g - \(SELECT median\(g\) FROM whole\)\), (\d+)\)", sql).group(1) == str(SETTLE_DIGITS)


def test_a_mean_at_the_idle_threshold_falls_in_one_bucket_whatever_its_last_bit(tmp_path) -> None:
    """waste_hourly sorts a holder-hour into idle or used/underused by its mean GR activity, a
    mean DuckDB sums in parallel: at 10,000 GPUs 114 allocation-hours sat at 0.05 give or take
    one bit, and the bucket (and the row count) changed between two builds of the same data."""
    from datetime import timedelta

    import gpuinsight as gi
    from tests.fleet_tables import T0, MiniFleet

    f = MiniFleet()
    f.node("n1", "p5.48xlarge", "H100", 8)
    f.price("p5.48xlarge", "H100", 8, 98.32)
    f.pod("p1", "n1")
    f.series("n1", 0, "p1", "ns", 0.05, end=T0 + timedelta(hours=1))
    waste = gi.open(tmp_path / "w.duckdb")
    with waste as g:
        f.load(g.wh)
        g.refresh()
        q = g.registry.get("waste_hourly")

        def buckets(gr: float) -> set[str]:
            with g.wh.transaction() as con:
                con.execute("UPDATE allocation_hourly SET gr_active_avg = ? WHERE pod = 'p1'", [gr])
                g.registry.build(con, q)
            return {b for (b,) in g.sql("SELECT bucket FROM waste_hourly WHERE namespace = 'ns'").rows()}

        assert buckets(0.05 - 1.3877787807814457e-17) == buckets(0.05 + 6.938893903907228e-18) == buckets(0.05) \
            == {"used", "underused"}
        assert buckets(0.0499) == {"idle"}
    assert re.search(r"round\(gr, (\d+)\) < 0\.05", (queries_dir() / "waste_hourly.sql").read_text()).group(1) \
        == str(SETTLE_DIGITS)
    # the active days of workload_gpu_profile's diurnal profile, likewise
    assert re.search(r"round\(gs / nullif\(cs, 0\), (\d+)\) > 0\.05",
                     (queries_dir() / "workload_gpu_profile.sql").read_text()).group(1) == str(SETTLE_DIGITS)
