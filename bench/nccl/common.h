// What the C programs of bench/nccl share: checks that print the failing call and return 1
// from main, and a monotonic clock in milliseconds.
#ifndef COLL_BENCH_NCCL_COMMON_H
#define COLL_BENCH_NCCL_COMMON_H
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <time.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    ncclResult_t res_ = (call);                                                       \
    if (res_ != ncclSuccess) {                                                        \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,            \
              ncclGetErrorString(res_), ncclGetLastError(NULL));                         \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)
#define CUDA(call)                                                                    \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) {                                                        \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                 \
              cudaGetErrorString(err_));                                                 \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
#endif
