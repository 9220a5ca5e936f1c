"""v18's CPU ops: x @ w.T read from the integers a QuantizedTensor stores, and the layers between
the products.

What it introduces: torchlet_q::linear, a C++ op (built by setup.sh through
torch.utils.cpp_extension) that reads each weight row once for up to 32 rows of x and
dequantizes in registers; more rows dequantize the whole matrix (in blocks of rows past 16 MB)
into a float32 GEMM. In the same library, the steps a layer runs between its products, each one
op where PyTorch ran 5 to 20: rms_norm and add_rms_norm, rope_split (RoPE and the head split of
v13's packed q/k/v row), store_kv and paged_decode_attention (one query row per request over
v08's paged cache, read where its block table says, no gather). A quantized engine runs them on
a CPU in float32.

Why the previous version needs it: v17's CPU products read float32, 4 bytes a weight; torch's
packed int8 and int4 kernels were slower than float32 at batch 1 on this CPU (issue 46). With
the products on the integers, a token of the default model was 25 ms at 1 thread, 13 of them
products: most of the rest was the dispatch of small ops on rows of 576 floats (the decode
attention 5 ms, norms 1.9, the store 1.5, RoPE 1.4).

Core principle: for every weight format the default model and v18 use (GGUF's Q8_0, Q4_0 and
Q4_1; int8 per output channel; int4 in groups of 32, 64 and 128 with zero points), on shapes that
are nobody's fast path (37 output rows, 1 to 5 groups a row, 1 to 70 rows of x, so both the
register kernel of small batches and the dequantize-then-GEMM path of prompts run), the product
equals the float64 product of the dequantized matrix within float32 rounding.

The tolerance: the kernel dequantizes every weight bit for bit as QuantizedTensor.dequantize
does (the same integer difference, product and sum, no fused multiply-add), so what is left is
the float32 sum of K products, in any order off by at most K * 2^-24 * sum_k |x_k w_k| (the
standard bound gamma_K), plus one rounding for the bias and one for an 8-bit group's scale
(applied to the group's sum, not to each weight). The bound is (K + 2) * 2^-24 *
(sum_k |x_k w_k| + |bias|), entry by entry. A wrong nibble, group, sign or scale changes an
entry by a sizeable part of sum_k |x_k w_k|, thousands of times the bound.

The layers' ops are held to float64 references the same way, each bound the rounding its
arithmetic does (see each spec); the store copies, bit for bit.

Files: implementations/v18_quantized_weights/csrc/qlinear.cpp (the kernel), csrc/layers.cpp and
csrc/attention.cpp (the layers' ops), implementations/v18_quantized_weights/cpu_kernels.py (their
build, the product's fallback); model.py's QuantizedOps (cpu_layers) and CpuAttention run them.

Tradeoff left visible: activations stay float32 (the logits must be a float64 engine's on the
dequantized weights), so the kernel does float arithmetic on every weight where llama.cpp's
integer dot products on int8 activations do less; without a compiler it falls back to the
dequantized product, the same numbers at float speed (and the layers stay v17's PyTorch ones).
"""
from __future__ import annotations

import shutil

import pytest
import torch

from torchlet.contract import QUANTIZED_WEIGHTS, QuantizedTensor

N = 37  # not a multiple of the 2 or 4 rows the kernel reads at a time, nor of a thread's share
ROWS_OF_X = (1, 3, 9, 17, 32, 33, 70)  # 9, 17: tiles of 8 then 1; 32: the last that the register
#                                        kernel takes; 33 up: dequantize-then-GEMM


pytestmark = pytest.mark.spec(needs=QUANTIZED_WEIGHTS)


@pytest.fixture
def cpu_kernels(impl):
    """The version's cpu_kernels module (its package exports it)."""
    return impl.package.cpu_kernels


