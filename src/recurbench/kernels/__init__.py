"""Attention kernels: one folder per op, each with a readable naive reference, a chunked PyTorch
path (the CPU runtime) and a Triton GPU path, behind one public function.

Nothing here imports triton at package import time.
"""
