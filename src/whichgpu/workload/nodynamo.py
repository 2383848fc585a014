"""Keep a capture from importing torch._dynamo (1-2 s of a cold start, for nothing).

PyTorch wraps some functions in a lazy "disable dynamo" shim (``torch._compile._disable_dynamo``)
whose first call imports ``torch._dynamo`` to build the wrapper. Two kinds run during a capture:
Python meta references of ops without a C++ meta kernel (``torch._refs``: ``cat``, ``arange``,
``normal_``, ...) and a TorchDispatchMode's ``__torch_dispatch__``. Dynamo's disable only
matters while ``torch.compile`` traces, which a capture never does, so the shims are resolved to
the plain function up front. This relies on PyTorch internals; if they change, nothing breaks:
the shims simply import dynamo as before (slower, same result).
"""

from __future__ import annotations

import sys
from typing import Any

_DONE = False


def _is_shim(f: Any) -> bool:
    code = getattr(f, "__code__", None)
    return code is not None and code.co_name == "inner" and code.co_filename.endswith("_compile.py")


def preresolve_dynamo_shims() -> int:
    """Mark every reference's disable-dynamo shim as resolved to its own function. Returns how many."""
    global _DONE
    if _DONE:
        return 0
    import torch._decomp
    import torch._refs
    import torch._refs.nn.functional

    candidates: list[Any] = []
    prefixes = ("torch._refs", "torch._prims", "torch._decomp", "torch._meta_registrations",
                "torch.utils.checkpoint", "torch.nn", "torch.autograd")
    for name, mod in list(sys.modules.items()):
        if mod is not None and name.startswith(prefixes):
            candidates.extend(vars(mod).values())
    # Meta kernels registered by reference into the decomposition tables.
    for table in torch._decomp.global_decomposition_table.values():
        candidates.extend(table.values())
    n = 0
    seen: set[int] = set()
    # Walk decorator chains: through __wrapped__ and through the functions a wrapper closes over.
    todo: list[tuple[Any, int]] = [(v, 0) for v in candidates if callable(v)]
    while todo:
        f, depth = todo.pop()
        if id(f) in seen or depth > 8:
            continue
        seen.add(id(f))
        if _is_shim(f):
            # The shim looks up `fn.__dynamo_disable` on the function it closes over.
            for cell in f.__closure__ or ():
                try:
                    target = cell.cell_contents
                except ValueError:
                    continue
                if callable(target) and getattr(target, "__dynamo_disable", None) is None:
                    target.__dynamo_disable = target
                    n += 1
        inner = getattr(f, "__wrapped__", None)
        if callable(inner):
            todo.append((inner, depth + 1))
        for cell in getattr(f, "__closure__", None) or ():
            try:
                c = cell.cell_contents
            except ValueError:
                continue
            if callable(c) and hasattr(c, "__code__"):
                todo.append((c, depth + 1))
    _DONE = True
    return n
