"""Sentient: a personal knowledge agent whose memory is a vault of markdown files."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sentient")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0.0.0+unknown"
