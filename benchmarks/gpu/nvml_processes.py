"""On a GPU host: does servelab's sampler see per-process utilisation? A torch process multiplies matrices for 6 s;
the sampler (loaded alone, without servelab's package imports) runs 3 s beside it and prints the device's and the
processes' SM samples with their names. nvidia-ml-py must be importable (on the device: a copy of pynvml.py in
.gpu-probe/, carried with the checkout).
usage: /opt/torch/.venv/bin/python3 benchmarks/gpu/nvml_processes.py"""

import importlib.util
import subprocess
import sys
import time

sys.path[:0] = [".gpu-probe"]
spec = importlib.util.spec_from_file_location("gpu_telemetry", "src/servelab/engines/gpu_telemetry.py")
assert spec and spec.loader
module = importlib.util.module_from_spec(spec)
sys.modules["gpu_telemetry"] = module
spec.loader.exec_module(module)

LOAD = """import torch, time
x = torch.randn(8192, 8192, device="cuda"); y = x @ x; torch.cuda.synchronize(); print("ready", flush=True)
t = time.time()
while time.time() - t < 6:
    y = x @ x
torch.cuda.synchronize()"""

load = subprocess.Popen([sys.executable, "-c", LOAD], stdout=subprocess.PIPE, text=True)
assert load.stdout is not None
print(load.stdout.readline().strip())
time.sleep(0.5)
sampler = module.GpuSampler(interval_s=0.5)
print("start:", sampler.start())
time.sleep(3)
telemetry = sampler.stop()
load.wait()
print("device samples", len(telemetry.samples), [round(s.sm_util) for s in telemetry.samples])
print("process samples", len(telemetry.processes), [(p.pid, p.sm_util, round(p.t_s, 2)) for p in telemetry.processes])
print("names", telemetry.process_names, "load pid", load.pid)