def random_matrix(gen, bits, group, cols, zeros=None, mins=False):
    """A QuantizedTensor of N rows with random integers, scales (both signs), zeros and mins.
    zeros: None, an int for every group (Q4_0's 8), or "random"."""
    groups = cols // group
    if bits == 8:
        q = torch.randint(-128, 128, (N, cols), generator=gen, dtype=torch.int8)
    else:  # every byte value, so a run's low and high nibbles differ
        q = torch.randint(0, 256, (N, cols // 2), generator=gen, dtype=torch.uint8)
    scales = (torch.randn(N, groups, generator=gen) * 0.02).half()
    if zeros == "random":
        zeros = torch.randint(0, 2 ** bits, (N, groups), generator=gen, dtype=torch.uint8)
    elif zeros is not None:
        zeros = torch.full((N, groups), zeros, dtype=torch.uint8)
    mins = (torch.randn(N, groups, generator=gen) * 0.1).half() if mins else None
    return QuantizedTensor(bits, q, scales, group, zeros, mins)


FORMATS = {  # name: (bits, group or None for one group a row, zeros, mins)
    "Q8_0": (8, 32, None, False),
    "Q4_0": (4, 32, 8, False),
    "Q4_1": (4, 32, None, True),
    "int8 per channel": (8, None, None, False),
    "int4 g32": (4, 32, "random", False),
    "int4 g64": (4, 64, "random", False),
    "int4 g128": (4, 128, "random", False),
    # no checkpoint's format, but the layout allows it: the 8-bit path with a zero and a min
    "int8 g32 zeros+mins": (8, 32, "random", True),
}


def check(y, x, w, bias):
    wd = w.dequantize().double()
    ref = x.double() @ wd.T + bias.double()
    bound = (x.shape[1] + 2) * 2.0 ** -24 * (x.double().abs() @ wd.abs().T + bias.double().abs())
    err = (y.double() - ref).abs()
    assert y.dtype == torch.float32 and y.shape == ref.shape
    assert (err <= bound).all(), f"worst error {(err / bound).max():.3g} x the float32 bound"


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_product_equals_the_float64_product_of_the_dequantized_weights(cpu_kernels, fmt):
    bits, group, zeros, mins = FORMATS[fmt]
    gen = torch.Generator().manual_seed(18)
    for runs in (1, 3, 5):  # K = 1, 3 and 5 groups (per channel: K = 32, 96, 160)
        cols = runs * (group or 32)
        w = random_matrix(gen, bits, group or cols, cols, zeros, mins)
        bias = torch.randn(N, generator=gen)
        for m in ROWS_OF_X:
            x = torch.randn(m, cols, generator=gen)
            check(cpu_kernels.linear(x, w, bias), x, w, bias)


def test_without_bias_and_with_leading_dimensions(cpu_kernels):
    gen = torch.Generator().manual_seed(7)
    w = random_matrix(gen, 4, 32, 96, mins=True)
    x = torch.randn(2, 3, 96, generator=gen)
    y = cpu_kernels.linear(x, w)
    assert y.shape == (2, 3, N)
    check(y.reshape(6, N), x.reshape(6, 96), w, torch.zeros(N))


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="no C++ compiler: linear falls back to F.linear on dequantized weights")
def test_the_extension_builds_and_runs_as_a_torch_op(cpu_kernels):
    assert cpu_kernels.available(), cpu_kernels.build_error
    gen = torch.Generator().manual_seed(1)
    w = random_matrix(gen, 8, 32, 64)
    x = torch.randn(1, 64, generator=gen)
    y = torch.ops.torchlet_q.linear(x, w.q, w.scales, None, None, 8, 32, None)
    check(y, x, w, torch.zeros(N))


def test_the_extension_is_built_under_the_torchlet_cache_and_registers_one_op(cpu_kernels,
                                                                               monkeypatch,
                                                                               tmp_path):
    """Where setup.sh's build goes (TORCHLET_CACHE_DIR moves it, as it moves the model cache),
    and a second build in a process that has the op loads nothing again: the op is registered
    once, whichever copy of the module (a mutant's tree) asked first."""
    monkeypatch.setenv("TORCHLET_CACHE_DIR", str(tmp_path))
    assert cpu_kernels.build_dir().parent == tmp_path / "extensions"
    if cpu_kernels.available():
        assert cpu_kernels.registered()
        assert cpu_kernels.build() and cpu_kernels.build_seconds == 0.0


# --- the layers' ops ------------------------------------------------------------------------

U = 2.0 ** -24  # float32's unit roundoff


@pytest.fixture
def ops(cpu_kernels):
    """The layers' ops, once the extension is built."""
    if not cpu_kernels.available():
        pytest.skip(f"the extension did not build: {cpu_kernels.build_error}")
    return cpu_kernels


@pytest.mark.parametrize("rows, n", [(1, 576), (5, 37)])
def test_rms_norm_and_its_residual_add_equal_the_float64_norm(ops, rows, n):
    """weight * x / sqrt(mean(x^2) + eps), within 8 roundings of |y| (a rounded mean, its sum
    with eps, a square root, a quotient, two products, and slack); the residual add is float32's
    own sum, bit for bit."""
    gen = torch.Generator().manual_seed(46)
    x, res = torch.randn(rows, n, generator=gen) * 3, torch.randn(rows, n, generator=gen)
    weight, eps = torch.randn(n, generator=gen), 1e-5

    def expected(t):
        t = t.double()
        return weight.double() * t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps)

    for got, ref in ((ops.rms_norm(x, weight, eps), expected(x)),
                     (ops.add_rms_norm(x, res, weight, eps)[0], expected(x + res))):
        err = (got.double() - ref).abs()
        assert (err <= 8 * U * ref.abs() + 1e-30).all(), f"worst {(err / ref.abs()).max():.3g}"
    assert torch.equal(ops.add_rms_norm(x, res, weight, eps)[1], x + res)


