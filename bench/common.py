"""Shared pieces of the bench/ scripts: one thread, the cortado-bench binary, timing, results.

Import this module before numpy (or anything that loads a BLAS or OpenMP runtime): importing
it pins every numerical library to one thread, the benchmarks' definition of a fair comparison.
"""
import json
import logging
import os
import platform
import subprocess
import sys
import time

# Before numpy/scikit-learn/XGBoost load OpenBLAS, MKL or OpenMP: their pools read these once.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402  (after the thread settings on purpose)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BIN = os.path.join(ROOT, ".build", "release")


def quiet_coremltools():
    """coremltools warns at import on Linux that its native predict proxy is missing (it is
    never used here: Cortado predicts) and that it has not been tested with XGBoost 2."""
    logging.getLogger("coremltools").setLevel(logging.ERROR)


def resolve_bin(path, name="cortado-bench"):
    """`--bin` takes the build folder (`.build/release`, what `make bench` passes) or an
    executable in it; returns the executable `name` there. Exits with a build hint when it is
    not there."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    candidate = os.path.join(folder, name)
    if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
        sys.exit(f"no {name} executable at {candidate}; build it with: swift build -c release --product {name}")
    return candidate


def add_common_args(parser, repeat):
    parser.add_argument("--bin", default=DEFAULT_BIN,
                        help="build folder holding cortado-bench, or the executable (default .build/release)")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=repeat, help="timed runs per engine (median reported)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", help="folder to keep the model, data and prediction files in")
    parser.add_argument("--summary", help="write the results as JSON here (bench/run_all.py reads it)")


def thread_report():
    """One line naming the BLAS/OpenMP pools numpy & co. loaded and their thread counts."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed"
    pools = threadpool_info()
    if not pools:
        return "no BLAS/OpenMP pools loaded"
    seen = {}
    for p in pools:
        key = (p.get("internal_api"), p.get("num_threads"))
        seen[key] = seen.get(key, 0) + 1
    return ", ".join(f"{api}{f' x{n}' if n > 1 else ''}: {threads} thread{'s' if threads != 1 else ''}"
                     for (api, threads), n in seen.items())


def time_python(fn, repeat, warmup=3):
    """Median wall and process-CPU seconds of `fn()` over `repeat` runs, and its last result."""
    import gc
    for _ in range(warmup):
        result = fn()
    wall, cpu = [], []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            result = fn()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    finally:
        if enabled:
            gc.enable()
    return float(np.median(wall)), float(np.median(cpu)), result


def run_cortado(binary, mode, model_path, X, repeat, workdir, name):
    """Times `cortado-bench MODE` on the rows of X (written as little-endian float64) and
    returns its JSON report and the predictions (rows x outputWidth)."""
    data_path = os.path.join(workdir, name + "_rows.f64")
    out_path = os.path.join(workdir, name + "_cortado.f64")
    X.astype("<f8").tofile(data_path)
    cmd = [binary, mode, model_path, data_path, str(X.shape[0]), str(X.shape[1]),
           "--repeat", str(repeat), "--out", out_path]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"cortado-bench failed ({done.returncode}): {done.stderr.strip()}\n{done.stdout}")
    report = json.loads(done.stdout)
    pred = np.fromfile(out_path, dtype="<f8").reshape(X.shape[0], report["outputWidth"])
    return report, pred


def max_relative_error(cortado, reference):
    """max |cortado - reference| / max(1, |reference|) (absolute near zero, relative above 1)."""
    if cortado.shape != reference.shape:
        return float("inf")
    return float((np.abs(cortado - reference) / np.maximum(1.0, np.abs(reference))).max())


def result_row(name, reference_engine, rows, ref_wall, ref_cpu, report, error, tolerance):
    """One benchmark case, as printed in the tables and written to --summary."""
    ok = bool(report["all_finite"]) and error <= tolerance
    return {
        "case": name,
        "reference": reference_engine,
        "rows": rows,
        "reference_rows_per_second": rows / ref_wall,
        "reference_rows_per_cpu_second": rows / ref_cpu if ref_cpu > 0 else float("inf"),
        "cortado_rows_per_second": report["rows_per_second"],
        "cortado_rows_per_cpu_second": report["rows_per_cpu_second"],
        "wall_ratio": report["rows_per_second"] / (rows / ref_wall),
        "cpu_ratio": report["rows_per_cpu_second"] / (rows / ref_cpu) if ref_cpu > 0 else float("nan"),
        "max_error": error,
        "tolerance": tolerance,
        "agree": ok,
    }


