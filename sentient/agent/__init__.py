"""The agent: turns, the tool loop, helpers, the reader and scripts."""
