"""reserve(), release() and reservations() against the simulated two-GPU
machine of test_binding (its fixture: one registry and one simulator per
test)."""

import inspect
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
import unittest

try:  # as tests.python.test_reserve (make python) or test_reserve (tap.py)
    from . import test_binding as tb
except ImportError:
    import test_binding as tb

gpuman = tb.gpuman

# A program that reserves N GPUs for an hour, prints the id and exits: the
# reservation outlives it.
RESERVER = textwrap.dedent("""
    import sys, gpuman
    print(gpuman.reserve(n=int(sys.argv[1]), duration="1h").id, flush=True)
""")

# A program that waits to reserve N GPUs and, on Ctrl-C, says so and lives
# on: a wait left behind would show as its ticket while it sleeps.
WAITER = textwrap.dedent("""
    import sys, time, gpuman
    try:
        gpuman.reserve(n=int(sys.argv[1]), duration="1h", wait=True)
        print("reserved", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    time.sleep(60)
""")


class ReserveTest(unittest.TestCase):
    setUp = tb.BindingTest.setUp
    tearDown = tb.BindingTest.tearDown
    scenario = tb.BindingTest.scenario
    status = tb.BindingTest.status
    leases = tb.BindingTest.leases
    child_env = tb.BindingTest.child_env
    waiters = tb.BindingTest.waiters
    until = tb.BindingTest.until

    def assert_all_free(self):
        self.assertEqual(gpuman.reservations(), [])
        gpuman.select(n=2).release()

    def test_a_reservation_holds_gpus_against_select(self):
        """reserve() holds its GPUs against a second select(), with no process holding them"""
        before = time.time()
        r = gpuman.reserve(n=1, duration="1h")
        self.assertEqual(r.gpus, [1])  # the freest, as select() would take
        self.assertEqual(r.uuids, [tb.UUID1])
        self.assertEqual(r.cuda_visible_devices, tb.UUID1)
        self.assertEqual(r.env, {"CUDA_VISIBLE_DEVICES": tb.UUID1, "GPUMAN_GPUS": "1",
                                 "GPUMAN_RESERVATION": r.id})
        self.assertAlmostEqual(r.expires, before + 3600, delta=5)
        self.assertGreater(r.remaining, 3590)
        # Nothing of this process's environment changes: it is for others.
        self.assertNotIn("CUDA_VISIBLE_DEVICES", os.environ)
        with self.assertRaises(gpuman.Unavailable):
            gpuman.select(n=2)
        lease = gpuman.select()
        self.assertEqual(lease.indices, [0])
        lease.release()
        listed = gpuman.reservations()
        self.assertEqual([(x["id"], x["reservation"], x["expires_ms"]) for x in listed],
                         [(r.id, True, r.expires_ms)])
        self.assertEqual([g["uuid"] for g in listed[0]["gpus"]], [tb.UUID1])
        self.assertEqual([x["id"] for x in self.leases() if x["reservation"]], [r.id])
        self.assertIn(r.id, repr(r))

    def test_release_frees_the_gpus(self):
        """release(id) frees the GPUs; a second release names the id"""
        r = gpuman.reserve(n=2, duration=600)
        self.assertEqual(sorted(r.gpus), [0, 1])
        gpuman.release(r.id)
        self.assert_all_free()
        with self.assertRaises(gpuman.InvalidArgument) as cm:
            gpuman.release(r.id)
        self.assertIn(r.id, str(cm.exception))
        r.release()  # gone already: no error
        self.assertTrue(r.released)

    def test_context_manager_releases_on_exit(self):
        """with reserve(...) as r: released at the end of the block, raised or not"""
        with gpuman.reserve(n=2, duration="10m") as r:
            self.assertEqual([x["id"] for x in gpuman.reservations()], [r.id])
        self.assertTrue(r.released)
        self.assert_all_free()
        with self.assertRaises(KeyError):
            with gpuman.reserve(n=2, duration="10m"):
                raise KeyError("boom")
        self.assert_all_free()

    def test_a_reservation_expires(self):
        """a reservation ends by itself at its expiry and its GPUs are free again"""
        r = gpuman.reserve(n=2, duration=1)
        with self.assertRaises(gpuman.Unavailable):
            gpuman.select()
        time.sleep(max(0.0, r.expires - time.time()) + 0.2)
        self.assertEqual(r.remaining, 0)
        self.assert_all_free()

    def test_a_reservation_outlives_its_process(self):
        """a reservation made by a process that has exited still holds; CLI release ends it"""
        run = subprocess.run([sys.executable, "-c", RESERVER, "2"], env=self.child_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr)
        rid = run.stdout.strip()
        self.assertEqual([x["id"] for x in gpuman.reservations()], [rid])
        with self.assertRaises(gpuman.Unavailable):
            gpuman.select()
        env = dict(os.environ)
        end = subprocess.run([tb.GPUMAN, "release", rid], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
        self.assertEqual(end.returncode, 0, end.stderr)
        self.assert_all_free()

    def test_select_inside_ones_own_reservation_uses_its_gpus(self):
        """with its env in force, select() leases inside one's own reservation"""
        r = gpuman.reserve(n=1, duration="10m")
        os.environ.update(r.env)
        lease = gpuman.select()
        self.assertEqual(lease.indices, r.gpus)
        lease.release()
        with self.assertRaises(gpuman.Unavailable):
            gpuman.select(n=2)  # bounded by the reservation's one GPU
        r.release()

    def test_ctrl_c_in_a_wait_leaves_no_ticket_and_no_reservation(self):
        """Ctrl-C in reserve(wait=True) ends the wait: no ticket, nothing reserved"""
        mine = gpuman.reserve(n=1, duration="10m")
        child = subprocess.Popen([sys.executable, "-c", WAITER, "2"], env=self.child_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 universal_newlines=True)
        self.children.append(child)
        self.until("the waiter's ticket",
                   lambda: [w["pid"] for w in self.waiters()] == [child.pid])
        child.send_signal(signal.SIGINT)
        self.until("the child's answer to SIGINT", lambda: child.poll() is not None
                   or select.select([child.stdout], [], [], 0.1)[0])
        self.assertEqual(child.stdout.readline().strip(), "interrupted",
                         child.stderr.read() if child.poll() is not None else "")
        self.assertIsNone(child.poll())
        self.assertEqual(self.waiters(), [])
        self.assertEqual([x["id"] for x in gpuman.reservations()], [mine.id])
        mine.release()
        self.assert_all_free()

    def test_bad_arguments_and_signatures(self):
        """reserve takes keywords only, typed; a bad duration or size names itself"""
        params = list(inspect.signature(gpuman.reserve).parameters.values())
        self.assertEqual({p.kind for p in params}, {inspect.Parameter.KEYWORD_ONLY})
        self.assertEqual([p.name for p in params if p.annotation is inspect.Parameter.empty], [])
        with self.assertRaises(TypeError):
            gpuman.reserve(1, "1h")
        with self.assertRaises(TypeError):
            gpuman.reserve(n=1)  # a reservation always ends: duration is required
        for kwargs, culprit in (({"duration": "soon"}, "soon"), ({"duration": 0}, "0"),
                                ({"duration": "1h", "mem": "12Q"}, "12Q"),
                                ({"duration": "1h", "by": "nope"}, "nope")):
            with self.subTest(**kwargs):
                with self.assertRaises(gpuman.InvalidArgument) as cm:
                    gpuman.reserve(**kwargs)
                self.assertIn(culprit, str(cm.exception))
        with self.assertRaises(gpuman.Unavailable) as cm:
            gpuman.reserve(n=3, duration="1h")
        self.assertEqual(cm.exception.code, 12)
        self.assertEqual(gpuman.reservations(), [])


if __name__ == "__main__":
    unittest.main()
