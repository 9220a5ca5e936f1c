// y[M, N] = x[M, K] @ w.T (+ bias) for float32 x and a QuantizedTensor w (see
// torchlet/contract/quantized.py), weight-only: x stays float32. A decode step is bound by the
// weight read, so a small batch reads the integer weights once for all its rows and dequantizes
// them in registers; a prompt (many rows) is bound by arithmetic, so it dequantizes blocks of
// rows to float32 and hands them to the GEMM torch already has.
//
// Every weight is dequantized exactly as QuantizedTensor.dequantize rounds it (the integer
// difference q - zero, one product by the scale, one sum with the min), so what differs from a
// float64 oracle is the float32 sum of the products (and, for 8-bit scales-only formats, the
// scale applied to a group's sum instead of to each weight: one rounding more). Built with
// -ffp-contract=off so the compiler fuses no mul + add that the reference rounds twice.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

struct Weights {
  int bits;
  int64_t N, K, group, G;  // G groups per row
  const uint8_t* q;        // row n starts at q + n * row_bytes
  const at::Half* s;
  const uint8_t* z;        // null: zero 0
  const at::Half* m;       // null: min 0
  int64_t row_bytes() const { return bits == 8 ? K : K / 2; }
  int64_t padded_groups() const { return (G + 15) / 16 * 16; }  // a row's floats in row_params' buffers
  int q_at(int64_t n, int64_t c) const {  // the integer of row n, column c (slow path only)
    const uint8_t* row = q + n * row_bytes();
    if (bits == 8) return static_cast<int8_t>(row[c]);
    uint8_t b = row[(c / 32) * 16 + c % 16];
    return c % 32 < 16 ? (b & 0xF) : (b >> 4);
  }
};

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

// Row n's scales, zeros and mins as float: the inner loops broadcast them from L1. Sixteen at a
// time where AVX512 is, the last few loaded under a mask and stored whole (each buffer holds
// padded_groups() floats a row): one at a time, these conversions were a fifth of a Q4_1
// product's instructions, and masked stores cost a fifth again on this CPU (AMD Zen 4).
void row_params(const Weights& w, int64_t n, float* s, float* z, float* m) {
  const int64_t base = n * w.G;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  for (int64_t g = 0; g < w.G; g += 16) {
    const __mmask16 k = static_cast<__mmask16>(w.G - g >= 16 ? 0xFFFF : (1u << (w.G - g)) - 1);
    auto halves = [&](const at::Half* p) {
      return p ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p + base + g)) : _mm512_setzero_ps();
    };
    _mm512_storeu_ps(s + g, halves(w.s));
    _mm512_storeu_ps(m + g, halves(w.m));
    _mm512_storeu_ps(z + g, w.z ? _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                              _mm_maskz_loadu_epi8(k, w.z + base + g)))
                                        : _mm512_setzero_ps());
  }
#else
  for (int64_t g = 0; g < w.G; ++g) {
    s[g] = static_cast<float>(w.s[base + g]);
    z[g] = w.z ? static_cast<float>(w.z[base + g]) : 0.f;
    m[g] = w.m ? static_cast<float>(w.m[base + g]) : 0.f;
  }
#endif
}

// Row n as float32, rounded as the reference rounds it (the prompt path and the portable path).
void dequant_row(const Weights& w, int64_t n, float* out) {
  for (int64_t c = 0; c < w.K; ++c) {
    int64_t g = c / w.group;
    int zi = w.z ? w.z[n * w.G + g] : 0;
    float v = static_cast<float>(w.q_at(n, c) - zi) * static_cast<float>(w.s[n * w.G + g]);
    if (w.m) v = v + static_cast<float>(w.m[n * w.G + g]);
    out[c] = v;
  }
}

#if defined(__AVX512F__)
inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128((const __m128i*)p); }
inline void prefetch(const uint8_t* p) { _mm_prefetch((const char*)p, _MM_HINT_T0); }
constexpr int MT_MAX = 8, NR_MAX = 4;  // rows of x, rows of w a tile holds (see rows())

