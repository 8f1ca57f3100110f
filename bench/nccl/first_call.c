// What a fresh process waits for NCCL: the CUDA contexts, ncclCommInitAll over the
// machine's GPUs (at most 2; NCCL refuses two ranks on one GPU, so one rank on a one-GPU
// machine), then a first allreduce of 1M floats, waited for. Prints one line with each
// part's milliseconds; the process's wall time around it is the script's. An argument sets
// the rank count, ranks going round the GPUs (coll's library takes two ranks on one GPU); a
// second, milliseconds the program waits between init and its first call (an application's
// own setup), not counted in "init + first call".
// Built and run by bench/gpu_first_compile.sh against the machine's NCCL and against coll's
// library, beside coll's cold starts.
#include <stdlib.h>

#include "common.h"

enum { MAX_RANKS = 2, COUNT = 1 << 20 };

int main(int argc, char **argv) {
  double t0 = now_ms();
  int gpus = 0;
  CUDA(cudaGetDeviceCount(&gpus));
  int n = gpus < MAX_RANKS ? gpus : MAX_RANKS;
  if (argc > 1) n = atoi(argv[1]);
  if (n < 1 || n > MAX_RANKS || gpus < 1) {
    fprintf(stderr, "ranks must be 1 to %d, on at least one GPU\n", MAX_RANKS);
    return 1;
  }
  int devs[MAX_RANKS];
  float *buf[MAX_RANKS];
  cudaStream_t streams[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    devs[r] = r % gpus;
    CUDA(cudaSetDevice(devs[r]));
    CUDA(cudaFree(0));
  }
  double t1 = now_ms();
  for (int r = 0; r < n; r++) {
    CUDA(cudaSetDevice(devs[r]));
    CUDA(cudaMalloc((void **)&buf[r], COUNT * sizeof(float)));
    CUDA(cudaMemset(buf[r], 0, COUNT * sizeof(float)));
    CUDA(cudaStreamCreate(&streams[r]));
  }
  for (int r = 0; r < n; r++) {
    CUDA(cudaSetDevice(devs[r]));
    CUDA(cudaDeviceSynchronize());
  }
  double t2 = now_ms();
  ncclComm_t comms[MAX_RANKS];
  CHECK(ncclCommInitAll(comms, n, devs));
  double t3 = now_ms();
  int wait_ms = argc > 2 ? atoi(argv[2]) : 0;
  if (wait_ms > 0) {
    struct timespec w = {wait_ms / 1000, (long)(wait_ms % 1000) * 1000000L};
    nanosleep(&w, NULL);
  }
  double t3w = now_ms();
  CHECK(ncclGroupStart());
  for (int r = 0; r < n; r++)
    CHECK(ncclAllReduce(buf[r], buf[r], COUNT, ncclFloat, ncclSum, comms[r], streams[r]));
  CHECK(ncclGroupEnd());
  for (int r = 0; r < n; r++) {
    CUDA(cudaSetDevice(devs[r]));
    CUDA(cudaStreamSynchronize(streams[r]));
  }
  double t4 = now_ms();
  double first = t4 - t3w, init = t3 - t2;
  int version = 0;
  ncclGetVersion(&version);
  printf("nccl %d first call: %d rank(s), contexts %.1f ms, buffers %.1f ms, "
         "ncclCommInitAll %.1f ms, waited %d ms, first allreduce %.1f ms, init + first call "
         "%.1f ms, main %.1f ms\n",
         version, n, t1 - t0, t2 - t1, init, wait_ms, first, init + first, t4 - t0);
  for (int r = 0; r < n; r++) ncclCommDestroy(comms[r]);
  return 0;
}
