// A C program on coll's NCCL library, as any NCCL program calls it: one process, two ranks
// (one per GPU, or both on GPU 0 of a one-GPU machine), allreduce, allgather and broadcast
// in a group, checked element by element. Built and run by bench/gpu_nccl.sh against the
// library's libnccl.so.2; prints "smoke ok" and exits 0 when every element is right.
#include <stdlib.h>

#include "common.h"

enum { N = 2 };

int main(void) {
  int ngpus = 0, version = 0;
  CUDA(cudaGetDeviceCount(&ngpus));
  CHECK(ncclGetVersion(&version));
  int devs[N] = {0, ngpus > 1 ? 1 : 0};
  ncclComm_t comms[N];
  double t0 = now_ms();
  CHECK(ncclCommInitAll(comms, N, devs));
  double init_ms = now_ms() - t0, first_ms = 0;
  const size_t count = (1 << 20) + 5;
  float *send[N], *recv[N];
  cudaStream_t streams[N];
  float *host = (float *)malloc(N * count * sizeof(float));
  for (int r = 0; r < N; r++) {
    CUDA(cudaSetDevice(devs[r]));
    CUDA(cudaStreamCreate(&streams[r]));
    CHECK(ncclMemAlloc((void **)&send[r], count * sizeof(float)));
    CHECK(ncclMemAlloc((void **)&recv[r], N * count * sizeof(float)));
    for (size_t i = 0; i < count; i++) host[i] = (float)((r * 31 + i * 7) % 97);
    CUDA(cudaMemcpy(send[r], host, count * sizeof(float), cudaMemcpyHostToDevice));
  }
  int wrong = 0;
  for (int test = 0; test < 3; test++) {
    double t1 = now_ms();
    CHECK(ncclGroupStart());
    for (int r = 0; r < N; r++) {
      if (test == 0) CHECK(ncclAllReduce(send[r], recv[r], count, ncclFloat, ncclSum, comms[r], streams[r]));
      if (test == 1) CHECK(ncclAllGather(send[r], recv[r], count, ncclFloat, comms[r], streams[r]));
      if (test == 2) CHECK(ncclBroadcast(send[r], recv[r], count, ncclFloat, 1, comms[r], streams[r]));
    }
    CHECK(ncclGroupEnd());
    for (int r = 0; r < N; r++) {
      CUDA(cudaSetDevice(devs[r]));
      CUDA(cudaStreamSynchronize(streams[r]));
    }
    if (test == 0) first_ms = now_ms() - t1;
    for (int r = 0; r < N; r++) {
      size_t n = test == 1 ? N * count : count;
      CUDA(cudaMemcpy(host, recv[r], n * sizeof(float), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < n; i++) {
        float want;
        if (test == 0) want = (float)(((0 * 31 + i * 7) % 97) + ((1 * 31 + i * 7) % 97));
        else if (test == 1) want = (float)(((i / count) * 31 + (i % count) * 7) % 97);
        else want = (float)((1 * 31 + i * 7) % 97);
        if (host[i] != want) wrong++;
      }
    }
    printf("test %d: %d wrong so far\n", test, wrong);
  }
  for (int r = 0; r < N; r++) {
    CHECK(ncclMemFree(send[r]));
    CHECK(ncclMemFree(recv[r]));
    CHECK(ncclCommDestroy(comms[r]));
  }
  free(host);
  printf("init %.1f ms, first allreduce of %zu floats %.1f ms\n", init_ms, count, first_ms);
  printf("version %d, %d GPUs: %s\n", version, ngpus, wrong ? "WRONG" : "smoke ok");
  return wrong ? 1 : 0;
}
