#!/usr/bin/env python3
"""hostile.py PORT PID - bad clients against gpuman serve while a good one
keeps asking for /metrics; prints one JSON object of what happened.

Bad clients, all at once: IDLE connections that never send a byte, slowloris
connections that send a header line now and then and never finish, a
request with a 10 MB header, a 10 MB POST body, a GET with a 10 MB body,
and malformed request lines.
"""
import json
import os
import resource
import socket
import sys
import time

port, pid = int(sys.argv[1]), int(sys.argv[2])
idle_n = int(os.environ.get("IDLE", "1000"))
ADDR = ("127.0.0.1", port)
BIG = 10 * 1024 * 1024


def rss_kb():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def answer(sock, timeout=10.0):
    """The status code of whatever the server answers on sock, or None."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    parts = data.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def good():
    """One well-behaved GET /metrics: (status, bytes, seconds)."""
    t = time.monotonic()
    s = socket.create_connection(ADDR, timeout=10)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    s.settimeout(10)
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    s.close()
    code = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None
    return code, len(data), time.monotonic() - t


def send_big(head, body=b"", timeout=10.0):
    """Send head (and body), tolerating the server closing on us."""
    s = socket.create_connection(ADDR, timeout=10)
    t = time.monotonic()
    try:
        s.sendall(head)
        if body:
            s.sendall(body)
    except OSError:
        pass
    code = answer(s, timeout)
    s.close()
    return code, time.monotonic() - t


soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, idle_n + 512), hard))
res = {"rss_before_kb": rss_kb()}

idle = [socket.create_connection(ADDR, timeout=10) for _ in range(idle_n)]
loris = []
for _ in range(20):
    s = socket.create_connection(ADDR, timeout=10)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    loris.append(s)
res["idle_open"] = len(idle)
res["rss_idle_kb"] = rss_kb()

res["big_header"] = send_big(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * BIG + b"\r\n\r\n")[0]
code, secs = send_big(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % BIG,
                      b"b" * BIG)
res["big_post"], res["big_post_s"] = code, round(secs, 3)
res["big_get_body"] = send_big(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % BIG,
                               b"c" * BIG)[0]
# None: closed without an answer, or none within 2 s (then the idle timeout
# closes it).
res["malformed"] = [send_big(line, timeout=2)[0] for line in
                    (b"HELLO\r\n\r\n", b"GET\r\n\r\n", b"GET /metrics HTTP/9.9\r\n\r\n",
                     b"\x00\xff\xfe garbage \r\n\r\n")]

lat, codes = [], []
for i in range(20):
    for s in loris:
        try:
            s.sendall(b"X-Slow-%d: 1\r\n" % i)
        except OSError:
            pass
    code, size, secs = good()
    codes.append(code)
    lat.append(secs)
res["good_codes"] = sorted(set(c for c in codes if c is not None)) + [c for c in codes if c is None]
res["good_ok"] = sum(1 for c in codes if c == 200)
res["good_max_ms"] = round(max(lat) * 1000, 1)
res["good_median_ms"] = round(sorted(lat)[len(lat) // 2] * 1000, 1)
res["rss_during_kb"] = rss_kb()
for s in idle + loris:
    s.close()
print(json.dumps(res))
