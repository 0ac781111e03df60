"""Per-client budgets (issue #20): request bytes held per stream, per connection and per server
(`--max-stream-buffer`, `--max-connection-buffer`, `--max-process-buffer`), connections
(`--max-connections`, `--max-connections-per-peer`) and the header timeout.

The attack: one HTTP/2 connection (PyPI `h2` on a raw socket, h2attack.py) keeps 256 gRPC calls
open and sends most of an 8 MiB message on each without finishing any. Without budgets the
server holds every byte (2 GiB); with them its resident memory stays within the process budget
plus a fixed margin, and a well-behaved grpcio client on its own connection keeps getting
answers throughout.
"""
import re
import socket
import threading
import time
import urllib.request

import grpc

from h2attack import Attack, rss_bytes
from test_predictor import P, check_outputs, as_dict, expect_error, good_call, raw_call, row_features

pb = P.predictor_pb2
MiB = 1 << 20
STREAM, CONNECTION, PROCESS = 8 * MiB, 16 * MiB, 24 * MiB
# What the server may add besides the requests it holds: allocator slack, nghttp2 sessions,
# per-stream bookkeeping for thousands of refused streams.
MARGIN = 32 * MiB
ATTACK_SECONDS = 3


def test_unfinished_messages_on_many_streams_stay_within_the_budget(repo, start_server):
    server = start_server(repo.path, "--max-stream-buffer", STREAM, "--max-connection-buffer", CONNECTION,
                          "--max-process-buffer", PROCESS)
    pid = server.proc.pid
    case = repo.cases["logreg"]
    done = threading.Event()
    answered, errors = [], []

    def well_behaved():
        with server.channel() as ch:
            stub = P.predictor_pb2_grpc.PredictorStub(ch)
            for i in range(1_000_000):  # bounded; ended by `done`
                if done.is_set():
                    return
                row = i % 12
                try:
                    reply = stub.Predict(pb.PredictRequest(model="logreg", inputs=row_features(case, row)), timeout=30)
                    check_outputs(case, row, as_dict(reply.outputs))
                    answered.append(row)
                except Exception as e:  # every failure is reported
                    errors.append(repr(e))

    with server.channel() as ch:
        good_call(P.predictor_pb2_grpc.PredictorStub(ch), repo)
    before = rss_bytes(pid)
    client = threading.Thread(target=well_behaved)
    client.start()
    try:
        host, port = server.address.rsplit(":", 1)
        attack = Attack(host, int(port), streams=256, message=8 * MiB, seconds=ATTACK_SECONDS, pid=pid).run()
        during = len(answered)
    finally:
        done.set()
        client.join(60)
    print(f"\n  RSS before {before / MiB:.0f} MiB, peak {attack.peak_rss / MiB:.0f} MiB over {attack.samples} samples; "
          f"attack: {attack.opened} streams opened, {attack.sent / MiB:.0f} MiB sent, grpc-status {attack.statuses}, "
          f"resets {attack.resets}; well-behaved calls answered {len(answered)}")
    assert attack.opened >= 256 and attack.samples > 0
    # The server refused what did not fit: RESOURCE_EXHAUSTED (8) answers or REFUSED_STREAM (7) resets.
    assert attack.statuses.get("8", 0) + attack.resets.get(7, 0) > 0, (attack.statuses, attack.resets)
    assert attack.peak_rss <= before + PROCESS + MARGIN, f"peak {attack.peak_rss / MiB:.0f} MiB, before {before / MiB:.0f} MiB"
    assert not errors, errors[:5]
    assert during > 0
    with server.channel() as ch:
        good_call(P.predictor_pb2_grpc.PredictorStub(ch), repo)


def test_a_message_larger_than_the_stream_budget_is_resource_exhausted(repo, start_server):
    server = start_server(repo.path, "--max-stream-buffer", 4096)
    with server.channel() as ch:
        expect_error(lambda: raw_call(ch, "/cortado.v1.Predictor/Predict", bytes(5000)),
                     grpc.StatusCode.RESOURCE_EXHAUSTED, "5000", "--max-stream-buffer")
        good_call(P.predictor_pb2_grpc.PredictorStub(ch), repo)


def test_connections_beyond_the_per_peer_limit_are_closed(repo, start_server):
    server = start_server(repo.path, "--max-connections-per-peer", 2)
    host, port = server.address.rsplit(":", 1)
    # The start-up health checks' connection must be gone before counting (bounded wait).
    for _ in range(200):
        if re.search(r"^cortado_connections 0(\.0)?$", urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10).read().decode(), re.M):
            break
        time.sleep(0.05)
    held = [socket.create_connection((host, int(port)), timeout=10) for _ in range(2)]
    try:
        # Both are counted once accepted: read the server's SETTINGS on each.
        for s in held:
            assert s.recv(9)
        options = [("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)]
        with grpc.insecure_channel(server.address, options=options) as ch:
            expect_error(lambda: good_call(P.predictor_pb2_grpc.PredictorStub(ch), repo), grpc.StatusCode.UNAVAILABLE)
        assert "--max-connections-per-peer" in server.stderr()
    finally:
        for s in held:
            s.close()


def test_a_connection_that_sends_no_frame_is_closed_after_the_header_timeout(repo, start_server):
    server = start_server(repo.path, "--header-timeout", 0.3)
    host, port = server.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        received = b""
        while True:  # the server's SETTINGS, then EOF once it gives up on us (bounded by the timeout)
            data = s.recv(4096)
            if not data:
                break
            received += data
        assert received[3:4] == b"\x04"  # a SETTINGS frame came first
    assert "--header-timeout" in server.stderr()
    with server.channel() as ch:
        good_call(P.predictor_pb2_grpc.PredictorStub(ch), repo)
