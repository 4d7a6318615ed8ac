// Phase trace of the DSV4 kernels (a timing diagnostic, compiled out by default): the attention
// kernel and mla_output_proj's stream kernels (T <= 64).
//
// With MLA_DSV4_TRACE 1 (edit this line in a copy of kernel_src/ and point MLAJIT_KERNEL_DIR at
// it; the library's embedded sources keep 0) thread 0 of every CTA records %globaltimer at the
// kernel's events into a per-module table in the even launches of each token count T (T <= 64,
// then one shared counter), and the last CTA to leave the next (odd) launch of the same kernel
// prints the table of launches 4, 6, 8, 10, one line each, on stdout. So no printf delays a
// recorded launch or the kernels that wait for it (the attention's print used to hold its
// completion, and with it kernel A's griddepcontrol.wait, for ~1 ms); the printing launches are
// not recorded. The line:
//   TAG T=.. hca=.. launch .. t0 .. | cta0: event durations since the previous event of CTA 0 |
//   max: the latest CTA's time of each event since the earliest CTA's start (µs)
// TAG: PROF (attention), OPA / OPB (out-proj kernels A / B); t0: the earliest CTA's start in
// %globaltimer µs, so that the lines of one launch's kernels can be put on one time line. An
// event a CTA does not reach (no items) is left out of its max. Nothing else changes: with 0
// every call below is empty and the kernels' code is the untraced one.
#pragma once

#ifndef MLA_DSV4_TRACE
#define MLA_DSV4_TRACE 0
#endif

