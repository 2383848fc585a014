"""Name resolution shared by GPUs and models: case and punctuation insensitive.

Resolution order for a query:
1. exact match of the squashed form (lowercase, vendor/brand words and punctuation removed)
   against an id, name or alias;
2. token match: every query token is a prefix of a distinct token of a candidate name
   ("a100 80gb sxm" matches "A100 SXM4 80GB"); one candidate entry wins, several are ambiguous;
3. otherwise unknown, with "did you mean" suggestions.

An index built with each entry's memory (the GPU catalog) also reads names the way benchmark
tables write them ("3090 24GB", "H100 (H100-HBM3-80GB)", "MI250X (one GCD)"), when 1-2 find
no single entry:

4. a memory size ("80GB", "16 GB") or a memory-type word ("HBM3", "GDDR6X") is checked against
   the candidates' memory, not their names: it is dropped from the name match and keeps only
   the candidates whose memory.size_gb equals it (or whose memory.type has the word);
5. a parenthesised qualifier "X (Y)" narrows X's candidates: Y's memory words filter as in 4;
   each other word of Y keeps the candidates with a name word it is a prefix of, and is
   skipped when none has one ("(Lambda Cloud)", "(330W cap)" say nothing about the part);
6. when the name alone (X, or X less its memory words) resolves by 1-2, the candidates are that
   entry and its variants (entries with a spelling that has all the words of one of its
   spellings, and more: "H100 PCIe" of "H100", "MI250X GCD" of "MI250X", but not "MI250X" of
   "MI250"), and the entry wins when 4-5 leave it in ("H100 (H100-HBM3-80GB)");
7. of several candidates left, the base model wins when every other is a variant of it ("3090":
   "RTX 3090", not "RTX 3090 Ti"); otherwise they stay ambiguous ("A100-80GB (330W cap)": PCIe
   or SXM4).

A query with a control or invisible character (a tab, a zero-width space: Unicode category C,
or a line separator), an empty one and one starting with '-' are refused before 1 (`name_problem`):
they would otherwise resolve silently with the character dropped.

A name that 1-2 resolve keeps its entry. When 4-7 leave no single entry either, the error is
that of 1-3 (the ambiguity of 2 with its candidates, or unknown with "did you mean"), except
that an unknown name with several candidates left by 4-7 is ambiguous between those.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

from whichgpu.errors import AmbiguousNameError, InputError, UnknownNameError, WhichGPUError

# Words that never distinguish one entry from another.
NOISE = frozenset({"nvidia", "geforce", "tesla", "amd", "radeon", "instinct", "intel", "google",
                   "cloud", "generation", "gpu", "the"})
_SPLIT = re.compile(r"[^a-z0-9]+")
# Split "a100sxm4" style joins at letter<->digit boundaries only for digits after letters
# when the query has no separators at all (e.g. "rtx4090").
_ALNUM = re.compile(r"[a-z]+|[0-9]+[a-z]*")
# A memory size: "80gb" as one token, or "16" followed by "gb".
_SIZE = re.compile(r"([0-9]+)gb")
# "X (Y)": every parenthesised part is a qualifier Y; the rest is the name X.
_QUALIFIER = re.compile(r"\(([^()]*)\)")


# Control characters have no Unicode name; the common ones, as errors call them.
_CONTROL_NAMES = {"\t": "TAB", "\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\x00": "NUL", "\x1b": "ESCAPE"}


def name_problem(name: str) -> str | None:
    """What makes `name` unusable as a name a user types or a file gives, worded to follow the
    name ("'-a10' starts with '-', ..."), or None: a control or invisible character (Unicode
    category C: tabs, newlines, zero-width spaces, ...; or a line or paragraph separator),
    nothing but spaces, or a leading '-'."""
    for i, ch in enumerate(name):
        cat = unicodedata.category(ch)
        if cat[0] == "C" or cat in ("Zl", "Zp"):
            label = unicodedata.name(ch, _CONTROL_NAMES.get(ch, ""))
            what = f"U+{ord(ch):04X}" + (f" {label}" if label else "")
            return (f"has a control or invisible character ({what}) at position {i + 1}; "
                    "a name holds letters, digits, spaces and punctuation only")
    if not name.strip():
        return "is empty; give a name"
    if name.strip().startswith("-"):
        return "starts with '-', which no name does (an option given where a name was expected?)"
    return None


def check_name(kind: str, name: str) -> None:
    """Raise InputError when `name` cannot be a `kind` name (`name_problem`)."""
    problem = name_problem(name)
    if problem:
        what = "name" if kind == "name" else f"{kind} name"
        raise InputError(f"invalid {what} {name!r}: it {problem}")


def tokens(name: str) -> list[str]:
    toks = [t for t in _SPLIT.split(name.lower()) if t and t not in NOISE]
    return toks


def squash(name: str) -> str:
    return "".join(tokens(name))


@dataclass(frozen=True)
class Memory:
    """An entry's memory, which memory sizes and memory-type words in a query are checked
    against (rules 4-5 of the module docstring)."""

    size_gb: float
    type: str


@dataclass(frozen=True)
class _Said:
    """A query's tokens sorted by what they say: name words, memory sizes, memory-type words."""

    names: list[str]
    sizes: list[float]
    types: list[str]


