"""Triton kernels for batched Householder QR in geqrf's compact form.

One module per stage, each with its plain-torch reference in `naive.py`:

- `fallback`   how a route's fallback to torch.geqrf shows outside the submission
- `plan`       the typed plan: every knob of a route, its allowed values and the rules between them
- `precision`  split-precision tensor-core products (fp32, tf32, tf32x3, fp16x3, fp16x2lo, fp16)
- `scratch`    buffers allocated once per shape and reused, scoped per concurrent group
- `panel`      one program per matrix factors an L x b panel in registers, building T as it goes
- `coop`       the cooperative panel: NC programs per matrix share a tall panel's rows
- `tsqr`       the TSQR panel (coop.exchange tsqr): each program factors its rows alone, the R factors combined
- `strip`      the fused trailing update C <- C - V (T^T (V^T C))
- `wy`         a two-level block's T from its inner T: the torch merge, or one Triton launch
- `tproduct`   the far update's small T^T W on tensor cores in a split precision
- `blocked`    drivers: single-level, two-level and cooperative two-level blocked QR
- `warp`       the warp driver: a whole QR of n <= 32 in one warp a matrix, a column a lane
- `relocate`   launches whose input and output pointers move by a device table (graph.mode relocate)
- `graphs`     CUDA graphs: one per input shape or input tensor, relocated, or concurrent batch groups (opt-in)
- `routing`    a route per (n, batch), and the public entry `qr_routed`

The generated submission inlines these modules in the order their imports
imply (qrsub/build.py derives it) with their intra-package imports removed, so
every top-level name must be unique across modules.
"""
