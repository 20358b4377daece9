"""deploy/slurm/loom.sbatch against a real Slurm: the test starts its own munged, slurmctld and
slurmd (Debian's packages; scripts/setup.sh installs them) with a generated slurm.conf on free
ports, then submits jobs of 2 tasks on this one node:

  - the seed program (`loom run examples/distributed_sum.mlir`, 8 devices from 2 workers started
    by srun) gives [8 8 8 8 8 8 8 8], with LOOM_CONTROLLER, LOOM_TOKEN and the IFRT proxy's
    variables set for the command, and everything stopped (SIGTERM) and the secret removed after;
  - the job's exit status is the command's;
  - a job cancelled while its command runs stops the controller and the workers."""
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import LOOM_BIN, SOURCE_DIR, wait_for

SBATCH = SOURCE_DIR / "deploy" / "slurm" / "loom.sbatch"
NEEDED = ["munged", "slurmctld", "slurmd", "sbatch", "scancel", "squeue", "sbcast"]


def skip_reason():
    if os.geteuid() != 0:
        return "the test's slurmd runs jobs as root: run it as root"
    missing = [b for b in NEEDED if not shutil.which(b) and not os.path.exists(f"/usr/sbin/{b}")]
    if missing:
        return f"Slurm is not installed (missing {', '.join(missing)}: apt-get install slurmctld slurmd slurm-client munge)"
    return None


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


