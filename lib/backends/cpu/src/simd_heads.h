// Decode attention's key-order walk over the K/V cache (HeadsDotFn / HeadsAxpyFn in
// cpu_vec_dot.h) for the plain float types: keys two at a time, every kv head of them inside.
// Included by simd_avx2.cpp and simd_avx512.cpp inside their namespace, after their dot_row and
// rows_axpy_n: each level compiles its own copy.
//
// Two keys per step measured best (tg32 at depth 3500 on the small llama, 1 / 2 threads):
// 2 keys 51 / 83 t/s, 1 key 44 / 66, 4 keys 43 / 67, 8 keys 43 / -. A step over more keys of
// one head leaves the rows' memory order, which the hardware prefetcher follows.
constexpr int64_t kHeadsStep = 2;

// f(j0, j1) for the steps [j0, j1) of keys [0, m), pf's rows of each step asked for first.
template <class F>
inline void key_steps(int64_t m, const PrefetchRows& pf, F&& f) {
  for (int64_t j0 = 0; j0 < m; j0 += kHeadsStep) {
    const int64_t j1 = std::min(j0 + kHeadsStep, m);
    pf.ask(j0, j1);
    f(j0, j1);
  }
}

template <DType T>
void heads_dot_fast(int64_t K, const void* a, size_t lda, size_t ldh, int64_t nr, int nh, const float* const* b, int nc,
                    float* const* out, const PrefetchRows& pf) {
  const auto* pa = static_cast<const uint8_t*>(a);
  with_count<kMaxDotCols>(nc, [&]<int NC>() {
    key_steps(nr, pf, [&](int64_t j0, int64_t j1) {
      for (int h = 0; h < nh; ++h)
        for (int64_t j = j0; j < j1; ++j) {
          float o[NC];
          dot_row<T, NC>(K, pa + j * lda + h * ldh, b + h * NC, o);
          for (int c = 0; c < NC; ++c) out[h * NC + c][j] = o[c];
        }
    });
  });
}

template <DType T>
void heads_axpy_fast(int64_t n, int64_t m, const void* x, size_t ldx, size_t ldh, int nh, const float* p, size_t ldp,
                     int nr, float* y, size_t ldy, const PrefetchRows& pf) {
  const auto* px = static_cast<const uint8_t*>(x);
  with_count<kMaxDotCols>(nr, [&]<int NR>() {
    key_steps(m, pf, [&](int64_t j0, int64_t j1) {
      for (int h = 0; h < nh; ++h)
        rows_axpy_n<T, NR>(n, j1 - j0, px + j0 * ldx + h * ldh, ldx, p + h * NR * ldp + j0, ldp, y + h * NR * ldy, ldy);
    });
  });
}
