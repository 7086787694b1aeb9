"""Lexically constrained decoding: target phrases that must appear in a translation, kept by dynamic beam
allocation (Post & Vilar, 2018, "Fast Lexically Constrained Decoding with Dynamic Beam Allocation"; the form
here follows Hu et al., 2019 and fairseq's ``LexicallyConstrainedBeamSearch``: one ranked list of candidates per
sentence, no separate beam per bank).

A sentence's constraints are phrases of target token ids, in any order. Each hypothesis carries a
:class:`Constraints` state: which phrases it has produced, and how far into one it is now. At each step of beam
search (search.BeamSearch), a constrained sentence's candidates are

1. the 2k best continuations of its beams (what unconstrained beam search looks at),
2. each live beam's best next token,
3. each live beam's tokens that advance a constraint (the next token of a phrase it is in, or the first token of a
   phrase it has not produced),

and each candidate's *bank* is how many constraint tokens it will have produced. The beam is shared out among the
banks: the candidates are sorted by score within their bank, then taken round-robin, best of the highest bank
first (a bank with fewer candidates than its share leaves the rest to the others). EOS is forbidden to a hypothesis
until it has produced every phrase, so every finished hypothesis meets its constraints.

The fallback, documented: a sentence that reaches its length limit before any hypothesis met every constraint
finishes with its best hypotheses at the limit, as unconstrained search would; :func:`missing` names the phrases
its output lacks (``aiayn translate`` warns about each such line). A line whose phrases need more tokens than its
length limit allows is refused before decoding (:func:`check_fits`).

Matching is on token ids: a phrase is its tokens as the target tokenizer encodes it on its own (SentencePiece
marks a word start, so a phrase matches where it starts a word).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..quoting import brief

State = tuple[int, tuple[int, ...]]        # (bit i set: phrase i produced, the tokens of the phrase under way)


class Constraints:
    """One sentence's phrases (each a non-empty sequence of token ids) and the states of a hypothesis over them."""

    def __init__(self, phrases: Sequence[Sequence[int]]) -> None:
        self.phrases = tuple(tuple(int(t) for t in p) for p in phrases)
        if not self.phrases or any(not p for p in self.phrases):
            raise ValueError("a constraint is a non-empty phrase; a sentence without constraints has None")
        self.tokens = sum(len(p) for p in self.phrases)            # the bank of a hypothesis that met them all
        self.all = (1 << len(self.phrases)) - 1
        self.start: State = (0, ())
        self._advance: dict[tuple[State, int], State] = {}       # memoized: a search asks the same again and again
        self._bank: dict[State, int] = {}
        self._next: dict[State, list[int]] = {}

    def __repr__(self) -> str:
        return f"Constraints({[list(p) for p in self.phrases]})"

    def _open(self, met: int) -> list[tuple[int, ...]]:
        return [p for i, p in enumerate(self.phrases) if not met >> i & 1]

    def done(self, state: State) -> bool:
        return state[0] == self.all

    def bank(self, state: State) -> int:
        """Constraint tokens produced: those of the phrases met and of the one under way."""
        if state not in self._bank:
            met, prefix = state
            self._bank[state] = sum(len(p) for i, p in enumerate(self.phrases) if met >> i & 1) + len(prefix)
        return self._bank[state]

    def next_tokens(self, state: State) -> list[int]:
        """The tokens that take ``state`` further into a phrase it has not produced (sorted)."""
        if state not in self._next:
            met, prefix = state
            n = len(prefix)
            ahead = {p[n] for p in self._open(met) if p[:n] == prefix and len(p) > n}
            self._next[state] = sorted(ahead | {p[0] for p in self._open(met)})
        return self._next[state]

    def advance(self, state: State, token: int) -> State:
        """The state after ``token``: a phrase completed is met; a phrase broken off is started again from this token
        if it begins one."""
        key = (state, token)
        if key not in self._advance:
            self._advance[key] = self._step(state, token)
        return self._advance[key]

    def _step(self, state: State, token: int) -> State:
        met, prefix = state
        went = prefix + (token,)
        for i, p in enumerate(self.phrases):
            if not met >> i & 1 and p == went:
                return met | 1 << i, ()
        if any(p[: len(went)] == went for p in self._open(met)):
            return met, went
        return self._step((met, ()), token) if prefix else (met, ())


