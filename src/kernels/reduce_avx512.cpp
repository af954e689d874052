// AVX-512 reduce kernels (F, BW, VL, DQ; F16C for f16): 16 f32 lanes per
// register. Compiled for AVX-512 function by function (the pragma below), so
// the rest of the library keeps the baseline ISA and the dispatcher only
// calls in here on CPUs that have it.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "kernels/reduce_isa.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")
// GCC 12 warns about the deliberately undefined pass-through operand inside
// its own AVX-512 intrinsics (_mm512_undefined_ps); nothing here reads it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/reduce_vector_loop.hpp"

namespace axonml::distributed::kernels {
namespace {

// Lane types common to the 16-bit floats: f32 accumulators in a __m512.
struct F32Acc {
  using Acc = float;
  using Reg = __m512;
  static constexpr std::size_t kLanes = 16;
  static Reg load_acc(const float* p) { return _mm512_load_ps(p); }
  static void store_acc(float* p, Reg r) { _mm512_store_ps(p, r); }
  // vminps(x, acc) == (x < acc ? x : acc): the scalar kernel's minimum()
  // except where x is NaN (vminps returns acc there), so those lanes take x
  // and a NaN of any source propagates. Max likewise.
  template <ReduceOp kOp> static Reg combine(Reg acc, Reg x) {
    if constexpr (kOp == ReduceOp::Product) return _mm512_mul_ps(acc, x);
    else if constexpr (kOp == ReduceOp::Min) return nan_of_x_or(x, _mm512_min_ps(x, acc));
    else if constexpr (kOp == ReduceOp::Max) return nan_of_x_or(x, _mm512_max_ps(x, acc));
    else return _mm512_add_ps(acc, x);
  }
  // x in the lanes where x is NaN, r elsewhere.
  static Reg nan_of_x_or(Reg x, Reg r) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x); }
  static Reg scale(Reg r, float s) { return _mm512_mul_ps(r, _mm512_set1_ps(s)); }
  static Reg canonical_nan(Reg r) {
    const __mmask16 nan = _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(nan, r, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
  }
  static void fence() { _mm_sfence(); }
};

struct F32Lanes : F32Acc {
  using T = float;
  static constexpr DataType kType = DataType::F32;
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Reg r) { _mm512_storeu_ps(p, r); }
  static void stream(float* p, Reg r) { _mm512_stream_ps(p, r); }
};

struct F64Lanes {
  using T = double;
  using Acc = double;
  using Reg = __m512d;
  static constexpr DataType kType = DataType::F64;
  static constexpr std::size_t kLanes = 8;
  static Reg load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, Reg r) { _mm512_storeu_pd(p, r); }
  static void stream(double* p, Reg r) { _mm512_stream_pd(p, r); }
  static Reg load_acc(const double* p) { return _mm512_load_pd(p); }
  static void store_acc(double* p, Reg r) { _mm512_store_pd(p, r); }
  template <ReduceOp kOp> static Reg combine(Reg acc, Reg x) {
    if constexpr (kOp == ReduceOp::Product) return _mm512_mul_pd(acc, x);
    else if constexpr (kOp == ReduceOp::Min) return nan_of_x_or(x, _mm512_min_pd(x, acc));
    else if constexpr (kOp == ReduceOp::Max) return nan_of_x_or(x, _mm512_max_pd(x, acc));
    else return _mm512_add_pd(acc, x);
  }
  // x in the lanes where x is NaN, r elsewhere.
  static Reg nan_of_x_or(Reg x, Reg r) { return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q), r, x); }
  static Reg scale(Reg r, double s) { return _mm512_mul_pd(r, _mm512_set1_pd(s)); }
  static Reg canonical_nan(Reg r) {
    const __mmask8 nan = _mm512_cmp_pd_mask(r, r, _CMP_UNORD_Q);
    return _mm512_mask_blend_pd(nan, r, _mm512_set1_pd(std::numeric_limits<double>::quiet_NaN()));
  }
  static void fence() { _mm_sfence(); }
};

// bf16 is the top half of an f32: widen by shifting; round to storage as
// bfloat16(float) does: NaN -> top half | quiet bit, else round to nearest even.
struct BF16Lanes : F32Acc {
  using T = bfloat16;
  static constexpr DataType kType = DataType::BF16;
  static Reg load(const bfloat16* p) {
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
  }
  static __m256i round_to_storage(Reg r) {
    const __m512i u = _mm512_castps_si512(r);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounding = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, rounding), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
  }
  static void store(bfloat16* p, Reg r) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), round_to_storage(r)); }
  static void stream(bfloat16* p, Reg r) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), round_to_storage(r)); }
};

