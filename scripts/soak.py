"""`make soak SECONDS=N`: a bounded soak of `cortado serve` (issue #20, item 6).

A Python driver on grpcio and tritonclient (the reference clients; cortado-load sends one kind
of good call only). It writes the server tests' model repository (Tests/Server/conftest.py:
logistic regression, XGBoost trees, a DictVectorizer pipeline, a Float16 neural network,
scalers), starts `cortado serve --model-control explicit`, and for N seconds drives, from
PROCESSES × THREADS callers each on a connection of its own (64 by default):

- good calls: native `Predictor.Predict` and OIP `ModelInfer` on every model, each answer
  checked against the library's prediction (the tests' `check_outputs` / `check`);
- bad calls: an unknown model (NOT_FOUND), a wrong shape or datatype (INVALID_ARGUMENT),
  bytes that are no protobuf (INVALID_ARGUMENT): each must fail with its code;
- streams: `ModelStreamInfer` carrying several requests, every answer checked;

while one model after the other is reloaded (`RepositoryModelLoad`) every RELOAD seconds and
the server's resident memory is sampled. Then SIGTERM, with the callers still sending.

It reports calls by kind, failed good calls (goal 0: an error or a wrong answer, while no
SIGTERM was sent), bad calls answered with the wrong code, calls lost at shutdown (good calls
started before the SIGTERM that did not succeed; goal 0), resident memory over time (goal:
flat after warm-up) and the server's exit status. Good calls started before the SIGTERM that
found no connection to send on (the server's GOAWAY closed theirs, the listener was closed when
grpcio retried) are counted apart, as refused: the server never took them. Exit status 1 when a goal is missed.

    CORTADO_BIN=.build/debug/cortado .venv/bin/python scripts/soak.py --seconds 120
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "Tests" / "Server"))

# Each caller's channel gets a connection of its own (grpcio shares subchannels otherwise).
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1), ("grpc.enable_http_proxy", 0)]
MODELS = ["logreg", "xgb", "dictlin", "half", "scaler", "scaler32"]
# grpcio's words for a call that found no connection to send on.
NEVER_SENT = "Failed to connect to remote host"


def read_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# ----------------------------------------------------------------------------- callers

class Caller:
    """One thread's calls, on one connection (a tritonclient client; the native stub shares
    its channel)."""

    def __init__(self, address, repo, seed, root_certificates=None, token=None):
        """root_certificates: a PEM file's path (TLS), or None (plaintext)."""
        import grpc
        import tritonclient.grpc as tc
        import test_predictor as tp
        import test_open_inference as toi
        self.grpc, self.tc, self.tp, self.toi = grpc, tc, tp, toi
        self.repo = repo
        self.rng = random.Random(seed)
        self.metadata = [("authorization", f"Bearer {token}")] if token else None
        ssl = root_certificates is not None
        self.client = tc.InferenceServerClient(address, ssl=ssl, root_certificates=root_certificates, channel_args=OWN_CONNECTION)
        channel = self.client._channel
        self.native = tp.P.predictor_pb2_grpc.PredictorStub(channel)
        self.raw_infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                             request_serializer=None, response_deserializer=None)
        self.headers = {"authorization": f"Bearer {token}"} if token else None
        self.details = ""

    def close(self):
        self.client.close()

    def one(self):
        """(kind, good, ok, code) of one call picked at random."""
        r = self.rng.random()
        model = self.rng.choice(MODELS)
        case = self.repo.cases[model]
        rows = len(next(iter(case.expected.values())))
        if r < 0.40:
            return self.native_predict(case, self.rng.randrange(rows))
        if r < 0.80:
            n = self.rng.randint(1, min(3, rows))
            start = self.rng.randrange(rows - n + 1)
            return self.oip_infer(case, list(range(start, start + n)))
        if r < 0.85:
            return self.stream(rows)
        return self.bad(self.rng.randrange(4))

    def native_predict(self, case, row):
        tp = self.tp
        try:
            reply = self.native.Predict(tp.pb.PredictRequest(model=case.name, inputs=tp.row_features(case, row)),
                                        timeout=30, metadata=self.metadata)
        except self.grpc.RpcError as e:
            self.details = e.details()
            return "native", True, False, e.code().name
        try:
            tp.check_outputs(case, row, tp.as_dict(reply.outputs))
        except AssertionError:
            return "native", True, False, "WRONG_ANSWER"
        return "native", True, True, "OK"

    def oip_infer(self, case, rows):
        from tritonclient.utils import InferenceServerException
        try:
            result = self.client.infer(case.name, self.toi.tensors(case, rows), client_timeout=30, headers=self.headers)
        except InferenceServerException as e:
            self.details = e.message()
            return "oip", True, False, (e.status() or "UNKNOWN").replace("StatusCode.", "")
        try:
            self.toi.check(case, rows, result)
        except AssertionError:
            return "oip", True, False, "WRONG_ANSWER"
        return "oip", True, True, "OK"

    def stream(self, rows):
        import queue
        answers = queue.Queue()
        picks = [(self.rng.choice(MODELS), self.rng.randrange(rows)) for _ in range(4)]
        picks = [(m, min(i, len(next(iter(self.repo.cases[m].expected.values()))) - 1)) for m, i in picks]
        try:
            self.client.start_stream(callback=lambda result, error: answers.put((result, error)), stream_timeout=30,
                                     headers=self.headers)
            for k, (m, i) in enumerate(picks):
                self.client.async_stream_infer(m, self.toi.tensors(self.repo.cases[m], [i]), request_id=str(k))
            got = [answers.get(timeout=30) for _ in picks]
        except Exception as e:  # a stream cut by the server, or no answer in time
            self.details = str(e)
            return "stream", True, False, type(e).__name__
        finally:
            try:
                self.client.stop_stream(cancel_requests=True)
            except Exception:
                pass
        for result, error in got:
            if error is not None:
                self.details = error.message()
                return "stream", True, False, (error.status() or "UNKNOWN").replace("StatusCode.", "")
            m, i = picks[int(result.get_response().id)]
            try:
                self.toi.check(self.repo.cases[m], [i], result)
            except AssertionError:
                return "stream", True, False, "WRONG_ANSWER"
        return "stream", True, True, "OK"

    def bad(self, which):
        """A call that must fail, with the code it must fail with."""
        from tritonclient.utils import InferenceServerException
        tp, toi = self.tp, self.toi
        if which == 0:
            expected, fn = "NOT_FOUND", lambda: self.native.Predict(tp.pb.PredictRequest(model="no-such-model"), timeout=30,
                                                                    metadata=self.metadata)
        elif which == 1:
            expected, fn = "NOT_FOUND", lambda: self.client.infer("no-such-model", toi.tensors(self.repo.cases["scaler"], [0]),
                                                                  client_timeout=30, headers=self.headers)
        elif which == 2:
            bad = toi._bad_requests(self.repo)
            name = self.rng.choice(sorted(bad))
            model, inputs, _ = bad[name]
            expected, fn = "INVALID_ARGUMENT", lambda: self.client.infer(model, inputs, client_timeout=30, headers=self.headers)
        else:
            junk = bytes(self.rng.randrange(256) for _ in range(self.rng.randint(1, 64)))
            expected, fn = "INVALID_ARGUMENT", lambda: self.raw_infer(b"\x0a\x06scaler\x2a\xff" + junk, timeout=30,
                                                                     metadata=self.metadata)
        try:
            fn()
        except self.grpc.RpcError as e:
            code = e.code().name
        except InferenceServerException as e:
            code = (e.status() or "UNKNOWN").replace("StatusCode.", "")
        else:
            code = "OK"
        return "bad", False, code == expected, code