def allocate(cands: list[tuple[float, int, int, int]]) -> list[tuple[float, int, int, int]]:
    """Dynamic beam allocation over one sentence's candidates (score, beam, column, bank): all of them, in the
    order the beam takes them (its first k are the beam): best first within each bank, the banks taken round-robin
    from the highest."""
    by_bank: dict[int, list[tuple[float, int, int, int]]] = {}
    for c in sorted(cands, key=lambda c: -c[0]):
        by_bank.setdefault(c[3], []).append(c)
    order = sorted(((r, -bank, c) for bank, cs in by_bank.items() for r, c in enumerate(cs)), key=lambda x: x[:2])
    return [c for _, _, c in order]


def contains(tokens: Sequence[int], phrase: Sequence[int]) -> bool:
    n = len(phrase)
    return any(tuple(tokens[i : i + n]) == tuple(phrase) for i in range(len(tokens) - n + 1))


def missing(tokens: Sequence[int], constraints: Constraints | None) -> list[tuple[int, ...]]:
    """The phrases of ``constraints`` that ``tokens`` (an output) does not contain."""
    if constraints is None:
        return []
    return [p for p in constraints.phrases if not contains(tokens, p)]


def unmet(outputs: Sequence[Sequence[Sequence[int]]], constraints: Sequence[Constraints | None]) -> list[int]:
    """The lines (indices) whose outputs (each line's n-best token lists) do not all contain the line's phrases.
    With ``keep_plain`` (DecodeConfig), a line first decoded without constraints keeps that translation when it
    already holds its phrases (it is the best the search found, and it meets them); only these lines are decoded
    again with constrained search. One rule for ``aiayn translate``, the Python API and the server."""
    return [i for i, (hs, c) in enumerate(zip(outputs, constraints, strict=True))
            if c is not None and any(missing(h, c) for h in hs)]


def refuse_constraints(decode: DecodeConfig) -> None:
    """The settings lexical constraints cannot be kept with, refused by name."""
    if decode.sampling:
        raise ValueError("constraints (a glossary): sampling cannot keep them; they need beam search (beam >= 2)")
    if decode.beam < 2:
        raise ValueError("constraints (a glossary) need beam search: beam >= 2 (the beam is shared out among the "
                         "hypotheses by how many constraint tokens they have produced; 4 or more keeps quality)")
    if decode.shortlist:
        raise ValueError("constraints (a glossary) with shortlist=true: the shortlist may not hold the constraint "
                         "tokens; decode without the shortlist")


def check_fits(constraints: Constraints | None, limit: int, where: str) -> None:
    """A clear error when the phrases need more tokens than the output may have (``limit``)."""
    if constraints is not None and constraints.tokens > limit:
        raise ValueError(f"{where}: the constraints need {constraints.tokens} target tokens, more than the "
                         f"{limit} this line's length limit allows (max_len_a, max_len_b)")


