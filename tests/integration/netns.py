"""Hosts on one machine: Linux network namespaces joined by veth pairs to a bridge, each with its
own address, so the controller, the workers and the client talk TCP between different "hosts"
(the loopback-only defaults mean something, and nothing reaches another host over 127.0.0.1).

    with Hosts(["ctl", "w0", "w1", "cli"]) as hosts:
        hosts.addr("ctl")            # "10.77.0.1"
        hosts.prefix("w0")           # ["ip", "netns", "exec", NAME]: put before a command

Everything lives in namespaces of its own (a hub namespace holds the bridge): the machine's own
network is never touched. Needs root and iproute2's `ip`; `skip_reason()` says why not."""
import os
import shutil
import subprocess


def skip_reason():
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the test as root)"
    if not shutil.which("ip"):
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    name = f"loomprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*args, ns=None):
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")


class Hosts:
    """Namespaces named loom<pid>-<host>, addresses 10.77.0.1, .2, ... in host order."""

    def __init__(self, names):
        self.tag = f"loom{os.getpid()}"
        self.names = list(names)
        self.hub = f"{self.tag}-hub"
        self.made = []

    def ns(self, host):
        return f"{self.tag}-{host}"

    def addr(self, host):
        return f"10.77.0.{self.names.index(host) + 1}"

    def prefix(self, host):
        return ["ip", "netns", "exec", self.ns(host)]

    def __enter__(self):
        try:
            _ip("netns", "add", self.hub)
            self.made.append(self.hub)
            _ip("link", "add", "br0", "type", "bridge", ns=self.hub)
            _ip("link", "set", "br0", "up", ns=self.hub)
            for i, h in enumerate(self.names):
                ns = self.ns(h)
                _ip("netns", "add", ns)
                self.made.append(ns)
                # one veth pair per host: eth0 inside it, its peer on the hub's bridge
                _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"p{i}", "netns", self.hub)
                _ip("link", "set", f"p{i}", "master", "br0", ns=self.hub)
                _ip("link", "set", f"p{i}", "up", ns=self.hub)
                _ip("addr", "add", f"{self.addr(h)}/24", "dev", "eth0", ns=ns)
                _ip("link", "set", "eth0", "up", ns=ns)
                _ip("link", "set", "lo", "up", ns=ns)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for ns in reversed(self.made):  # deleting a namespace deletes its veth ends
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self.made = []
        return False

    def run(self, host, cmd, **kw):
        """subprocess.run of cmd inside host's namespace."""
        return subprocess.run([*self.prefix(host), *map(str, cmd)], **kw)
