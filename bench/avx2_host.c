// An AVX2 + FMA host made of an AVX-512 one, for benchmarks: preloaded (LD_PRELOAD) into a
// process, it has the kernel fault every `cpuid` instruction (arch_prctl ARCH_SET_CPUID, the
// CPU's "CPUID faulting", flag cpuid_fault in /proc/cpuinfo), answers it in the SIGSEGV handler
// with the real values, and clears the feature bits an AMD Zen 3 lacks: AVX-512 (every subset),
// AVX-512 FP16 and BF16, AMX and AVX-VNNI. Every library that picks its kernels from `cpuid`
// (onnxruntime's MLAS, OpenVINO's oneDNN, OpenBLAS, NumPy, Cortado's cg_isa) then takes its
// AVX2 path on its own, as it would on such a host. The setting is per thread and inherited by
// the threads and processes the process starts; execve keeps LD_PRELOAD, so a child is masked too.
//
// Built by bench/common.py (`cc -O2 -shared -fPIC`) when a benchmark is given --avx2-host. It
// sets CORTADO_AVX2_HOST in the process's environment to "masked" (or "unavailable" when the
// CPU or kernel cannot fault cpuid: then nothing is hidden), which the benchmark prints and
// checks; CORTADO_AVX2_HOST_VERBOSE=1 has it say so on stderr in every process too.

#define _GNU_SOURCE
#include <asm/prctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static int set_cpuid_faulting(int on) {
    // ARCH_SET_CPUID's argument is "cpuid allowed": 0 makes it fault.
    return (int)syscall(SYS_arch_prctl, ARCH_SET_CPUID, on ? 0 : 1);
}

static void real_cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

// Leaf 7 sub-leaf 0: EBX avx512f(16) dq(17) ifma(21) pf(26) er(27) cd(28) bw(30) vl(31);
// ECX avx512_vbmi(1) vbmi2(6) vnni(11) bitalg(12) vpopcntdq(14);
// EDX avx512_4vnniw(2) 4fmaps(3) vp2intersect(8) amx_bf16(22) avx512_fp16(23) amx_tile(24) amx_int8(25).
// Leaf 7 sub-leaf 1: EAX avx_vnni(4) avx512_bf16(5) amx_fp16(21).
#define BIT(n) (1u << (n))
static const uint32_t l7_ebx = BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31);
static const uint32_t l7_ecx = BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14);
static const uint32_t l7_edx = BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25);
static const uint32_t l7s1_eax = BIT(4) | BIT(5) | BIT(21);

static void answer(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    set_cpuid_faulting(0);
    real_cpuid(leaf, sub, r);
    set_cpuid_faulting(1);
    if (leaf == 7 && sub == 0) {
        r[1] &= ~l7_ebx;
        r[2] &= ~l7_ecx;
        r[3] &= ~l7_edx;
    } else if (leaf == 7 && sub == 1) {
        r[0] &= ~l7s1_eax;
    } else if (leaf == 0xd && sub == 0) {
        // XCR0-supported components: drop opmask, ZMM_Hi256, Hi16_ZMM (5-7) and AMX tiles (17-18).
        r[0] &= ~(BIT(5) | BIT(6) | BIT(7) | BIT(17) | BIT(18));
    }
}

static struct sigaction previous;

static void on_segv(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    uint8_t *ip = (uint8_t *)uc->uc_mcontext.gregs[REG_RIP];
    if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) {
        uint32_t r[4];
        answer((uint32_t)uc->uc_mcontext.gregs[REG_RAX], (uint32_t)uc->uc_mcontext.gregs[REG_RCX], r);
        uc->uc_mcontext.gregs[REG_RAX] = r[0];
        uc->uc_mcontext.gregs[REG_RBX] = r[1];
        uc->uc_mcontext.gregs[REG_RCX] = r[2];
        uc->uc_mcontext.gregs[REG_RDX] = r[3];
        uc->uc_mcontext.gregs[REG_RIP] += 2;
        return;
    }
    // Not a cpuid: hand the fault on as if this handler were not there.
    sigaction(SIGSEGV, &previous, NULL);
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) previous.sa_sigaction(sig, info, context);
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
    }
}

__attribute__((constructor(101))) static void avx2_host_start(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    const char *verbose = getenv("CORTADO_AVX2_HOST_VERBOSE");
    int say = verbose && strcmp(verbose, "1") == 0;
    if (sigaction(SIGSEGV, &sa, &previous) != 0 || set_cpuid_faulting(1) != 0) {
        sigaction(SIGSEGV, &previous, NULL);
        setenv("CORTADO_AVX2_HOST", "unavailable", 1);
        fprintf(stderr, "avx2_host: this CPU or kernel cannot fault cpuid (no cpuid_fault): nothing hidden\n");
        return;
    }
    setenv("CORTADO_AVX2_HOST", "masked", 1);
    if (say) fprintf(stderr, "avx2_host: cpuid faults in pid %d; AVX-512, AMX and AVX-VNNI hidden\n", (int)getpid());
}
