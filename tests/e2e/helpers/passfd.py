#!/usr/bin/env python3
"""passfd.py - hand a broker lease's descriptor to another process over a
Unix socket (SCM_RIGHTS), for trust-broker.bats.

  take LISTEN SECONDS [release]   wait on LISTEN for one descriptor, print
                                  "took", then hold it SECONDS (or send
                                  {"op":"release"} on it at once and print
                                  the broker's answer)
  give BROKER LISTEN              take a lease of one GPU from BROKER, print
                                  "granted ID", send its descriptor to
                                  LISTEN and exit"""
import json
import os
import socket
import sys
import time


def take(listen, seconds, release):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(listen)
    os.chmod(listen, 0o777)
    srv.listen(1)
    conn, _ = srv.accept()
    _, fds, _, _ = socket.recv_fds(conn, 16, 1)
    lease = socket.socket(fileno=fds[0])
    print("took", flush=True)
    if release:
        lease.sendall(b'{"v":1,"op":"release"}\n')
        lease.settimeout(5)
        print(lease.recv(65536).decode().strip(), flush=True)
        return
    time.sleep(seconds)


def give(broker, listen):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(broker)
    s.sendall(b'{"v":1,"op":"acquire","request":{"n":"1"},"command":"passfd"}\n')
    s.settimeout(10)
    msg = json.loads(s.recv(65536).split(b"\n")[0])
    print("granted" if msg.get("op") == "granted" else msg, msg.get("id"), flush=True)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(listen)
    socket.send_fds(c, [b"x"], [s.fileno()])
    c.close()


if sys.argv[1] == "take":
    take(sys.argv[2], float(sys.argv[3]), sys.argv[4:] == ["release"])
else:
    give(sys.argv[2], sys.argv[3])
