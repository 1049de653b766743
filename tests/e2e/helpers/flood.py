#!/usr/bin/env python3
"""flood.py MODE SOCKET ... - a hostile user's load on `gpuman daemon`, for
trust-broker.bats; every mode is bounded in time or count.

  churn SOCKET SECONDS          connect and close, no payload, in a loop
  wait SOCKET N SECONDS JSON    N connections that each send JSON (an acquire
                                that waits) and then sit; "held N" is
                                printed once all are sent
  views SOCKET K SECONDS        K view requests outstanding at all times
  reserve SOCKET N JSON         N acquires in turn (reservations); prints
                                "granted G refused R" and the last refusal
  ask SOCKET JSON               the victim: one request, timed from connect
                                to the broker's first reply; prints
                                "MS OP" (a lease granted ends on close)
Prints what it did on the last line (counts), for the test's record."""
import json
import os
import resource
import selectors
import socket
import sys
import time


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def churn(path, seconds):
    end = time.monotonic() + seconds
    n = refused = 0
    while time.monotonic() < end:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
            n += 1
        except (BlockingIOError, ConnectionRefusedError, OSError):
            refused += 1
        s.close()
    print(f"connects {n} refused {refused}", flush=True)


def wait(path, n, seconds, line):
    raise_nofile()
    data = (line + "\n").encode()
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.sendall(data)
        except OSError:
            s.close()
            continue
        s.setblocking(False)
        socks.append(s)
    print(f"held {len(socks)}", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.2)
        for s in socks:  # drain what the broker says ("queued")
            try:
                s.recv(65536)
            except OSError:
                pass
    for s in socks:
        s.close()


def views(path, k, seconds):
    raise_nofile()
    sel = selectors.DefaultSelector()
    req = b'{"v":1,"op":"view"}\n'
    done = failed = 0
    end = time.monotonic() + seconds

    def start():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.sendall(req)
        except OSError:
            s.close()
            return False
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        return True

    for _ in range(k):
        start()
    while time.monotonic() < end:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            try:
                chunk = s.recv(1 << 20)
            except OSError:
                chunk = b""
            if chunk:
                continue
            sel.unregister(s)
            s.close()
            done += 1
            if not start():
                failed += 1
    print(f"views {done} failed {failed}", flush=True)


def reserve(path, n, line):
    granted = refused = 0
    last = ""
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        try:
            s.sendall((line + "\n").encode())
        except OSError:
            pass
        s.settimeout(5)
        data = b""
        try:
            while b"\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        s.close()
        try:
            msg = json.loads(data.split(b"\n")[0])
        except ValueError:
            msg = {}
        if msg.get("op") == "granted":
            granted += 1
        else:
            refused += 1
            last = msg.get("error", data.decode(errors="replace"))
    print(last)
    print(f"granted {granted} refused {refused}", flush=True)


def ask(path, line):
    t0 = time.monotonic()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall((line + "\n").encode())
    s.settimeout(20)
    data = b""
    try:
        while b"\n" not in data:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    ms = (time.monotonic() - t0) * 1000
    s.close()
    try:
        op = json.loads(data.split(b"\n")[0]).get("op", "?")
    except ValueError:
        op = "none"
    print(f"{ms:.0f} {op}", flush=True)


mode, path = sys.argv[1], sys.argv[2]
if mode == "churn":
    churn(path, float(sys.argv[3]))
elif mode == "wait":
    wait(path, int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
elif mode == "views":
    views(path, int(sys.argv[3]), float(sys.argv[4]))
elif mode == "ask":
    ask(path, sys.argv[3])
elif mode == "reserve":
    reserve(path, int(sys.argv[3]), sys.argv[4])
else:
    sys.exit("unknown mode " + mode)
os._exit(0)