def caller_process(index, threads, address, repo_dir, term_time, stop, results, tls_ca, token):
    """One process of callers (several processes: the GIL would cap one)."""
    repo = load_repo(repo_dir)
    lock = threading.Lock()
    tally = {"calls": {}, "failed_good": {}, "bad_wrong_code": {}, "lost_at_shutdown": {}, "refused_at_shutdown": {}, "after_sigterm": {},
             "examples": []}

    def add(group, key):
        tally[group][key] = tally[group].get(key, 0) + 1

    def run(t):
        try:
            caller = Caller(address, repo, seed=index * 1000 + t, root_certificates=tls_ca, token=token)
        except Exception as e:
            with lock:
                add("failed_good", f"caller could not start: {type(e).__name__}")
                tally["examples"].append(f"caller {t}: {e}"[:200])
            return
        try:
            while not stop.value:
                started = time.time()
                kind, good, ok, code = caller.one()
                term = term_time.value
                with lock:
                    add("calls", kind)
                    if term and started >= term:
                        add("after_sigterm", code)
                    elif not ok and good and term and NEVER_SENT in caller.details:
                        # The connection was gone (GOAWAY) and the retry found the listener
                        # closed: the server never took the call; a client retries elsewhere.
                        add("refused_at_shutdown", f"{kind} {code}")
                    elif not ok and good and term:
                        add("lost_at_shutdown", f"{kind} {code}")
                    elif not ok and good:
                        add("failed_good", f"{kind} {code}")
                    elif not ok and term and code == "UNAVAILABLE":
                        add("refused_at_shutdown", f"{kind} {code}")  # a bad call cut by the drain
                    elif not ok:
                        add("bad_wrong_code", code)
                    if not ok and (good or not term) and len(tally["examples"]) < 10 and not (term and started >= term):
                        when = f"started {term - started:.3f} s before the SIGTERM" if term else time.strftime("%H:%M:%S")
                        tally["examples"].append(f"{kind} {code} ({when}): {caller.details[:160]}")
                    caller.details = ""
        finally:
            caller.close()

    workers = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    results.put(tally)


