"""A vocabulary for the tiny fixtures, which have token ids and no tokenizer: what each id's
token spells, so that a grammar (torchlet.grammar, xgrammar) can be compiled over them and an
answer read back as text. Ids 0-2 are special (b"": never allowed, 2 the fixtures' eos), then
every printable ASCII character, then pieces JSON answers use, then two-letter pieces, so most
texts spell more than one way (a grammar's mask has to follow multi-character tokens)."""
from __future__ import annotations

import itertools

SPECIAL = 3
JSON_PIECES = (b'{"', b'": ', b', "', b'"}', b'true', b'false', b'null', b'[]', b'{}', b', ',
               b'": "', b'"]', b'["', b'0.', b'-1', b'10', b'25', b'99', b'ab', b'yes', b'no')


def pieces(vocab_size: int) -> list[bytes]:
    """Each token id's bytes, for a vocabulary of vocab_size ids."""
    out = [b""] * SPECIAL + [bytes([c]) for c in range(32, 127)] + list(JSON_PIECES)
    pairs = (bytes(p) for p in itertools.product(b"abcdefghijklmnopqrstuvwxyz", repeat=2))
    out += [p for p in itertools.islice(pairs, max(vocab_size - len(out), 0)) if p not in out]
    while len(out) < vocab_size:  # pairs already among the pieces leave a few ids over
        out.append(b"~%d" % len(out))
    return out[:vocab_size]


def spell(tokens, table: list[bytes], stops=()) -> str:
    """The text of these token ids, stop tokens left out."""
    return b"".join(table[t] for t in tokens if t not in stops).decode()
