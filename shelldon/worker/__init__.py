"""Everything that runs inside the per-turn forked worker. Imports no LLM SDK and no broker."""
