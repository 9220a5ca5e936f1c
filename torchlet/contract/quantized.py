"""A weight matrix stored as small integers in groups: what a quantized checkpoint holds (the
default model's GGUF blocks, read as they are) and what v18 computes with.

One layout covers GGUF's Q8_0, Q4_0 and Q4_1 blocks and v18's own int8 and int4 formats. A
matrix [rows, cols] is cut along cols into groups of `group` columns (a multiple of 32), and

    w[r, c] = scales[r, g] * (q[r, c] - zeros[r, g]) + mins[r, g],    g = c // group

with zeros 0 and mins 0 where they are None. scales and mins are float16 (as GGUF stores them),
zeros uint8. The dequantized value is computed in float32 in exactly that order (the integer
difference first, exact; one product; one sum), which is the order of the `gguf` package's
reference dequantizer, so a block dequantizes bit for bit as gguf's does:

    Q8_0: int8 q, group 32, scales only           w = d * q
    Q4_0: int4 q, group 32, scales, zeros = 8      w = d * (q - 8)
    Q4_1: int4 q, group 32, scales, mins           w = d * q + m

`bits` 8: q is int8 [rows, cols]. `bits` 4: q is uint8 [rows, cols // 2], each run of 32
columns in 16 bytes as GGUF packs a block: byte j holds column j in its low nibble and column
j + 16 in its high one (values 0..15). A kernel reads a run's 16 bytes once and unpacks both
halves with a mask and a shift."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Sequence

import torch

RUN = 32  # columns a run of packed int4 bytes covers (16 bytes); every group is whole runs
PARTS = ("q", "scales", "zeros", "mins")  # the tensors a QuantizedTensor may hold


@dataclass(frozen=True)
class QuantizedTensor:
    RUN: ClassVar[int] = RUN       # columns a run of packed 4-bit q covers (see the module)

    bits: int                      # 8 or 4
    q: torch.Tensor                # int8 [rows, cols] or uint8 [rows, cols // 2]
    scales: torch.Tensor           # float16 [rows, cols // group]
    group: int                     # columns a scale covers, a multiple of RUN
    zeros: torch.Tensor | None = None   # uint8 [rows, cols // group]
    mins: torch.Tensor | None = None    # float16 [rows, cols // group]
    name: str = ""                 # what the format is called ("Q4_1", "int8", ...), for reports

    def __post_init__(self):
        rows, cols = self.shape
        if self.bits not in (4, 8):
            raise ValueError(f"bits must be 4 or 8, got {self.bits}")
        if self.group % RUN or cols % self.group:
            raise ValueError(f"group {self.group} must be a multiple of {RUN} dividing the "
                             f"{cols} columns")
        expected = (torch.int8, self.q.shape[1]) if self.bits == 8 else (torch.uint8, cols // 2)
        if self.q.dtype != expected[0]:
            raise ValueError(f"{self.bits}-bit q must be {expected[0]}, got {self.q.dtype}")
        for part, dtype in (("scales", torch.float16), ("zeros", torch.uint8),
                            ("mins", torch.float16)):
            t = getattr(self, part)
            if t is None:
                continue
            if t.dtype != dtype or tuple(t.shape) != (rows, cols // self.group):
                raise ValueError(f"{part} must be {dtype} [{rows}, {cols // self.group}], got "
                                 f"{t.dtype} {list(t.shape)}")

    @property
    def shape(self) -> tuple[int, int]:
        """[rows, cols] of the matrix it stands for."""
        rows, width = self.q.shape
        return rows, width * (2 if self.bits == 4 else 1)

    @property
    def nbytes(self) -> int:
        """Bytes of its storages: what a read of the whole matrix reads."""
        return sum(t.untyped_storage().nbytes() for t in self.parts())

    def parts(self) -> list[torch.Tensor]:
        return [t for t in (getattr(self, k) for k in PARTS) if t is not None]

    @property
    def layout(self) -> tuple:
        """What matrices must share to be stacked into one: bits, group, parts held, columns."""
        return self.bits, self.group, self.zeros is None, self.mins is None, self.shape[1]

    def each(self, fn) -> "QuantizedTensor":
        """The same matrix with fn applied to each tensor it holds (rows picked, a device)."""
        return replace(self, **{k: fn(getattr(self, k)) for k in PARTS
                                if getattr(self, k) is not None})

    def unpacked(self) -> torch.Tensor:
        """q as one integer per column (int16 [rows, cols]): a 4-bit run's low nibbles, then
        its high ones."""
        if self.bits == 8:
            return self.q.to(torch.int16)
        rows, cols = self.shape
        runs = self.q.view(rows, cols // RUN, RUN // 2).to(torch.int16)
        return torch.cat([runs & 0xF, runs >> 4], dim=-1).reshape(rows, cols)

    def dequantize(self) -> torch.Tensor:
        """The float32 matrix, rounded as gguf's reference rounds it (see the module)."""
        rows, cols = self.shape
        q = self.unpacked().view(rows, cols // self.group, self.group)
        if self.zeros is not None:
            q = q - self.zeros.to(torch.int16)[..., None]
        w = self.scales.float()[..., None] * q.float()
        if self.mins is not None:
            w = w + self.mins.float()[..., None]
        return w.reshape(rows, cols)

    def select_rows(self, index) -> "QuantizedTensor":
        """The matrix of these rows (an index tensor, or a slice), in their order."""
        return self.each(lambda t: t[index])

    def to(self, device) -> "QuantizedTensor":
        return self.each(lambda t: t.to(device))

    @staticmethod
    def cat(matrices: Sequence["QuantizedTensor"]) -> "QuantizedTensor":
        """The matrices' rows stacked (q/k/v into one): the same layout."""
        first = matrices[0]
        if any(m.layout != first.layout for m in matrices[1:]):
            raise ValueError("matrices of different layouts cannot be stacked")
        return replace(first, **{k: torch.cat([getattr(m, k) for m in matrices]) for k in PARTS
                                 if getattr(first, k) is not None})


def dequantized(tensors) -> dict:
    """The tensors with every QuantizedTensor made float32: what a version without quantized
    weights is built from."""
    return {k: v.dequantize() if isinstance(v, QuantizedTensor) else v for k, v in tensors.items()}
