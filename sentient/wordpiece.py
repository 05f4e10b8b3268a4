"""The embedding model's tokenizer for one plain text (a search's query), in Python: the ids the
`tokenizers` library gives it, without loading that library and parsing its 466 KB
tokenizer.json (30-70 ms of every `sentient search` that searches itself, for a query of a few
words).

What it implements is BERT's uncased WordPiece as the model's tokenizer.json configures it
(`Words.readable` checks each part of that configuration, and reads nothing else): the text's
whitespace split on and its ASCII punctuation split off, lower-cased, each word cut into the
longest pieces the vocabulary has (`##` before a piece inside a word; a word of more than 100
characters, or one with a part no piece covers, is `[UNK]`), then `[CLS]` before and `[SEP]`
after, the pieces cut to fit the model's length. Only for `plain` texts: printable ASCII and
ordinary whitespace, holding no special token's text; for any other (accents, other scripts,
control characters, `[MASK]`...) the library tokenizes, so that nothing here has to agree with it
on Unicode. tests/test_start_cost.py checks that both give the same ids.

The vocabulary is kept, one token a line in id order after their count, beside the cached weights
(embedding.weights_cache), named by the tokenizer.json it was read from; a tokenizer.json this
does not implement gets no such file, and its texts all go to the library.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

from sentient.cache_files import keep_file, mark_used

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # matched in the raw text by the library
_PLAIN = frozenset(string.printable) - frozenset("\x0b\x0c")  # printable ASCII, space, tab, newlines
_PUNCTUATION = frozenset(string.punctuation)  # each a word of its own
_SPLIT = str.maketrans({mark: f" {mark} " for mark in string.punctuation} | {"\t": " ", "\n": " ", "\r": " "})
MOST_CHARS = 100  # a longer word is [UNK] (max_input_chars_per_word)
# What the tokenizer.json's parts must be for the ids here to be the library's.
EXPECTED: dict[str, Any] = {
    "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
                   "lowercase": True},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": MOST_CHARS},
}


def plain(text: str) -> bool:
    """Whether the ids here are the library's for this text (see the module's docstring)."""
    return _PLAIN.issuperset(text) and not ("[" in text and any(token in text for token in SPECIAL))


class Words:
    """The vocabulary, and the ids of a plain text."""

    def __init__(self, tokens: list[str], most: int) -> None:
        """`tokens` in id order; `most`: the most ids of a text, [CLS] and [SEP] included."""
        self._ids = {token: number for number, token in enumerate(tokens)}
        self._most = most
        self._unknown, self._first, self._last = (self._ids[token] for token in ("[UNK]", "[CLS]", "[SEP]"))

    def ids(self, text: str) -> list[int]:
        """The ids of a `plain` text."""
        found = [self._first]
        room = self._most - 2
        for word in text.lower().translate(_SPLIT).split():
            found += self._pieces(word)
            if len(found) > room:
                break
        return [*found[: room + 1], self._last]

    def _pieces(self, word: str) -> list[int]:
        if len(word) > MOST_CHARS:
            return [self._unknown]
        pieces = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = self._ids.get(word[start:end] if start == 0 else "##" + word[start:end])
                if piece is not None:
                    break
                end -= 1
            else:
                return [self._unknown]  # a part no piece covers: the whole word is unknown
            pieces.append(piece)
            start = end
        return pieces

    @staticmethod
    def readable(config: dict[str, Any]) -> list[str] | None:
        """The vocabulary of a parsed tokenizer.json (its tokens in id order), when its parts are
        those this implements (EXPECTED; [CLS] text [SEP]); else None."""
        for part, expected in EXPECTED.items():
            given = config.get(part)
            if not isinstance(given, dict) or any(given.get(name) != value for name, value in expected.items()):
                return None
        single = (config.get("post_processor") or {}).get("single")
        if single != [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]:
            return None
        vocab = config["model"].get("vocab")
        if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
            return None
        added = {token.get("content"): token.get("id") for token in config.get("added_tokens") or ()}
        if set(added) - set(SPECIAL) or any(vocab.get(token) != added.get(token) for token in SPECIAL):
            return None
        tokens = sorted(vocab, key=vocab.__getitem__)
        if any(not token or not token.isprintable() or token != token.strip() for token in tokens):
            return None  # one a line: no token may be empty or hold a line break
        return tokens


def load_words(tokenizer: Path, kept: Path | None, most: int) -> Words | None:
    """The vocabulary of `tokenizer` (a tokenizer.json): read from `kept` when it is there, else
    read from the JSON and written to `kept` for the next process; None when the tokenizer is
    not one this implements (then the library tokenizes every text)."""
    if kept is not None:
        try:
            count, *tokens = kept.read_text(encoding="utf-8").split("\n")
            if int(count) == len(tokens):
                mark_used(kept)
                return Words(tokens, most)
        except (OSError, ValueError, KeyError):  # missing, cut short, not ours: read from the JSON again
            pass
    try:
        readable = Words.readable(json.loads(tokenizer.read_bytes()))
    except (OSError, ValueError, AttributeError):
        return None
    if readable is None:
        return None
    tokens = readable
    if kept is not None:
        text = "\n".join([str(len(tokens)), *tokens])  # how many first: a file cut short is seen
        try:
            keep_file(kept, lambda out: out.write(text.encode("utf-8")))
        except OSError:  # a folder that cannot be written: the next process reads the JSON again
            pass
    return Words(tokens, most)
