"""Helpers behind the Prometheus-family collectors (series frames, PromQL, HTTP, KSM)."""
