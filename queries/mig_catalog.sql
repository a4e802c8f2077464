-- name: mig_catalog
-- grain: one row per GPU model and MIG profile, plus the valid per-GPU layouts as a list
-- columns: gpu_model, profile, memory_gb, compute_slices, memory_slices, max_instances, layouts
-- description: MIG profiles the rules may propose (without the +me media variants), with
--   their compute and memory slices and max instances, and every valid layout of slice
--   classes (e.g. "4g+2g+1g.2x") for packing instances onto GPUs.
SELECT p.gpu_model, p.profile, p.memory_gb, p.compute_slices, p.memory_slices, p.max_instances,
       (SELECT list(slice_classes ORDER BY layout_id) FROM mig_layouts) AS layouts
FROM mig_profiles p
WHERE p.profile NOT LIKE '%+me%'
ORDER BY p.gpu_model, p.compute_slices, p.memory_slices
