"""The checkpoints the specs run on: the tiny fixtures, written checkpoint directories and GGUF files, the real model."""