// dequant_row with vectors (the prompt path's cost is this plus the GEMM): the same rounding.
void dequant_row_avx512(const Weights& w, int64_t n, float* out, float* s, float* z, float* m) {
  row_params(w, n, s, z, m);
  const uint8_t* row = w.q + n * w.row_bytes();
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t g = 0; g < w.G; ++g) {
    const __m512 sv = _mm512_set1_ps(s[g]), zv = _mm512_set1_ps(z[g]), mv = _mm512_set1_ps(m[g]);
    for (int64_t c = g * w.group; c < (g + 1) * w.group; c += 32) {
      if (w.bits == 4) {
        __m512 tbl = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(iota, zv), sv), mv);
        __m512i b = _mm512_cvtepu8_epi32(load16(row + c / 2));
        _mm512_storeu_ps(out + c, _mm512_permutexvar_ps(b, tbl));
        _mm512_storeu_ps(out + c + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tbl));
      } else {
        for (int h = 0; h < 32; h += 16) {  // q - zero is exact in float: it is < 2^24
          __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(row + c + h)));
          v = _mm512_sub_ps(v, zv);
          _mm512_storeu_ps(out + c + h, _mm512_add_ps(_mm512_mul_ps(v, sv), mv));
        }
      }
    }
  }
}

// NR weight rows against MT rows of x. One accumulator vector per (row, x row): products are
// summed lane-wise over all of K and reduced once per output, never once per group.
//   4-bit: each group's 16 possible values are a 16-float table (scale * (i - zero) + min, as the
//   reference rounds it), and vpermps looks a nibble up in it: the dword's low 4 bits index the
//   table, so the low nibble needs no mask and the high one a single shift.
//   8-bit: sign-extend 16 bytes and convert. With scales only (Q8_0, int8) and registers to spare,
//   the group's products are summed unscaled and scaled once per group (for int8 per channel,
//   once per row); otherwise each weight is dequantized as the reference does.
// Both prefetch the whole rows PREFETCH_BYTES ahead, once per cache line: with 2-4 rows read side
// by side the hardware prefetcher alone left 8-bit reads at half the speed (Q8_0's LM head 9.5 ms
// -> 4.8 ms at 1 thread). 2.3 KB is the 8 rows of 288 bytes (Q4_1 at K = 576) that measured best.
constexpr int64_t PREFETCH_BYTES = 2304;
template <int BITS, int NR, int MT>
void tile(const Weights& w, int64_t n0, const float* x, int64_t M_stride, float* y, int64_t ldy,
          const float* s, const float* z, const float* mn) {
  // s, z, mn: NR rows of P floats each, from row_params
  const int64_t G = w.G, P = w.padded_groups(), group = w.group, rb = w.row_bytes();
  const int64_t ahead = (PREFETCH_BYTES + rb - 1) / rb * rb;  // whole rows
  const bool hz = w.z != nullptr, hm = w.m != nullptr;
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 acc[NR][MT];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < MT; ++i) acc[r][i] = _mm512_setzero_ps();
  const uint8_t* qr[NR];
  for (int r = 0; r < NR; ++r) qr[r] = w.q + (n0 + r) * rb;

  for (int64_t g = 0; g < G; ++g) {
    if constexpr (BITS == 4) {
      __m512 tbl[NR];
      for (int r = 0; r < NR; ++r) {
        __m512 t = hz ? _mm512_sub_ps(iota, _mm512_set1_ps(z[r * P + g])) : iota;
        t = _mm512_mul_ps(t, _mm512_set1_ps(s[r * P + g]));
        tbl[r] = hm ? _mm512_add_ps(t, _mm512_set1_ps(mn[r * P + g])) : t;
      }
      for (int64_t c = g * group; c < (g + 1) * group; c += 32) {
        __m512 lo[NR], hi[NR];
        if ((c & 127) == 0)
          for (int r = 0; r < NR; ++r) prefetch(qr[r] + c / 2 + ahead);
        for (int r = 0; r < NR; ++r) {
          __m512i b = _mm512_cvtepu8_epi32(load16(qr[r] + c / 2));
          lo[r] = _mm512_permutexvar_ps(b, tbl[r]);
          hi[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tbl[r]);
        }
        for (int i = 0; i < MT; ++i) {
          __m512 xl = _mm512_loadu_ps(x + i * M_stride + c);
          __m512 xh = _mm512_loadu_ps(x + i * M_stride + c + 16);
          for (int r = 0; r < NR; ++r) {
            acc[r][i] = _mm512_fmadd_ps(xl, lo[r], acc[r][i]);
            acc[r][i] = _mm512_fmadd_ps(xh, hi[r], acc[r][i]);
          }
        }
      }
    } else if (MT * NR <= 8 && !hz && !hm) {  // p[] and acc[] both fit in the 32 registers
      __m512 p[NR][MT];
      for (int r = 0; r < NR; ++r)
        for (int i = 0; i < MT; ++i) p[r][i] = _mm512_setzero_ps();
      for (int64_t c = g * group; c < (g + 1) * group; c += 16) {
        if ((c & 63) == 0)
          for (int r = 0; r < NR; ++r) prefetch(qr[r] + c + ahead);
        __m512 wv[NR];
        for (int r = 0; r < NR; ++r)
          wv[r] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(qr[r] + c)));
        for (int i = 0; i < MT; ++i) {
          __m512 xv = _mm512_loadu_ps(x + i * M_stride + c);
          for (int r = 0; r < NR; ++r) p[r][i] = _mm512_fmadd_ps(xv, wv[r], p[r][i]);
        }
      }
      for (int r = 0; r < NR; ++r) {
        __m512 sv = _mm512_set1_ps(s[r * P + g]);
        for (int i = 0; i < MT; ++i) acc[r][i] = _mm512_fmadd_ps(sv, p[r][i], acc[r][i]);
      }
    } else {
      __m512 sv[NR], mv[NR];
      __m512i zv[NR];
      for (int r = 0; r < NR; ++r) {
        sv[r] = _mm512_set1_ps(s[r * P + g]);
        mv[r] = _mm512_set1_ps(mn[r * P + g]);
        zv[r] = _mm512_set1_epi32(static_cast<int>(z[r * P + g]));
      }
      for (int64_t c = g * group; c < (g + 1) * group; c += 16) {
        if ((c & 63) == 0)
          for (int r = 0; r < NR; ++r) prefetch(qr[r] + c + ahead);
        __m512 wv[NR];
        for (int r = 0; r < NR; ++r) {
          __m512i v = _mm512_cvtepi8_epi32(load16(qr[r] + c));
          if (hz) v = _mm512_sub_epi32(v, zv[r]);
          wv[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(v), sv[r]);
          if (hm) wv[r] = _mm512_add_ps(wv[r], mv[r]);
        }
        for (int i = 0; i < MT; ++i) {
          __m512 xv = _mm512_loadu_ps(x + i * M_stride + c);
          for (int r = 0; r < NR; ++r) acc[r][i] = _mm512_fmadd_ps(xv, wv[r], acc[r][i]);
        }
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < MT; ++i) y[i * ldy + n0 + r] = _mm512_reduce_add_ps(acc[r][i]);
}