class Glossary:
    """Terms and their required translations, from a UTF-8 TSV file: ``source term<TAB>target term`` per line (blank
    lines and lines starting with ``#`` skipped). The rules, one place:

    - a term matches where it stands as whole words in a source line (not inside a longer word, nor in a hyphenated
      one: ``Shirt`` is not found in ``T-Shirt``), ignoring case
      (Unicode, as Python's ``re.IGNORECASE``); whitespace inside a term matches any run of whitespace;
    - overlapping matches: the longest term wins (``New York City`` over ``New York``), then the earliest;
    - each term found makes its target term a constraint of the line, once, written as in the file (its case too);
      two terms with the same target give one constraint.
    """

    def __init__(self, entries: Sequence[tuple[str, str]], name: str = "glossary") -> None:
        import re

        self.entries, self.name = list(entries), name
        for term, target in self.entries:
            if not (isinstance(term, str) and term.strip() and isinstance(target, str) and target.strip()):
                # an empty term would match everywhere and force its target into every line
                raise ValueError(f"{name}: a glossary entry needs a non-empty source term and target term, not "
                                 f"{brief(term)} -> {brief(target)}")
        by_length = sorted(range(len(self.entries)), key=lambda i: -len(self.entries[i][0]))
        self._patterns = [(re.compile(r"(?<![\w-])" + r"\s+".join(map(re.escape, self.entries[i][0].split())) +
                                      r"(?![\w-])", re.IGNORECASE), self.entries[i][1]) for i in by_length]

    @classmethod
    def load(cls, path: str | Path) -> Glossary:
        entries: list[tuple[str, str]] = []
        for n, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            fields = raw.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise ValueError(f"{path}:{n}: a glossary line is 'source term<TAB>target term', both non-empty; "
                                 f"got {raw!r}")
            entries.append((fields[0].strip(), fields[1].strip()))
        if not entries:
            raise ValueError(f"{path}: the glossary has no entries")
        return cls(entries, str(path))

    def matches(self, line: str) -> list[tuple[int, int, str]]:
        """(start, end, target term) of each term found in ``line``, by the rules above, in the line's order."""
        taken: list[tuple[int, int, str]] = []
        for pattern, target in self._patterns:
            for m in pattern.finditer(line):
                if all(m.end() <= s or m.start() >= e for s, e, _ in taken):
                    taken.append((m.start(), m.end(), target))
        return sorted(taken)

    def constraints(self, line: str) -> list[str]:
        """The target terms ``line`` must be translated with."""
        return list(dict.fromkeys(target for _, _, target in self.matches(line)))

    def added_to(self, phrases: Sequence[str], line: str) -> list[str]:
        """A line's own constraint ``phrases`` and the target terms it must be translated with, each once: how every
        front end merges a glossary with constraints."""
        return list(dict.fromkeys([*phrases, *self.constraints(line)]))