@pytest.mark.parametrize("heads, kv_heads, head_dim", [(9, 3, 64), (4, 1, 6)])
def test_rope_split_turns_q_and_k_as_the_float64_rotation_and_keeps_v(ops, heads, kv_heads,
                                                                      head_dim):
    """Each head of the packed row [q heads | k heads | v heads] turned by rotate_half's
    rotation, x * cos + rotate_half(x) * sin: two rounded products and their rounded sum, so
    within 2 roundings of |x cos| + |x' sin|; v copied as it is."""
    gen = torch.Generator().manual_seed(3)
    tokens, half = 3, head_dim // 2
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=gen)
    angles = torch.rand(tokens, half, generator=gen) * 40
    cos, sin = (torch.cat([f(angles)] * 2, dim=-1) for f in (torch.cos, torch.sin))
    q, k, v = ops.rope_split(qkv, cos, sin, heads, kv_heads)
    x = qkv.double().view(tokens, heads + 2 * kv_heads, head_dim)[:, :heads + kv_heads]
    c, s = cos.double()[:, None], sin.double()[:, None]
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    ref, size = x * c + turned * s, (x * c).abs() + (turned * s).abs()
    got = torch.cat([q, k], dim=1).double()
    assert q.shape == (tokens, heads, head_dim) and k.shape == (tokens, kv_heads, head_dim)
    assert ((got - ref).abs() <= 2 * U * size).all()
    assert torch.equal(v, qkv.view(tokens, -1, head_dim)[:, heads + kv_heads:])


BLOCK = 4


def paged(blocks: int, kv_heads: int, head_dim: int):
    """A K/V cache pair [blocks, BLOCK, kv_heads, head_dim] whose every slot holds NaN until
    written: a slot that a request does not own must never reach its output."""
    return [torch.full((blocks, BLOCK, kv_heads, head_dim), float("nan")) for _ in range(2)]


def test_store_kv_writes_each_row_to_its_slot_and_nothing_for_minus_one(ops):
    gen = torch.Generator().manual_seed(5)
    k_cache, v_cache = paged(6, 2, 8)
    k, v = torch.randn(4, 2, 8, generator=gen), torch.randn(4, 2, 8, generator=gen)
    slots = torch.tensor([9, -1, 0, 23])
    ops.store_kv(k, v, k_cache, v_cache, slots)
    for cache, new in ((k_cache, k), (v_cache, v)):
        flat = cache.view(-1, 2, 8)
        assert torch.equal(flat[[9, 0, 23]], new[[0, 2, 3]])
        written = torch.zeros(len(flat), dtype=torch.bool)
        written[[9, 0, 23]] = True
        assert flat[~written].isnan().all(), "a slot no row names was written"


