"""This machine's GPUs through NVML (nvidia-ml-py), mapped to catalog entries."""

from __future__ import annotations

from typing import Any

from whichgpu.errors import WhichGPUError
from whichgpu.hardware.catalog import Catalog


def local_gpus(catalog: Catalog) -> dict[str, Any]:
    """{'gpus': [...], 'reason': str}. Never raises for 'no GPU'; says why instead."""
    try:
        import pynvml
    except ImportError:
        return {"gpus": [], "reason": "nvidia-ml-py is not installed (pip install 'whichgpu[nvml]'), so NVML cannot be queried"}
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return {"gpus": [], "reason": f"no NVIDIA driver/GPU found (NVML: {e})"}
    try:
        n = pynvml.nvmlDeviceGetCount()
        gpus = []
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            if isinstance(name, bytes):
                name = name.decode()
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total / 1e9
            cid, note = None, ""
            try:
                cid = catalog.get(name).id
            except WhichGPUError as e:
                note = str(e)
            gpus.append({"index": i, "name": name, "memory_gb": mem, "catalog_id": cid, "note": note})
        return {"gpus": gpus, "reason": "" if gpus else "NVML reports 0 devices"}
    finally:
        pynvml.nvmlShutdown()