// tile's 4-bit case for one row of x and groups of 32 (every GGUF 4-bit format, and int4's
// default): a batch-1 decode step's products, most of a token's time. The same arithmetic, but a
// group is one 32-column run and whether it has zeros or mins is known when it is compiled: the
// loop is then a group's table, load, two lookups and two products a row (Q4_1 3072 x 576 from
// memory, weight rows two at a time: 128 -> 102 us, paired).
template <int NR, bool HZ, bool HM>
void tile4_g32(const Weights& w, int64_t n0, const float* x, float* y, const float* s,
               const float* z, const float* mn) {
  const int64_t G = w.G, P = w.padded_groups(), rb = w.row_bytes();
  const int64_t ahead = (PREFETCH_BYTES + rb - 1) / rb * rb;
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 acc[NR];
  const uint8_t* qr[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps(), qr[r] = w.q + (n0 + r) * rb;
  for (int64_t g = 0; g < G; ++g) {
    if ((g & 3) == 0)  // once per 64-byte line
      for (int r = 0; r < NR; ++r) prefetch(qr[r] + g * 16 + ahead);
    const __m512 xl = _mm512_loadu_ps(x + g * 32), xh = _mm512_loadu_ps(x + g * 32 + 16);
    for (int r = 0; r < NR; ++r) {
      __m512 t = HZ ? _mm512_sub_ps(iota, _mm512_set1_ps(z[r * P + g])) : iota;
      t = _mm512_mul_ps(t, _mm512_set1_ps(s[r * P + g]));
      if (HM) t = _mm512_add_ps(t, _mm512_set1_ps(mn[r * P + g]));
      const __m512i b = _mm512_cvtepu8_epi32(load16(qr[r] + g * 16));
      acc[r] = _mm512_fmadd_ps(xl, _mm512_permutexvar_ps(b, t), acc[r]);
      acc[r] = _mm512_fmadd_ps(xh, _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), t), acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) y[n0 + r] = _mm512_reduce_add_ps(acc[r]);
}

// tile's 8-bit case with scales only (Q8_0) for one row of x and groups of 32, likewise: the LM
// head of the default model, a 30 MB read every token (1.89 -> 1.65 ms, paired).
template <int NR>
void tile8_g32(const Weights& w, int64_t n0, const float* x, float* y, const float* s) {
  const int64_t G = w.G, P = w.padded_groups(), rb = w.row_bytes();
  const int64_t ahead = (PREFETCH_BYTES + rb - 1) / rb * rb;
  __m512 acc[NR];
  const int8_t* qr[NR];
  for (int r = 0; r < NR; ++r)
    acc[r] = _mm512_setzero_ps(), qr[r] = reinterpret_cast<const int8_t*>(w.q + (n0 + r) * rb);
  for (int64_t g = 0; g < G; ++g) {
    if ((g & 1) == 0)  // once per 64-byte line
      for (int r = 0; r < NR; ++r) prefetch(reinterpret_cast<const uint8_t*>(qr[r]) + g * 32 + ahead);
    const __m512 xa = _mm512_loadu_ps(x + g * 32), xb = _mm512_loadu_ps(x + g * 32 + 16);
    for (int r = 0; r < NR; ++r) {
      auto weights = [&](int64_t c) {
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(qr[r] + c))));
      };
      __m512 p = _mm512_fmadd_ps(xa, weights(g * 32), _mm512_setzero_ps());
      p = _mm512_fmadd_ps(xb, weights(g * 32 + 16), p);
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(s[r * P + g]), p, acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) y[n0 + r] = _mm512_reduce_add_ps(acc[r]);
}

