/* The rates one core of this machine issues 512-bit and 256-bit int8 dot products (vpdpbusd), f32 FMAs and a mix
 * of the two, each as ten independent chains so that latency does not count: the ceilings that ember's prefill
 * (int8 dots, then a float step per group) and attention (f32 FMAs) run under. Written in assembly so that no
 * compiler can fold the repeated operations. Needs AVX-512 VNNI; run by scripts/cpu-peaks.sh. */
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define OP(op, r, i) op " %%" r "20, %%" r "21, %%" r #i "\n"
#define TEN(op, r) OP(op, r, 0) OP(op, r, 1) OP(op, r, 2) OP(op, r, 3) OP(op, r, 4) \
    OP(op, r, 5) OP(op, r, 6) OP(op, r, 7) OP(op, r, 8) OP(op, r, 9)
#define CLOBBERS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9"
#define ROUNDS 20000000L

#define TIME(label, body, per_round)                                       \
    do {                                                                   \
        double t0 = now();                                                 \
        for (long k = 0; k < ROUNDS; k++) __asm__ volatile(body ::: CLOBBERS); \
        double s = now() - t0;                                             \
        printf("%-36s %6.2f G/s\n", label, (double)ROUNDS * (per_round) / s / 1e9); \
    } while (0)

int main(void) {
    TIME("vpdpbusd zmm (64 MACs each)", TEN("vpdpbusd", "zmm"), 10);
    TIME("vpdpbusd ymm (32 MACs each)", TEN("vpdpbusd", "ymm"), 10);
    TIME("vfmadd231ps zmm (16 lanes)", TEN("vfmadd231ps", "zmm"), 10);
    TIME("vfmadd231ps ymm (8 lanes)", TEN("vfmadd231ps", "ymm"), 10);
    /* 8 dots and 2 FMAs: whether the FMAs take the dots' ports (the total rate stays) or others (it rises). */
    TIME("vpdpbusd zmm 8 + vfmadd231ps zmm 2",
         OP("vpdpbusd", "zmm", 0) OP("vpdpbusd", "zmm", 1) OP("vpdpbusd", "zmm", 2) OP("vpdpbusd", "zmm", 3)
         OP("vpdpbusd", "zmm", 4) OP("vpdpbusd", "zmm", 5) OP("vpdpbusd", "zmm", 6) OP("vpdpbusd", "zmm", 7)
         OP("vfmadd231ps", "zmm", 8) OP("vfmadd231ps", "zmm", 9), 10);
    return 0;
}
