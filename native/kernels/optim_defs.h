// The training step's element-wise arithmetic, one definition for the CUDA kernels
// (kernels.cu) and their host twins (the stand-in libcuda). Each step is the same
// IEEE double operation, in the same order, as the host optimizer in
// src/runtime/optim.ts, so device and host results are bit-identical. Products and
// sums are written with nnMul/nnAdd so nvcc cannot fuse them into an FMA (one
// rounding instead of two would change the bits).
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernel_defs.h"

#ifdef __CUDACC__
#define NN_MUL(a, b) __dmul_rn((a), (b))
#define NN_ADD(a, b) __dadd_rn((a), (b))
#define NN_SUB(a, b) __dsub_rn((a), (b))
#else
#define NN_MUL(a, b) ((a) * (b))
#define NN_ADD(a, b) ((a) + (b))
#define NN_SUB(a, b) ((a) - (b))
#endif

// Sum of squares runs in fixed chunks: each chunk summed in order, then the chunk
// sums in order. The order is part of the result, so the host path uses it too.
constexpr uint64_t kSumSquaresChunk = 4096;

NN_HD inline double nnChunkSumSquares(const float* x, uint64_t begin, uint64_t end) {
  double s = 0;
  for (uint64_t i = begin; i < end; ++i) {
    const double v = x[i];
    s = NN_ADD(s, NN_MUL(v, v));
  }
  return s;
}

// AdamW (decoupled weight decay), as optim.ts's AdamW.step for element i.
struct NnAdamW { double lr, beta1, beta2, eps, weightDecay, bc1, bc2; };

NN_HD inline void nnAdamWStep(float* p, const float* grad, float* m, float* v, uint64_t i, const NnAdamW& o) {
  const double g = grad[i];
  m[i] = static_cast<float>(NN_ADD(NN_MUL(o.beta1, static_cast<double>(m[i])), NN_MUL(NN_SUB(1.0, o.beta1), g)));
  v[i] = static_cast<float>(
      NN_ADD(NN_MUL(o.beta2, static_cast<double>(v[i])), NN_MUL(NN_MUL(NN_SUB(1.0, o.beta2), g), g)));
  const double update = (static_cast<double>(m[i]) / o.bc1) / NN_ADD(sqrt(static_cast<double>(v[i]) / o.bc2), o.eps);
  const double pi = p[i];
  p[i] = static_cast<float>(NN_SUB(pi, NN_MUL(o.lr, NN_ADD(update, NN_MUL(o.weightDecay, pi)))));
}

// SGD with optional momentum (buf null without), as optim.ts's SGD.step.
struct NnSgd { double lr, momentum, weightDecay; };

NN_HD inline void nnSgdStep(float* p, const float* grad, float* buf, uint64_t i, const NnSgd& o) {
  const double pi = p[i];
  double g = NN_ADD(static_cast<double>(grad[i]), NN_MUL(o.weightDecay, pi));
  if (buf) {
    g = NN_ADD(NN_MUL(o.momentum, static_cast<double>(buf[i])), g);
    buf[i] = static_cast<float>(g);  // the update uses the unrounded value, as the host does
  }
  p[i] = static_cast<float>(NN_SUB(pi, NN_MUL(o.lr, g)));
}
