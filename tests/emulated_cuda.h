// CPU emulation of the CUDA subset step_ops.cu uses: each block's threads are fibers (ucontext) run in a random
// order between barriers; blocks run one by one in a random order.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <algorithm>
#include <random>
#include <functional>
#include <ucontext.h>

struct emu_dim3 { unsigned x, y, z; };
static emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dsqrt_rn(double a) { return sqrt(a); }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline int atomicAdd(int* p, int v) { int o = *p; *p = o + v; return o; }

struct EmuFiber { ucontext_t ctx; unsigned tx, ty; int state; };
static std::vector<EmuFiber> emu_fibers;
static std::vector<char*> emu_stacks;
static ucontext_t emu_sched;
static int emu_cur;
static std::function<void()> emu_job;
static std::mt19937 emu_rng(12345);
static const size_t EMU_STACK = 128 * 1024;
static long emu_barriers = 0;

static void emu_fiber_main(int id) {
    emu_job();
    emu_fibers[id].state = 2;
    swapcontext(&emu_fibers[id].ctx, &emu_sched);
}
static void __syncthreads() {
    emu_barriers++;
    emu_fibers[emu_cur].state = 1;
    swapcontext(&emu_fibers[emu_cur].ctx, &emu_sched);
}
static int emu_or_flag = 0;
static int __syncthreads_or(int p) {
    if (p) emu_or_flag = 1;
    __syncthreads();
    int r = emu_or_flag;
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) emu_or_flag = 0;
    __syncthreads();
    return r;
}

static void emu_launch(emu_dim3 grid, emu_dim3 block, std::function<void()> fn) {
    gridDim = grid; blockDim = block; emu_job = fn;
    const int nt = block.x * block.y;
    if (nt > 1024 || nt < 1) { fprintf(stderr, "EMU: bad block %d\n", nt); abort(); }
    while ((int) emu_stacks.size() < nt) emu_stacks.push_back((char*) malloc(EMU_STACK));
    emu_fibers.resize(nt);
    std::vector<long long> blocks;
    for (long long b = 0; b < (long long) grid.x * grid.y; ++b) blocks.push_back(b);
    std::shuffle(blocks.begin(), blocks.end(), emu_rng);
    std::vector<int> order;
    for (long long b : blocks) {
        blockIdx.x = b % grid.x; blockIdx.y = b / grid.x; blockIdx.z = 0;
        for (int id = 0; id < nt; ++id) {
            EmuFiber& f = emu_fibers[id];
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = emu_stacks[id];
            f.ctx.uc_stack.ss_size = EMU_STACK;
            f.ctx.uc_link = nullptr;
            makecontext(&f.ctx, (void (*)()) emu_fiber_main, 1, id);
            f.state = 0; f.tx = id % block.x; f.ty = id / block.x;
        }
        for (;;) {
            order.clear();
            for (int id = 0; id < nt; ++id) if (emu_fibers[id].state != 2) order.push_back(id);
            if (order.empty()) break;
            std::shuffle(order.begin(), order.end(), emu_rng);
            for (int id : order) {
                emu_cur = id;
                threadIdx.x = emu_fibers[id].tx; threadIdx.y = emu_fibers[id].ty; threadIdx.z = 0;
                emu_fibers[id].state = 0;
                swapcontext(&emu_sched, &emu_fibers[id].ctx);
            }
            int done = 0, bar = 0;
            for (int id = 0; id < nt; ++id) { done += emu_fibers[id].state == 2; bar += emu_fibers[id].state == 1; }
            if (done && bar) { fprintf(stderr, "EMU: divergent barrier (%d done, %d waiting)\n", done, bar); abort(); }
        }
    }
}
