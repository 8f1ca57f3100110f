// Where the fixed cost of a copy-engine call goes, and which way of ordering the two GPUs
// around the copies costs least. coll runs an in-place all-gather of 2 ranks as a
// copy-engine call (executor/src/cuda/copy_engine.rs): on each GPU's stream a 1-thread
// barrier kernel, one cudaMemcpyAsync of the GPU's half into the peer, the barrier kernel
// again. Such a call took about 20 us more than its bytes at the copy engine's rate (32 MiB
// per GPU: 110 us for 90; NCCL's copy-engine path 103). Built and run on the GPU machine by
// `bash bench/gpu_a2a.sh ce-call` (nvcc is there, not here):
//   nvcc -O2 -std=c++17 -arch=sm_90 -o ce_call bench/ce_call.cu -lcuda
// Each GPU copies its own source buffer into the peer's destination buffer, both GPUs at
// once (opposite directions), 16, 32, 64, 128 and 512 MiB per GPU per call. A call of a
// variant is enqueued on both GPUs' streams; 3 warm-up calls, then 20 calls (10 at 512 MiB)
// enqueued back to back with no host sync between them, timed by wall clock until both
// streams are done, best of 3. Prints us per call, GB/s per direction and the overhead: us
// per call less the bytes at `copy-only`'s rate at 512 MiB. Each variant is checked once at
// 16 MiB (every call's sources set to a pattern of GPU and call, the last call's pattern
// looked for at both ends of each destination: #wrong).
//   copy-only              the copies alone, no ordering between the GPUs
//   kernel-barrier         as coll: barrier kernel, copy, barrier kernel
//   kernel-barrier-before  the first barrier kernel and the copy: what the second one costs
//   event-join             no kernels: each stream waits on an event the peer's stream
//                          records before the copy, and on another after it
//   copy-chunks-4          kernel-barrier with the copy as 4 copies on the same stream: does
//                          each copy's start cost?
//   ce-pull                kernel-barrier with each copy on the receiving GPU's stream
//   memop-barrier          no kernels: the driver's stream memory operations; each GPU's
//                          stream writes the call's number into its flag word on the peer
//                          and waits until the peer's word on it reaches the number, before
//                          the copy and after it
//   memop-barrier-nofence-first  the same, the write before the copy without its memory
//                          barrier: the stream's earlier writes (the last call's copy) are
//                          ordered by the last call's second barrier already
// The memop variants run last: the driver may refuse a write into peer memory (printed as
// the row, the others go on), and a refusal found only when the stream runs would end the
// program. A call that does not finish in 10 s is released (every barrier word set past
// any value waited for) and its variant reported as hung.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::printf("%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));      \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