def reference_attention(q, k_cache, v_cache, tables, lengths, scale):
    """Float64, request by request: each query head over its KV head's first n gathered rows;
    also returns what the bound reads (probabilities, scores' sizes)."""
    batch, heads, head_dim = q.shape
    group = heads // k_cache.shape[2]
    out, parts = torch.zeros(q.shape, dtype=torch.float64), []
    for b, n in enumerate(lengths.tolist()):
        if n == 0:
            parts.append(None)
            continue
        keys, values = (c[tables[b].long()].flatten(0, 1)[:n].double() for c in (k_cache, v_cache))
        keys, values = (t.repeat_interleave(group, dim=1) for t in (keys, values))  # [n, H, D]
        qb = q[b].double()
        scores = torch.einsum("hd,nhd->hn", qb, keys) * scale
        probs = torch.softmax(scores, dim=-1)
        out[b] = torch.einsum("hn,nhd->hd", probs, values)
        sizes = torch.einsum("hd,nhd->hn", qb.abs(), keys.abs()) * scale
        parts.append((probs, values, sizes, scores))
    return out, parts


@pytest.mark.parametrize("head_dim", [64, 20])
def test_paged_decode_attention_equals_the_float64_attention_over_each_requests_blocks(ops,
                                                                                      head_dim):
    """Three requests of 9 query heads over 3 KV heads: a context ending mid-block over blocks
    out of order, one of a single token, an idle lane (context 0: zeros); every slot they do not
    own holds NaN. The bound: the float32 scores are each within (head_dim + 2) roundings of
    scale * sum |q_d k_d| (S), which moves a probability by a factor within 2 (head_dim + 2) S
    roundings; the subtracted maximum, exp, the sum of n and the quotient add n + |s - max| + 8;
    the weighted sum of the values n + 1 more; all of sum_j p_j |v_j|, doubled for slack. A
    wrong head, slot, scale or length moves an entry by a sizeable part of it."""
    gen = torch.Generator().manual_seed(11)
    k_cache, v_cache = paged(8, 3, head_dim)
    tables = torch.tensor([[5, 2, 7, 0], [3, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.int32)
    lengths = torch.tensor([10, 1, 0], dtype=torch.int32)
    for b, n in enumerate(lengths.tolist()):
        for j in range(n):
            slot = int(tables[b, j // BLOCK]) * BLOCK + j % BLOCK
            for cache in (k_cache, v_cache):
                cache.view(-1, 3, head_dim)[slot] = torch.randn(3, head_dim, generator=gen) * 2
    q = torch.randn(3, 9, head_dim, generator=gen)
    scale = head_dim ** -0.5
    got = ops.paged_decode_attention(q, k_cache, v_cache, tables, lengths, scale)
    ref, parts = reference_attention(q, k_cache, v_cache, tables, lengths, scale)
    assert got.shape == q.shape and got.dtype == torch.float32
    assert torch.equal(got[2], torch.zeros_like(got[2]))
    for b, part in enumerate(parts):
        if part is None:
            continue
        probs, values, sizes, scores = part
        n = probs.shape[1]
        spread = (scores.amax(-1, keepdim=True) - scores).amax(-1)  # [H]
        factor = 2 * (head_dim + 2) * sizes.amax(-1) + n + spread + 8 + n + 1
        bound = 2 * U * factor[:, None] * torch.einsum("hn,nhd->hd", probs, values.abs())
        err = (got[b].double() - ref[b]).abs()
        assert (err <= bound).all(), f"request {b}: worst {(err / bound).max():.3g} x the bound"


def test_a_quantized_engine_on_a_cpu_runs_its_decode_step_on_these_ops(impl, ops):
    """Float32 on a CPU with Triton off (as torchlet generate runs), a decode step of the
    quantized fixture dispatches the layers' ops and none of the PyTorch attention's gathers
    and softmax: observed from outside, every op the step dispatches."""
    from spec.support.models.fixtures import tiny_checkpoint
    from spec.support.models.quantized import quantized
    from spec.support.watchers.op_trace import op_trace
    from torchlet.contract import GenerationParams
    from torchlet.running import triton_interpret

    with triton_interpret("0"):
        engine = impl.build(quantized(tiny_checkpoint("tiny_qwen2"), "Q4_1"), use_graphs=False)
        engine.add_request(list(range(3, 12)), GenerationParams(max_new_tokens=3))
        engine.step()  # the prompt
        names = {name for name, _ in op_trace(engine.step)[0]}
    assert {f"torchlet_q.{op}.default" for op in ("paged_decode_attention", "store_kv",
                                                  "rope_split", "add_rms_norm",
                                                  "linear")} <= names, sorted(names)
    pytorch_attention = {"aten.einsum.default", "aten.bmm.default", "aten.softmax.int",
                         "aten._softmax.default"}
    assert not pytorch_attention & names, sorted(names)
