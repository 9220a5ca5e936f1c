"""The checkpoints the specs run on: the tiny fixtures, written checkpoint directories and GGUF files, the real model."""
from .fixtures import tiny_checkpoint  # the one most callers want (../shared/tools/step_files.py)

__all__ = ["tiny_checkpoint"]
