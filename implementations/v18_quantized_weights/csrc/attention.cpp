// The decode step's K/V store and attention on a CPU, reading the paged cache where it lies (the
// layout of implementations/v08_paged_gqa_py/model.py: [num_blocks, block_size, kv_heads,
// head_dim], token p of a request at block table[p / block_size], row p % block_size).
//
// v08's PyTorch functions gather every slot a padded table names into a new tensor, then run two
// einsums, a mask, a softmax and a second mask: about 20 small ops a layer, 5 ms of a 25 ms token
// of the default model at 1 thread, for 100 dot products of 64 floats per head. Here one query
// row per request reads each key and value row once, for the group of query heads that share it.
// The maths is v08's, in float32: scores q.k * scale, softmax (max subtracted, exp, divided by the
// sum), then the probabilities' weighted sum of the values.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.f;
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  sum = _mm512_reduce_add_ps(acc);
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// out[0, n) += p * v[0, n)
void axpy(float p, const float* v, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 pv = _mm512_set1_ps(p);
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_fmadd_ps(pv, _mm512_loadu_ps(v + i), _mm512_loadu_ps(out + i)));
#endif
  for (; i < n; ++i) out[i] += p * v[i];
}

void check_cache(const at::Tensor& cache, const char* name) {
  TORCH_CHECK(cache.dim() == 4 && cache.scalar_type() == at::kFloat && cache.is_contiguous(),
              "torchlet_q: ", name, " must be a contiguous float32 [num_blocks, block_size, "
              "kv_heads, head_dim] cache");
}

// Row t of k and v [T, kv_heads, head_dim] into slot slot_mapping[t] of the caches (the cache
// viewed as [num_blocks * block_size, kv_heads, head_dim]); a slot of -1 writes nothing.
void store_kv(const at::Tensor& k_in, const at::Tensor& v_in, at::Tensor k_cache,
              at::Tensor v_cache, const at::Tensor& slot_mapping_in) {
  check_cache(k_cache, "k_cache");
  check_cache(v_cache, "v_cache");
  const int64_t width = k_cache.size(2) * k_cache.size(3);
  const int64_t slots = k_cache.size(0) * k_cache.size(1);
  at::Tensor k = k_in.contiguous(), v = v_in.contiguous();
  at::Tensor slot_mapping = slot_mapping_in.to(at::kLong).contiguous();
  const int64_t T = slot_mapping.numel();
  TORCH_CHECK(k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat &&
                  k.numel() == T * width && v.numel() == T * width,
              "torchlet_q::store_kv: k and v must be float32 [", T, ", kv_heads, head_dim] as "
              "the caches' rows");
  const int64_t* slot = slot_mapping.data_ptr<int64_t>();
  for (int64_t t = 0; t < T; ++t) {
    if (slot[t] < 0) continue;
    TORCH_CHECK(slot[t] < slots, "torchlet_q::store_kv: slot ", slot[t], " past the cache's ",
                slots);
    std::copy_n(k.data_ptr<float>() + t * width, width, k_cache.data_ptr<float>() + slot[t] * width);
    std::copy_n(v.data_ptr<float>() + t * width, width, v_cache.data_ptr<float>() + slot[t] * width);
  }
}

// Grouped-query decode attention: q [B, heads, head_dim], one row per request, over the first
// context_lens[b] tokens that block_tables [B, max_blocks] names. Query head h reads KV head
// h / (heads / kv_heads). A request with context 0 (an idle lane) gets zeros.
at::Tensor paged_decode_attention(const at::Tensor& q_in, const at::Tensor& k_cache,
                                  const at::Tensor& v_cache, const at::Tensor& block_tables_in,
                                  const at::Tensor& context_lens_in, double scale) {
  check_cache(k_cache, "k_cache");
  check_cache(v_cache, "v_cache");
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes(), "torchlet_q: k_cache and v_cache differ");
  at::Tensor q = q_in.contiguous();
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2);
  const int64_t block = k_cache.size(1), KV = k_cache.size(2), G = H / KV;
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && D == k_cache.size(3) &&
                  H % KV == 0,
              "torchlet_q::paged_decode_attention: q must be float32 [B, heads, head_dim] with "
              "heads a multiple of the cache's kv_heads and its head_dim");
  at::Tensor tables = block_tables_in.to(at::kLong).contiguous();
  at::Tensor lens = context_lens_in.to(at::kLong).contiguous();
  const int64_t max_blocks = tables.size(1), blocks = k_cache.size(0);
  TORCH_CHECK(tables.size(0) == B && lens.numel() == B,
              "torchlet_q::paged_decode_attention: a block table and a length per row of q");
  const int64_t* table = tables.data_ptr<int64_t>();
  const int64_t* len = lens.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(len[b] >= 0 && len[b] <= max_blocks * block,
                "torchlet_q::paged_decode_attention: context ", len[b], " past its table");
    for (int64_t i = 0; i < (len[b] + block - 1) / block; ++i)
      TORCH_CHECK(table[b * max_blocks + i] >= 0 && table[b * max_blocks + i] < blocks,
                  "torchlet_q::paged_decode_attention: block ", table[b * max_blocks + i],
                  " is not in the cache");
  }
  at::Tensor out = at::zeros_like(q);
  const float *qp = q.data_ptr<float>(), *kp = k_cache.data_ptr<float>(),
              *vp = v_cache.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  const int64_t row = KV * D;  // one token's keys (or values), every KV head side by side
  // A request at a time, token by token: a token's row of every head is read at once, so a block
  // of the cache streams in order (16 tokens of 768 bytes for the default model). Head by head,
  // a third of each row at a time, the rows arrived from memory at half the speed (the caches
  // are cold: a token's weights evict them).
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    int64_t longest = 1;
    for (int64_t b = begin; b < end; ++b) longest = std::max(longest, len[b]);
    std::vector<float> p(H * longest);  // p[h * n + j]: query head h, token j
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n = len[b];
      if (n == 0) continue;
      const float* qb = qp + b * H * D;
      float* ob = op + b * H * D;
      for (int64_t j = 0; j < n; ++j) {
        const float* kr = kp + (table[b * max_blocks + j / block] * block + j % block) * row;
        for (int64_t h = 0; h < H; ++h) p[h * n + j] = dot(qb + h * D, kr + (h / G) * D, D) * sc;
      }
      for (int64_t h = 0; h < H; ++h) {
        float* ph = p.data() + h * n;
        float top = -std::numeric_limits<float>::infinity(), sum = 0.f;
        for (int64_t j = 0; j < n; ++j) top = std::max(top, ph[j]);
        for (int64_t j = 0; j < n; ++j) sum += (ph[j] = std::exp(ph[j] - top));
        for (int64_t j = 0; j < n; ++j) ph[j] /= sum;
      }
      for (int64_t j = 0; j < n; ++j) {
        const float* vr = vp + (table[b * max_blocks + j / block] * block + j % block) * row;
        for (int64_t h = 0; h < H; ++h) axpy(p[h * n + j], vr + (h / G) * D, ob + h * D, D);
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torchlet_q, lib) {
  lib.def("store_kv(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, "
          "Tensor slot_mapping) -> ()");
  lib.def("paged_decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
          "Tensor context_lens, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(torchlet_q, CPU, lib) {
  lib.impl("store_kv", &store_kv);
  lib.impl("paged_decode_attention", &paged_decode_attention);
}
