"""The local HTTP API: /api for Sentient's own clients, /v1 for OpenAI-compatible ones."""
