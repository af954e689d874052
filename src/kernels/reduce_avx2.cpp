// AVX2 reduce kernels (with FMA-era F16C for f16): 8 f32 lanes per register.
// Compiled for AVX2 function by function (the pragma below), so the rest of
// the library keeps the baseline ISA.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "kernels/reduce_isa.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,f16c,fma")

#include "kernels/reduce_vector_loop.hpp"

namespace axonml::distributed::kernels {
namespace {

struct F32Acc {
  using Acc = float;
  using Reg = __m256;
  static constexpr std::size_t kLanes = 8;
  static Reg load_acc(const float* p) { return _mm256_load_ps(p); }
  static void store_acc(float* p, Reg r) { _mm256_store_ps(p, r); }
  // vminps(x, acc) == (x < acc ? x : acc): the scalar kernel's minimum()
  // except where x is NaN (vminps returns acc there), so those lanes take x
  // and a NaN of any source propagates. Max likewise.
  template <ReduceOp kOp> static Reg combine(Reg acc, Reg x) {
    if constexpr (kOp == ReduceOp::Product) return _mm256_mul_ps(acc, x);
    else if constexpr (kOp == ReduceOp::Min) return nan_of_x_or(x, _mm256_min_ps(x, acc));
    else if constexpr (kOp == ReduceOp::Max) return nan_of_x_or(x, _mm256_max_ps(x, acc));
    else return _mm256_add_ps(acc, x);
  }
  // x in the lanes where x is NaN, r elsewhere.
  static Reg nan_of_x_or(Reg x, Reg r) { return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); }
  static Reg scale(Reg r, float s) { return _mm256_mul_ps(r, _mm256_set1_ps(s)); }
  static Reg canonical_nan(Reg r) {
    return _mm256_blendv_ps(r, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()),
                            _mm256_cmp_ps(r, r, _CMP_UNORD_Q));
  }
  static void fence() { _mm_sfence(); }
};

struct F32Lanes : F32Acc {
  using T = float;
  static constexpr DataType kType = DataType::F32;
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Reg r) { _mm256_storeu_ps(p, r); }
  static void stream(float* p, Reg r) { _mm256_stream_ps(p, r); }
};

struct F64Lanes {
  using T = double;
  using Acc = double;
  using Reg = __m256d;
  static constexpr DataType kType = DataType::F64;
  static constexpr std::size_t kLanes = 4;
  static Reg load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, Reg r) { _mm256_storeu_pd(p, r); }
  static void stream(double* p, Reg r) { _mm256_stream_pd(p, r); }
  static Reg load_acc(const double* p) { return _mm256_load_pd(p); }
  static void store_acc(double* p, Reg r) { _mm256_store_pd(p, r); }
  template <ReduceOp kOp> static Reg combine(Reg acc, Reg x) {
    if constexpr (kOp == ReduceOp::Product) return _mm256_mul_pd(acc, x);
    else if constexpr (kOp == ReduceOp::Min) return nan_of_x_or(x, _mm256_min_pd(x, acc));
    else if constexpr (kOp == ReduceOp::Max) return nan_of_x_or(x, _mm256_max_pd(x, acc));
    else return _mm256_add_pd(acc, x);
  }
  // x in the lanes where x is NaN, r elsewhere.
  static Reg nan_of_x_or(Reg x, Reg r) { return _mm256_blendv_pd(r, x, _mm256_cmp_pd(x, x, _CMP_UNORD_Q)); }
  static Reg scale(Reg r, double s) { return _mm256_mul_pd(r, _mm256_set1_pd(s)); }
  static Reg canonical_nan(Reg r) {
    return _mm256_blendv_pd(r, _mm256_set1_pd(std::numeric_limits<double>::quiet_NaN()),
                            _mm256_cmp_pd(r, r, _CMP_UNORD_Q));
  }
  static void fence() { _mm_sfence(); }
};

