/*
 * Shows a process an AVX2-only CPU (no AVX-512, no AVX-VNNI) without a second machine.
 *
 * make_view.py copies a virtual environment and, in the copy's native libraries, overwrites every
 * `cpuid` (0f a2) with `int3; nop` (cc 90) and every `xgetbv` (0f 01 d0) with `int3; xchg ax,ax`
 * (cc 66 90). This library, loaded first by every Python of the copy, catches the SIGTRAP of those
 * int3s, runs the real instruction with the registers the code had set up, clears the feature bits
 * an AVX2 desktop lacks (the mask of a Skylake client or a Zen 2) and lets the code go on at the
 * nop. The kernels then chosen are those an AVX2 machine runs, so answers are the AVX2 answers;
 * timings are those of AVX2 kernels on this machine's cores, not those of an AVX2 desktop's cores.
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

/* leaf 7 subleaf 0 EBX: AVX512F 16, DQ 17, IFMA 21, PF 26, ER 27, CD 28, BW 30, VL 31 */
#define LEAF7_EBX_AVX512 ((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31))
/* ECX: VBMI 1, VBMI2 6, VNNI 11, BITALG 12, VPOPCNTDQ 14 */
#define LEAF7_ECX_AVX512 ((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14))
/* EDX: 4VNNIW 2, 4FMAPS 3, VP2INTERSECT 8, AMX-BF16 22, FP16 23, AMX-TILE 24, AMX-INT8 25 */
#define LEAF7_EDX_AVX512 ((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25))
/* leaf 7 subleaf 1 EAX: AVX-VNNI 4, AVX512_BF16 5, AMX-FP16 21, AVX-IFMA 23 */
#define LEAF7_1_EAX_HIDDEN ((1u << 4) | (1u << 5) | (1u << 21) | (1u << 23))
/* XCR0: opmask 5, ZMM_Hi256 6, Hi16_ZMM 7, AMX tile state 17, 18 */
#define XCR0_HIDDEN ((1ull << 5) | (1ull << 6) | (1ull << 7) | (1ull << 17) | (1ull << 18))

static unsigned long trapped;

static void on_trap(int signo, siginfo_t *info, void *context) {
    (void)signo;
    (void)info;
    ucontext_t *uc = (ucontext_t *)context;
    greg_t *regs = uc->uc_mcontext.gregs;
    const unsigned char *next = (const unsigned char *)regs[REG_RIP];
    if (next[-1] != 0xcc) {
        abort();
    }
    trapped++;
    if (next[0] == 0x66 && next[1] == 0x90) { /* xgetbv */
        uint32_t lo, hi;
        uint32_t which = (uint32_t)regs[REG_RCX];
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(which));
        uint64_t value = ((uint64_t)hi << 32) | lo;
        if (which == 0) {
            value &= ~XCR0_HIDDEN;
        }
        regs[REG_RAX] = (greg_t)(uint32_t)value;
        regs[REG_RDX] = (greg_t)(uint32_t)(value >> 32);
        return;
    }
    if (next[0] == 0x90) { /* cpuid */
        uint32_t leaf = (uint32_t)regs[REG_RAX], sub = (uint32_t)regs[REG_RCX];
        uint32_t a, b, c, d;
        __cpuid_count(leaf, sub, a, b, c, d);
        if (leaf == 7 && sub == 0) {
            b &= ~LEAF7_EBX_AVX512;
            c &= ~LEAF7_ECX_AVX512;
            d &= ~LEAF7_EDX_AVX512;
        } else if (leaf == 7 && sub == 1) {
            a &= ~LEAF7_1_EAX_HIDDEN;
        } else if (leaf == 0xd && sub == 0) {
            a &= ~(uint32_t)XCR0_HIDDEN;
        }
        regs[REG_RAX] = (greg_t)a;
        regs[REG_RBX] = (greg_t)b;
        regs[REG_RCX] = (greg_t)c;
        regs[REG_RDX] = (greg_t)d;
        return;
    }
    abort();
}

static void report(void) {
    if (getenv("AVX2_VIEW_REPORT")) {
        fprintf(stderr, "avx2-view: %lu cpuid/xgetbv answered\n", trapped);
    }
}

__attribute__((constructor)) static void install(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_trap;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTRAP, &action, NULL);
    atexit(report);
}
