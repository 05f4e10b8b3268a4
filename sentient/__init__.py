"""Sentient: a personal knowledge agent whose memory is a vault of markdown files."""

import os

# numpy's OpenBLAS reads its thread count once, when numpy first loads, and the threat scanner's
# learned detector loads it before the embedding model does (in `sentient index`, during the
# sync): one BLAS thread unless set, here, before either. Its own threads spin waiting for a core
# and took 3-4x the CPU time a text on a busy machine (sentient/embedding.py BLAS_THREADS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def __getattr__(name: str) -> str:
    """`__version__`, from the installed package's metadata when first asked for: importing
    importlib.metadata takes a few hundredths of a second, which a threat-scan helper process
    (sentient/threats/parallel.py) would otherwise wait for before it is ready."""
    if name != "__version__":
        raise AttributeError(f"module 'sentient' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("sentient")
    except PackageNotFoundError:  # run from a source tree that was never installed
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
