"""IdentityMemo: per-object memoisation used by estimate and the memory timeline."""

from __future__ import annotations

from whichgpu.memo import IdentityMemo


class _Obj:  # unhashable, like a Trace
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, v: int) -> None:
        self.v = v


def test_reuses_only_for_the_same_object_and_options() -> None:
    memo: IdentityMemo[int] = IdentityMemo(8)
    calls: list[int] = []

    def make(o: _Obj, k: int) -> int:
        calls.append(o.v)
        return o.v * 10 + k

    a, b = _Obj(1), _Obj(1)
    assert memo.get((a,), (0,), lambda: make(a, 0)) == 10
    assert memo.get((a,), (0,), lambda: make(a, 0)) == 10
    assert memo.get((a,), (1,), lambda: make(a, 1)) == 11  # other options: computed
    assert memo.get((b,), (0,), lambda: make(b, 0)) == 10  # equal contents, other object: computed
    assert calls == [1, 1, 1]


def test_an_entry_is_not_served_to_a_new_object_at_a_reused_id() -> None:
    memo: IdentityMemo[int] = IdentityMemo(8)
    a = _Obj(1)
    memo.get((a,), (), lambda: 1)
    key = next(iter(memo._entries))
    c = _Obj(2)
    # Simulate id reuse: the stored entry's key now matches c, but its owner is a.
    memo._entries[(id(c),)] = memo._entries.pop(key)
    assert memo.get((c,), (), lambda: 2) == 2


def test_bounded() -> None:
    memo: IdentityMemo[int] = IdentityMemo(3)
    objs = [_Obj(i) for i in range(10)]
    for o in objs:
        memo.get((o,), (), lambda o=o: o.v)  # type: ignore[misc]
    assert len(memo._entries) <= 3
