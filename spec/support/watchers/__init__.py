"""Watching an engine from outside: the ops, kernels, lanes, blocks and replays a step really runs."""