// Eight 32-bit lanes holding values < 2^16 (or 0 / -1 masks) to eight 16-bit
// lanes: pack within each 128-bit half, then gather the two halves.
__m128i pack_16(__m256i v) {
  const __m256i packed = _mm256_packs_epi32(v, v);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

// pack_16 for values in [0, 0xffff], which the signed pack would saturate.
__m128i pack_u16(__m256i v) {
  const __m256i packed = _mm256_packus_epi32(v, v);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

// bf16: widen by shifting; round to storage as bfloat16(float): NaN -> top half | quiet
// bit, else round to nearest even.
struct BF16Lanes : F32Acc {
  using T = bfloat16;
  static constexpr DataType kType = DataType::BF16;
  static Reg load(const bfloat16* p) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
  }
  static __m128i round_to_storage(Reg r) {
    const __m256i u = _mm256_castps_si256(r);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounding = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, rounding), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(r, r, _CMP_UNORD_Q));
    return pack_u16(_mm256_blendv_epi8(rounded, quiet, nan));
  }
  static void store(bfloat16* p, Reg r) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), round_to_storage(r)); }
  static void stream(bfloat16* p, Reg r) { _mm_stream_si128(reinterpret_cast<__m128i*>(p), round_to_storage(r)); }
};

// f16 converts in hardware; only NaN differs: float16(float) stores the
// canonical sign | 0x7e00.
struct F16Lanes : F32Acc {
  using T = float16;
  static constexpr DataType kType = DataType::F16;
  static Reg load(const float16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static __m128i round_to_storage(Reg r) {
    const __m128i half = _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i u = _mm256_castps_si256(r);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000));
    const __m128i nan_bits = pack_u16(_mm256_or_si256(sign, _mm256_set1_epi32(0x7e00)));
    const __m128i nan = pack_16(_mm256_castps_si256(_mm256_cmp_ps(r, r, _CMP_UNORD_Q)));
    return _mm_blendv_epi8(half, nan_bits, nan);
  }
  static void store(float16* p, Reg r) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), round_to_storage(r)); }
  static void stream(float16* p, Reg r) { _mm_stream_si128(reinterpret_cast<__m128i*>(p), round_to_storage(r)); }
};

// Integers: adds and multiplies wrap, as the scalar kernel's unsigned math.
template <typename Int, std::size_t kLaneCount>
struct IntLanesBase {
  using T = Int;
  using Acc = Int;
  using Reg = __m256i;
  static constexpr std::size_t kLanes = kLaneCount;
  static Reg load(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store(T* p, Reg r) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), r); }
  static void stream(T* p, Reg r) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), r); }
  static Reg load_acc(const T* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store_acc(T* p, Reg r) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), r); }
  static Reg scale(Reg r, T) { return r; }
  static void fence() { _mm_sfence(); }
};

struct I32Lanes : IntLanesBase<std::int32_t, 8> {
  static constexpr DataType kType = DataType::I32;
  template <ReduceOp kOp> static Reg combine(Reg acc, Reg x) {
    if constexpr (kOp == ReduceOp::Product) return _mm256_mullo_epi32(acc, x);
    else if constexpr (kOp == ReduceOp::Min) return _mm256_min_epi32(acc, x);
    else if constexpr (kOp == ReduceOp::Max) return _mm256_max_epi32(acc, x);
    else return _mm256_add_epi32(acc, x);
  }
};

// AVX2 has no 64-bit multiply, min or max: the low 64 bits of a product are
// lo*lo + ((lo*hi + hi*lo) << 32); min and max select on a compare.
struct I64Lanes : IntLanesBase<std::int64_t, 4> {
  static constexpr DataType kType = DataType::I64;
  template <ReduceOp kOp> static Reg combine(Reg acc, Reg x) {
    if constexpr (kOp == ReduceOp::Product) {
      const __m256i low = _mm256_mul_epu32(acc, x);
      const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(acc, 32), x),
                                             _mm256_mul_epu32(acc, _mm256_srli_epi64(x, 32)));
      return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
    } else if constexpr (kOp == ReduceOp::Min) {
      return _mm256_blendv_epi8(acc, x, _mm256_cmpgt_epi64(acc, x));
    } else if constexpr (kOp == ReduceOp::Max) {
      return _mm256_blendv_epi8(acc, x, _mm256_cmpgt_epi64(x, acc));
    } else {
      return _mm256_add_epi64(acc, x);
    }
  }
};

}  // namespace

void reduce_avx2(DataType type, ReduceOp op, std::span<const std::byte* const> sources,
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

#pragma GCC pop_options
