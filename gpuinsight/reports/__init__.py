"""The waste & savings report: chart builders (:mod:`.charts`), colours (:mod:`.theme`), the
self-contained HTML file (:func:`gpuinsight.reports.html.write_report`) and its upload."""
