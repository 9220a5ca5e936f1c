"""Shared machinery of the specs: the oracle, prompts, meters, strategies, snapshot naming."""
