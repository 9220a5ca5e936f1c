// A layer's small steps between its products, one op each on a CPU: RMSNorm (with the residual
// add before it) and RoPE with the head split. In PyTorch each is 5 to 10 ops of a few
// microseconds on a row of 576 floats; at batch 1 their dispatch, not their arithmetic, was 3 ms
// of a 25 ms token of the default model (60 norms and 30 rotations a token).
//
// The arithmetic is v00's, rounded as it rounds (built with -ffp-contract=off, see
// cpu_kernels.py): RMSNorm is weight * (x * rsqrt(mean(x^2) + eps)), its sum of squares in
// double; RoPE is x * cos + rotate_half(x) * sin, each product rounded, then the sum.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

void check_rows(const at::Tensor& x, const at::Tensor& weight, const char* op) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                  weight.dim() == 1 && x.size(-1) == weight.size(0),
              "torchlet_q::", op, ": x must be float32 [..., N] and weight float32 [N]");
}

// y = weight * (x * rsqrt(mean(x^2) + eps)), row by row of N; with `res`, x is first x + res (the
// sum kept in `total`). A prompt's thousands of rows are shared among torch's threads.
void norm_rows(const float* x, const float* res, float* total, const float* w, float* y,
               int64_t rows, int64_t N, float eps) {
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * N;
      if (res) {
        for (int64_t i = 0; i < N; ++i) total[r * N + i] = xr[i] + res[r * N + i];
        xr = total + r * N;
      }
      int64_t i = 0;
      double squares = 0.0;
#if defined(__AVX512F__)
      __m512d acc = _mm512_setzero_pd();  // eight double lanes: the sum is not float32's
      for (; i + 8 <= N; i += 8) {
        const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(xr + i));
        acc = _mm512_fmadd_pd(v, v, acc);
      }
      squares = _mm512_reduce_add_pd(acc);
#endif
      for (; i < N; ++i) squares += static_cast<double>(xr[i]) * xr[i];
      const float rs = 1.f / std::sqrt(static_cast<float>(squares / N) + eps);
      float* yr = y + r * N;
      for (int64_t k = 0; k < N; ++k) yr[k] = w[k] * (xr[k] * rs);
    }
  });
}

at::Tensor rms_norm(const at::Tensor& x_in, const at::Tensor& weight_in, double eps) {
  check_rows(x_in, weight_in, "rms_norm");
  at::Tensor x = x_in.contiguous(), w = weight_in.contiguous();
  at::Tensor y = at::empty_like(x);
  const int64_t N = x.size(-1);
  norm_rows(x.data_ptr<float>(), nullptr, nullptr, w.data_ptr<float>(), y.data_ptr<float>(),
            x.numel() / N, N, static_cast<float>(eps));
  return y;
}

// (rms_norm(x + residual), x + residual): the residual stream's add and the norm after it
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x_in, const at::Tensor& res_in,
                                                const at::Tensor& weight_in, double eps) {
  check_rows(x_in, weight_in, "add_rms_norm");
  TORCH_CHECK(res_in.sizes() == x_in.sizes() && res_in.scalar_type() == at::kFloat,
              "torchlet_q::add_rms_norm: residual must be float32 of x's shape");
  at::Tensor x = x_in.contiguous(), res = res_in.contiguous(), w = weight_in.contiguous();
  at::Tensor total = at::empty_like(x), y = at::empty_like(x);
  const int64_t N = x.size(-1);
  norm_rows(x.data_ptr<float>(), res.data_ptr<float>(), total.data_ptr<float>(),
            w.data_ptr<float>(), y.data_ptr<float>(), x.numel() / N, N, static_cast<float>(eps));
  return {y, total};
}

// qkv [T, (heads + 2 kv_heads) * D], a row [q heads | k heads | v heads] -> q [T, heads, D] and
// k [T, kv_heads, D] turned by the angles whose cos and sin [T, D] v00's rope_cos_sin gives
// (rotate_half's layout: the first and second halves of a head are the real and imaginary
// parts), and v [T, kv_heads, D] as it is.
std::tuple<at::Tensor, at::Tensor, at::Tensor> rope_split(const at::Tensor& qkv_in,
                                                          const at::Tensor& cos_in,
                                                          const at::Tensor& sin_in,
                                                          int64_t heads, int64_t kv_heads) {
  TORCH_CHECK(qkv_in.dim() == 2 && qkv_in.scalar_type() == at::kFloat && heads > 0 &&
                  kv_heads > 0 && qkv_in.size(1) % (heads + 2 * kv_heads) == 0,
              "torchlet_q::rope_split: qkv must be float32 [T, (heads + 2 kv_heads) * head_dim]");
  at::Tensor qkv = qkv_in.contiguous(), cos = cos_in.contiguous(), sin = sin_in.contiguous();
  const int64_t T = qkv.size(0), D = qkv.size(1) / (heads + 2 * kv_heads), half = D / 2;
  TORCH_CHECK(D % 2 == 0 && cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat &&
                  cos.numel() == T * D && sin.numel() == T * D,
              "torchlet_q::rope_split: cos and sin must be float32 [T, head_dim] of an even "
              "head_dim");
  at::Tensor q = at::empty({T, heads, D}, qkv.options());
  at::Tensor k = at::empty({T, kv_heads, D}, qkv.options());
  at::Tensor v = qkv.narrow(1, (heads + kv_heads) * D, kv_heads * D)
                     .reshape({T, kv_heads, D}).clone(at::MemoryFormat::Contiguous);
  at::parallel_for(0, T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* row = qkv.data_ptr<float>() + t * qkv.size(1);
      const float *c = cos.data_ptr<float>() + t * D, *s = sin.data_ptr<float>() + t * D;
      for (int64_t h = 0; h < heads + kv_heads; ++h) {
        const float* x = row + h * D;
        float* y = h < heads ? q.data_ptr<float>() + (t * heads + h) * D
                             : k.data_ptr<float>() + (t * kv_heads + h - heads) * D;
        for (int64_t i = 0; i < half; ++i) {
          y[i] = x[i] * c[i] + (-x[i + half]) * s[i];
          y[i + half] = x[i + half] * c[i + half] + x[i] * s[i + half];
        }
      }
    }
  });
  return {q, k, v};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torchlet_q, lib) {
  lib.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  lib.def("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  lib.def("rope_split(Tensor qkv, Tensor cos, Tensor sin, int heads, int kv_heads) -> "
          "(Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torchlet_q, CPU, lib) {
  lib.impl("rms_norm", &rms_norm);
  lib.impl("add_rms_norm", &add_rms_norm);
  lib.impl("rope_split", &rope_split);
}
