"""The Python binding against a simulated two-GPU machine.

Each test gets its own registry (GPUMAN_STATE_DIR), simulator state and
scenario.  libgpuman keeps a loaded NVML for the life of the process and the
simulator reads GPUMAN_SIM at its first nvmlInit, so each test loads its own
copy of the simulator (GPUMAN_NVML): one process, one fresh machine per test.
Child processes leave GPUMAN_NVML unset and find the simulator beside
libgpuman, as a user's program would.
"""

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import types
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("GM_BUILD") or os.path.join(ROOT, "build")
PYDIR = os.path.join(ROOT, "python")
os.environ.setdefault("GPUMAN_LIB", os.path.join(BUILD, "libgpuman.so"))
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

import gpuman  # noqa: E402
from gpuman import _lease  # noqa: E402

GPUMAN = os.path.join(BUILD, "gpuman")
SIMLIB = os.path.join(BUILD, "sim", "libnvidia-ml.so.1")

UUID0 = "GPU-11111111-aaaa-bbbb-cccc-000000000001"
UUID1 = "GPU-22222222-aaaa-bbbb-cccc-000000000002"
# GPU 1 has the most free memory (chosen first) and is the faster one, so
# CUDA's default order is the reverse of NVML's: GPU 1 is cuda 0.
TWO_GPUS = {
    "driver_version": "580.95.05",
    "cuda_driver_version": 13000,
    "gpus": [
        {"name": "NVIDIA GeForce GTX 1080 Ti", "uuid": UUID0,
         "memory_total_mib": 11264, "memory_used_mib": 1000, "utilization_gpu": 5,
         "power_draw_w": 55, "power_limit_w": 250, "speed": 1.0,
         "processes": [{"pid": 4242, "used_mib": 500}]},
        {"name": "NVIDIA TITAN RTX", "uuid": UUID1,
         "memory_total_mib": 24576, "memory_used_mib": 100, "utilization_gpu": 0,
         "power_draw_w": 30, "power_limit_w": 280, "speed": 2.0,
         "processes": []},
    ],
}

# A program that leases N GPUs, says which, and holds them for S seconds.
HOLDER = textwrap.dedent("""
    import sys, time, gpuman
    lease = gpuman.select(n=int(sys.argv[1]))
    print(lease.cuda_visible_devices, flush=True)
    time.sleep(float(sys.argv[2]))
""")

# A program that waits for N GPUs and, on Ctrl-C, says so and lives on: a
# wait left behind would show as its ticket while it sleeps.
WAITER = textwrap.dedent("""
    import sys, time, gpuman
    try:
        gpuman.select(n=int(sys.argv[1]), wait=True)
        print("leased", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    time.sleep(60)
""")

CLEARED = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GPUMAN_NVML", "GPUMAN_SIM",
           "GPUMAN_GPUS", "GPUMAN_LEASE") + _lease._KNOBS


