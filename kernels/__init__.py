"""Triton kernels for batched Householder QR, each with a plain-torch reference beside it."""
