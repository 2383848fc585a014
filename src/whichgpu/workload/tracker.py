"""Which module each op belongs to, forward and backward.

Forward: global module hooks keep a stack of module paths. Backward: every autograd node is
tagged, when its module's forward returns, with that module's path (a walk from the module's
outputs back through nodes not tagged yet, so inner modules tag their nodes first); a backward
op reads the tag of the node the autograd engine is executing
(``torch._C._current_autograd_node()``). Unlike hook-based backward tracking, this is not
confused by in-place modules or by tensors shared across layers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

KEY = "whichgpu_module"


class Tracker:
    def __init__(self, root: nn.Module) -> None:
        self.names: dict[int, str] = {id(m): n for n, m in root.named_modules()}
        self.param_module: dict[int, str] = {
            id(p): n.rsplit(".", 1)[0] if "." in n else "" for n, p in root.named_parameters()}
        self.stack: list[str] = []
        self.last_backward = ""
        self._handles: list[Any] = []

    def __enter__(self) -> Tracker:
        self._handles = [nn.modules.module.register_module_forward_pre_hook(self._pre),
                         nn.modules.module.register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _name(self, mod: nn.Module) -> str:
        """The module's path in the model; a module the model does not register (created on the
        fly, e.g. transformers' ACT2FN activations) is named under the module running it, so its
        ops stay inside that block (and count as often as it repeats)."""
        name = self.names.get(id(mod))
        if name is not None:
            return name
        return f"{self.stack[-1]}.{type(mod).__name__}" if self.stack else type(mod).__name__

    def _pre(self, mod: nn.Module, args: Any) -> None:
        self.stack.append(self._name(mod))

    def _post(self, mod: nn.Module, args: Any, out: Any) -> None:
        name = self.stack.pop() if self.stack else self._name(mod)
        if torch.is_grad_enabled():
            self._tag(out, name)

    def _tag(self, out: Any, name: str) -> None:
        leaves = tree_flatten(out)[0]
        if hasattr(out, "values") and not leaves:
            leaves = list(out.values())
        todo = [t.grad_fn for t in leaves if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while todo:
            node = todo.pop()
            meta: dict[str, Any] = node.metadata  # type: ignore[assignment]
            if node is None or KEY in meta:
                continue
            meta[KEY] = name
            todo.extend(nf for nf, _ in node.next_functions if nf is not None)

    def current(self, backward: bool) -> str:
        if not backward:
            return self.stack[-1] if self.stack else ""
        node = torch._C._current_autograd_node()
        if node is not None:
            meta: dict[str, Any] = node.metadata  # type: ignore[assignment]
            name: str | None = meta.get(KEY)
            if name is None:
                var = getattr(node, "variable", None)  # AccumulateGrad of a parameter
                if var is not None:
                    name = self.param_module.get(id(var))
            if name is not None:
                self.last_backward = name
                return name
        return self.last_backward
