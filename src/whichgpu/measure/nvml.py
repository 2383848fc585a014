"""This machine's GPUs through NVML (nvidia-ml-py), mapped to catalog entries."""

from __future__ import annotations

import contextlib
from typing import Any

from whichgpu.errors import WhichGPUError
from whichgpu.hardware.catalog import Catalog


def _text(x: object) -> str:
    """An NVML string (bytes in older nvidia-ml-py releases) as text, whatever its encoding."""
    return x.decode("utf-8", errors="replace") if isinstance(x, bytes) else str(x)


def local_gpus(catalog: Catalog) -> dict[str, Any]:
    """{'gpus': [...], 'reason': str}. Never raises for 'no GPU' or an NVML failure; says why instead."""
    try:
        import pynvml
    except ImportError:
        return {"gpus": [], "reason": "nvidia-ml-py is not installed (pip install 'whichgpu[nvml]'), so NVML cannot be queried"}
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return {"gpus": [], "reason": f"no NVIDIA driver/GPU found (NVML: {e})"}
    gpus: list[dict[str, Any]] = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(pynvml.nvmlDeviceGetName(h))
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total / 1e9
            cid, note = None, ""
            try:
                cid = catalog.get(name).id
            except WhichGPUError as e:
                note = str(e)
            gpus.append({"index": i, "name": name, "memory_gb": mem, "catalog_id": cid, "note": note})
    except Exception as e:  # NVMLError (GPU lost, no permission, ...): report what was read and why it stopped
        return {"gpus": gpus, "reason": f"NVML failed after {len(gpus)} device(s): {e}"}
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown changes nothing in the answer
            pynvml.nvmlShutdown()
    return {"gpus": gpus, "reason": "" if gpus else "NVML reports 0 devices"}
