"""LLM-free core: persistence, gating, limits, sandbox. Imports no LLM SDK, broker or worker."""