class NameIndex:
    """Maps many spellings to canonical ids. With ``memory`` (id -> Memory), queries may also
    name an entry by its memory and qualify a name in parentheses (module docstring, 4-7)."""

    def __init__(self, entries: Iterable[tuple[str, Iterable[str]]],
                 memory: Mapping[str, Memory] | None = None) -> None:
        self._exact: dict[str, set[str]] = {}
        self._names: dict[str, list[list[str]]] = {}
        self._display: dict[str, str] = {}
        for cid, names in entries:
            allnames = [cid, *names]
            self._display[cid] = cid
            for n in allnames:
                self._exact.setdefault(squash(n), set()).add(cid)
                self._names.setdefault(cid, []).append(tokens(n))
        self._memory = dict(memory) if memory is not None else None
        self._memory_words = {w for m in (memory or {}).values() for w in tokens(m.type)}

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
        check_name(kind, query)
        try:
            return self._resolve_by_name(query, kind, hint)
        except (UnknownNameError, AmbiguousNameError) as err:
            if self._memory is None:
                raise
            best, left = self._resolve_qualified(query)
            if best is not None:
                return best
            if isinstance(err, UnknownNameError) and len(left) > 1:
                raise AmbiguousNameError(kind, query, left) from None
            raise  # today's error: unknown with suggestions, or ambiguous with its candidates

    def _resolve_by_name(self, query: str, kind: str, hint: str) -> str:
        """Rules 1-3 of the module docstring."""
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

    def _resolve_qualified(self, query: str) -> tuple[str | None, set[str]]:
        """Rules 4-7: (the entry, or None; the candidates left)."""
        outer = _QUALIFIER.sub(" ", query)
        inner = " ".join(_QUALIFIER.findall(query))
        said = self._sort_tokens(tokens(outer))
        names = said.names
        hits = self._token_matches(names) if names else set()
        if not hits and len(names) == 1:
            parts = _ALNUM.findall(names[0])
            if len(parts) > 1:
                names = parts
                hits = self._token_matches(parts)
        alone = self._alone(query, outer, " ".join(said.names))
        if alone is not None:
            # The name alone is one entry: the rest picks it or a variant of it ("H100" then
            # "H100 PCIe", "MI250X" then "MI250X GCD"), never a longer name it is a prefix of
            # ("MI250" is not "MI250X").
            hits = {alone} | {cid for cid in hits if self._variant_of(cid, alone)}
        hits = self._memory_fits(hits, said)
        if inner:
            hits = self._narrow(hits, self._sort_tokens(tokens(inner)))
        if alone in hits or len(hits) == 1:
            return (alone if alone in hits else next(iter(hits))), hits
        return _base_model(names, hits, self._names), hits

    def _alone(self, query: str, *names: str) -> str | None:
        """The entry rules 1-2 give the first of `names` (the query less its qualifier, then
        less its memory words too) that resolves alone, or None."""
        for name in names:
            if not name.strip() or name.strip() == query.strip():
                continue
            try:
                return self._resolve_by_name(name, "", "")
            except WhichGPUError:
                continue
        return None

    def _variant_of(self, cid: str, base: str) -> bool:
        """`cid` has a spelling with all the words of one of `base`'s, and more."""
        return any(set(b) < set(c) for b in self._names[base] for c in self._names[cid])

    def _sort_tokens(self, toks: list[str]) -> _Said:
        names: list[str] = []
        sizes: list[float] = []
        types: list[str] = []
        i = 0
        while i < len(toks):
            t = toks[i]
            m = _SIZE.fullmatch(t)
            if m:
                sizes.append(float(m.group(1)))
            elif t.isdigit() and i + 1 < len(toks) and toks[i + 1] == "gb":
                sizes.append(float(t))
                i += 1
            elif t in self._memory_words:
                types.append(t)
            else:
                names.append(t)
            i += 1
        return _Said(names, sizes, types)

    def _memory_fits(self, hits: set[str], said: _Said) -> set[str]:
        """The candidates whose memory has every size and type the query names."""
        mem = self._memory or {}

        def fits(cid: str) -> bool:
            m = mem.get(cid)
            if m is None:
                return not (said.sizes or said.types)
            return (all(m.size_gb == s for s in said.sizes)
                    and all(t in tokens(m.type) for t in said.types))

        return {cid for cid in hits if fits(cid)}

    def _narrow(self, hits: set[str], said: _Said) -> set[str]:
        """A qualifier's words narrow the candidates; name words no candidate has are skipped."""
        hits = self._memory_fits(hits, said)
        for word in said.names:
            having = {cid for cid in hits
                      if any(any(t.startswith(word) for t in vt) for vt in self._names[cid])}
            if having:
                hits = having
        return hits


