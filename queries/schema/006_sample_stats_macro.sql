-- name: 006_sample_stats_macro
-- description: sample_stats(...): the one definition of a workload's DCGM sample statistics,
--   an aggregate over its samples returned as a struct. The materialized model
--   workload_sample_stats applies it to the whole window (computed once per load), and
--   workload_gpu_profile to a window given by since/until. Fields: samples; GR mean and
--   p50/p95/p99 (grq) and max; SM mean, p95/p99 (smq) and max; framebuffer p95/p99 (fbq) and
--   max; peak_p95, the p95 over steps of the per-step max of GR and SM activity (the
--   short-window p95); the step; max_pushed_down, whether any step's max exceeds its mean
--   (the source computed a max within the step, e.g. max_over_time); the GPU's memory; the
--   share of samples above 5 % GR active.

CREATE OR REPLACE MACRO sample_stats(gr, gr_max, sm, sm_max, fb, fb_max, fb_free, step) AS {
    'samples': count(*),
    'gr_mean': avg(gr),
    'grq': quantile_cont(gr, [0.5, 0.95, 0.99]),
    'gr_max': max(gr_max),
    'sm_mean': avg(sm),
    'smq': quantile_cont(sm, [0.95, 0.99]),
    'sm_max': max(sm_max),
    'fbq': quantile_cont(fb, [0.95, 0.99]),
    'fb_max_mib': max(fb_max),
    'peak_p95': quantile_cont(greatest(coalesce(gr_max, gr), coalesce(sm_max, sm)), 0.95),
    'step_s': max(step),
    'max_pushed_down': coalesce(bool_or(gr_max > gr + 1e-9 OR sm_max > sm + 1e-9), false),
    'gpu_memory_mib': max(fb + fb_free),
    'active_fraction': avg(CASE WHEN gr > 0.05 THEN 1.0 ELSE 0.0 END)
};
