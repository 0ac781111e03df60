// Which kernel path runs (see cg_isa in include/cortado_gemm.h): chosen once from the CPU's
// features and CORTADO_ISA, switchable by tests.
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "cg_kernels.h"

static const char *const cg_isa_names[] = {"portable", "avx2", "avx512", "neon"};

const char *cg_isa_name(cg_isa_path isa) {
    return isa >= CG_ISA_PORTABLE && isa <= CG_ISA_NEON ? cg_isa_names[isa] : "unknown";
}

cg_isa_path cg_isa_best(void) {
#if defined(__x86_64__)
    // __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0).
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma")) {
        return CG_ISA_AVX512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CG_ISA_AVX2;
#elif defined(__aarch64__)
    // Advanced SIMD is part of every aarch64 CPU (the ABI passes floats in its registers).
    return CG_ISA_NEON;
#endif
    return CG_ISA_PORTABLE;
}

// Whether this CPU runs path isa: portable always; on x86-64 the paths up to the best (they
// are numbered narrowest first); elsewhere only the best.
static int cg_isa_runs(cg_isa_path isa, cg_isa_path best) {
    if (isa == CG_ISA_PORTABLE || isa == best) return 1;
#if defined(__x86_64__)
    return isa >= CG_ISA_PORTABLE && isa <= CG_ISA_AVX512 && isa < best;
#else
    return 0;
#endif
}

// The path in use, −1 until first asked. Kernels read it on every call; it changes only at
// the first call or through cg_set_isa, so relaxed atomics suffice.
static int cg_isa_now = -1;

// The path CORTADO_ISA asks for when this CPU runs it; else `best` (said once on stderr when
// the variable names no path; a path wider than the CPU's, or of another architecture, is
// quietly the best, as it always was on x86).
static cg_isa_path cg_isa_requested(cg_isa_path best) {
    const char *want = getenv("CORTADO_ISA");
    if (!want || !*want) return best;
    for (int i = CG_ISA_PORTABLE; i <= CG_ISA_NEON; i++) {
        if (strcasecmp(want, cg_isa_names[i]) == 0) return cg_isa_runs((cg_isa_path)i, best) ? (cg_isa_path)i : best;
    }
    fprintf(stderr, "cortado: CORTADO_ISA=%s is not avx512, avx2, neon or portable; using %s\n", want, cg_isa_names[best]);
    return best;
}

cg_isa_path cg_isa(void) {
    int isa = __atomic_load_n(&cg_isa_now, __ATOMIC_RELAXED);
    if (isa < 0) {
        isa = cg_isa_requested(cg_isa_best());
        __atomic_store_n(&cg_isa_now, isa, __ATOMIC_RELAXED);
    }
    return (cg_isa_path)isa;
}

cg_isa_path cg_set_isa(cg_isa_path isa) {
    cg_isa_path best = cg_isa_best();
    int chosen = isa < CG_ISA_PORTABLE ? CG_ISA_PORTABLE : cg_isa_runs(isa, best) ? isa : best;
    __atomic_store_n(&cg_isa_now, chosen, __ATOMIC_RELAXED);
    return (cg_isa_path)chosen;
}

int cg_available(void) { return cg_isa() != CG_ISA_PORTABLE; }

const cg_kernels *cg_kernels_now(void) {
    switch (cg_isa()) {
#if defined(__x86_64__)
    case CG_ISA_AVX512: return &cg_kernels_avx512;
    case CG_ISA_AVX2: return &cg_kernels_avx2;
#endif
#if defined(__aarch64__)
    case CG_ISA_NEON: return &cg_kernels_neon;
#endif
    default: return &cg_kernels_portable;
    }
}
