"""Ranks of a tensor-parallel group, each a child process."""