#define CU_CHECK(x)                                                                \
  do {                                                                             \
    CUresult r_ = (x);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                      \
      const char* s_ = "?";                                                        \
      cuGetErrorString(r_, &s_);                                                   \
      std::printf("%s:%d: %s\n", __FILE__, __LINE__, s_);                          \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

// As coll's barrier: count this GPU in, then wait until every GPU has counted as far.
__global__ void barrier(unsigned long long* mine, unsigned long long* const* all, int n) {
  if (threadIdx.x != 0) return;
  unsigned long long v = *(volatile unsigned long long*)mine + 1;
  __threadfence_system();
  *(volatile unsigned long long*)mine = v;
  for (int i = 0; i < n; i++) {
    while (*(volatile unsigned long long*)all[i] < v) {
    }
  }
  __threadfence_system();
}

static const size_t MiB = 1ull << 20;
static const size_t MAX = 512 * MiB;
// Words apart, so that the flag words of the two writers do not share a 128-byte line.
static const int FLAG_STRIDE = 16;
// Set into every barrier word to release a call that hangs: past any count or call number.
static const unsigned long long RELEASE = 1ull << 62;

struct Ctx {
  cudaStream_t s[2];
  char* src[2];                  // on GPU d, copied to the peer
  char* dst[2];                  // on GPU d, written by the peer
  unsigned long long* cnt[2];    // GPU d's barrier count, on GPU d
  unsigned long long** all[2];   // on GPU d: {cnt[0], cnt[1]}
  unsigned long long* flag[2];   // on GPU d: word s * FLAG_STRIDE written by GPU s
  cudaEvent_t a[2][2], b[2][2];  // [set][GPU]: before and after the copy
  unsigned long long call = 0;   // calls enqueued since the last reset
  size_t bytes = 0;
};

// A variant: enqueues one call on both GPUs; returns the driver's refusal, or nullptr.
typedef const char* (*Enqueue)(Ctx&);

static void launch_barrier(Ctx& c, int d) {
  CHECK(cudaSetDevice(d));
  barrier<<<1, 32, 0, c.s[d]>>>(c.cnt[d], c.all[d], 2);
  CHECK(cudaGetLastError());
}

// GPU d's source into the peer's destination, in `pieces` copies, on d's stream or (`pull`)
// on the peer's.
static void copy(Ctx& c, int d, int pieces, bool pull) {
  int p = 1 - d, on = pull ? p : d;
  size_t piece = c.bytes / pieces;
  CHECK(cudaSetDevice(on));
  for (int i = 0; i < pieces; i++)
    CHECK(cudaMemcpyAsync(c.dst[p] + i * piece, c.src[d] + i * piece, piece,
                          cudaMemcpyDeviceToDevice, c.s[on]));
}

static const char* copy_only(Ctx& c) {
  c.call++;
  for (int d = 0; d < 2; d++) copy(c, d, 1, false);
  return nullptr;
}

// Barrier, copy, barrier (`after`); each step on both GPUs before the next, so that the
// host's order does not hold one GPU's barrier back.
static const char* barriers(Ctx& c, int pieces, bool pull, bool after) {
  c.call++;
  for (int d = 0; d < 2; d++) launch_barrier(c, d);
  for (int d = 0; d < 2; d++) copy(c, d, pieces, pull);
  if (after)
    for (int d = 0; d < 2; d++) launch_barrier(c, d);
  return nullptr;
}
static const char* kernel_barrier(Ctx& c) { return barriers(c, 1, false, true); }
static const char* kernel_barrier_before(Ctx& c) { return barriers(c, 1, false, false); }
static const char* copy_chunks_4(Ctx& c) { return barriers(c, 4, false, true); }
static const char* ce_pull(Ctx& c) { return barriers(c, 1, true, true); }

// A wait takes the event's record as it stands when the wait is enqueued; the two sets
// alternate all the same, so that no event is recorded again while a wait on it is pending.
static const char* event_join(Ctx& c) {
  int k = (int)(c.call++ & 1);
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaEventRecord(c.a[k][d], c.s[d]));
  }
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamWaitEvent(c.s[d], c.a[k][1 - d], 0));
    copy(c, d, 1, false);
    CHECK(cudaSetDevice(d));
    CHECK(cudaEventRecord(c.b[k][d], c.s[d]));
  }
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamWaitEvent(c.s[d], c.b[k][1 - d], 0));
  }
  return nullptr;
}

static CUdeviceptr flag_word(Ctx& c, int on, int writer) {
  return (CUdeviceptr)(uintptr_t)(c.flag[on] + writer * FLAG_STRIDE);
}

static const char* cu_error(CUresult r) {
  const char* s = "unknown error";
  cuGetErrorString(r, &s);
  return s;
}

// Call c: each GPU writes 2c into its word on the peer and waits for the peer's 2c on it,
// copies, then the same with 2c + 1. `first` is the first write's flags.
static const char* memops(Ctx& c, unsigned first) {
  c.call++;
  for (int phase = 0; phase < 2; phase++) {
    cuuint64_t v = 2 * c.call + phase;
    unsigned flags = phase == 0 ? first : (unsigned)CU_STREAM_WRITE_VALUE_DEFAULT;
    for (int d = 0; d < 2; d++) {
      CHECK(cudaSetDevice(d));
      CUresult r = cuStreamWriteValue64((CUstream)c.s[d], flag_word(c, 1 - d, d), v, flags);
      if (r != CUDA_SUCCESS) return cu_error(r);
    }
    for (int d = 0; d < 2; d++) {
      CHECK(cudaSetDevice(d));
      CUresult r = cuStreamWaitValue64((CUstream)c.s[d], flag_word(c, d, 1 - d), v,
                                       CU_STREAM_WAIT_VALUE_GEQ);
      if (r != CUDA_SUCCESS) return cu_error(r);
    }
    if (phase == 0)
      for (int d = 0; d < 2; d++) copy(c, d, 1, false);
  }
  return nullptr;
}
static const char* memop_barrier(Ctx& c) { return memops(c, CU_STREAM_WRITE_VALUE_DEFAULT); }
static const char* memop_barrier_nofence_first(Ctx& c) {
  return memops(c, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
}

static double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Barrier counts and flag words to 0, on idle streams.
static void reset(Ctx& c) {
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMemsetAsync(c.cnt[d], 0, sizeof(unsigned long long), c.s[d]));
    CHECK(cudaMemsetAsync(c.flag[d], 0, 2 * FLAG_STRIDE * sizeof(unsigned long long), c.s[d]));
  }
  for (int d = 0; d < 2; d++) CHECK(cudaStreamSynchronize(c.s[d]));
  c.call = 0;
}

