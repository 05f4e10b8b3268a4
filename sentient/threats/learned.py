"""The learned stage: a classifier for what the patterns pass, shipped as plain data.

The patterns explain themselves but reach only the phrasings someone wrote down. The detector
scores every sentence of a text the patterns found nothing in, and the text as a whole, with a
logistic regression over hashed character n-grams (3 to 5 bytes of the text's UTF-8, lower-cased,
its whitespace collapsed): n-grams work in any language and survive small changes of wording.
It is trained by `train/train_detector.py` from the sources listed in train/sources.json
(docs/security.md names them) and shipped as two files in sentient/data/:

- detector.npy   the weights, one float16 a hash bucket, read with `allow_pickle=False` (loading
                 runs no code: a file that is anything but a flat float16 array is refused)
- detector.json  the bias, the threshold chosen on a validation split, the hashing parameters,
                 the weights' SHA-256 (checked on load) and reference scores from the training
                 script's export (the tests score them again)

Inference is a gather and a sum in numpy: every n-gram's bucket is a polynomial hash of its bytes
(the same on every machine and every run; Python's `hash` is salted), the weights of the
buckets are added up per sentence, and a sentence's score is the bias plus that sum over the
square root of its n-gram count. A text is flagged when its own score, or its best sentence's,
reaches the threshold; the finding names that sentence.

It is made fast in two ways, neither changing a score: a batch is hashed and weighed CHUNK bytes
at a time (every n-gram length in one pass of 64-bit arithmetic: see `Hashing`), so that the
intermediate arrays stay in the processor's cache instead of going through memory a dozen times;
and one short text (a `scan()` of a note) is cut into sentences in Python and scored with a
handful of numpy calls instead of the batch's fifty, whose fixed cost would be most of its time.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from sentient.errors import ConfigError

DATA = Path(__file__).resolve().parent.parent / "data"
DETECTOR_FILE = DATA / "detector.json"  # the weights are the .npy file of the same name
FORMAT = "sentient-detector 1"
CLASS = "learned"
PATTERN_ID = "learned-detector"

LONGEST = 5  # bytes: the longest n-gram a detector may use
LONGEST_READ = 1_800  # n-grams: a longer sentence or text is scored as its mean weight times sqrt of this
SHORTEST = 24  # bytes a sentence needs to be scored on its own (a shorter one counts in its text's), and a text at all
_TEXT = "\0" * (LONGEST - 1) + "\x02" + "\0" * (LONGEST - 1)  # between texts: no n-gram reaches across
_MULTIPLIERS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9)  # odd 64-bit constants, n = 3, 4, 5
_CONTROLS = re.compile("[\x00-\x02]")
CHUNK = 8_192  # bytes of a batch hashed at a time: n-grams x CHUNK x 8 bytes of hashes stay in the cache
ONE_TEXT = 4_096  # characters: a text judged alone up to this long takes the short way (Detector.judge)


@dataclass(frozen=True)
class Reading:
    """Texts as the detector reads them: one byte array (the UTF-8 of each text NFKC'd and
    lower-cased, tabs as spaces), the texts apart by NUL bytes, cut into
    sentences: a sentence ends after a line break, or after the space that follows `.`, `!` or `?`."""

    data: Any  # numpy uint8, 8 NUL bytes at the end
    starts: Any  # numpy int64: each sentence's first byte
    ends: Any  # and the byte after its last
    texts: Any  # numpy int64: the number of the text each sentence is of
    count: int  # texts


def read(texts: Sequence[str]) -> Reading:
    """`Reading` of the texts. Only a text with characters outside ASCII is NFKC'd (an ASCII
    text already is). The sentences are found from where the texts begin and end (the _TEXT
    between them) and where they are cut, a few passes over the bytes: a sentence begins where
    its text does or after a cut inside it, and ends where the next one begins or its text ends."""
    import numpy as np

    lowered = [text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).lower() for text in texts]
    data = _encoded(lowered)
    separators = max(len(texts) - 1, 0)
    if np.count_nonzero(data < 3) != (2 * (LONGEST - 1) + 1) * separators + 8:  # more than _TEXT's and the end's
        data = _encoded([_CONTROLS.sub(" ", text) for text in lowered])  # a text's own NUL, \x01 or \x02: a space
    marks = np.flatnonzero(data == 2)  # one in each _TEXT
    text_starts = np.concatenate(([0], marks + LONGEST))
    text_ends = np.concatenate((marks - (LONGEST - 1), [len(data) - 8]))
    spaces = np.flatnonzero(data[1:] == 32)  # the byte before each space
    before = data[spaces]
    cuts = np.concatenate((np.flatnonzero(data == 10), spaces[(before == 46) | (before == 33) | (before == 63)] + 1))
    after = cuts + 1  # a sentence begins there unless its text ends there (a NUL of _TEXT or of the end)
    starts = np.sort(np.concatenate((text_starts[text_starts < text_ends], after[data[after] > 2])))
    numbers = np.searchsorted(marks, starts)  # the text of each sentence
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    last = np.ones(len(starts), dtype=bool)  # its text's last sentence: it ends where the text does
    last[:-1] = numbers[1:] != numbers[:-1]
    ends[last] = text_ends[numbers[last]]
    return Reading(data, starts, ends, numbers, len(texts))


def _encoded(lowered: Sequence[str]) -> Any:
    """The texts joined by _TEXT, line breaks as \\n and tabs as spaces, as UTF-8 bytes in a
    numpy array with 8 NUL bytes at the end (so that every n-gram can be read as a number)."""
    import numpy as np

    joined = _TEXT.join(lowered).encode("utf-8", "surrogatepass")  # looked through as bytes: memchr's speed
    if b"\r" in joined:  # CR, LF and tab are single bytes of UTF-8, never part of a character's
        joined = joined.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if b"\t" in joined:
        joined = joined.replace(b"\t", b" ")
    return np.frombuffer(joined + b"\0" * 8, dtype=np.uint8)


def buckets(reading: Reading, n: int, bits: int) -> Any:
    """The bucket of the n-gram (n of 3 to LONGEST bytes) starting at every byte of the reading
    but the last 7: the n bytes read as a little-endian number (the same on every machine),
    multiplied by an odd constant for n (its low 32 bits for n of up to 4, in 32-bit arithmetic),
    the top `bits` bits of the product."""
    import numpy as np

    data = reading.data
    if n <= 4:  # four bytes are a 32-bit number: half the memory to go through
        small = np.ndarray((len(data) - 7,), dtype="<u4", buffer=data, offset=0, strides=(1,))
        value32 = small & np.uint32((1 << (8 * n)) - 1) if n < 4 else small.copy()
        value32 *= np.uint32(_MULTIPLIERS[n - 3] & 0xFFFFFFFF)
        value32 >>= np.uint32(32 - bits)
        return value32.astype(np.intp)  # numpy gathers by its own index type fastest
    words = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, offset=0, strides=(1,))
    value = words & np.uint64((1 << (8 * n)) - 1)
    value *= np.uint64(_MULTIPLIERS[n - 3])
    value >>= np.uint64(64 - bits)
    return value.view(np.int64)


@dataclass(frozen=True)
class Hashing:
    """`buckets` for every n-gram length of a detector at once, in 64-bit arithmetic: the bytes
    at a position read as a little-endian 64-bit number, masked to n bytes, times a multiplier,
    the top `bits` bits. For n of up to 4 the multiplier is the 32-bit constant shifted up 32
    bits: the top bits of (x * m) mod 2^32 are those of ((x * m) << 32) mod 2^64, so the buckets
    are exactly `buckets`'s (tests/test_learned.py checks it)."""

    masks: Any  # numpy uint64, one row per n-gram length
    multipliers: Any  # the same shape
    shift: Any  # numpy uint64: 64 - bits

    @classmethod
    def of(cls, ngrams: Sequence[int], bits: int) -> Hashing:
        import numpy as np

        multipliers = [(_MULTIPLIERS[n - 3] & 0xFFFFFFFF) << 32 if n <= 4 else _MULTIPLIERS[n - 3] for n in ngrams]
        return cls(
            np.array([[(1 << (8 * n)) - 1] for n in ngrams], dtype=np.uint64),
            np.array([[value] for value in multipliers], dtype=np.uint64),
            np.uint64(64 - bits),
        )

    def weigh(self, weights: Any, words: Any, hashes: Any, gathered: Any, out: Any) -> None:
        """`out[i]`: the weights of the buckets of the n-grams starting at the i-th of `words`
        (the bytes from each position as 64-bit numbers), added in the detector's order of
        n-grams in float32. `hashes` (uint64) and `gathered` (float32) are work arrays of
        n-grams x len(words)."""
        import numpy as np

        np.bitwise_and(words, self.masks, out=hashes)
        np.multiply(hashes, self.multipliers, out=hashes)
        np.right_shift(hashes, self.shift, out=hashes)
        np.take(weights, hashes.view(np.int64), out=gathered, mode="clip")  # clip: no check (all in range)
        np.add.reduce(gathered, axis=0, out=out)  # row by row: ((first + second) + third)