class Named(Protocol):
    """An entry with names: a GPU spec, a system, an engine."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def aliases(self) -> tuple[str, ...]: ...


N = TypeVar("N", bound=Named)


class NamedEntries(Generic[N]):
    """Entries in order, each resolvable by its id, name or an alias (`NameIndex`)."""

    kind: ClassVar[str] = "name"
    """What an entry is called in errors ("unknown GPU 'x'")."""
    hint: ClassVar[str] = ""
    """Where to see them all, for an unknown name among many with no close match."""

    def __init__(self, entries: list[N], memory: Mapping[str, Memory] | None = None) -> None:
        self._entries = entries
        self._index = NameIndex(((e.id, (e.name, *e.aliases)) for e in self._entries), memory=memory)
        self._by_id = {e.id: e for e in self._entries}
        self._found: dict[str, N] = {}  # names already resolved (the entries never change)

    def __iter__(self) -> Iterator[N]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: str) -> N:
        """The entry `name` stands for (an id, a name, an alias), or an error with suggestions."""
        hit = self._found.get(name)
        if hit is None:
            hit = self._found[name] = self._by_id[self._index.resolve(name, kind=self.kind, hint=self.hint)]
        return hit

    def ids(self) -> list[str]:
        return [e.id for e in self._entries]


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


def _base_model(qt: list[str], hits: set[str], names: dict[str, list[list[str]]]) -> str | None:
    """The candidate the others are variants of: one with a spelling (covered by the name tokens
    `qt`) whose words every covering spelling of every other candidate has, plus more ("RTX 3090"
    against "RTX 3090 Ti"). None when there is no such candidate ("gaudi": "Gaudi 2", "Gaudi 3")."""
    covering = {cid: [set(vt) for vt in names[cid] if _covers(qt, vt)] for cid in hits}
    base = [cid for cid in hits
            if any(all(sw < sc for other in hits if other != cid for sc in covering[other])
                   for sw in covering[cid])]
    return base[0] if len(base) == 1 else None