namespace mla {
namespace dsv4 {
namespace trace {

// The attention kernel's events (finish).
enum Event {
    kStart, kXQuant, kP1Ready, kP1Epi, kP1Done, kPrefetch, kB0, kP2Done, kP3Ready, kP3Epi,
    kP3Done, kB2, kP4Q, kP4Kv, kP4Deq, kP4Qk, kP4Sm, kP4Tile, kP4First, kP4Done, kEnd, kEvents
};
// The out-proj stream kernels' events (op_finish; kernel B has no kOpQuant): the consumers past
// griddepcontrol.wait, their quantize share done (kernel A), A ready (kernel A: every unit
// quantized; B: kernel A complete), the epilogue, the end.
enum OpEvent { kOpStart, kOpWait, kOpQuant, kOpReady, kOpEpi, kOpEnd, kOpEvents };

#if MLA_DSV4_TRACE
constexpr int kMaxCtas = 256;
constexpr int kSlots = kEvents > kOpEvents ? kEvents : kOpEvents;
__device__ unsigned long long g_t[kMaxCtas][kSlots];
__device__ unsigned g_exit;
__device__ unsigned g_count[66];
__shared__ unsigned s_seen;                     // events recorded by mark_first (thread 0 only)
__shared__ unsigned s_rec;                      // this launch records (thread 0 only)

__device__ __forceinline__ int count_slot(int T) { return T <= 64 ? T : 65; }

__device__ __forceinline__ unsigned long long now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Every mark is thread 0's. mark: the event's time; mark_first: the first record of the launch
// wins (events inside loops: the first phase-1 / 3 / 4 item); mark0: thread 0. begin: whether
// this launch records (an even count: the launches of this T are serialized, so every CTA reads
// the same count), and if so its start.
__device__ __forceinline__ void begin(int T) {
    if (threadIdx.x != 0) return;
    s_seen = 0u;
    s_rec = (*(volatile unsigned *)&g_count[count_slot(T)] & 1u) == 0u;
    if (!s_rec || blockIdx.x >= kMaxCtas) return;
    for (int e = 0; e < kSlots; ++e) g_t[blockIdx.x][e] = 0ull;
    g_t[blockIdx.x][kStart] = now();
}
__device__ __forceinline__ void mark(int e) {
    if (s_rec && blockIdx.x < kMaxCtas) g_t[blockIdx.x][e] = now();
}
// A shared flag word, so that no global load sits on the traced path.
__device__ __forceinline__ void mark_first(int e) {
    if (s_rec && blockIdx.x < kMaxCtas && !(s_seen & (1u << e))) {
        s_seen |= 1u << e;
        g_t[blockIdx.x][e] = now();
    }
}
__device__ __forceinline__ void mark0(int e) {
    if (threadIdx.x == 0) mark(e);
}

// Thread 0 of a CTA at its end: true for the grid's last one in launches 5, 7, 9, 11 of this T,
// which then prints the table launch *launch (the one before it) recorded.
__device__ __forceinline__ bool last_to_leave(int T, unsigned *launch) {
    __threadfence();
    if (atomicAdd(&g_exit, 1u) != gridDim.x * gridDim.y - 1u) return false;
    g_exit = 0u;
    __threadfence();
    const unsigned k = atomicAdd(&g_count[count_slot(T)], 1u);
    *launch = k - 1u;
    return (k & 1u) && k >= 5u && k <= 11u;
}

// The line described at the top (the CTAs of grid row blockIdx.y 0 only: kMaxCtas slots).
__device__ void report(const char *tag, int T, int hca, unsigned launch,
                       const char *const *names, int n_events) {
    const unsigned n = gridDim.x < kMaxCtas ? gridDim.x : kMaxCtas;
    unsigned long long t0 = ~0ull;
    for (unsigned c = 0; c < n; ++c) {
        const unsigned long long s = *(volatile unsigned long long *)&g_t[c][0];
        if (s && s < t0) t0 = s;
    }
    printf("%s T=%d hca=%d launch %u t0 %.1f | cta0:", tag, T, hca, launch, (double)t0 * 1e-3);
    unsigned long long prev = g_t[0][0];
    for (int e = 1; e < n_events; ++e) {
        const unsigned long long v = *(volatile unsigned long long *)&g_t[0][e];
        if (!v) continue;
        printf(" %s %.1f", names[e], (double)(v - prev) * 1e-3);
        prev = v;
    }
    printf(" | max:");
    for (int e = 0; e < n_events; ++e) {
        unsigned long long mx = 0ull, sum = 0ull;
        unsigned cnt = 0u;
        for (unsigned c = 0; c < n; ++c) {
            const unsigned long long v = *(volatile unsigned long long *)&g_t[c][e];
            if (!v) continue;
            if (v > mx) mx = v;
            sum += v - t0, ++cnt;
        }
        if (cnt) printf(" %s %.1f/%.1f(%u)", names[e], (double)(mx - t0) * 1e-3,
                        (double)sum / cnt * 1e-3, cnt);
    }
    printf("\n");
}

// The attention kernel: every CTA, once, at its very end (after its last global access).
__device__ __forceinline__ void finish(int T, int hca) {
    __syncthreads();
    if (threadIdx.x != 0) return;
    mark(kEnd);
    unsigned launch = 0u;
    if (!last_to_leave(T, &launch)) return;
    static const char *const names[kEvents] = {"start", "xq", "p1rdy", "p1epi", "p1done",
                                               "pf", "b0", "p2", "p3rdy", "p3epi", "p3done",
                                               "b2", "p4q", "p4kv", "p4deq", "p4qk", "p4sm", "p4tile", "p4first", "p4done",
                                               "end"};
    report("PROF", T, hca, launch, names, kEvents);
}

// The out-proj stream kernels: thread 0 (a consumer) after its CTA's epilogue (tag "OPA" or
// "OPB"). Only CTAs of grid row blockIdx.y 0 record (the K slices of 16 < T <= 64 share slots).
__device__ __forceinline__ void op_begin(int T) {
    if (blockIdx.y == 0) begin(T);
}
__device__ __forceinline__ void op_mark(int e) {
    if (threadIdx.x == 0 && blockIdx.y == 0) mark(e);
}
__device__ __forceinline__ void op_finish(const char *tag, int T) {
    if (threadIdx.x != 0) return;
    if (blockIdx.y == 0) mark(kOpEnd);
    unsigned launch = 0u;
    if (!last_to_leave(T, &launch)) return;
    static const char *const names[kOpEvents] = {"start", "wait", "quant", "ready", "epi", "end"};
    report(tag, T, 0, launch, names, kOpEvents);
}
#else
__device__ __forceinline__ void begin(int) {}
__device__ __forceinline__ void mark(int) {}
__device__ __forceinline__ void mark_first(int) {}
__device__ __forceinline__ void mark0(int) {}
__device__ __forceinline__ void finish(int, int) {}
__device__ __forceinline__ void op_begin(int) {}
__device__ __forceinline__ void op_mark(int) {}
__device__ __forceinline__ void op_finish(const char *, int) {}
#endif

}  // namespace trace
}  // namespace dsv4
}  // namespace mla
