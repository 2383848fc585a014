"""Name resolution shared by GPUs and models: case and punctuation insensitive.

Resolution order for a query:
1. exact match of the squashed form (lowercase, vendor/brand words and punctuation removed)
   against an id, name or alias;
2. token match: every query token is a prefix of a distinct token of a candidate name
   ("a100 80gb sxm" matches "A100 SXM4 80GB"); one candidate entry wins, several are ambiguous;
3. otherwise unknown, with "did you mean" suggestions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from whichgpu.errors import AmbiguousNameError, UnknownNameError

# Words that never distinguish one entry from another.
NOISE = frozenset({"nvidia", "geforce", "tesla", "amd", "radeon", "instinct", "intel", "google",
                   "cloud", "generation", "gpu", "the"})
_SPLIT = re.compile(r"[^a-z0-9]+")
# Split "a100sxm4" style joins at letter<->digit boundaries only for digits after letters
# when the query has no separators at all (e.g. "rtx4090").
_ALNUM = re.compile(r"[a-z]+|[0-9]+[a-z]*")


def tokens(name: str) -> list[str]:
    toks = [t for t in _SPLIT.split(name.lower()) if t and t not in NOISE]
    return toks


def squash(name: str) -> str:
    return "".join(tokens(name))


class NameIndex:
    """Maps many spellings to canonical ids."""

    def __init__(self, entries: Iterable[tuple[str, Iterable[str]]]) -> None:
        self._exact: dict[str, set[str]] = {}
        self._names: dict[str, list[list[str]]] = {}
        self._display: dict[str, str] = {}
        for cid, names in entries:
            allnames = [cid, *names]
            self._display[cid] = cid
            for n in allnames:
                self._exact.setdefault(squash(n), set()).add(cid)
                self._names.setdefault(cid, []).append(tokens(n))

    def ids(self) -> list[str]:
        return list(self._display)

    def all_names(self) -> list[str]:
        return list(self._display)

    def _token_matches(self, qt: list[str]) -> set[str]:
        hits: set[str] = set()
        for cid, variants in self._names.items():
            for vt in variants:
                if _covers(qt, vt):
                    hits.add(cid)
                    break
        return hits

    def resolve(self, query: str, kind: str = "name", hint: str = "") -> str:
        q = query.strip()
        if not q:
            raise UnknownNameError(kind, query, self.ids(), hint)
        hit = self._exact.get(squash(q))
        if hit and len(hit) == 1:
            return next(iter(hit))
        if hit and len(hit) > 1:
            raise AmbiguousNameError(kind, query, hit)
        qt = tokens(q)
        if not qt:
            raise UnknownNameError(kind, query, self.ids(), hint)
        hits = self._token_matches(qt)
        if not hits and len(qt) == 1:
            # "rtx4090" -> ["rtx", "4090"]
            parts = _ALNUM.findall(qt[0])
            if len(parts) > 1:
                hits = self._token_matches(parts)
        if len(hits) == 1:
            return next(iter(hits))
        if len(hits) > 1:
            # Prefer candidates where the query covers the whole name (fewest extra tokens).
            best = _tightest(qt, hits, self._names)
            if best is not None:
                return best
            raise AmbiguousNameError(kind, query, hits)
        raise UnknownNameError(kind, query, self.ids(), hint)


def _covers(query: list[str], cand: list[str]) -> bool:
    """Each query token is a prefix of a different candidate token."""
    used = [False] * len(cand)
    for q in query:
        for i, c in enumerate(cand):
            if not used[i] and c.startswith(q):
                used[i] = True
                break
        else:
            return False
    return True


def _tightest(qt: list[str], hits: set[str], names: dict[str, list[list[str]]]) -> str | None:
    """If exactly one candidate has a spelling whose tokens equal the query's, take it."""
    exact = [cid for cid in hits if any(sorted(v) == sorted(qt) for v in names[cid])]
    if len(exact) == 1:
        return exact[0]
    return None