template <int NR>
void tile4_g32_any(const Weights& w, int64_t n0, const float* x, float* y, const float* s,
                   const float* z, const float* mn) {
  if (w.z && w.m) return tile4_g32<NR, true, true>(w, n0, x, y, s, z, mn);
  if (w.z) return tile4_g32<NR, true, false>(w, n0, x, y, s, z, mn);
  if (w.m) return tile4_g32<NR, false, true>(w, n0, x, y, s, z, mn);
  return tile4_g32<NR, false, false>(w, n0, x, y, s, z, mn);
}

// Rows [b, e) of the output for MT rows of x: NR weight rows at a time, then one at a time.
template <int BITS, int MT>
void rows(const Weights& w, int64_t b, int64_t e, const float* x, float* y, int64_t ldy,
          float* s, float* z, float* m) {
  // NR * MT accumulators and NR unpacked vectors fit the 32 zmm (NR 4 at MT 4 was slower). At
  // one row of x (a batch-1 decode step, whose weights come from memory, not cache: 96 MB a token
  // of the default model against a 32 MB L3), fewer streams read faster: 4-bit rows two at a time
  // and 8-bit rows one at a time (cold, standalone: Q4_1 3072 x 576 101 -> 89 us against 4 at a
  // time, the Q8_0 LM head 3.3 -> 2.1 ms).
  constexpr int NR = MT > 2 ? 2 : MT == 2 ? NR_MAX : BITS == 4 ? 2 : 1;
  const int64_t P = w.padded_groups();
  int64_t n = b;
  const bool g32 = MT == 1 && w.group == 32 && (BITS == 4 || (!w.z && !w.m));
  for (; n + NR <= e; n += NR) {
    for (int r = 0; r < NR; ++r) row_params(w, n + r, s + r * P, z + r * P, m + r * P);
    if (!g32)
      tile<BITS, NR, MT>(w, n, x, w.K, y, ldy, s, z, m);
    else if (BITS == 4)
      tile4_g32_any<NR>(w, n, x, y, s, z, m);
    else
      tile8_g32<NR>(w, n, x, y, s);
  }
  for (; n < e; ++n) {
    row_params(w, n, s, z, m);
    if (!g32)
      tile<BITS, 1, MT>(w, n, x, w.K, y, ldy, s, z, m);
    else if (BITS == 4)
      tile4_g32_any<1>(w, n, x, y, s, z, m);
    else
      tile8_g32<1>(w, n, x, y, s);
  }
}