class BindingTest(unittest.TestCase):
    def setUp(self):
        self.saved_env = dict(os.environ)
        self.tmp = tempfile.mkdtemp(prefix="gpuman-py.")
        for key in CLEARED:
            os.environ.pop(key, None)
        os.environ["GPUMAN_STATE_DIR"] = os.path.join(self.tmp, "state")
        os.environ["GPUMAN_SIM_STATE"] = os.path.join(self.tmp, "simstate")
        os.makedirs(os.environ["GPUMAN_SIM_STATE"])
        self.scenario(TWO_GPUS)
        self.children = []

    def tearDown(self):
        _lease._release_all()
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.wait()
            child.stdout.close()
            child.stderr.close()
        sys.modules.pop("torch", None)
        os.environ.clear()
        os.environ.update(self.saved_env)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- helpers -------------------------------------------------------

    def scenario(self, doc):
        """Make doc the simulated machine, on a fresh copy of the simulator."""
        n = len([f for f in os.listdir(self.tmp) if f.startswith("sim")])
        simdir = os.path.join(self.tmp, "sim%d" % n)
        os.makedirs(simdir)
        shutil.copy(SIMLIB, simdir)
        path = os.path.join(self.tmp, "scenario%d.json" % n)
        with open(path, "w") as f:
            json.dump(doc, f)
        os.environ["GPUMAN_SIM"] = path
        os.environ["GPUMAN_NVML"] = os.path.join(simdir, "libnvidia-ml.so.1")

    def status(self):
        """`gpuman status --json` as another process sees the machine."""
        env = dict(os.environ)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        run = subprocess.run([GPUMAN, "status", "--json"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
        self.assertEqual(run.returncode, 0, run.stderr)
        return json.loads(run.stdout)

    def leases(self):
        return self.status()["leases"]

    def waiters(self):
        return self.status()["waiters"]

    def child_env(self):
        env = dict(os.environ)
        # Another program, not a child under our lease: nothing inherited.
        for key in ("GPUMAN_NVML", "CUDA_VISIBLE_DEVICES", "GPUMAN_GPUS", "GPUMAN_LEASE"):
            env.pop(key, None)
        env["PYTHONPATH"] = PYDIR
        return env

    def until(self, what, condition, seconds=30):
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                self.fail("gave up waiting for %s" % what)
            time.sleep(0.05)

    def holder(self, n, seconds):
        """Start a process that leases n GPUs for `seconds`; returns it once
        it holds them, with the CUDA_VISIBLE_DEVICES it got."""
        child = subprocess.Popen([sys.executable, "-c", HOLDER, str(n), str(seconds)],
                                 env=self.child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 universal_newlines=True)
        self.children.append(child)
        line = child.stdout.readline().strip()
        if not line:
            child.wait()
            self.fail("holder failed: %s" % child.stderr.read())
        return child, line

    def fake_torch(self, initialised):
        torch = types.ModuleType("torch")
        torch.cuda = types.SimpleNamespace(is_initialized=lambda: initialised)
        sys.modules["torch"] = torch

    # ---- snapshot ------------------------------------------------------

    def test_devices_report_the_scenario(self):
        """devices() reports the scenario's GPUs, numbers and processes"""
        gpus = gpuman.devices()
        self.assertEqual([g["index"] for g in gpus], [0, 1])
        self.assertEqual([g["uuid"] for g in gpus], [UUID0, UUID1])
        self.assertEqual(gpus[1]["name"], "NVIDIA TITAN RTX")
        self.assertEqual([g["memory_total_mib"] for g in gpus], [11264, 24576])
        # used = the driver's own + its processes'
        self.assertEqual([g["memory_used_mib"] for g in gpus], [1500, 100])
        self.assertEqual([g["memory_free_mib"] for g in gpus], [9764, 24476])
        self.assertEqual([g["utilization_gpu_pct"] for g in gpus], [5, 0])
        self.assertEqual([g["power_draw_w"] for g in gpus], [55.0, 30.0])
        self.assertEqual([g["power_limit_w"] for g in gpus], [250.0, 280.0])
        self.assertIsNone(gpus[0]["temperature_c"])  # not in the scenario: null, not 0
        self.assertEqual([g["cuda_index"] for g in gpus], [1, 0])
        self.assertEqual([(p["pid"], p["used_mib"]) for p in gpus[0]["processes"]],
                         [(4242, 500)])
        self.assertEqual(gpus[1]["processes"], [])
        snap = gpuman.snapshot()
        self.assertEqual(snap["driver_version"], "580.95.05")
        self.assertEqual(len(snap["gpus"]), 2)

    def test_binding_and_library_versions_agree(self):
        """gpuman.version() (the library's) is the binding's __version__"""
        self.assertEqual(gpuman.version(), gpuman.__version__)
        major, minor, patch = (int(x) for x in gpuman.__version__.split("."))
        self.assertEqual(gpuman._native.lib().gm_version_number(),
                         major << 16 | minor << 8 | patch)

    # ---- select --------------------------------------------------------

    def test_select_leases_the_freest_gpu_and_sets_the_environment(self):
        """select() leases the freest GPU, exports its UUID, release ends it"""
        lease = gpuman.select()
        self.assertEqual(lease.indices, [1])
        self.assertEqual(lease.uuids, [UUID1])
        self.assertFalse(lease.cpu)
        self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], UUID1)
        self.assertEqual(os.environ["GPUMAN_GPUS"], "1")
        self.assertEqual(os.environ["GPUMAN_LEASE"], lease.id)
        self.assertNotIn("TF_FORCE_GPU_ALLOW_GROWTH", os.environ)  # exclusive: no knobs
        held = self.leases()
        self.assertEqual(len(held), 1)
        self.assertEqual(held[0]["id"], lease.id)
        self.assertEqual(held[0]["pid"], os.getpid())
        self.assertEqual(held[0]["kind"], "exclusive")
        self.assertEqual([g["uuid"] for g in held[0]["gpus"]], [UUID1])
        lease.release()
        self.assertEqual(self.leases(), [])
        self.assertNotIn("CUDA_VISIBLE_DEVICES", os.environ)
        self.assertNotIn("GPUMAN_LEASE", os.environ)
        lease.release()  # idempotent

    def test_a_dropped_lease_is_still_held(self):
        """a lease lives as long as the process, not as its Python object"""
        lease_id = gpuman.select().id
        import gc
        gc.collect()
        self.assertEqual([l["id"] for l in self.leases()], [lease_id])

    def test_a_forked_child_leaves_the_parents_lease_alone(self):
        """a forked child that exits normally does not end the parent's lease"""
        lease = gpuman.select()
        pid = os.fork()
        if pid == 0:
            # What a normal exit of the child runs: gpuman's atexit handler.
            code = 1
            try:
                _lease._release_all()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(status, 0)
        self.assertEqual([l["id"] for l in self.leases()], [lease.id])

    def test_two_selects_get_different_gpus(self):
        """two selects in one process get different GPUs"""
        first = gpuman.select()
        second = gpuman.select()
        self.assertEqual(first.uuids, [UUID1])
        self.assertEqual(second.uuids, [UUID0])
        self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], UUID0)
        self.assertEqual(len(self.leases()), 2)
        second.release()
        self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], UUID1)
        first.release()
        self.assertNotIn("CUDA_VISIBLE_DEVICES", os.environ)

    def test_an_inherited_allocation_bounds_every_select(self):
        """under an inherited CUDA_VISIBLE_DEVICES, leases are its entries"""
        os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"  # CUDA order: GPU 1, then GPU 0
        first = gpuman.select()
        self.assertEqual(first.indices, [1])
        self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], "0")
        # The second choice is made within "0,1", not within the first lease.
        second = gpuman.select()
        self.assertEqual(second.indices, [0])
        self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], "1")
        with self.assertRaises(gpuman.Unavailable):
            gpuman.select()
        first.release()
        second.release()
        self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], "0,1")

    def test_mem_share_sets_framework_knobs_the_user_left_unset(self):
        """a memory share caps TensorFlow and JAX, keeping the user's values"""
        os.environ["XLA_CLIENT_MEM_FRACTION"] = "0.5"
        lease = gpuman.select(mem="4G")
        self.assertEqual(lease.indices, [1])
        self.assertAlmostEqual(lease.mem_fraction, 4096 / 24576)
        self.assertEqual(os.environ["TF_FORCE_GPU_ALLOW_GROWTH"], "true")
        self.assertEqual(os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"], "false")
        self.assertEqual(os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"], "0.167")
        self.assertEqual(os.environ["XLA_CLIENT_MEM_FRACTION"], "0.5")
        held = self.leases()
        self.assertEqual((held[0]["kind"], held[0]["share_mib"]), ("share", 4096))
        # A second share fits beside the first on the same GPU.
        other = gpuman.select(mem="4G")
        self.assertEqual(other.indices, [1])
        other.release()
        lease.release()
        for key in ("TF_FORCE_GPU_ALLOW_GROWTH", "XLA_PYTHON_CLIENT_PREALLOCATE",
                    "XLA_PYTHON_CLIENT_MEM_FRACTION"):
            self.assertNotIn(key, os.environ)
        self.assertEqual(os.environ["XLA_CLIENT_MEM_FRACTION"], "0.5")

    def test_unavailable_when_every_gpu_is_leased(self):
        """with every GPU leased and no wait, select raises Unavailable"""
        gpuman.select(n=2)
        with self.assertRaises(gpuman.Unavailable) as cm:
            gpuman.select()
        self.assertEqual(cm.exception.code, 6)
        self.assertIn("leased", str(cm.exception))
        with self.assertRaises(gpuman.Unavailable) as cm:
            gpuman.select(n=3)  # more GPUs than the machine has
        self.assertEqual(cm.exception.code, 12)

    def test_bad_arguments_name_the_option(self):
        """bad arguments raise GpumanError naming the option, even with fallback"""
        cases = [({"min_free": "12Q"}, "min_free='12Q': unknown unit 'Q'", "12Q"),
                 ({"by": "nope"}, "by='nope': unknown policy", "nope"),
                 ({"n": 0}, "n='0': count must be between 1 and 1024", "0"),
                 ({"max_util": 300}, "max_util='300': percentage", "300"),
                 ({"wait": "soon"}, "wait='soon'", "soon"),
                 ({"fallback": "gpu"}, "fallback", "gpu")]
        for kwargs, option, value in cases:
            with self.subTest(**kwargs):
                with self.assertRaises(gpuman.GpumanError) as cm:
                    gpuman.select(**kwargs)
                self.assertNotIsInstance(cm.exception, gpuman.Unavailable)
                self.assertIsInstance(cm.exception, gpuman.InvalidArgument)
                self.assertIsInstance(cm.exception, ValueError)
                self.assertIn(option, str(cm.exception))
                self.assertIn(value, str(cm.exception))
        with self.assertRaises(gpuman.GpumanError):
            gpuman.select(min_free="12Q", fallback="cpu")
        self.assertEqual(self.leases(), [])

    def test_arguments_are_keyword_only_with_type_hints(self):
        """select, auto_choice, pick and request_text take keywords only, typed"""
        import inspect
        for fn in (gpuman.select, gpuman.auto_choice, gpuman.pick, gpuman.request_text):
            with self.subTest(fn=fn.__name__):
                params = [p for p in inspect.signature(fn).parameters.values()
                          if p.name != "self"]
                self.assertIn("n", [p.name for p in params])
                self.assertEqual({p.kind for p in params}, {inspect.Parameter.KEYWORD_ONLY})
                self.assertEqual([p.name for p in params
                                  if p.annotation is inspect.Parameter.empty], [])
        with self.assertRaises(TypeError):
            gpuman.select(2)
        self.assertEqual(self.leases(), [])

    def test_request_text_is_the_command_line_form(self):
        """request_text and lease.request give the request as gpuman's options"""
        self.assertEqual(gpuman.request_text(), "")
        self.assertEqual(gpuman.request_text(n=2, mem=8192, wait="90"),
                         "-n 2 --mem 8G --wait=1m30s")
        self.assertEqual(gpuman.request_text(by="util", min_free="50%", only=[0, "GPU-2222"],
                                             idle=True, wait=True),
                         "--by util --min-free 50% --only 0,GPU-2222 --idle --wait")
        with self.assertRaises(ValueError):
            gpuman.request_text(mem="12Q")
        lease = gpuman.select(mem="1.5G")
        self.assertEqual(lease.request, "--mem 1536M")

    def test_select_mig_leases_one_slice_never_the_whole_gpu(self):
        """select(mig=...) leases a MIG slice; a plain select() skips a GPU in MIG mode"""
        with open(os.path.join(ROOT, "examples", "mig-a100.json")) as f:
            self.scenario(json.load(f))
        lease = gpuman.select(mig="1g.10gb")
        slice_1d = "MIG-1d000000-1111-4000-8000-000000000004"
        self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], slice_1d)
        self.assertEqual(lease.uuids, [slice_1d])
        self.assertEqual(lease.indices, [0])
        self.assertEqual(lease.request, "--mig 1g.10gb")
        held = self.leases()
        self.assertEqual([g["mig_uuid"] for g in held[0]["gpus"]], [slice_1d])
        with self.assertRaises(gpuman.Unavailable) as caught:
            gpuman.select(mig="1g.10gb")
        self.assertIn("MIG-1d000000 leased by", str(caught.exception))
        lease.release()
        with self.assertRaises(ValueError):
            gpuman.request_text(mig="1g.10gb", mem="1G")
        # GPU 0 is split: a whole GPU is GPU 1
        self.assertEqual(gpuman.pick(), [1])
        with self.assertRaises(gpuman.Unavailable) as caught:
            gpuman.pick(only=[0])
        self.assertIn("in MIG mode: never handed out whole", str(caught.exception))

    def test_pick_chooses_without_leasing(self):
        """pick() names the GPUs select() would take, and leases nothing"""
        self.assertEqual(gpuman.pick(), [1])
        self.assertEqual(gpuman.pick(n=2), [1, 0])
        self.assertEqual(gpuman.pick(by="index"), [0])
        self.assertEqual(self.leases(), [])
        lease = gpuman.select()
        self.assertEqual(gpuman.pick(), [0])
        # Its own lease does not bound the choice, as it does not bound select.
        self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], UUID1)
        self.assertEqual(gpuman.pick(mem="1G"), [0])
        other = gpuman.select()
        with self.assertRaises(gpuman.Unavailable) as cm:
            gpuman.pick()
        self.assertEqual(cm.exception.code, 6)
        # one reason for both GPUs, said once
        self.assertIn("both GPUs: leased exclusively by", str(cm.exception))
        with self.assertRaises(gpuman.Unavailable) as cm:
            gpuman.pick(n=3)
        self.assertEqual(cm.exception.code, 12)
        with self.assertRaises(gpuman.InvalidArgument):
            gpuman.pick(by="nope")
        self.assertEqual(sorted(l["id"] for l in self.leases()), sorted([lease.id, other.id]))

    def test_leases_lists_every_live_lease(self):
        """leases() lists this and other processes' leases, as status does"""
        self.assertEqual(gpuman.leases(), [])
        child, _ = self.holder(1, 60)
        lease = gpuman.select(mem="2G")
        mine = [l for l in gpuman.leases() if l["pid"] == os.getpid()]
        theirs = [l for l in gpuman.leases() if l["pid"] == child.pid]
        self.assertEqual([(l["id"], l["kind"], l["share_mib"]) for l in mine],
                         [(lease.id, "share", 2048)])
        self.assertEqual([g["uuid"] for g in mine[0]["gpus"]], lease.uuids)
        self.assertEqual([l["kind"] for l in theirs], ["exclusive"])
        self.assertEqual(gpuman.leases(), self.leases())
        self.assertEqual(gpuman.waiters(), [])
        child.kill()
        child.wait()
        self.assertEqual([l["pid"] for l in gpuman.leases()], [os.getpid()])

    def test_arguments_become_the_request_options(self):
        """select's arguments reach the library as the command line's options"""
        opts = dict(_lease._options(2, "util", 8192, 50, "50%", True, [0, "GPU-2222"], 3, True))
        self.assertEqual(opts, {"n": "2", "by": "util", "min-free": "8192", "max-util": "50",
                                "mem": "50%", "wait": None, "only": "0,GPU-2222",
                                "exclude": "3", "idle": None})
        self.assertEqual(dict(_lease._options(1, "memory", None, None, None, 2.5, None, None,
                                              False)), {"n": "1", "by": "memory", "wait": "2.5"})
        self.assertNotIn("wait", dict(_lease._options(1, "memory", None, None, None, False,
                                                      None, None, False)))

    # ---- auto_choice ---------------------------------------------------

    def test_auto_choice_yields_framework_devices_and_restores_env(self):
        """auto_choice yields cuda:0 and /gpu:0, and releases at block end"""
        os.environ["GPUMAN_GPUS"] = "users-own"
        with gpuman.auto_choice() as dev:
            self.assertIsInstance(dev, str)
            self.assertEqual(dev, "cuda:0")
            self.assertEqual((dev.torch, dev.tf, dev.index, dev.jax), ("cuda:0", "/gpu:0", 0, 0))
            self.assertEqual((dev.indices, dev.uuids, dev.cpu), ([1], [UUID1], False))
            self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], UUID1)
            self.assertEqual(len(self.leases()), 1)
        self.assertEqual(self.leases(), [])
        self.assertNotIn("CUDA_VISIBLE_DEVICES", os.environ)
        self.assertEqual(os.environ["GPUMAN_GPUS"], "users-own")

    def test_auto_choice_with_several_gpus_names_the_first(self):
        """with n=2 the device is still cuda:0, the others in device_ids"""
        with gpuman.auto_choice(n=2) as dev:
            self.assertEqual(dev, "cuda:0")
            self.assertEqual(dev.device_ids, [0, 1])
            self.assertEqual(dev.indices, [1, 0])
            self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], UUID1 + "," + UUID0)

    def test_auto_choice_releases_when_the_block_raises(self):
        """an exception in the block still releases the lease"""
        with self.assertRaises(ZeroDivisionError):
            with gpuman.auto_choice():
                1 / 0
        self.assertEqual(self.leases(), [])
        self.assertNotIn("CUDA_VISIBLE_DEVICES", os.environ)

    # ---- CPU fallback --------------------------------------------------

    def test_fallback_cpu_on_a_machine_without_gpus(self):
        """fallback='cpu' without GPUs: warns, yields cpu, hides all GPUs"""
        self.scenario({"gpus": []})
        with self.assertRaises(gpuman.Unavailable) as cm:
            gpuman.select()
        self.assertIn("no NVIDIA GPU", str(cm.exception))
        with self.assertWarnsRegex(RuntimeWarning, "no NVIDIA GPU.*CPU"):
            lease = gpuman.select(fallback="cpu")
        self.assertTrue(lease.cpu)
        self.assertEqual((lease.device, lease.device.tf, lease.device.index), ("cpu", "/cpu:0", None))
        self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], "")
        lease.release()
        self.assertNotIn("CUDA_VISIBLE_DEVICES", os.environ)

    def test_fallback_cpu_without_a_driver(self):
        """fallback='cpu' without NVML: warns, yields cpu; otherwise NoDriver"""
        del os.environ["GPUMAN_SIM"]
        os.environ["GPUMAN_NVML"] = "/nonexistent/libnvidia-ml.so.1"
        with self.assertRaises(gpuman.NoDriver):
            gpuman.devices()
        with self.assertRaises(gpuman.NoDriver) as cm:
            gpuman.select()
        self.assertIn("/nonexistent/libnvidia-ml.so.1", str(cm.exception))
        with self.assertWarnsRegex(RuntimeWarning, "driver"):
            with gpuman.auto_choice(fallback="cpu") as dev:
                self.assertEqual(dev, "cpu")
                self.assertTrue(dev.cpu)
                self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], "")
        self.assertNotIn("CUDA_VISIBLE_DEVICES", os.environ)

    def test_fallback_cpu_when_every_gpu_is_leased(self):
        """fallback='cpu' when busy: the warning says which GPU is held"""
        gpuman.select(n=2)
        with self.assertWarnsRegex(RuntimeWarning, "leased exclusively"):
            lease = gpuman.select(fallback="cpu")
        self.assertTrue(lease.cpu)

    # ---- other processes -----------------------------------------------

    def test_lease_of_a_killed_process_is_freed(self):
        """kill -9 of a holder frees its GPU at once"""
        child, visible = self.holder(1, 60)
        self.assertEqual(visible, UUID1)
        held = self.leases()
        self.assertEqual([l["pid"] for l in held], [child.pid])
        self.assertEqual(gpuman.select().uuids, [UUID0])  # the other one
        child.kill()
        child.wait()
        self.assertEqual([l["pid"] for l in self.leases()], [os.getpid()])
        self.assertEqual(gpuman.select().uuids, [UUID1])

    def test_a_holder_that_exits_releases(self):
        """a process that exits without release() leaves no lease behind"""
        child, _ = self.holder(2, 0)
        self.assertEqual(child.wait(timeout=30), 0)
        self.assertEqual(self.leases(), [])

    def test_wait_times_out(self):
        """wait=2 while another process holds every GPU: Unavailable (timeout)"""
        self.holder(2, 60)
        start = time.monotonic()
        with self.assertRaises(gpuman.Unavailable) as cm:
            gpuman.select(wait=2)
        self.assertEqual(cm.exception.code, 7)
        self.assertGreaterEqual(time.monotonic() - start, 1.5)
        self.assertEqual([l["gpus"] for l in self.leases() if l["pid"] == os.getpid()], [])

    def test_wait_gets_the_gpu_another_process_releases(self):
        """wait gets the GPUs as soon as another process lets them go"""
        child, _ = self.holder(2, 1)
        lease = gpuman.select(wait="60s")
        # The holder must be gone: it held both GPUs until it exited.
        self.assertEqual(child.wait(timeout=30), 0)
        self.assertEqual(lease.uuids, [UUID1])
        self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], UUID1)
        child, _ = self.holder(1, 1)  # takes GPU 0, the only one left
        second = gpuman.select(wait=30)
        self.assertEqual(child.wait(timeout=30), 0)
        self.assertEqual(second.uuids, [UUID0])

    def test_ctrl_c_in_a_wait_leaves_no_ticket_behind(self):
        """Ctrl-C in select(wait=True) ends the wait: no ticket blocks later requests"""
        self.holder(1, 60)  # GPU 1 held; GPU 0 free
        child = subprocess.Popen([sys.executable, "-c", WAITER, "2"], env=self.child_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 universal_newlines=True)
        self.children.append(child)
        self.until("the waiter's ticket",
                   lambda: [w["pid"] for w in self.waiters()] == [child.pid])
        self.assertEqual([w["pid"] for w in gpuman.waiters()], [child.pid])
        # First come, first served: its ticket (2 GPUs) keeps GPU 0 from us.
        with self.assertRaises(gpuman.Unavailable):
            gpuman.select()
        child.send_signal(signal.SIGINT)
        self.until("the child's answer to SIGINT", lambda: child.poll() is not None
                   or select.select([child.stdout], [], [], 0.1)[0])
        self.assertEqual(child.stdout.readline().strip(), "interrupted",
                         child.stderr.read() if child.poll() is not None else "")
        self.assertIsNone(child.poll())  # it lives on, and yet...
        left = self.waiters()
        if left:
            state = os.environ["GPUMAN_STATE_DIR"]
            left.append({"files": sorted(os.listdir(state)), "at": time.time(),
                         "threads": open("/proc/%d/status" % child.pid).read().split("Threads:")[1].split()[0]})
        self.assertEqual(left, [])
        self.assertEqual(gpuman.select().indices, [0])

    # ---- CUDA already initialised --------------------------------------

    def test_cuda_initialised_first_maps_the_index(self):
        """after CUDA started, gpuman warns and maps the device index"""
        self.fake_torch(initialised=True)
        # NVML GPU 0 is CUDA's device 1 in the default fastest-first order.
        with self.assertWarnsRegex(RuntimeWarning, "CUDA was initialised before gpuman chose"):
            lease = gpuman.select(only=0)
        self.assertEqual(lease.indices, [0])
        dev = lease.device
        self.assertEqual((dev, dev.torch, dev.tf, dev.index), ("cuda:1", "cuda:1", "/gpu:1", 1))
        lease.release()
        cases = [({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, "cuda:0"),
                 ({"CUDA_VISIBLE_DEVICES": "1"}, "cuda:0"),        # CUDA index 1 = GPU 0
                 ({"CUDA_VISIBLE_DEVICES": "GPU-2222,GPU-1111"}, "cuda:1")]  # UUID prefixes
        for env, expected in cases:
            with self.subTest(**env):
                os.environ.update(env)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    with gpuman.auto_choice(only=0) as dev:
                        self.assertEqual(dev, expected)
                self.assertEqual(len(caught), 1)
                for key in env:
                    del os.environ[key]

    def test_cuda_not_yet_initialised_needs_no_mapping(self):
        """torch imported but CUDA not started: no warning, cuda:0"""
        self.fake_torch(initialised=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with gpuman.auto_choice(only=0) as dev:
                self.assertEqual(dev, "cuda:0")
        self.assertEqual(caught, [])


class InstallTest(unittest.TestCase):
    def test_pip_install_bundles_the_library(self):
        """pip install ./python works offline and the copy runs on its own"""
        tmp = tempfile.mkdtemp(prefix="gpuman-pip.")
        self.addCleanup(shutil.rmtree, tmp, True)
        target = os.path.join(tmp, "site")
        env = dict(os.environ, GM_BUILD=BUILD, PIP_NO_INDEX="1")
        run = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                              "--no-build-isolation", "--no-deps", "--target", target, PYDIR],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout)
        with open(os.path.join(tmp, "machine.json"), "w") as f:
            json.dump(TWO_GPUS, f)
        # Away from the source tree, with nothing pointing at it.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPUMAN_", "CUDA_")) and k != "PYTHONPATH"}
        env.update(PYTHONPATH=target, GPUMAN_SIM=os.path.join(tmp, "machine.json"),
                   GPUMAN_STATE_DIR=os.path.join(tmp, "state"))
        script = ("import gpuman, os\n"
                  "print(gpuman._native.lib()._name)\n"
                  "with gpuman.auto_choice() as dev:\n"
                  "    print(dev, os.environ['CUDA_VISIBLE_DEVICES'])\n")
        run = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout)
        self.assertEqual(run.stdout.split("\n")[:2],
                         [os.path.join(target, "gpuman", "libgpuman.so"), "cuda:0 " + UUID1])

    def test_pip_install_gives_the_command(self):
        """pip install ./python also installs gpuman, its runner and simulator"""
        tmp = tempfile.mkdtemp(prefix="gpuman-pip.")
        self.addCleanup(shutil.rmtree, tmp, True)
        prefix = os.path.join(tmp, "env")
        env = dict(os.environ, GM_BUILD=BUILD, PIP_NO_INDEX="1")
        run = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                              "--no-build-isolation", "--no-deps", "--prefix", prefix, PYDIR],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout)
        for name in ("gpuman", "gpuman-runner", "gpuman-simload"):
            self.assertTrue(os.access(os.path.join(prefix, "bin", name), os.X_OK), name)
        # The command finds the simulator and scenario pip put beside it.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMAN_", "CUDA_"))}
        env.update(GPUMAN_STATE_DIR=os.path.join(tmp, "state"))
        lab = os.path.join(prefix, "share", "gpuman", "examples", "lab-8gpu.json")
        run = subprocess.run([os.path.join(prefix, "bin", "gpuman"), "--sim", lab, "pick"],
                             env=env, cwd=tmp, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
        self.assertEqual((run.returncode, run.stdout), (0, "2\n"))


if __name__ == "__main__":
    unittest.main()
