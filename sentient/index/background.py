"""Embedding in the background: `serve` keeps the index's vectors current in a thread of its own,
so that no request embeds a whole vault (a search embeds at most a few documents first:
reader.EMBED_IN_SEARCH). The thread runs at the lowest priority Linux gives a thread (nice 19),
takes a few documents at a time, and looks again a few seconds after it found nothing to do, or
as soon as it is told something changed (`poke`)."""

from __future__ import annotations

import logging
import os
import threading
from contextlib import suppress

from sentient.errors import SentientError
from sentient.index.index import Index

log = logging.getLogger(__name__)
BATCH = 64  # documents a step embeds before it lets go of the index again
IDLE_SECONDS = 5.0  # how long it waits, with nothing to embed, before it looks again


class BackgroundEmbedding:
    def __init__(self, index: Index, *, idle: float = IDLE_SECONDS) -> None:
        self.index = index
        self.idle = idle
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sentient-embedding", daemon=True)
        self.embedded = 0  # documents embedded since start

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Something changed: look now rather than after the idle wait."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        with suppress(OSError, AttributeError):  # this thread only, on Linux; elsewhere it runs as serve does
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        model = self.index.semantic_model()
        if model is None:  # no model: search ranks by words; nothing to do here
            return
        model.ready()  # queries by the int8 encoder from now on (Embedder.query), whether or not a document is embedded
        while not self._stop.is_set():
            try:
                done = self.index.embed(most=BATCH)
            except SentientError as exc:  # an index gone or broken: said once a while, tried again later
                log.warning("embedding for search by meaning paused: %s", exc.message)
                done = 0
            self.embedded += done
            if done < BATCH:  # none left: the vectors file is brought up to date (vectors.py), then a rest
                with suppress(SentientError):
                    self.index.keep_vectors()
                self._wake.wait(self.idle)
                self._wake.clear()
