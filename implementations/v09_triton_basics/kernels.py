"""Triton kernels for the per-token layers: RMSNorm (alone and fused with the residual add),
RoPE and SwiGLU. Each public function checks its inputs, then calls a torch op (made with the
contract's `kernel_op`) that launches one kernel, so that a graph recorder sees one op per kernel
(PITFALLS.md).

The kernels read and write the model's dtype and compute in float32, with the same rounding
points as v00's PyTorch functions. On CPU they run under TRITON_INTERPRET=1 (float32 only).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from torchlet.contract import fake_of, kernel_op

# One program normalizes one row in registers (on a GPU; several under the interpreter); wider
# rows would need a loop over chunks.
MAX_HIDDEN = 65536
# Under the interpreter, which runs programs one after another at a cost each, a program takes
# many rows: up to this many values of rows to norm, this many heads to turn.
INTERPRETED_VALUES = 16384
INTERPRETED_ROWS = 256
ELEMENTWISE_BLOCK = 1024
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Op names carry the module's import name so that two trees of versions can live in one process.
_NS = __name__.replace(".", "_")


def check(ok: bool, message: str) -> None:
    """Refuse bad inputs with a ValueError (an `assert` vanishes under python -O)."""
    if not ok:
        raise ValueError(message)


def check_tensor(name: str, t: torch.Tensor, like: torch.Tensor | None = None) -> None:
    check(t.dtype in DTYPES, f"{name} must be float32, float16 or bfloat16, got {t.dtype}")
    check(t.is_contiguous(), f"{name} must be contiguous (shape {tuple(t.shape)}, "
                             f"strides {t.stride()}); call .contiguous() first")
    if like is not None:
        check(t.dtype == like.dtype, f"{name} is {t.dtype} but the input is {like.dtype}")
        check(t.device == like.device, f"{name} is on {t.device} but the input is on {like.device}")


# --- RMSNorm -------------------------------------------------------------------------------

@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, n_rows, n_cols, eps,
                     HAS_RESIDUAL: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    at = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + at, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        x = add_rounded(x, tl.load(res_ptr + at, mask=mask, other=0.0))
        tl.store(res_out_ptr + at, x, mask=mask)
    normed = (x.to(tl.float32) * inv_rms(x, n_cols, eps)[:, None]).to(x.dtype)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + at, w[None, :] * normed, mask=mask)


@triton.jit
def add_rounded(x, res):
    """x + res added in float32 and rounded to x's dtype, bit for bit what PyTorch's `h = x +
    attention(...)` gives: the residual stream the next layer adds to."""
    return (x.to(tl.float32) + res.to(tl.float32)).to(x.dtype)


@triton.jit
def inv_rms(x, n_cols, eps):
    """1 / sqrt(mean(x^2) + eps) over a row's n_cols values (masked lanes hold 0), in float32:
    what a row is multiplied by before it is rounded to the model dtype. x is one row, or rows
    (the last axis the row's values): one number a row."""
    x32 = x.to(tl.float32)
    return tl.rsqrt(tl.sum(x32 * x32, axis=-1) / n_cols + eps)


def _launch_rms_norm(x, residual, weight, eps, out, res_out):
    n_cols = x.shape[-1]
    rows = x.numel() // n_cols
    if rows == 0:
        return
    block = triton.next_power_of_2(n_cols)
    # A row a program on a GPU; under the interpreter several
    per = 1 if x.is_cuda else min(triton.next_power_of_2(rows),
                                  max(1, INTERPRETED_VALUES // block))
    _rms_norm_kernel[(triton.cdiv(rows, per),)](
        x, residual, weight, out, res_out, rows, n_cols, eps, HAS_RESIDUAL=residual is not x,
        ROWS=per, BLOCK=block, num_warps=min(max(block // 256, 1), 16))


@kernel_op(f"{_NS}::rms_norm")
def _rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    out = torch.empty_like(x)
    _launch_rms_norm(x, x, weight, eps, out, out)
    return out


@fake_of(_rms_norm_op)
def _(x, weight, eps):
    return torch.empty_like(x)


@kernel_op(f"{_NS}::add_rms_norm")
def _add_rms_norm_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    out, res_out = torch.empty_like(x), torch.empty_like(x)
    _launch_rms_norm(x, residual, weight, eps, out, res_out)
    return out, res_out


@fake_of(_add_rms_norm_op)
def _(x, residual, weight, eps):
    return torch.empty_like(x), torch.empty_like(x)


def _check_norm(x: torch.Tensor, weight: torch.Tensor) -> None:
    check_tensor("x", x)
    check_tensor("weight", weight, like=x)
    check(x.dim() >= 1 and weight.dim() == 1 and weight.shape[0] == x.shape[-1],
          f"weight {tuple(weight.shape)} must be [hidden] with hidden = x.shape[-1] "
          f"(x is {tuple(x.shape)})")
    check(1 <= x.shape[-1] <= MAX_HIDDEN,
          f"hidden size {x.shape[-1]} outside [1, {MAX_HIDDEN}]: one program holds one row")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps) over the last dimension, the mean taken in float32."""
    _check_norm(x, weight)
    return _rms_norm_op(x, weight, float(eps))


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual) in one pass over memory: the pre-norm block adds
    a sublayer's output to the residual stream and normalizes the sum for the next sublayer."""
    _check_norm(x, weight)
    check_tensor("residual", residual, like=x)
    check(residual.shape == x.shape,
          f"residual {tuple(residual.shape)} must have the shape of x {tuple(x.shape)}")
    return _add_rms_norm_op(x, residual, weight, float(eps))


# --- RoPE ----------------------------------------------------------------------------------

@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, n_rows, n_heads, half,
                 BLOCK_R: tl.constexpr, BLOCK_HALF: tl.constexpr):
    # One program = BLOCK_R rows of x, a row one head of one token, the tokens' heads one
    # after another.
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    token = rows // n_heads
    cols = tl.arange(0, BLOCK_HALF)
    col_mask = cols < half
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    angle = token[:, None] * half + cols[None, :]
    cos = tl.load(cos_ptr + angle, mask=mask, other=0.0)
    sin = tl.load(sin_ptr + angle, mask=mask, other=0.0)
    # rotate_half layout: the first half of a head is the real part, the second the imaginary.
    first = rows[:, None] * 2 * half + cols[None, :]
    x1 = tl.load(x_ptr + first, mask=mask, other=0.0)
    x2 = tl.load(x_ptr + first + half, mask=mask, other=0.0)
    a, b = x1.to(tl.float32), x2.to(tl.float32)
    tl.store(out_ptr + first, (a * cos - b * sin).to(x1.dtype), mask=mask)
    tl.store(out_ptr + first + half, (b * cos + a * sin).to(x1.dtype), mask=mask)


def head_rows(rows: int, on_gpu: bool) -> int:
    """(token, head) rows a program turns, of `rows` in all: 16 on a GPU, several tokens' heads
    under the interpreter. rotate's plan, and a later fused split's."""
    return min(triton.next_power_of_2(rows), 16 if on_gpu else INTERPRETED_ROWS)


@kernel_op(f"{_NS}::apply_rope")
def _rope_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    tokens, heads, head_dim = x.shape
    out = torch.empty_like(x)
    if tokens == 0:
        return out
    rows = tokens * heads
    block_r = head_rows(rows, x.is_cuda)
    _rope_kernel[(triton.cdiv(rows, block_r),)](
        x, cos, sin, out, rows, heads, head_dim // 2,
        BLOCK_R=block_r, BLOCK_HALF=triton.next_power_of_2(head_dim // 2))
    return out


@fake_of(_rope_op)
def _(x, cos, sin):
    return torch.empty_like(x)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float):
    """cos and sin [tokens, head_dim / 2], float32, of the angles position * theta^(-2i/head_dim):
    what rotate reads. From PyTorch, with v00's formula: the GPU's fast sin/cos lose accuracy at
    the large angles of late positions, and this keeps parity with v00 exact. The positions
    are cast to float32 inside the product (as .float() casts them: one launch fewer)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                            dtype=torch.float32) / head_dim)
    angles = positions[:, None] * inv_freq[None, :]
    return angles.cos().contiguous(), angles.sin().contiguous()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [tokens, heads, head_dim] turned by the angles whose cos and sin rope_cos_sin gives, in
    Hugging Face's rotate_half layout: one kernel."""
    check_tensor("x", x)
    check(x.dim() == 3, f"x must be [tokens, heads, head_dim], got shape {tuple(x.shape)}")
    check(x.shape[-1] % 2 == 0 and x.shape[-1] > 0,
          f"head_dim must be even and positive, got {x.shape[-1]}")
    for name, t in (("cos", cos), ("sin", sin)):
        check(t.shape == (x.shape[0], x.shape[-1] // 2) and t.dtype == torch.float32
              and t.is_contiguous() and t.device == x.device,
              f"{name} must be contiguous float32 [tokens={x.shape[0]}, head_dim/2="
              f"{x.shape[-1] // 2}] on {x.device}, got {t.dtype} {tuple(t.shape)} on {t.device}")
    return _rope_op(x, cos, sin)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate each head of x [tokens, heads, head_dim] by position * theta^(-2i/head_dim),
    in Hugging Face's rotate_half layout (the same results as v00's apply_rope)."""
    check(positions.shape == (x.shape[0],) and not positions.is_floating_point(),
          f"positions must be integer [tokens={x.shape[0]}], got {positions.dtype} "
          f"{tuple(positions.shape)}")
    check(positions.device == x.device, f"positions on {positions.device}, x on {x.device}")
    return rotate(x, *rope_cos_sin(positions, x.shape[-1], float(theta)))


# --- SwiGLU --------------------------------------------------------------------------------

@triton.jit
def _swiglu_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    gate = tl.load(gate_ptr + offs, mask=mask, other=0.0)
    up = tl.load(up_ptr + offs, mask=mask, other=0.0)
    g = gate.to(tl.float32)
    # Rounded to the model dtype before the product, as silu(gate) * up is in PyTorch.
    silu = (g * tl.sigmoid(g)).to(gate.dtype)
    tl.store(out_ptr + offs, (silu.to(tl.float32) * up.to(tl.float32)).to(gate.dtype), mask=mask)


@kernel_op(f"{_NS}::swiglu")
def _swiglu_op(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(gate)
    n = gate.numel()
    if n:
        _swiglu_kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](gate, up, out, n,
                                                              BLOCK=ELEMENTWISE_BLOCK)
    return out


@fake_of(_swiglu_op)
def _(gate, up):
    return torch.empty_like(gate)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, elementwise: the MLP's activation between its up and down projections."""
    check_tensor("gate", gate)
    check_tensor("up", up, like=gate)
    check(gate.shape == up.shape,
          f"gate {tuple(gate.shape)} and up {tuple(up.shape)} must have the same shape")
    return _swiglu_op(gate, up)