def words_of(data: Any, count: int) -> Any:
    """The 8 bytes from each of the first `count` positions of `data` (bytes or a uint8 array,
    7 more bytes after them) as little-endian 64-bit numbers: a view, no copy."""
    import numpy as np

    return np.ndarray((count,), dtype="<u8", buffer=data, offset=0, strides=(1,))


def scale(counts: Any) -> Any:
    """What a sum of weights is multiplied by: 1/sqrt(count), the training texts' norm, up to
    LONGEST_READ n-grams; beyond, sqrt(LONGEST_READ)/count, so that a long text is judged by its
    mean weight as if it were of the length the model was trained on, and its score does not grow
    with its length (a page of the same harmless line repeated)."""
    import numpy as np

    counts = np.maximum(counts, 1.0)
    return np.sqrt(np.minimum(counts, LONGEST_READ)) / counts


def _ends(encoded: bytes) -> list[int]:
    """Where each sentence of one text's bytes but the last ends (see `Reading`): after a line
    break, or after the space that follows `.`, `!` or `?`; found by bytes.find, not a pass of
    Python's regular expressions over every byte."""
    ends: list[int] = []
    for cut in (b"\n", b". ", b"! ", b"? "):
        at = encoded.find(cut)
        while at >= 0:
            ends.append(at + len(cut))
            at = encoded.find(cut, at + 1)
    ends.sort()
    return ends