template <int BITS>
void rows_any(int mt, const Weights& w, int64_t b, int64_t e, const float* x, float* y,
              int64_t ldy, float* s, float* z, float* m) {
  switch (mt) {
    case 1: return rows<BITS, 1>(w, b, e, x, y, ldy, s, z, m);
    case 2: return rows<BITS, 2>(w, b, e, x, y, ldy, s, z, m);
    case 3: return rows<BITS, 3>(w, b, e, x, y, ldy, s, z, m);
    case 4: return rows<BITS, 4>(w, b, e, x, y, ldy, s, z, m);
    case 5: return rows<BITS, 5>(w, b, e, x, y, ldy, s, z, m);
    case 6: return rows<BITS, 6>(w, b, e, x, y, ldy, s, z, m);
    case 7: return rows<BITS, 7>(w, b, e, x, y, ldy, s, z, m);
    default: return rows<BITS, 8>(w, b, e, x, y, ldy, s, z, m);
  }
}
#endif

// Small M: read the weights once, all of x's rows at a time (in tiles of MT_MAX with AVX512).
void gemv(const Weights& w, const float* x, int64_t M, float* y) {
  at::parallel_for(0, w.N, 16, [&](int64_t b, int64_t e) {
#if defined(__AVX512F__)
    const int64_t P = w.padded_groups();
    std::vector<float> buf(3 * NR_MAX * P);
    float *s = buf.data(), *z = s + NR_MAX * P, *m = z + NR_MAX * P;
    for (int64_t i = 0; i < M; i += MT_MAX) {
      int mt = static_cast<int>(std::min<int64_t>(MT_MAX, M - i));
      if (w.bits == 4)
        rows_any<4>(mt, w, b, e, x + i * w.K, y + i * w.N, w.N, s, z, m);
      else
        rows_any<8>(mt, w, b, e, x + i * w.K, y + i * w.N, w.N, s, z, m);
    }
#else
    std::vector<float> row(w.K);
    for (int64_t n = b; n < e; ++n) {
      dequant_row(w, n, row.data());
      for (int64_t i = 0; i < M; ++i) {
        float acc = 0.f;
        for (int64_t c = 0; c < w.K; ++c) acc += x[i * w.K + c] * row[c];
        y[i * w.N + n] = acc;
      }
    }
#endif
  });
}