static bool idle(Ctx& c) {
  bool done = true;
  for (int d = 0; d < 2; d++) {
    cudaError_t q = cudaStreamQuery(c.s[d]);
    if (q == cudaErrorNotReady) {
      done = false;
    } else {
      CHECK(q);
    }
  }
  return done;
}

// Waits until both streams are done; false if that took over `limit` s, then after setting
// every barrier word to RELEASE (again and again: a GPU still running may write a smaller
// one) until they are. The host's copies go on the legacy stream, which the non-blocking
// streams do not wait for nor hold up.
static bool drain(Ctx& c, double limit) {
  auto t0 = std::chrono::steady_clock::now();
  while (!idle(c))
    if (seconds_since(t0) > limit) break;
  if (idle(c)) return true;
  std::vector<unsigned long long> words(2 * FLAG_STRIDE, RELEASE);
  auto t1 = std::chrono::steady_clock::now();
  while (!idle(c)) {
    if (seconds_since(t1) > 10) {
      std::printf("streams still busy 10 s after the release; giving up\n");
      std::exit(2);
    }
    for (int d = 0; d < 2; d++) {
      CHECK(cudaSetDevice(d));
      CHECK(cudaMemcpy(c.cnt[d], words.data(), sizeof(unsigned long long),
                       cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(c.flag[d], words.data(), words.size() * sizeof(unsigned long long),
                       cudaMemcpyHostToDevice));
    }
  }
  return false;
}

struct Result {
  double us = 0;
  const char* err = nullptr;  // the driver refused an enqueue
  bool hung = false;
};

static const double LIMIT = 10;

static Result measure(Ctx& c, Enqueue f, size_t bytes, int n) {
  Result r;
  c.bytes = bytes;
  reset(c);
  for (int i = 0; i < 3 && !r.err; i++) r.err = f(c);
  // After a refusal the other GPU may wait for a write that never comes: drain releases it.
  if (r.err) {
    drain(c, 2);
    return r;
  }
  if (!drain(c, LIMIT)) {
    r.hung = true;
    return r;
  }
  double best = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n && !r.err; i++) r.err = f(c);
    if (r.err) {
      drain(c, 2);
      return r;
    }
    if (!drain(c, LIMIT)) {
      r.hung = true;
      return r;
    }
    best = std::min(best, seconds_since(t0));
  }
  r.us = best / n * 1e6;
  return r;
}

// 8 calls of 16 MiB, GPU d's source set to (d + 1) * 16 + call before each (on d's stream:
// the barriers order it against a peer's pull of the previous call); then the first and last
// 4 KiB of each destination should hold the peer's last pattern. The bytes found otherwise,
// or -1 if a call was refused or hung.
static long check(Ctx& c, Enqueue f) {
  const size_t bytes = 16 * MiB, edge = 4096;
  const int calls = 8;
  c.bytes = bytes;
  reset(c);
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMemsetAsync(c.dst[d], 0, bytes, c.s[d]));
  }
  // The peer's copies into it are not ordered after this stream's memset in every variant.
  for (int d = 0; d < 2; d++) CHECK(cudaStreamSynchronize(c.s[d]));
  for (int k = 0; k < calls; k++) {
    for (int d = 0; d < 2; d++) {
      CHECK(cudaSetDevice(d));
      CHECK(cudaMemsetAsync(c.src[d], (d + 1) * 16 + k % 16, bytes, c.s[d]));
    }
    if (f(c)) {
      drain(c, 2);
      return -1;
    }
  }
  if (!drain(c, LIMIT)) return -1;
  long wrong = 0;
  std::vector<unsigned char> h(edge);
  for (int p = 0; p < 2; p++) {
    unsigned char want = (unsigned char)((1 - p + 1) * 16 + (calls - 1) % 16);
    for (size_t off : {(size_t)0, bytes - edge}) {
      CHECK(cudaSetDevice(p));
      CHECK(cudaMemcpy(h.data(), c.dst[p] + off, edge, cudaMemcpyDeviceToHost));
      for (unsigned char x : h) wrong += x != want;
    }
  }
  return wrong;
}

static void row(const char* name, size_t bytes, const Result& r, double rate, const char* wrong) {
  size_t mib = bytes / MiB;
  if (r.err) {
    std::printf("| %s | %zu | refused: %s | | | |\n", name, mib, r.err);
  } else if (r.hung) {
    std::printf("| %s | %zu | hung (over %.0f s) | | | |\n", name, mib, LIMIT);
  } else {
    double gbs = bytes / r.us / 1e3;
    std::printf("| %s | %zu | %.1f | %.1f | %.1f | %s |\n", name, mib, r.us, gbs,
                r.us - bytes / rate * 1e6, wrong);
  }
  std::fflush(stdout);
}

