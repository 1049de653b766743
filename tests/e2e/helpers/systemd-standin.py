#!/usr/bin/python3
# systemd-standin.py RECORD MOUNT READY - a stand-in for systemd's manager on
# a private bus (DBUS_SESSION_BUS_ADDRESS), for fence.bats: these machines
# have no systemd as PID 1.  It owns org.freedesktop.systemd1 and answers
# Subscribe and StartTransientUnit on /org/freedesktop/systemd1 as systemd
# does for a scope: it makes the unit's cgroup under MOUNT (in its slice's
# folder, systemd.slice(5)'s rule), moves the PIDs there, answers a job
# path and then signals JobRemoved(..., "done").  Each call is appended to
# RECORD as one JSON line, with every property's D-Bus type signature, so
# that the test asserts what gpuman sent.  It touches READY once it owns
# the name.  Debian's python3-dbus and python3-gi.
import json
import os
import sys

import dbus
import dbus.service
import dbus.mainloop.glib
from gi.repository import GLib

IFACE = "org.freedesktop.systemd1.Manager"
RECORD, MOUNT, READY = sys.argv[1:4]


def signature(v):
    """The D-Bus type of a value dbus-python unpacked from a variant."""
    for cls, sig in ((dbus.Boolean, "b"), (dbus.String, "s"), (dbus.ObjectPath, "o"),
                     (dbus.Byte, "y"), (dbus.UInt32, "u"), (dbus.Int32, "i"),
                     (dbus.UInt64, "t"), (dbus.Int64, "x"), (dbus.Double, "d")):
        if isinstance(v, cls):
            return sig
    if isinstance(v, dbus.Array):
        return "a" + (v.signature or (signature(v[0]) if len(v) else "?"))
    if isinstance(v, dbus.Struct):
        return "(" + "".join(signature(x) for x in v) + ")"
    return "?"


def plain(v):
    if isinstance(v, (dbus.Array, dbus.Struct, list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dbus.Boolean):
        return bool(v)
    if isinstance(v, (dbus.String, dbus.ObjectPath)):
        return str(v)
    return int(v)


def slice_dir(name):
    stem = name[: -len(".slice")]
    parts = stem.split("-")
    return "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def record(o):
    with open(RECORD, "a") as f:
        f.write(json.dumps(o) + "\n")


class Manager(dbus.service.Object):
    jobs = 0

    @dbus.service.method(IFACE, in_signature="", out_signature="")
    def Subscribe(self):
        record({"method": "Subscribe"})

    @dbus.service.method(IFACE, in_signature="ssa(sv)a(sa(sv))", out_signature="o")
    def StartTransientUnit(self, name, mode, props, aux):
        record({"method": "StartTransientUnit", "name": str(name), "mode": str(mode),
                "properties": [[str(k), signature(v), plain(v)] for k, v in props],
                "aux": len(aux)})
        p = dict((str(k), v) for k, v in props)
        d = os.path.join(MOUNT, slice_dir(str(p.get("Slice", "system.slice"))), str(name))
        if os.path.exists(d):
            raise dbus.exceptions.DBusException(
                "Unit %s already exists." % name, name="org.freedesktop.systemd1.UnitExists")
        os.makedirs(d)
        for pid in p.get("PIDs", []):
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write("%d\n" % pid)
        Manager.jobs += 1
        job = "/org/freedesktop/systemd1/job/%d" % Manager.jobs
        # after the reply, as systemd's start job ends after it answers
        GLib.idle_add(self.JobRemoved, dbus.UInt32(Manager.jobs), dbus.ObjectPath(job), name,
                      "done")
        return dbus.ObjectPath(job)

    @dbus.service.signal(IFACE, signature="uoss")
    def JobRemoved(self, id_, job, unit, result):
        return False


dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.SessionBus()
keep = dbus.service.BusName("org.freedesktop.systemd1", bus)
Manager(bus, "/org/freedesktop/systemd1")
open(READY, "w").close()
GLib.MainLoop().run()
