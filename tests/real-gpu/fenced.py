"""fenced.py - run by check.sh as the job of a lease the broker fenced: the
job is in a cgroup of the broker's folder ("gpuman"), and PyTorch and JAX,
clients gpuman did not write, reach the leased GPU through the device
filter (the driver's control and UVM nodes must stay open to them).
Prints what it saw; exit 1 if any part failed."""
import os
import subprocess
import sys

bad = 0
cg = open("/proc/self/cgroup").read()
if "/gpuman/" not in cg:
    print("FAIL the job is not in a cgroup of the broker's folder: %r" % cg)
    bad += 1
print("CUDA_VISIBLE_DEVICES=%s" % os.environ.get("CUDA_VISIBLE_DEVICES"))
try:
    import torch

    x = torch.ones(1 << 20, device="cuda")
    print("torch: %s sum %d" % (torch.cuda.get_device_name(0), int(x.sum())))
    if int(x.sum()) != 1 << 20:
        bad += 1
except Exception as e:  # the fence must not break CUDA: say what broke
    print("FAIL torch: %s" % e)
    bad += 1
env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
jax = subprocess.run(
    [sys.executable, "-c",
     "import jax, jax.numpy as np; d = jax.devices()[0]; "
     "print('jax: %s %s sum %d' % (d.platform, d.device_kind, int(np.ones(1024).sum())))"],
    env=env, capture_output=True, text=True, timeout=180)
print(jax.stdout.strip() or jax.stderr.strip()[-400:])
if jax.returncode != 0 or "jax: gpu" not in jax.stdout:
    print("FAIL jax exit %d" % jax.returncode)
    bad += 1
sys.exit(1 if bad else 0)
