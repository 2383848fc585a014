"""Build models without running parameter initialisers.

On the meta device parameter values do not exist, yet ``nn.Module`` constructors still call
``torch.nn.init`` functions; for meta tensors some of those (``normal_`` via ``torch._refs``)
import ``torch._dynamo``, which costs 1-2 s on a cold start. Replacing the initialisers by
no-ops while a model is built changes nothing but the time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

_INITS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
          "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
          "sparse_")


def _keep(tensor: Any, *args: Any, **kwargs: Any) -> Any:
    return tensor


@contextlib.contextmanager
def skip_init() -> Iterator[None]:
    saved = {name: getattr(torch.nn.init, name) for name in _INITS if hasattr(torch.nn.init, name)}
    try:
        for name in saved:
            setattr(torch.nn.init, name, _keep)
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.nn.init, name, fn)