def _scale(count: int) -> float:
    """`scale` of one count, in Python floats (the same operations: the same number)."""
    counted = max(float(count), 1.0)
    return math.sqrt(min(counted, LONGEST_READ)) / counted


@dataclass(frozen=True)
class Hit:
    """A text the detector flags: its score and the sentence that scored highest."""

    score: float
    sentence: str


@dataclass(frozen=True)
class Detector:
    """The weights and settings of detector.json and its .npy, loaded and checked."""

    path: str
    digest: str  # of both files: what the pattern set's fingerprint takes in
    bias: float
    threshold: float
    ngrams: tuple[int, ...]
    bits: int
    weights: Any = field(repr=False)  # numpy float32 array of 2**bits
    references: tuple[tuple[str, float], ...] = ()

    @cached_property
    def hashing(self) -> Hashing:
        return Hashing.of(self.ngrams, self.bits)

    def weighed(self, reading: Reading) -> Any:
        """For every byte of the reading but the last 7, the weights of the n-grams starting
        there added up (float32), CHUNK bytes at a time."""
        import numpy as np

        hashing = self.hashing
        size = len(reading.data) - 7
        words = words_of(reading.data, size)
        total = np.empty(size, dtype=np.float32)
        step = min(CHUNK, size)
        hashes = np.empty((len(self.ngrams), step), dtype=np.uint64)
        gathered = np.empty((len(self.ngrams), step), dtype=np.float32)
        for start in range(0, size, step):
            stop = min(start + step, size)
            width = stop - start
            hashing.weigh(self.weights, words[start:stop], hashes[:, :width], gathered[:, :width], total[start:stop])
        return total

    @classmethod
    def load(cls, path: Path = DETECTOR_FILE) -> Detector:
        return _load(path)

    def score(self, reading: Reading) -> tuple[Any, Any]:
        """Each sentence's score (-inf for one shorter than SHORTEST bytes, which counts only
        in its text's), and each text's (-inf for one shorter than SHORTEST bytes: too few
        n-grams to judge): the bias plus the weights of its n-grams' buckets summed, over the
        square root of how many there are."""
        import numpy as np

        if not len(reading.starts):
            return np.zeros(0), np.full(reading.count, self.bias)
        total = self.weighed(reading)
        # each sentence's n-grams, [start, end): every other sum of the bounds taken in turn
        bounds = np.column_stack((reading.starts, reading.ends)).ravel()
        sums = np.add.reduceat(total, bounds)[::2].astype(np.float64)
        lengths = reading.ends - reading.starts
        counts = (lengths * len(self.ngrams)).astype(np.float64)
        sentence = self.bias + sums * scale(counts)
        sentence[lengths < SHORTEST] = -np.inf
        text_sums = np.bincount(reading.texts, weights=sums, minlength=reading.count)
        text_counts = np.bincount(reading.texts, weights=counts, minlength=reading.count)
        whole = self.bias + text_sums * scale(text_counts)
        whole[text_counts < SHORTEST * len(self.ngrams)] = -np.inf  # too short to judge
        return sentence, whole

    def judge(self, texts: Sequence[str]) -> list[Hit | None]:
        """For each text, a Hit when its own score or its best sentence's reaches the threshold,
        with the best sentence (the text's first when none is scored alone). One text of up to
        ONE_TEXT characters takes the short way (`_judge_one`), to the same verdict and score."""
        import numpy as np

        if len(texts) == 1 and len(texts[0]) <= ONE_TEXT:
            return [self._judge_one(texts[0])]
        reading = read(texts)
        sentence, whole = self.score(reading)
        best = np.full(reading.count, -np.inf)
        firsts = np.flatnonzero(np.diff(reading.texts, prepend=-1))  # the texts' sentences are in order:
        best[reading.texts[firsts]] = np.maximum.reduceat(sentence, firsts)  # each text's best by one reduceat
        judged: list[Hit | None] = [None] * reading.count
        for number in np.flatnonzero(np.maximum(best, whole) >= self.threshold):
            low, high = np.searchsorted(reading.texts, [number, number + 1])  # its sentences
            if low == high:
                continue
            top = low + int(np.argmax(sentence[low:high]))
            shown = bytes(reading.data[reading.starts[top] : reading.ends[top]]).decode("utf-8", "replace")
            judged[number] = Hit(round(float(max(best[number], whole[number])), 4), shown.strip())
        return judged

    def _judge_one(self, text: str) -> Hit | None:
        """`judge([text])[0]` the short way: the text read as `read` does, its sentences found by
        `_ends`, one `Hashing.weigh` and one reduceat in numpy, the scores in Python floats (the
        same IEEE operations as `score`'s, in the same order: the same numbers)."""
        import numpy as np

        lowered = text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).lower()
        if "\r" in lowered:
            lowered = lowered.replace("\r\n", "\n").replace("\r", "\n")
        if "\t" in lowered:
            lowered = lowered.replace("\t", " ")
        encoded = _CONTROLS.sub(" ", lowered).encode("utf-8", "surrogatepass")
        size = len(encoded)
        if size < SHORTEST:  # too short to judge, as a text and as a sentence
            return None
        ends = _ends(encoded)
        starts = [0, *ends[:-1]] if ends and ends[-1] == size else [0, *ends]
        if not ends or ends[-1] != size:
            ends.append(size)
        words = words_of(encoded + b"\0" * 8, size + 1)  # one past the end: reduceat's last bound
        total = np.empty(size + 1, dtype=np.float32)
        shape = (len(self.ngrams), size + 1)
        self.hashing.weigh(self.weights, words, np.empty(shape, np.uint64), np.empty(shape, np.float32), total)
        bounds = [bound for pair in zip(starts, ends, strict=True) for bound in pair]
        sums = np.add.reduceat(total, bounds)[::2].astype(np.float64).tolist()
        per = len(self.ngrams)
        scores: list[float] = []
        text_sum = 0.0
        for start, end, summed in zip(starts, ends, sums, strict=True):
            length = end - start
            scores.append(self.bias + summed * _scale(length * per) if length >= SHORTEST else -math.inf)
            text_sum += summed
        whole = self.bias + text_sum * _scale(size * per)  # size >= SHORTEST: judged
        top = max(range(len(scores)), key=scores.__getitem__)
        score = max(scores[top], whole)
        if score < self.threshold:
            return None
        shown = encoded[starts[top] : ends[top]].decode("utf-8", "replace")
        return Hit(round(score, 4), shown.strip())

    def describe(self, hit: Hit) -> str:
        return f"the learned detector scored it {hit.score:.2f} (flags from {self.threshold:.2f})"


