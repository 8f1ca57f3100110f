// Can the copy engines add to what the SMs move over NVLink? Broadcast at n = 2 sits at the
// link's one-direction SM rate (367-376 GB/s, bench/NOTES.md "The machine") and alltoall at
// 1 GiB at the two-direction SM-store ceiling (363 GB/s each way); NVLink carries 478 GB/s
// per direction. Built and run on the GPU machine by bench/gpu_a2a.sh part `ce` (nvcc is
// there, not here). Each variant moves 1 GiB from GPU 0 to GPU 1 (and, for the `-both`
// ones, 1 GiB from GPU 1 to GPU 0 at the same time), best of 5 after a warm-up, and prints
// GB/s per direction:
//   sm            every SM of the sender storing 16-byte words into the peer (132 x 512)
//   ce-push       cudaMemcpyAsync on a stream of the sender
//   ce-pull       the same on a stream of the receiver
//   sm+ce-F       the SMs store the first F% while the sender's copy engine moves the rest,
//                 at once (two streams); the time is until both are done
//   sm+pull-F     the same with the receiver's copy engine
//   ce-push-x2    two copies at once on two streams of the sender, half the data each
//   ce-push-pull  the sender's copy engine and the receiver's at once, half the data each
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      std::printf("%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));       \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

__global__ void store(uint4* dst, const uint4* src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

struct Side {
  int dev, peer;
  char* src;  // on dev
  char* dst;  // on peer
  cudaStream_t sm, ce, ce2, pull;  // sm, ce and ce2 on dev, pull on peer
};

static const size_t BYTES = 1ull << 30;

// Starts moving BYTES for one side: the first `sm_share` by the SMs, the rest by a copy
// engine (the receiver's when `pull`).
static void start(Side& s, double sm_share, bool pull) {
  size_t sm_bytes = (size_t)(BYTES * sm_share) / 16 * 16;
  if (sm_bytes > 0) {
    CHECK(cudaSetDevice(s.dev));
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, s.dev));
    store<<<sms, 512, 0, s.sm>>>((uint4*)s.dst, (const uint4*)s.src, sm_bytes / 16);
    CHECK(cudaGetLastError());
  }
  if (sm_bytes < BYTES) {
    CHECK(cudaSetDevice(pull ? s.peer : s.dev));
    CHECK(cudaMemcpyAsync(s.dst + sm_bytes, s.src + sm_bytes, BYTES - sm_bytes,
                          cudaMemcpyDeviceToDevice, pull ? s.pull : s.ce));
  }
}

static void finish(std::vector<Side>& sides) {
  for (auto& s : sides) {
    CHECK(cudaSetDevice(s.dev));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaSetDevice(s.peer));
    CHECK(cudaDeviceSynchronize());
  }
}

// Starts moving BYTES for one side by copy engines only: half on the sender's two streams
// (`pull` false) or half on the sender's and half on the receiver's.
static void start_split(Side& s, bool pull) {
  size_t half = BYTES / 2;
  CHECK(cudaSetDevice(s.dev));
  CHECK(cudaMemcpyAsync(s.dst, s.src, half, cudaMemcpyDeviceToDevice, s.ce));
  if (!pull) {
    CHECK(cudaMemcpyAsync(s.dst + half, s.src + half, BYTES - half, cudaMemcpyDeviceToDevice, s.ce2));
  } else {
    CHECK(cudaSetDevice(s.peer));
    CHECK(cudaMemcpyAsync(s.dst + half, s.src + half, BYTES - half, cudaMemcpyDeviceToDevice, s.pull));
  }
}

static double rate(std::vector<Side>& sides, int nsides, double sm_share, bool pull,
                   bool split = false) {
  std::vector<Side> used(sides.begin(), sides.begin() + nsides);
  double best = 1e30;
  for (int rep = 0; rep < 6; rep++) {
    finish(used);
    auto t0 = std::chrono::steady_clock::now();
    for (auto& s : used) {
      if (split) {
        start_split(s, pull);
      } else {
        start(s, sm_share, pull);
      }
    }
    finish(used);
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, t);
  }
  return BYTES / best / 1e9;
}

int main() {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::printf("needs 2 GPUs, found %d\n", n);
    return 1;
  }
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    cudaError_t pe = cudaDeviceEnablePeerAccess(1 - d, 0);
    if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) CHECK(pe);
    cudaGetLastError();
  }
  std::vector<Side> sides(2);
  for (int d = 0; d < 2; d++) {
    Side& s = sides[d];
    s.dev = d;
    s.peer = 1 - d;
    CHECK(cudaSetDevice(d));
    CHECK(cudaMalloc(&s.src, BYTES));
    CHECK(cudaMemset(s.src, 1 + d, BYTES));
    CHECK(cudaStreamCreateWithFlags(&s.sm, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s.ce, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s.ce2, cudaStreamNonBlocking));
    CHECK(cudaSetDevice(1 - d));
    CHECK(cudaMalloc(&s.dst, BYTES));
    CHECK(cudaStreamCreateWithFlags(&s.pull, cudaStreamNonBlocking));
  }
  std::printf("| variant | GB/s per direction, one direction | both directions at once |\n");
  std::printf("|---|---:|---:|\n");
  auto row = [&](const char* name, double share, bool pull) {
    std::printf("| %s | %.1f | %.1f |\n", name, rate(sides, 1, share, pull),
                rate(sides, 2, share, pull));
    std::fflush(stdout);
  };
  std::printf("| ce-push-x2 | %.1f | %.1f |\n", rate(sides, 1, 0, false, true),
              rate(sides, 2, 0, false, true));
  std::printf("| ce-push-pull | %.1f | %.1f |\n", rate(sides, 1, 0, true, true),
              rate(sides, 2, 0, true, true));
  std::fflush(stdout);
  row("sm", 1.0, false);
  row("ce-push", 0.0, false);
  row("ce-pull", 0.0, true);
  const int shares[] = {40, 50, 60, 70, 80};
  char name[32];
  for (int f : shares) {
    std::snprintf(name, sizeof name, "sm+ce-%d", f);
    row(name, f / 100.0, false);
  }
  for (int f : shares) {
    std::snprintf(name, sizeof name, "sm+pull-%d", f);
    row(name, f / 100.0, true);
  }
  return 0;
}
