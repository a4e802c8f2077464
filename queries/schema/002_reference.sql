-- name: 002_reference
-- description: static reference data the models join against: MIG GPU-instance profiles per
--   GPU model and the maximal valid per-GPU layouts (derived from NVML placements);
--   GPU model (profile names and max instances from NVIDIA mig-parted's default config;
--   slice counts from the NVML placement data; see docs/models.md for the citation).

CREATE TABLE IF NOT EXISTS mig_profiles (
    gpu_model       VARCHAR NOT NULL,   -- canonical model (gpuinsight.gpumodels)
    profile         VARCHAR NOT NULL,   -- e.g. 1g.10gb
    memory_gb       DOUBLE NOT NULL,    -- nominal GB in the name
    compute_slices  INTEGER NOT NULL,   -- of 7
    memory_slices   INTEGER NOT NULL,   -- of 8
    max_instances   INTEGER NOT NULL,
    PRIMARY KEY (gpu_model, profile)
);

INSERT OR REPLACE INTO mig_profiles VALUES
    ('A100-40GB', '1g.5gb', 5, 1, 1, 7),
    ('A100-40GB', '1g.5gb+me', 5, 1, 1, 1),
    ('A100-40GB', '1g.10gb', 10, 1, 2, 4),
    ('A100-40GB', '2g.10gb', 10, 2, 2, 3),
    ('A100-40GB', '3g.20gb', 20, 3, 4, 2),
    ('A100-40GB', '4g.20gb', 20, 4, 4, 1),
    ('A100-40GB', '7g.40gb', 40, 7, 8, 1),
    ('A100-80GB', '1g.10gb', 10, 1, 1, 7),
    ('A100-80GB', '1g.10gb+me', 10, 1, 1, 1),
    ('A100-80GB', '1g.20gb', 20, 1, 2, 4),
    ('A100-80GB', '2g.20gb', 20, 2, 2, 3),
    ('A100-80GB', '3g.40gb', 40, 3, 4, 2),
    ('A100-80GB', '4g.40gb', 40, 4, 4, 1),
    ('A100-80GB', '7g.80gb', 80, 7, 8, 1),
    ('H100-80GB', '1g.10gb', 10, 1, 1, 7),
    ('H100-80GB', '1g.10gb+me', 10, 1, 1, 1),
    ('H100-80GB', '1g.20gb', 20, 1, 2, 4),
    ('H100-80GB', '2g.20gb', 20, 2, 2, 3),
    ('H100-80GB', '3g.40gb', 40, 3, 4, 2),
    ('H100-80GB', '4g.40gb', 40, 4, 4, 1),
    ('H100-80GB', '7g.80gb', 80, 7, 8, 1),
    ('H100-NVL-94GB', '1g.12gb', 12, 1, 1, 7),
    ('H100-NVL-94GB', '1g.12gb+me', 12, 1, 1, 1),
    ('H100-NVL-94GB', '1g.24gb', 24, 1, 2, 4),
    ('H100-NVL-94GB', '2g.24gb', 24, 2, 2, 3),
    ('H100-NVL-94GB', '3g.47gb', 47, 3, 4, 2),
    ('H100-NVL-94GB', '4g.47gb', 47, 4, 4, 1),
    ('H100-NVL-94GB', '7g.94gb', 94, 7, 8, 1),
    ('H200-141GB', '1g.18gb', 18, 1, 1, 7),
    ('H200-141GB', '1g.18gb+me', 18, 1, 1, 1),
    ('H200-141GB', '1g.35gb', 35, 1, 2, 4),
    ('H200-141GB', '2g.35gb', 35, 2, 2, 3),
    ('H200-141GB', '3g.71gb', 71, 3, 4, 2),
    ('H200-141GB', '4g.71gb', 71, 4, 4, 1),
    ('H200-141GB', '7g.141gb', 141, 7, 8, 1);

-- Maximal non-overlapping GPU-instance layouts of a 7-compute / 8-memory-slice GPU. Any
-- sub-multiset of a layout is valid. "1g.2x" = the 1-compute-slice profile with 2 memory slices.
CREATE TABLE IF NOT EXISTS mig_layouts (
    layout_id            INTEGER PRIMARY KEY,
    slice_classes        VARCHAR NOT NULL,
    compute_slices_used  INTEGER NOT NULL,
    memory_slices_used   INTEGER NOT NULL,
    instances            INTEGER NOT NULL
);

INSERT OR REPLACE INTO mig_layouts VALUES
    (1, '7g', 7, 8, 1),
    (2, '4g+3g', 7, 8, 2),
    (3, '4g+2g+1g.2x', 7, 8, 3),
    (4, '4g+2g+1g', 7, 7, 3),
    (5, '4g+1g.2x+1g.2x', 6, 8, 3),
    (6, '4g+1g.2x+1g', 6, 7, 3),
    (7, '4g+1g.2x+1g+1g', 7, 8, 4),
    (8, '4g+1g+1g+1g', 7, 7, 4),
    (9, '3g+3g', 6, 8, 2),
    (10, '3g+2g+2g', 7, 8, 3),
    (11, '3g+2g+1g.2x', 6, 8, 3),
    (12, '3g+2g+1g', 6, 7, 3),
    (13, '3g+2g+1g+1g', 7, 8, 4),
    (14, '3g+1g.2x+1g.2x', 5, 8, 3),
    (15, '3g+1g.2x+1g', 5, 7, 3),
    (16, '3g+1g.2x+1g+1g', 6, 8, 4),
    (17, '3g+1g+1g+1g', 6, 7, 4),
    (18, '3g+1g+1g+1g+1g', 7, 8, 5),
    (19, '2g+2g+2g+1g.2x', 7, 8, 4),
    (20, '2g+2g+2g+1g', 7, 7, 4),
    (21, '2g+2g+1g.2x+1g.2x', 6, 8, 4),
    (22, '2g+2g+1g.2x+1g', 6, 7, 4),
    (23, '2g+2g+1g.2x+1g+1g', 7, 8, 5),
    (24, '2g+2g+1g+1g+1g', 7, 7, 5),
    (25, '2g+1g.2x+1g.2x+1g.2x', 5, 8, 4),
    (26, '2g+1g.2x+1g.2x+1g', 5, 7, 4),
    (27, '2g+1g.2x+1g.2x+1g+1g', 6, 8, 5),
    (28, '2g+1g.2x+1g+1g+1g', 6, 7, 5),
    (29, '2g+1g.2x+1g+1g+1g+1g', 7, 8, 6),
    (30, '2g+1g+1g+1g+1g+1g', 7, 7, 6),
    (31, '1g.2x+1g.2x+1g.2x+1g.2x', 4, 8, 4),
    (32, '1g.2x+1g.2x+1g.2x+1g', 4, 7, 4),
    (33, '1g.2x+1g.2x+1g.2x+1g+1g', 5, 8, 5),
    (34, '1g.2x+1g.2x+1g+1g+1g', 5, 7, 5),
    (35, '1g.2x+1g.2x+1g+1g+1g+1g', 6, 8, 6),
    (36, '1g.2x+1g+1g+1g+1g+1g', 6, 7, 6),
    (37, '1g.2x+1g+1g+1g+1g+1g+1g', 7, 8, 7),
    (38, '1g+1g+1g+1g+1g+1g+1g', 7, 7, 7);