_FIX = "reinstall Sentient, or run train/train_detector.py to make the pair again"


def digest(path: Path = DETECTOR_FILE) -> str:
    """What identifies a detector: a digest of its two files (what the fingerprint takes in)."""
    return _digest(*_read(path))


def _digest(settings_bytes: bytes, weights_bytes: bytes) -> str:
    return hashlib.sha256(settings_bytes + b"\0" + weights_bytes).hexdigest()[:16]


def _read(path: Path) -> tuple[bytes, bytes]:
    try:
        return path.read_bytes(), path.with_suffix(".npy").read_bytes()
    except OSError as error:
        raise ConfigError(f"{path}: the learned detector cannot be read ({error}); {_FIX}") from error


def _load(settings_file: Path) -> Detector:
    import numpy as np

    weights_file = settings_file.with_suffix(".npy")
    fix = _FIX
    settings_bytes, weights_bytes = _read(settings_file)
    try:
        settings = json.loads(settings_bytes)
    except ValueError as error:
        raise ConfigError(f"{settings_file}: the learned detector is not JSON ({error}); {fix}") from error
    if not isinstance(settings, dict) or settings.get("format") != FORMAT:
        raise ConfigError(f"{settings_file}: not a detector of format {FORMAT!r}; {fix}")
    if hashlib.sha256(weights_bytes).hexdigest() != settings.get("weights_sha256"):
        raise ConfigError(f"{weights_file}: its SHA-256 is not the one {settings_file.name} records; {fix}")
    try:
        import io

        weights = np.load(io.BytesIO(weights_bytes), allow_pickle=False)
        bits = int(settings["bits"])
        ngrams = tuple(int(n) for n in settings["ngrams"])
        bias = float(settings["bias"])
        threshold = float(settings["threshold"])
        references = tuple((str(text), float(score)) for text, score in settings.get("references", []))
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError(f"{settings_file}: the learned detector does not load ({error}); {fix}") from error
    if (
        weights.dtype != np.float16
        or weights.shape != (1 << bits,)
        or not 8 <= bits <= 24
        or not ngrams
        or not all(3 <= n <= LONGEST for n in ngrams)
    ):
        raise ConfigError(f"{weights_file}: expected {1 << bits} float16 weights and n-grams of 3 to {LONGEST} "
                          f"bytes, found {weights.dtype} {weights.shape} and {ngrams}; {fix}")  # fmt: skip
    return Detector(
        str(settings_file),
        _digest(settings_bytes, weights_bytes),
        bias,
        threshold,
        ngrams,
        bits,
        weights.astype(np.float32),
        references,
    )
