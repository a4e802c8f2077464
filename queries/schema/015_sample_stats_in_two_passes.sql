-- name: 015_sample_stats_in_two_passes
-- description: a workload's DCGM sample statistics (migration 006's sample_stats) are computed
--   by two aggregates instead of one: sample_stats_core (counts, means, maxima and the GR and SM
--   quantiles) and sample_stats_tails (the framebuffer quantiles and peak_p95), put together by
--   sample_stats_of(core, tails) into the same struct, fields in the same order. Why: each exact
--   quantile keeps every value of its group until the end, and with all four in one aggregate
--   DuckDB could not hold them under a memory limit: at 10,000 GPUs x 30 days (92.9 M samples)
--   and a 6 GB limit it spilled without end (past 40 GB of disk), while two aggregates of two
--   quantiles each finish in the same CPU time within 4.6 GB. The fields are those of 006.

CREATE OR REPLACE MACRO sample_stats_core(gr, gr_max, sm, sm_max, fb, fb_max, fb_free, step) AS {
    'samples': count(*),
    'gr_mean': avg(gr),
    'grq': quantile_cont(gr, [0.5, 0.95, 0.99]),
    'gr_max': max(gr_max),
    'sm_mean': avg(sm),
    'smq': quantile_cont(sm, [0.95, 0.99]),
    'sm_max': max(sm_max),
    'fb_max_mib': max(fb_max),
    'step_s': max(step),
    'max_pushed_down': coalesce(bool_or(gr_max > gr + 1e-9 OR sm_max > sm + 1e-9), false),
    'gpu_memory_mib': max(fb + fb_free),
    'active_fraction': avg(CASE WHEN gr > 0.05 THEN 1.0 ELSE 0.0 END)
};

CREATE OR REPLACE MACRO sample_stats_tails(gr, gr_max, sm, sm_max, fb) AS {
    'fbq': quantile_cont(fb, [0.95, 0.99]),
    'peak_p95': quantile_cont(greatest(coalesce(gr_max, gr), coalesce(sm_max, sm)), 0.95)
};

CREATE OR REPLACE MACRO sample_stats_of(core, tails) AS {
    'samples': core.samples,
    'gr_mean': core.gr_mean,
    'grq': core.grq,
    'gr_max': core.gr_max,
    'sm_mean': core.sm_mean,
    'smq': core.smq,
    'sm_max': core.sm_max,
    'fbq': tails.fbq,
    'fb_max_mib': core.fb_max_mib,
    'peak_p95': tails.peak_p95,
    'step_s': core.step_s,
    'max_pushed_down': core.max_pushed_down,
    'gpu_memory_mib': core.gpu_memory_mib,
    'active_fraction': core.active_fraction
};

-- no query uses the one-aggregate form any more: gone, so that none starts to
DROP MACRO IF EXISTS sample_stats;
