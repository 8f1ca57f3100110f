// The floor of an 8-byte allreduce between two GPUs in CUDA graphs, to tell how much of
// coll's graph time (7.3-7.7 us against NCCL's 5.6-6.7, bench/NOTES.md "Small calls") its
// interpreter adds. Built and run on the GPU machine by bench/gpu_small.sh part `floor` (nvcc
// is there, not here). Each variant captures `calls` launches per GPU into one graph per
// GPU, launches both graphs `reps` times and prints microseconds per call:
//   empty      a kernel that does nothing (the graph's own cost per kernel node);
//   empty-big  the same with 2 KiB of parameters (coll's kernels take about 1.9 KiB);
//   ll         one thread stores {data, flag} x 2 in one 16-byte store into the peer's
//              memory, polls its own line for the peer's, adds, writes the output: the least
//              an LL allreduce does (two lines alternate, so a sender one call ahead never
//              overwrites a line not yet read);
//   ll-big     the same with 2 KiB of parameters;
//   ll-512     the same launched with 512 threads, 31 warps idle (as coll's CTAs);
//   code-16k   one thread runs 1 024 dependent instructions once, straight-line (16 KiB of
//              code, as an interpreter running each op's code once per launch);
//   loop-16k   the same chain as a loop over 2 instructions: against code-16k, what fetching
//              cold instructions costs. Each also prints the SM cycles thread 0 spent.
// A wait gives up after about a second and the variant prints "timeout".
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <vector>

typedef unsigned int u32;
typedef unsigned long long u64;

struct Args {
  const float* in;
  float* out;
  u32* mine;  // this GPU's two lines
  u32* peer;  // the peer's two lines
  u32* failed;
  u32 flag;
  u32 slot;
};
struct Pad {
  u64 p[240];
};

__device__ __forceinline__ void ll(const Args& a) {
  if (threadIdx.x != 0) return;
  const u64 v = *(const u64*)a.in;
  u32* line = a.peer + 4 * a.slot;
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(line), "r"((u32)v),
               "r"(a.flag), "r"((u32)(v >> 32)), "r"(a.flag)
               : "memory");
  const u32* my = a.mine + 4 * a.slot;
  u32 d0, f0, d1, f1;
  const long long deadline = clock64() + 2000000000ll;
  while (true) {
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
                 : "l"(my)
                 : "memory");
    if (f0 == a.flag && f1 == a.flag) break;
    if (clock64() > deadline) {
      *a.failed = 1;
      return;
    }
  }
  const float x0 = __uint_as_float(d0), x1 = __uint_as_float(d1);
  a.out[0] = a.in[0] + x0;
  a.out[1] = a.in[1] + x1;
}

#define S1 x = __brev(x) + 1u;
#define S8 S1 S1 S1 S1 S1 S1 S1 S1
#define S64 S8 S8 S8 S8 S8 S8 S8 S8
#define S512 S64 S64 S64 S64 S64 S64 S64 S64
__global__ void k_code(u32 x, u32* out, u64* cycles) {
  if (threadIdx.x != 0) return;
  const long long t = clock64();
  S512
  *cycles = clock64() - t;
  if (x == 12345u) *out = x;
}
__global__ void k_loop(u32 x, u32* out, u64* cycles) {
  if (threadIdx.x != 0) return;
  const long long t = clock64();
#pragma unroll 1
  for (int i = 0; i < 512; i++) {
    S1
  }
  *cycles = clock64() - t;
  if (x == 12345u) *out = x;
}

__global__ void k_empty(u32 x) {
  if (x == 12345 && threadIdx.x == 1000) asm volatile("trap;");
}
__global__ void k_empty_big(Pad p) {
  if (p.p[0] == 12345 && threadIdx.x == 1000) asm volatile("trap;");
}
__global__ void k_ll(Args a) { ll(a); }
__global__ void k_ll_big(Args a, Pad p) {
  if (p.p[0] == 12345 && threadIdx.x == 1000) asm volatile("trap;");
  ll(a);
}

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,                \
              cudaGetErrorString(e_));                                         \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

struct Gpu {
  cudaStream_t s;
  float *in, *out;
  u32 *lines, *failed;
  u64* cycles;
};