// Large M: the weights dequantized to float32 into a buffer this thread keeps, then one GEMM of
// torch's: a prompt is compute-bound, so the product must be float32's own. The whole matrix at
// once where it fits BLOCK_FLOATS (every layer's matrix of the default model), so the GEMM packs
// x once and writes y in place: blocks of 1 MB (x packed again for each 170 to 455 rows, and y
// written through a copy) made a 5,000-token prompt's first token 17% slower than float32's.
// A matrix past it (an LM head asked for every row's logits) goes in blocks of rows.
constexpr int64_t BLOCK_FLOATS = int64_t(1) << 22;  // 16 MB of float32
void gemm(const Weights& w, const at::Tensor& x, at::Tensor& y) {
  const int64_t NB = std::max<int64_t>(1, std::min(w.N, BLOCK_FLOATS / w.K));
  // kept between calls: a fresh 7 MB allocation each product is mapped and zeroed by the kernel
  thread_local at::Tensor buffer;
  if (!buffer.defined() || buffer.numel() < NB * w.K) buffer = at::empty({NB * w.K}, x.options());
  float* wp = buffer.data_ptr<float>();
  for (int64_t n0 = 0; n0 < w.N; n0 += NB) {
    int64_t nb = std::min(NB, w.N - n0);
    at::parallel_for(0, nb, 8, [&](int64_t b, int64_t e) {
#if defined(__AVX512F__)
      const int64_t P = w.padded_groups();
      std::vector<float> buf(3 * P);
      for (int64_t r = b; r < e; ++r)
        dequant_row_avx512(w, n0 + r, wp + r * w.K, buf.data(), buf.data() + P,
                           buf.data() + 2 * P);
#else
      for (int64_t r = b; r < e; ++r) dequant_row(w, n0 + r, wp + r * w.K);
#endif
    });
    at::Tensor wb = buffer.narrow(0, 0, nb * w.K).view({nb, w.K});
    if (nb == w.N)
      at::mm_out(y, x, wb.t());
    else
      y.narrow(1, n0, nb).copy_(at::mm(x, wb.t()));
  }
}

// Up to this many rows of x the register kernel beat dequantize-then-GEMM on the LM head at 1
// thread (Q4_1 at 32 rows: 28.5 ms against float32 F.linear's 32 ms, before the dequantization).
constexpr int64_t GEMV_MAX_M = 32;

at::Tensor qlinear(const at::Tensor& x_in, const at::Tensor& q_in, const at::Tensor& scales_in,
                   const c10::optional<at::Tensor>& zeros, const c10::optional<at::Tensor>& mins,
                   int64_t bits, int64_t group, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(x_in.scalar_type() == at::kFloat, "torchlet_q::linear: x must be float32");
  TORCH_CHECK(bits == 4 || bits == 8, "torchlet_q::linear: bits must be 4 or 8");
  const int64_t K = x_in.size(-1);
  at::Tensor x = x_in.reshape({-1, K}).contiguous();
  at::Tensor q = q_in.contiguous(), s = scales_in.contiguous();
  at::Tensor z = zeros.has_value() ? zeros->contiguous() : at::Tensor();
  at::Tensor m = mins.has_value() ? mins->contiguous() : at::Tensor();
  Weights w{static_cast<int>(bits), q.size(0), K, group, K / group,
            static_cast<const uint8_t*>(q.data_ptr()),
            s.data_ptr<at::Half>(), z.defined() ? z.data_ptr<uint8_t>() : nullptr,
            m.defined() ? m.data_ptr<at::Half>() : nullptr};
  TORCH_CHECK(q.size(1) == w.row_bytes() && K % group == 0 && group % 32 == 0,
              "torchlet_q::linear: weights do not match x's ", K, " columns");
  const int64_t M = x.size(0);
  at::Tensor y = at::empty({M, w.N}, x.options());
  if (M <= GEMV_MAX_M)
    gemv(w, x.data_ptr<float>(), M, y.data_ptr<float>());
  else
    gemm(w, x, y);
  if (bias.has_value()) y.add_(*bias);
  std::vector<int64_t> shape(x_in.sizes().begin(), x_in.sizes().end() - 1);
  shape.push_back(w.N);
  return y.view(shape);
}

}  // namespace

TORCH_LIBRARY(torchlet_q, lib) {
  lib.def("linear(Tensor x, Tensor q, Tensor scales, Tensor? zeros, Tensor? mins, int bits, "
          "int group, Tensor? bias=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(torchlet_q, CPU, lib) { lib.impl("linear", &qlinear); }