// f16 converts in hardware (nearest even, subnormals, overflow to infinity);
// only NaN differs: float16(float) stores the canonical sign | 0x7e00.
struct F16Lanes : F32Acc {
  using T = float16;
  static constexpr DataType kType = DataType::F16;
  static Reg load(const float16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m256i round_to_storage(Reg r) {
    const __m256i half = _mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i u = _mm512_castps_si512(r);
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000));
    const __m256i nan_bits = _mm512_cvtepi32_epi16(_mm512_or_si512(sign, _mm512_set1_epi32(0x7e00)));
    const __mmask16 nan = _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
    return _mm256_mask_blend_epi16(nan, half, nan_bits);
  }
  static void store(float16* p, Reg r) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), round_to_storage(r)); }
  static void stream(float16* p, Reg r) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), round_to_storage(r)); }
};

// Integers: adds and multiplies wrap, as the scalar kernel's unsigned math.
struct IntLanesBase {
  using Reg = __m512i;
  static void fence() { _mm_sfence(); }
};

struct I32Lanes : IntLanesBase {
  using T = std::int32_t;
  using Acc = std::int32_t;
  static constexpr DataType kType = DataType::I32;
  static constexpr std::size_t kLanes = 16;
  static Reg load(const T* p) { return _mm512_loadu_si512(p); }
  static void store(T* p, Reg r) { _mm512_storeu_si512(p, r); }
  static void stream(T* p, Reg r) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), r); }
  static Reg load_acc(const T* p) { return _mm512_load_si512(p); }
  static void store_acc(T* p, Reg r) { _mm512_store_si512(p, r); }
  template <ReduceOp kOp> static Reg combine(Reg acc, Reg x) {
    if constexpr (kOp == ReduceOp::Product) return _mm512_mullo_epi32(acc, x);
    else if constexpr (kOp == ReduceOp::Min) return _mm512_min_epi32(acc, x);
    else if constexpr (kOp == ReduceOp::Max) return _mm512_max_epi32(acc, x);
    else return _mm512_add_epi32(acc, x);
  }
  static Reg scale(Reg r, T) { return r; }
};

struct I64Lanes : IntLanesBase {
  using T = std::int64_t;
  using Acc = std::int64_t;
  static constexpr DataType kType = DataType::I64;
  static constexpr std::size_t kLanes = 8;
  static Reg load(const T* p) { return _mm512_loadu_si512(p); }
  static void store(T* p, Reg r) { _mm512_storeu_si512(p, r); }
  static void stream(T* p, Reg r) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), r); }
  static Reg load_acc(const T* p) { return _mm512_load_si512(p); }
  static void store_acc(T* p, Reg r) { _mm512_store_si512(p, r); }
  template <ReduceOp kOp> static Reg combine(Reg acc, Reg x) {
    if constexpr (kOp == ReduceOp::Product) return _mm512_mullo_epi64(acc, x);
    else if constexpr (kOp == ReduceOp::Min) return _mm512_min_epi64(acc, x);
    else if constexpr (kOp == ReduceOp::Max) return _mm512_max_epi64(acc, x);
    else return _mm512_add_epi64(acc, x);
  }
  static Reg scale(Reg r, T) { return r; }
};

}  // namespace

void reduce_avx512(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
                   std::byte* dest, std::size_t begin, std::size_t end) {
  switch (type) {
    case DataType::F32: return reduce_lanes<F32Lanes>(op, sources, dest, begin, end);
    case DataType::F64: return reduce_lanes<F64Lanes>(op, sources, dest, begin, end);
    case DataType::BF16: return reduce_lanes<BF16Lanes>(op, sources, dest, begin, end);
    case DataType::F16: return reduce_lanes<F16Lanes>(op, sources, dest, begin, end);
    case DataType::I32: return reduce_lanes<I32Lanes>(op, sources, dest, begin, end);
    case DataType::I64: return reduce_lanes<I64Lanes>(op, sources, dest, begin, end);
  }
}

}  // namespace axonml::distributed::kernels

#pragma GCC diagnostic pop
#pragma GCC pop_options
