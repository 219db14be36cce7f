"""The model: the OpenAI-compatible client, the built-in rules provider, the server's context window."""
