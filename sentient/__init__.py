"""Sentient: a personal knowledge agent whose memory is a vault of markdown files."""


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
