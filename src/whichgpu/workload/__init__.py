"""Workload capture: any PyTorch model to a hardware-independent op trace.

Only this package and `measure/` import torch, and only lazily (inside functions), so that the
torch-free core (catalog, performance and memory models, recommendations over cached traces)
works without it.
"""