def print_table(results, reference_label):
    w = max(20, max(len(r["case"]) for r in results))
    ref_head = f"{reference_label} rows/s"
    print(f"{'model':<{w}} {'clock':<5} {ref_head:>20} {'cortado rows/s':>16} {'cortado/' + reference_label:>18}")
    for r in results:
        print(f"{r['case']:<{w}} {'wall':<5} {r['reference_rows_per_second']:>20,.0f} "
              f"{r['cortado_rows_per_second']:>16,.0f} {r['wall_ratio']:>17.2f}x")
        print(f"{'':<{w}} {'cpu':<5} {r['reference_rows_per_cpu_second']:>20,.0f} "
              f"{r['cortado_rows_per_cpu_second']:>16,.0f} {r['cpu_ratio']:>17.2f}x")


def write_summary(path, benchmark, description, results):
    if not path:
        return
    with open(path, "w") as f:
        json.dump({"benchmark": benchmark, "description": description, "results": results}, f, indent=1)


def add_avx2_host_arg(parser):
    parser.add_argument("--avx2-host", action="store_true",
                        help="run the whole benchmark (Cortado, onnxruntime, OpenVINO, NumPy) as on an AVX2 + FMA "
                             "host: bench/avx2_host.c, preloaded, hides AVX-512, AMX and AVX-VNNI from cpuid "
                             "(needs the cpuid_fault CPU flag), so every engine picks its AVX2 kernels itself")


def enter_avx2_host(args):
    """With --avx2-host: builds bench/avx2_host.c (into .build/, with cc) and runs this script
    again under it (LD_PRELOAD, inherited by the `cortado` processes it starts), unless it is
    already running so. Exits when the CPU cannot fault cpuid, rather than time the wide paths
    under an AVX2 label."""
    if not getattr(args, "avx2_host", False):
        return
    if avx2_host_active():
        return
    if os.environ.get("CORTADO_AVX2_HOST") == "unavailable":
        sys.exit("--avx2-host: this CPU or kernel cannot fault cpuid (no cpuid_fault in /proc/cpuinfo): "
                 "nothing can be hidden; CORTADO_ISA=avx2 (--isa avx2) forces Cortado's path alone")
    source = os.path.join(ROOT, "bench", "avx2_host.c")
    library = os.path.join(ROOT, ".build", "avx2_host.so")
    if not os.path.exists(library) or os.path.getmtime(library) < os.path.getmtime(source):
        os.makedirs(os.path.dirname(library), exist_ok=True)
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(filter(None, [library, env.get("LD_PRELOAD")]))
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def avx2_host_active():
    """Whether this process runs under bench/avx2_host.c with AVX-512 hidden (--avx2-host)."""
    return os.environ.get("CORTADO_AVX2_HOST") == "masked"


def avx2_host_label():
    """A note for the CPU line when this process runs under bench/avx2_host.c (--avx2-host)."""
    return ", AVX-512 hidden by --avx2-host" if avx2_host_active() else ""


def pin_threads(cpus):
    """Every thread of this process (and so the processes it starts) to `cpus`."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def pin_for(threads, allowed, enabled=True):
    """Pins this process for rounds of `threads` threads: to the first `threads` of the CPUs
    `allowed` when that is fewer than all of them (every engine then runs on the same CPUs;
    on a VM whose vCPUs run at different speeds from moment to moment, a fresh `cortado`
    process and the long-lived Python process otherwise land on different ones), else to all.
    Returns the CPUs pinned to when fewer than all, else None."""
    pin = list(allowed[:threads]) if enabled and threads < len(allowed) else list(allowed)
    pin_threads(pin)
    return pin if len(pin) < len(allowed) else None


def cpu_model():
    """The CPU model /proc/cpuinfo names (figures are quoted with it)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def kernel_path():
    """The kernel path Cortado picks here (as cg_isa in Sources/CGemm/cg_isa.c decides it): the
    widest of avx512 (AVX-512F+VL and FMA), avx2 (AVX2+FMA) and portable the CPU's flags allow,
    or the narrower one CORTADO_ISA names; on aarch64 neon, or portable when CORTADO_ISA asks for
    it. `cortado report --json` says it too ("kernelPath")."""
    want = os.environ.get("CORTADO_ISA", "").lower()
    if platform.machine() in ("aarch64", "arm64"):
        return "portable" if want == "portable" else "neon"
    order = ["portable", "avx2", "avx512"]
    best = "portable"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                if avx2_host_active():
                    flags -= {"avx512f", "avx512vl"}
                best = "avx512" if {"avx512f", "avx512vl", "fma"} <= flags else ("avx2" if {"avx2", "fma"} <= flags else "portable")
                break
    except OSError:
        pass
    return order[min(order.index(want), order.index(best))] if want in order else best


def cpu_flags():
    """The widest vector instruction set the CPU has: AVX-512, AVX2+FMA or SSE."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                widest = "AVX-512" if "avx512f" in flags else ("AVX2+FMA" if "avx2" in flags else "SSE")
                return widest + avx2_host_label()
    except OSError:
        pass
    return "?"
