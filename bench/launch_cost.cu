// Host cost of enqueueing a kernel, to tell which part of coll's eager small call the driver
// takes (bench/NOTES.md "Small calls"). Built and run on the GPU machine by bench/gpu_small.sh
// part `launch` (nvcc is there, not here): empty kernels whose parameters are as large as
// coll's main kernel's (about 1.9 KiB: CallArgs holds 2 x 64 peer pointers) or small, on one
// GPU or every GPU (up to 8) in turn (cuCtxSetCurrent before each, as coll did), and every
// GPU launched from its own host thread at once (a spinning worker per GPU, as coll's
// launch threads). Prints microseconds per call.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

struct Small {
  unsigned long long p[16];
};
struct Big {
  unsigned long long p[240];
};

__global__ void k_small(Small s) {
  if (s.p[0] == 1 && threadIdx.x == 1000) s.p[1] = 0;
}
__global__ void k_big(Big b) {
  if (b.p[0] == 1 && threadIdx.x == 1000) b.p[1] = 0;
}

#define CK(x)                                                         \
  do {                                                                \
    CUresult r_ = (x);                                                \
    if (r_ != CUDA_SUCCESS) {                                         \
      const char* s_ = nullptr;                                       \
      cuGetErrorString(r_, &s_);                                      \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

using Clock = std::chrono::steady_clock;
static double us_since(Clock::time_point t0, int calls) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
}

struct Dev {
  CUcontext ctx;
  CUstream stream;
  CUfunction small, big;
};

// Enqueue cost only: batches short enough not to fill the launch queue, synchronised
// between batches outside the timed part.
template <class F>
static double host_per_call(std::vector<Dev>& d, F launch_one_call) {
  const int batch = 64, batches = 200;
  double total = 0;
  for (int b = 0; b < batches + 5; b++) {
    auto t0 = Clock::now();
    for (int i = 0; i < batch; i++) launch_one_call();
    double t = us_since(t0, batch);
    if (b >= 5) total += t;
    for (auto& x : d) {
      cuCtxSetCurrent(x.ctx);
      cuStreamSynchronize(x.stream);
    }
  }
  return total / batches;
}

int main() {
  CK(cuInit(0));
  int ndev = 0;
  CK(cuDeviceGetCount(&ndev));
  int n = ndev < 8 ? ndev : 8;
  std::vector<Dev> d(n);
  for (int i = 0; i < n; i++) {
    CUdevice dev;
    CK(cuDeviceGet(&dev, i));
    CK(cuDevicePrimaryCtxRetain(&d[i].ctx, dev));
    CK(cuCtxSetCurrent(d[i].ctx));
    CK(cuStreamCreate(&d[i].stream, CU_STREAM_NON_BLOCKING));
    cudaSetDevice(i);
    CK((CUresult)cudaGetFuncBySymbol((cudaFunction_t*)&d[i].small, (const void*)k_small));
    CK((CUresult)cudaGetFuncBySymbol((cudaFunction_t*)&d[i].big, (const void*)k_big));
  }
  Small s{};
  Big b{};
  void* ps[] = {&s};
  void* pb[] = {&b};
  auto launch = [&](Dev& x, bool big) {
    return cuLaunchKernel(big ? x.big : x.small, 4, 1, 1, 128, 1, 1, 0, x.stream,
                          big ? pb : ps, nullptr);
  };
  printf("# host microseconds per call (enqueue only), %d GPUs, params %zu B or %zu B\n", n,
         sizeof(Small), sizeof(Big));
  for (bool big : {false, true}) {
    cuCtxSetCurrent(d[0].ctx);
    printf("one GPU, %s params: %.2f\n", big ? "big" : "small",
           host_per_call(d, [&] { launch(d[0], big); }));
  }
  if (n < 2) return 0;
  for (bool big : {false, true}) {
    printf("%d GPUs in turn, cuCtxSetCurrent each, %s params: %.2f\n", n, big ? "big" : "small",
           host_per_call(d, [&] {
             for (auto& x : d) {
               cuCtxSetCurrent(x.ctx);
               launch(x, big);
             }
           }));
  }
  printf("cuCtxSetCurrent alone, alternating: %.3f\n", host_per_call(d, [&] {
           cuCtxSetCurrent(d[0].ctx);
           cuCtxSetCurrent(d[1].ctx);
         }) / 2);
  // Two workers spinning on a call counter; the caller waits until both have enqueued.
  for (bool big : {false, true}) {
    std::atomic<long> seq{0}, done{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> w;
    for (int i = 0; i < n; i++)
      w.emplace_back([&, i] {
        cuCtxSetCurrent(d[i].ctx);
        long seen = 0;
        while (!stop.load(std::memory_order_acquire)) {
          long s2 = seq.load(std::memory_order_acquire);
          if (s2 == seen) continue;
          seen = s2;
          launch(d[i], big);
          done.fetch_add(1, std::memory_order_acq_rel);
        }
      });
    long target = 0;
    double t = host_per_call(d, [&] {
      seq.fetch_add(1, std::memory_order_acq_rel);
      target += n;
      while (done.load(std::memory_order_acquire) < target) {
      }
    });
    stop = true;
    for (auto& x : w) x.join();
    printf("%d GPUs from %d spinning threads at once, %s params: %.2f\n", n, n,
           big ? "big" : "small", t);
  }
  // An eager loop of calls of empty kernels on every GPU in turn: host-bound.
  for (int i = 0; i < n; i++) {
    cuCtxSetCurrent(d[i].ctx);
    cuStreamSynchronize(d[i].stream);
  }
  const int calls = 2000;
  auto t0 = Clock::now();
  for (int c = 0; c < calls; c++)
    for (auto& x : d) {
      cuCtxSetCurrent(x.ctx);
      launch(x, true);
    }
  for (auto& x : d) {
    cuCtxSetCurrent(x.ctx);
    cuStreamSynchronize(x.stream);
  }
  printf("eager pairs of empty big-param kernels, wall per call: %.2f\n", us_since(t0, calls));
  return 0;
}
