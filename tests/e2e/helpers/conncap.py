#!/usr/bin/env python3
"""conncap.py PORT N - hold N idle connections to gpuman serve and ask once
more: prints how long that request took and its status line, then whether
the idle ones were closed by the server (and when), for serve.bats."""
import socket
import sys
import time


def get(port):
    """The status line of GET /metrics, or "closed" when none came."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    data = b""
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    s.close()
    return data.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    t0 = time.monotonic()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    time.sleep(0.2)
    start = time.monotonic()
    status = get(port)
    print("answered after %.1f s: %s" % (time.monotonic() - start, status))
    for s in idle:
        s.settimeout(10)
        try:
            got = s.recv(1)
        except OSError:
            got = b""
        if got:
            print("an idle connection got data")
            return 1
    print("idle closed after %.1f s" % (time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