class Lexical:
    """The constraints of the sentences of one beam search (search.BeamSearch), in its sentence order: each one's
    Constraints (or None) and its w beams' states, and the two things a step does with them: :meth:`forbid_eos` on
    the log-probabilities, :meth:`allocate` on the 2k candidates, then :meth:`chosen` with the k kept."""

    def __init__(self) -> None:
        self.cons: list[Constraints | None] = []
        self.states: list[list[State]] = []
        self._after: dict[int, list[State]] = {}        # this step's candidates' states, by constrained sentence

    def admit(self, cons: Sequence[Constraints | None], w: int, decode: DecodeConfig) -> None:
        """Sentences join with ``w`` beams each, decoded with ``decode`` (refused if it cannot keep constraints)."""
        if any(c is not None for c in cons):
            refuse_constraints(decode)
        self.cons += cons
        self.states += [[c.start] * w if c is not None else [] for c in cons]

    def expand(self, k: int) -> None:
        """The batch's one beam per sentence became k (search.BeamSearch._expand)."""
        self.states = [states * k for states in self.states]

    def keep(self, rows: list[int]) -> None:
        self.cons, self.states = [self.cons[i] for i in rows], [self.states[i] for i in rows]

    def _constrained(self) -> list[int]:
        return [i for i, c in enumerate(self.cons) if c is not None]

    def forbid_eos(self, logp: Tensor, scores: Tensor, at_limit: Tensor, eos: int) -> None:
        """logp (n, w, V), in place: EOS is forbidden to a hypothesis that has not produced every phrase; at the
        length limit too while another live beam of its sentence has (that one ends the sentence). Where none has by
        the limit, each beam ends with what it has (EOS is the only token left there): the documented fallback."""
        rows = self._constrained()
        if not rows:
            return
        limit, beams = at_limit.tolist(), scores.tolist()
        where: tuple[list[int], list[int]] = ([], [])
        for i in rows:
            c, states = self.cons[i], self.states[i]
            assert c is not None
            open_ = [j for j, state in enumerate(states) if not c.done(state)]
            live_done = any(x > float("-inf") and c.done(states[j]) for j, x in enumerate(beams[i]))
            if open_ and (not limit[i] or live_done):
                where[0].extend([i] * len(open_))
                where[1].extend(open_)
        if where[0]:
            logp[where[0], where[1], eos] = float("-inf")

    def allocate(self, logp: Tensor, scores: Tensor, top: Tensor, beam_of: Tensor, col: Tensor, eos: int) -> None:
        """Replace the 2k candidates (n, 2k) of each constrained sentence, in place, by its 2k first in dynamic beam
        allocation's order: from its 2k best, each live beam's best and the tokens that advance a beam's constraints
        (the module's docstring). logp (n, w, V) after :meth:`forbid_eos`, scores (n, w) the beams'. The tensors are
        read and written once for all the sentences (a call per sentence would cost more than the search itself)."""
        rows = self._constrained()
        self._after = {}
        if not rows:
            return
        index = torch.tensor(rows, device=logp.device)
        best_v, best_t = (x.tolist() for x in logp.index_select(0, index).max(-1))    # each beam's best next token
        tops, beams_of, cols = (x.index_select(0, index).tolist() for x in (top, beam_of, col))
        beams = scores.index_select(0, index).tolist()
        advancing = [(r, b, t) for r, i in enumerate(rows) for b, x in enumerate(beams[r]) if x > float("-inf")
                     for t in self.cons[i].next_tokens(self.states[i][b])]  # type: ignore[union-attr]
        values = logp[[rows[r] for r, _, _ in advancing], [b for _, b, _ in advancing],
                      [t for _, _, t in advancing]].tolist() if advancing else []
        extra: dict[int, list[tuple[int, int, float]]] = {}
        for (r, b, t), v in zip(advancing, values, strict=True):
            extra.setdefault(r, []).append((b, t, v))
        m, orders = top.shape[1], []
        for r, i in enumerate(rows):
            c, states, beam = self.cons[i], self.states[i], beams[r]
            assert c is not None
            pool = {(b, t): v for v, b, t in zip(tops[r], beams_of[r], cols[r], strict=True) if v > float("-inf")}
            for b, (v, t) in enumerate(zip(best_v[r], best_t[r], strict=True)):
                if beam[b] + v > float("-inf"):
                    pool.setdefault((b, t), beam[b] + v)
            for b, t, v in extra.get(r, []):
                if v > float("-inf"):
                    pool.setdefault((b, t), beam[b] + v)
            new = {bt: states[bt[0]] if bt[1] == eos else c.advance(states[bt[0]], bt[1]) for bt in pool}
            order = allocate([(v, b, t, c.bank(new[(b, t)])) for (b, t), v in pool.items()])[:m]
            order += [(float("-inf"), 0, 0, 0)] * (m - len(order))         # impossible candidates, never chosen
            orders.append(order)
            self._after[i] = [new.get((o[1], o[2]), c.start) for o in order]
        top[index] = torch.tensor([[o[0] for o in order] for order in orders], dtype=top.dtype, device=top.device)
        beam_of[index] = torch.tensor([[o[1] for o in order] for order in orders], device=top.device)
        col[index] = torch.tensor([[o[2] for o in order] for order in orders], device=top.device)

    def chosen(self, cont: Tensor) -> None:
        """cont (n, k): which of the 2k candidates each sentence's k beams continue."""
        for i, after in self._after.items():
            self.states[i] = [after[j] for j in cont[i].tolist()]