static void wrong_text(long w, char* out, size_t n) {
  if (w < 0) {
    std::snprintf(out, n, "no check");
  } else {
    std::snprintf(out, n, "%ld", w);
  }
}

int main() {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::printf("needs 2 GPUs, found %d\n", n);
    return 1;
  }
  CU_CHECK(cuInit(0));
  int driver = 0, runtime = 0;
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  char names[2][256];
  int memops64[2];
  for (int d = 0; d < 2; d++) {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, d));
    std::snprintf(names[d], sizeof names[d], "%s", prop.name);
    CUdevice dev;
    CU_CHECK(cuDeviceGet(&dev, d));
    CU_CHECK(cuDeviceGetAttribute(&memops64[d], CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                                  dev));
  }
  std::printf("GPU 0 %s, GPU 1 %s; driver CUDA %d, runtime %d; 64-bit stream memops %d %d\n",
              names[0], names[1], driver, runtime, memops64[0], memops64[1]);
  std::fflush(stdout);

  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    cudaError_t pe = cudaDeviceEnablePeerAccess(1 - d, 0);
    if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) CHECK(pe);
    cudaGetLastError();
  }
  Ctx c;
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamCreateWithFlags(&c.s[d], cudaStreamNonBlocking));
    CHECK(cudaMalloc(&c.src[d], MAX));
    CHECK(cudaMalloc(&c.dst[d], MAX));
    CHECK(cudaMemset(c.src[d], 0x5a + d, MAX));
    CHECK(cudaMalloc(&c.cnt[d], sizeof(unsigned long long)));
    CHECK(cudaMalloc(&c.flag[d], 2 * FLAG_STRIDE * sizeof(unsigned long long)));
    CHECK(cudaMalloc(&c.all[d], 2 * sizeof(unsigned long long*)));
    for (int k = 0; k < 2; k++) {
      CHECK(cudaEventCreateWithFlags(&c.a[k][d], cudaEventDisableTiming));
      CHECK(cudaEventCreateWithFlags(&c.b[k][d], cudaEventDisableTiming));
    }
  }
  for (int d = 0; d < 2; d++) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMemcpy(c.all[d], c.cnt, sizeof c.cnt, cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());
  }

  const size_t sizes[] = {16 * MiB, 32 * MiB, 64 * MiB, 128 * MiB, 512 * MiB};
  const int nsizes = sizeof sizes / sizeof sizes[0];
  auto calls = [](size_t bytes) { return bytes >= 512 * MiB ? 10 : 20; };
  char wrong[32];

  std::printf(
      "| variant | MiB per GPU | us per call | GB/s per direction | overhead us | #wrong |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);

  // copy-only first, whole: its rate at 512 MiB is what every overhead is measured against.
  std::vector<Result> base(nsizes);
  for (int i = 0; i < nsizes; i++) base[i] = measure(c, copy_only, sizes[i], calls(sizes[i]));
  if (base[nsizes - 1].hung || base[nsizes - 1].us <= 0) {
    std::printf("copy-only did not finish at 512 MiB\n");
    return 1;
  }
  double rate = sizes[nsizes - 1] / (base[nsizes - 1].us * 1e-6);
  wrong_text(check(c, copy_only), wrong, sizeof wrong);
  for (int i = 0; i < nsizes; i++) row("copy-only", sizes[i], base[i], rate, i == 0 ? wrong : "-");

  struct Variant {
    const char* name;
    Enqueue f;
  };
  const Variant variants[] = {
      {"kernel-barrier", kernel_barrier},
      {"kernel-barrier-before", kernel_barrier_before},
      {"event-join", event_join},
      {"copy-chunks-4", copy_chunks_4},
      {"ce-pull", ce_pull},
      {"memop-barrier", memop_barrier},
      {"memop-barrier-nofence-first", memop_barrier_nofence_first},
  };
  for (const Variant& v : variants) {
    for (int i = 0; i < nsizes; i++) {
      Result r = measure(c, v.f, sizes[i], calls(sizes[i]));
      if (i == 0 && !r.err && !r.hung) {
        wrong_text(check(c, v.f), wrong, sizeof wrong);
      } else {
        std::snprintf(wrong, sizeof wrong, "-");
      }
      row(v.name, sizes[i], r, rate, wrong);
      if (r.err || r.hung) break;
    }
  }
  return 0;
}
