"""The kernel families. Importing a family's package registers its kernels
(``tiledmm.registry`` imports them on first use: all of them, or just the family of a
kernel it knows the home of, so a first Triton call does not import numba)."""
FAMILIES = ("tiledmm.kernels.block", "tiledmm.kernels.library", "tiledmm.kernels.simt")