def load_repo(repo_dir):
    """The cases (inputs, expected outputs) written with the repository, read back."""
    import pickle
    with open(Path(repo_dir) / "cases.pickle", "rb") as f:
        return pickle.load(f)


# ----------------------------------------------------------------------------- the run

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120, help="load time before the SIGTERM (default 120)")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=32, help="callers (connections) per process")
    ap.add_argument("--reload", type=float, default=3.0, help="seconds between model reloads")
    ap.add_argument("--sample", type=float, default=2.0, help="seconds between memory samples")
    ap.add_argument("--tls", action="store_true", help="serve over TLS with a bearer token (a self-signed certificate)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--server-arg", action="append", default=[], help="extra `cortado serve` argument (repeatable)")
    args = ap.parse_args()

    import pickle
    import types
    import conftest

    work = Path(tempfile.mkdtemp(prefix="cortado-soak-"))
    repo_dir = work / "models"
    repo_dir.mkdir()
    cases = conftest.build_repository(repo_dir)
    import test_predictor  # noqa: F401  compiles the protos' Python modules once, before the callers start
    with open(repo_dir / "cases.pickle", "wb") as f:
        pickle.dump(types.SimpleNamespace(cases=cases), f)

    server_args = ["--model-control", "explicit", *args.server_arg]
    tls_ca = token = None
    if args.tls:
        tls_ca, token, extra = tls_setup(work)
        server_args += extra
    server = conftest.Server(repo_dir, server_args, work).start() if not args.tls else start_tls(conftest, repo_dir, server_args, work, tls_ca, token)
    pid = server.proc.pid
    print(f"soak: cortado serve pid {pid} on {server.address}, {args.processes * args.threads} callers, {args.seconds:.0f} s"
          f"{' over TLS with a token' if args.tls else ''}", flush=True)

    ctx = mp.get_context("spawn")
    term_time = ctx.Value("d", 0.0)
    stop = ctx.Value("b", 0)
    results = ctx.Queue()
    procs = [ctx.Process(target=caller_process, args=(i, args.threads, server.address, str(repo_dir), term_time, stop, results,
                                                      str(tls_ca) if tls_ca else None, token))
             for i in range(args.processes)]
    for p in procs:
        p.start()

    samples = []
    reloads = {"ok": 0, "failed": 0}
    reload_errors = []
    import tritonclient.grpc as tc
    admin = tc.InferenceServerClient(server.address, ssl=args.tls, root_certificates=str(tls_ca) if tls_ca else None)
    headers = {"authorization": f"Bearer {token}"} if token else None
    start = time.time()
    next_reload = start + args.reload
    next_sample = start
    k = 0
    while time.time() - start < args.seconds:
        now = time.time()
        if now >= next_sample:
            samples.append((round(now - start, 1), read_rss_kib(pid)))
            next_sample += args.sample
        if now >= next_reload:
            model = MODELS[k % len(MODELS)]
            k += 1
            try:
                admin.load_model(model, headers=headers)
                reloads["ok"] += 1
            except Exception as e:
                reloads["failed"] += 1
                if len(reload_errors) < 5:
                    reload_errors.append(f"{model}: {e}")
            next_reload += args.reload
        time.sleep(0.05)
    admin.close()

    # SIGTERM with the callers still sending.
    term_time.value = time.time()
    server.terminate()
    status = server.wait(60)
    drain = time.time() - term_time.value
    time.sleep(1.0)
    stop.value = 1
    tallies = [results.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(30)

    total = {"calls": {}, "failed_good": {}, "bad_wrong_code": {}, "lost_at_shutdown": {}, "refused_at_shutdown": {},
             "after_sigterm": {}, "examples": []}
    for t in tallies:
        for group, counts in t.items():
            if group == "examples":
                total["examples"] += counts
                continue
            for key, n in counts.items():
                total[group][key] = total[group].get(key, 0) + n
    rss = [s for s in samples if s[1] is not None]
    warm = [kib for t, kib in rss if t >= args.seconds * 0.25]
    figures = {
        "seconds": args.seconds,
        "callers": args.processes * args.threads,
        "tls": args.tls,
        "calls": total["calls"],
        "calls_total": sum(total["calls"].values()),
        "calls_per_second": round(sum(total["calls"].values()) / (args.seconds + drain), 1),
        "failed_good_calls": total["failed_good"],
        "bad_calls_with_wrong_code": total["bad_wrong_code"],
        "lost_at_shutdown": total["lost_at_shutdown"],
        "refused_at_shutdown_never_sent": total["refused_at_shutdown"],
        "after_sigterm_by_code": total["after_sigterm"],
        "examples": total["examples"],
        "reloads": reloads,
        "reload_errors": reload_errors,
        "rss_kib_samples": rss,
        "rss_mib_after_warmup_first_last_max": [round(warm[0] / 1024, 1), round(warm[-1] / 1024, 1), round(max(warm) / 1024, 1)] if warm else None,
        "exit_status": status,
        "drain_seconds": round(drain, 2),
    }
    print(json.dumps({k: v for k, v in figures.items() if k != "rss_kib_samples"}, indent=1))
    print("rss MiB over time: " + " ".join(f"{t:.0f}s:{kib / 1024:.0f}" for t, kib in rss[:: max(1, len(rss) // 20)]))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    missed = (figures["calls_total"] == 0 or sum(total["failed_good"].values()) or sum(total["lost_at_shutdown"].values())
              or sum(total["bad_wrong_code"].values()) or reloads["failed"] or status != 0)
    print("soak: " + ("goals MISSED" if missed else "every goal met (memory: see the samples)"))
    return 1 if missed else 0


# ----------------------------------------------------------------------------- TLS

def tls_setup(work):
    """A self-signed certificate for 127.0.0.1 and a token file (openssl's command line)."""
    import subprocess
    cert, key = work / "server.crt", work / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    token = "soak-" + os.urandom(8).hex()
    tokens = work / "tokens"
    tokens.write_text(f"{token} infer,admin\n")
    return cert, token, ["--tls-cert", str(cert), "--tls-key", str(key), "--auth-tokens", str(tokens)]


def start_tls(conftest, repo_dir, server_args, work, ca, token):
    """conftest.Server waits for SERVING in plaintext; over TLS, wait here instead."""
    import grpc
    import subprocess
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    s = conftest.Server(repo_dir, server_args, work)
    s.port, s.metrics_port, s.http_port = conftest.free_port(), conftest.free_port(), conftest.free_port()
    s.log = open(s.log_path, "ab")
    s.proc = subprocess.Popen(conftest.CORTADO.split() + ["serve", "--models", str(repo_dir), "--host", "127.0.0.1",
                                                          "--port", str(s.port), "--metrics-port", str(s.metrics_port),
                                                          "--http-port", str(s.http_port), *server_args],
                              stdin=subprocess.DEVNULL, stdout=s.log, stderr=s.log)
    creds = grpc.ssl_channel_credentials(root_certificates=Path(ca).read_bytes())
    deadline = time.time() + 60
    while time.time() < deadline:
        if s.proc.poll() is not None:
            raise SystemExit(f"cortado serve exited: {s.stderr()}")
        with grpc.secure_channel(s.address, creds) as ch:
            try:
                reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=1,
                                                             metadata=[("authorization", f"Bearer {token}")])
                if reply.status == 1:
                    return s
            except grpc.RpcError:
                pass
        time.sleep(0.1)
    raise SystemExit("cortado serve over TLS did not answer SERVING")


if __name__ == "__main__":
    sys.exit(main())
