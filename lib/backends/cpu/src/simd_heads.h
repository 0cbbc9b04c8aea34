// Decode attention's key-order walk over the K/V cache (HeadsDotFn / HeadsAxpyFn in
// cpu_vec_dot.h) for the plain float types. Included by simd_avx2.cpp and simd_avx512.cpp inside
// their namespace, after their dot_row and rows_axpy_n: each level compiles its own copy.
//
// S = q K^T goes one key at a time, every kv head of it inside (the rows' memory order); O += P V
// goes one head at a time over all of the tile's keys, so each head's output rows stay in
// registers for the whole tile instead of being loaded and stored again every few keys. With the
// other stream's rows asked for into L2 as each key is visited (PrefetchRows), a decode step of a
// 1B llama's cache at depth 8192 (bench-ops FLASH_ATTN_EXT layout=cache, 32 MiB) took 1.8-2.0 ms
// where the walk in steps of two keys for both products, asking into L1, took 4.2 ms
// (docs/DECODE-SPEED.md).

// f(j) for the keys j < m, pf's row j asked for first.
template <class F>
inline void key_steps(int64_t m, const PrefetchRows& pf, F&& f) {
  for (int64_t j = 0; j < m; ++j) {
    pf.ask(j, j + 1);
    f(j);
  }
}

template <DType T>
void heads_dot_fast(int64_t K, const void* a, size_t lda, size_t ldh, int64_t nr, int nh, const float* const* b, int nc,
                    float* const* out, const PrefetchRows& pf) {
  const auto* pa = static_cast<const uint8_t*>(a);
  with_count<kMaxDotCols>(nc, [&]<int NC>() {
    key_steps(nr, pf, [&](int64_t j) {
      for (int h = 0; h < nh; ++h) {
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
    for (int h = 0; h < nh; ++h) {
      pf.ask(m * h / nh, m * (h + 1) / nh);  // pf's rows spread over the heads
      rows_axpy_n<T, NR>(n, m, px + h * ldh, ldx, p + h * NR * ldp, ldp, y + h * NR * ldy, ldy);
    }
  });
}