class Slurm:
    """A one-node Slurm cluster in directory d, all daemons in the foreground as our children."""

    def __init__(self, d):
        self.d = d
        self.procs = []
        d.mkdir(mode=0o700)
        (d / "munge").mkdir(mode=0o700)
        for sub in ("state", "spool"):
            (d / sub).mkdir()
        key = d / "munge" / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, os.urandom(1024))
        os.close(fd)
        self.sock = d / "munge" / "sock"
        node = subprocess.run([binary("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
        node = node.splitlines()[0]  # NodeName=HOST CPUs=... as slurmd sees this machine
        self.conf = d / "slurm.conf"
        self.conf.write_text(f"""ClusterName=loomtest
SlurmctldHost={socket.gethostname()}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={self.sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=10
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{node} State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self):
        d = self.d
        self._spawn([binary("munged"), "-F", "-f", f"--socket={self.sock}", f"--key-file={d}/munge/munge.key",
                     f"--log-file={d}/munge/log", f"--pid-file={d}/munge/pid", f"--seed-file={d}/munge/seed"])
        wait_for(lambda: self.sock.exists(), 20, what="munged's socket")
        self._spawn([binary("slurmctld"), "-D", "-i", "-f", self.conf])
        self._spawn([binary("slurmd"), "-D", "-f", self.conf])

        def idle():
            r = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=self.env)
            for p in self.procs:
                if p.poll() is not None:
                    raise AssertionError(f"{p.args[0]} exited: {self.logs()}")
            return r.returncode == 0 and r.stdout.strip() == "idle"
        wait_for(idle, 60, interval=0.3, what="the Slurm node to be idle")

    def _spawn(self, cmd):
        log = open(self.d / (os.path.basename(str(cmd[0])) + ".out"), "wb")
        self.procs.append(subprocess.Popen(list(map(str, cmd)), stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                           stdin=subprocess.DEVNULL, start_new_session=True))

    def logs(self):
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            p = self.d / name
            if p.exists():
                out.append(f"--- {name}\n{p.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def stop(self):
        subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True, env=self.env, timeout=30)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def sbatch(self, *args, timeout=180, env=None):
        """sbatch --wait; returns (CompletedProcess, the job's output)."""
        out = self.d / f"job-{time.monotonic_ns()}.out"
        r = subprocess.run(["sbatch", "--wait", f"--output={out}", *map(str, args)], capture_output=True, text=True,
                           env=env or self.env, timeout=timeout, cwd=self.d)
        return r, out.read_text(errors="replace") if out.exists() else ""


@pytest.fixture
def slurm(tmp_path):
    s = Slurm(tmp_path / "slurm")
    try:
        s.start()
        yield s
    finally:
        s.stop()


def job_env(slurm, tmp_path, **extra):
    return {**slurm.env, "LOOM": LOOM_BIN, "LOOM_KEEP_LOGS": "1", "LOOM_SLURM_DIR": str(tmp_path / "job"),
            **extra}


def test_a_two_task_job_runs_the_seed_program(slurm, tmp_path):
    cmd = ["bash", "-c", "env | grep -E '^(LOOM_CONTROLLER|JAX_PLATFORMS|JAX_BACKEND_TARGET|LOOM_TOKEN)=' | sort; "
           f"exec {LOOM_BIN} run {SOURCE_DIR}/examples/distributed_sum.mlir"]
    r, out = slurm.sbatch("--ntasks=2", "--ntasks-per-node=2", SBATCH, *cmd, env=job_env(slurm, tmp_path))
    assert r.returncode == 0, f"{r.stderr}\n{out}\n{slurm.logs()}"
    assert "[8 8 8 8 8 8 8 8]\n" in out, out
    assert "8 devices ready" in out and "starting 2 worker(s) x 4 devices" in out, out
    assert "JAX_PLATFORMS=proxy" in out and "JAX_BACKEND_TARGET=grpc://127.0.0.1:" in out, out
    assert "LOOM_CONTROLLER=" in out and "LOOM_TOKEN=loom_" in out, out
    job = tmp_path / "job"
    workers = sorted(job.glob("worker-*.log"))
    assert len(workers) == 2
    for w in workers:  # srun's tasks: registered as slice node-0, stopped by SIGTERM
        text = w.read_text()
        assert "slice node-0" in text and "stopping (SIGTERM)" in text, text
    ctl = (job / "controller.log").read_text()
    assert ctl.count("registered from") == 2 and "stopping (SIGTERM)" in ctl, ctl
    job_id = r.stdout.split()[-1]  # "Submitted batch job N"
    assert not os.path.exists(f"/tmp/loom-{job_id}.secret"), "the node's copy of the secret was left behind"


def test_the_jobs_status_is_the_commands(slurm, tmp_path):
    r, out = slurm.sbatch("--ntasks=1", SBATCH, "bash", "-c", "exit 3", env=job_env(slurm, tmp_path))
    assert r.returncode == 3, f"{r.stderr}\n{out}"
    assert "command exited with status 3" in out, out


def test_a_cancelled_job_stops_the_cluster(slurm, tmp_path):
    env = job_env(slurm, tmp_path)
    out = tmp_path / "cancel.out"
    sub = subprocess.run(["sbatch", "--parsable", f"--output={out}", "--ntasks=2", "--ntasks-per-node=2", str(SBATCH),
                          "sleep", "600"], capture_output=True, text=True, env=env, timeout=60, check=True)
    job = sub.stdout.strip().split(";")[0]
    wait_for(lambda: out.exists() and "devices ready" in out.read_text(), 120, interval=0.3,
             what="the job's cluster to come up")
    ctl_log = tmp_path / "job" / "controller.log"
    subprocess.run(["scancel", job], env=env, check=True, timeout=30)

    def finished():
        r = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, env=env)
        return r.returncode != 0 or not r.stdout.strip()
    wait_for(finished, 60, interval=0.3, what="the cancelled job to end")
    text = out.read_text()
    assert "cancelled: stopping the cluster" in text, text
    assert "stopping (SIGTERM)" in ctl_log.read_text(), ctl_log.read_text()
    # scancel signals every step of the job at once: a worker either gets its SIGTERM first or
    # sees the controller go first and exits for that; either way none is left running
    for w in (tmp_path / "job").glob("worker-*.log"):
        text = w.read_text()
        assert "stopping (SIGTERM)" in text or "lost the controller" in text, text
    def workers_gone():
        r = subprocess.run(["pgrep", "-f", f"secret-file /tmp/loom-{job}[.]secret"], capture_output=True, text=True)
        return not r.stdout.strip()
    wait_for(workers_gone, 30, interval=0.3, what="the job's workers to exit")