int main() {
  const int G = 2, calls = 50, reps = 20;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < G) {
    printf("ll_floor: needs 2 GPUs, found %d\n", n);
    return 0;
  }
  std::vector<Gpu> g(G);
  for (int i = 0; i < G; i++) {
    CK(cudaSetDevice(i));
    CK(cudaDeviceEnablePeerAccess(1 - i, 0));
    CK(cudaStreamCreateWithFlags(&g[i].s, cudaStreamNonBlocking));
    CK(cudaMalloc(&g[i].in, 8));
    CK(cudaMalloc(&g[i].out, 8));
    CK(cudaMalloc(&g[i].lines, 32));
    CK(cudaMalloc(&g[i].failed, 4));
    CK(cudaMalloc(&g[i].cycles, 8));
    CK(cudaMemset(g[i].lines, 0, 32));
    CK(cudaMemset(g[i].failed, 0, 4));
    float h[2] = {1.0f + i, 2.0f + i};
    CK(cudaMemcpy(g[i].in, h, 8, cudaMemcpyHostToDevice));
  }
  const char* names[] = {"empty", "empty-big", "ll", "ll-big", "ll-512", "code-16k", "loop-16k"};
  u32 epoch = 0;
  for (int v = 0; v < 7; v++) {
    std::vector<cudaGraphExec_t> exec(G);
    for (int i = 0; i < G; i++) {
      CK(cudaSetDevice(i));
      cudaGraph_t graph;
      CK(cudaStreamBeginCapture(g[i].s, cudaStreamCaptureModeThreadLocal));
      for (int c = 0; c < calls; c++) {
        // Flags never repeat within a line's last few messages: each variant starts a new
        // range, and a graph's replays reuse theirs only `calls` messages later.
        Args a{g[i].in, g[i].out, g[i].lines, g[1 - i].lines, g[i].failed,
               epoch + (u32)c + 1, (u32)c % 2};
        Pad p{};
        switch (v) {
          case 0: k_empty<<<1, 32, 0, g[i].s>>>(0); break;
          case 1: k_empty_big<<<1, 32, 0, g[i].s>>>(p); break;
          case 2: k_ll<<<1, 32, 0, g[i].s>>>(a); break;
          case 3: k_ll_big<<<1, 32, 0, g[i].s>>>(a, p); break;
          case 4: k_ll<<<1, 512, 0, g[i].s>>>(a); break;
          case 5: k_code<<<1, 32, 0, g[i].s>>>((u32)c, (u32*)g[i].out, g[i].cycles); break;
          default: k_loop<<<1, 32, 0, g[i].s>>>((u32)c, (u32*)g[i].out, g[i].cycles); break;
        }
      }
      CK(cudaStreamEndCapture(g[i].s, &graph));
      CK(cudaGraphInstantiate(&exec[i], graph, 0));
      CK(cudaGraphDestroy(graph));
    }
    epoch += calls + 2;
    auto launch_all = [&] {
      for (int i = 0; i < G; i++) {
        CK(cudaSetDevice(i));
        CK(cudaGraphLaunch(exec[i], g[i].s));
      }
    };
    auto sync_all = [&] {
      for (int i = 0; i < G; i++) {
        CK(cudaSetDevice(i));
        CK(cudaStreamSynchronize(g[i].s));
      }
    };
    launch_all();
    sync_all();
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; r++) launch_all();
    sync_all();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
            .count() /
        (reps * calls);
    u32 failed = 0;
    for (int i = 0; i < G; i++) {
      u32 f = 0;
      CK(cudaSetDevice(i));
      CK(cudaMemcpy(&f, g[i].failed, 4, cudaMemcpyDeviceToHost));
      failed |= f;
      CK(cudaGraphExecDestroy(exec[i]));
    }
    float o[2] = {0, 0};
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(o, g[0].out, 8, cudaMemcpyDeviceToHost));
    printf("%-10s %6.2f us per call%s", names[v], us, failed ? " timeout" : "");
    if (v >= 2 && v <= 4) printf(" (out %.0f %.0f, want 3 5)", o[0], o[1]);
    if (v >= 5) {
      u64 cy = 0;
      CK(cudaMemcpy(&cy, g[0].cycles, 8, cudaMemcpyDeviceToHost));
      printf(" (thread 0: %llu cycles)", cy);
    }
    printf("\n");
  }
  return 0;
}
