#!/usr/bin/env python3
"""broker_raw.py SOCKET [LINE...] - talk to `gpuman daemon` as a hand-made
(possibly hostile) client would: send each LINE as it is (a newline is added
unless the line is "-partial:TEXT", sent without one; "-await:TEXT" sends
nothing but reads until TEXT has come, as a client waits for its grant
before it names its job), then print every
line the broker sends back until it closes the connection or 2 s pass
(BROKER_RAW_WAIT seconds: a grant under load may take longer).
--hold S keeps the connection open S seconds after sending, silently."""
import os
import socket
import sys
import time

args = sys.argv[1:]
hold = 0.0
if args[:1] == ["--hold"]:
    hold = float(args[1])
    args = args[2:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(args[0])
data = b""
try:
    for line in args[1:]:
        if line.startswith("-await:"):
            want = line[len("-await:"):].encode()
            s.settimeout(float(os.environ.get("BROKER_RAW_WAIT", "2")))
            while want not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        elif line.startswith("-partial:"):
            s.sendall(line[len("-partial:"):].encode())
        else:
            s.sendall(line.encode() + b"\n")
except OSError:
    pass  # the broker hung up on us (or never sent what we awaited): read what it said before
if hold:
    time.sleep(hold)
s.settimeout(float(os.environ.get("BROKER_RAW_WAIT", "2")))
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except (socket.timeout, OSError):
    pass
sys.stdout.write(data.decode(errors="replace"))
