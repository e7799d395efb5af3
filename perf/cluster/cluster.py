#!/usr/bin/env python3
"""A cluster simulated on one machine: MPI ranks in Linux network namespaces, one namespace per node,
joined by shaped links (latency, jitter, rate, loss), Open MPI over TCP between them.

    cluster.py up N [--latency MS] [--rate MBIT] [--jitter MS] [--loss PCT]
                    [--link K:latency=MS,rate=MBIT,jitter=MS,loss=PCT ...] [--slow-rank K:PCT ...]
    cluster.py run [--timeout S] [--nodes M|K,L,..] [--ranks-per-node R] -- <mpirun arguments: -np P prog ...>
    cluster.py shape [shaping flags as for up]        (change the links of a running cluster)
    cluster.py probe [--from I] [--to J]              (ICMP round trips between two nodes)
    cluster.py exec [--timeout S] K -- command        (a command in node K's namespace)
    cluster.py stats | status | down [--all]
    cluster.py session N [up flags] [--timeout S] -- <mpirun arguments>   (up, run, down always)

Topology: namespaces NAME-node0 .. NAME-node{N-1} (10.77.0.1 .. 10.77.0.N) and NAME-head
(10.77.0.254, where mpirun runs), each with one interface `kattn0` to a switch. Two switches:

  user   (default) a TUN device per namespace, forwarded by a small user-space switch (a daemon of
         this script, SCHED_FIFO) that applies each link's delay, jitter, rate and loss, like netem.
         Works on kernels without sch_netem (the development machine's kernel has none).
  kernel veth pairs to a Linux bridge in NAME-switch, shaped by tc: netem (delay, jitter, loss,
         rate), or tbf where only a rate is asked. Needs sch_netem for latency.

Each node's link contributes half of --latency to every message to or from that node: two nodes with
the same setting are --latency apart (one way); a node whose link has latency X is (L + X) / 2 from
the others. Rates apply to each direction of each node's link, so a transfer to a slow node runs at
its rate. The head's link is never shaped (launch and control traffic only).

Open MPI sees every namespace as a host: mpirun runs in NAME-head with a hostfile of the node
addresses and an rsh agent (this script's `_agent`) that starts each node's orted with
`ip netns exec` under a host name of its own (Open MPI names shared memory by host name); ranks
reach their own node's orted (PMIx) on that namespace's loopback, and the BTL and the out-of-band
wiring use the 10.77.0.0/24 network only.

Only namespaces, cgroups and processes this script created are touched; state lives in
/run/kattn-cluster/NAME (KATTN_CLUSTER_STATE overrides the directory). Python standard library only.
"""

import argparse
import ctypes
import fcntl
import heapq
import json
import os
import random
import resource
import select
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time

SCRIPT = os.path.abspath(__file__)
STATE_ROOT = os.environ.get("KATTN_CLUSTER_STATE", "/run/kattn-cluster")
NET = "10.77.0"
HEAD_OCTET = 254
IFNAME = "kattn0"
CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUNSETOFFLOAD = 0x400454D0
TUN_F_CSUM = 0x01
TUN_F_TSO4 = 0x02
EARLY = 40e-6  # the user switch sends a packet up to EARLY before it is due (select wakes late)
SKIP = 77  # ctest's SKIP_RETURN_CODE: the machine does not permit namespaces


class Fail(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# small helpers


def sh(*args, check=True, timeout=30):
    """Runs a command (a list), returns its completed process; raises Fail on error when check."""
    p = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise Fail("%s: %s" % (" ".join(shlex.quote(a) for a in args), (p.stderr or p.stdout).strip()))
    return p


def state_dir(name):
    return os.path.join(STATE_ROOT, name)


def load(name):
    path = os.path.join(state_dir(name), "config.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise Fail("no cluster %r is up (%s missing): run `cluster.py up N` first" % (name, path))


def save(cfg):
    d = state_dir(cfg["name"])
    tmp = os.path.join(d, "config.json.tmp")
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=1)
    os.replace(tmp, os.path.join(d, "config.json"))


def node_ns(name, k):
    return "%s-node%d" % (name, k)


def head_ns(name):
    return name + "-head"


def switch_ns(name):
    return name + "-switch"


def node_ip(k):
    return "%s.%d" % (NET, k + 1)


def namespaces():
    p = sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def ns_pids(ns):
    p = sh("ip", "netns", "pids", ns, check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Netns:
    """Enters a network namespace in this thread (setns) and comes back on exit."""

    libc = None

    def __init__(self, ns):
        self.ns = ns

    def __enter__(self):
        if Netns.libc is None:
            Netns.libc = ctypes.CDLL(None, use_errno=True)
        self.own = os.open("/proc/self/ns/net", os.O_RDONLY)
        target = os.open("/run/netns/" + self.ns, os.O_RDONLY)
        try:
            if Netns.libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns " + self.ns)
        finally:
            os.close(target)
        return self

    def __exit__(self, *exc):
        Netns.libc.setns(self.own, CLONE_NEWNET)
        os.close(self.own)


# ----------------------------------------------------------------------------------------------
# link shaping parameters


KEYS = {"latency": "latency_ms", "jitter": "jitter_ms", "rate": "rate_mbit", "loss": "loss_pct"}


def shaping_from_args(a):
    default = {"latency_ms": a.latency, "jitter_ms": a.jitter, "rate_mbit": a.rate, "loss_pct": a.loss}
    links = {}
    for spec in a.link or []:
        try:
            k, rest = spec.split(":", 1)
            over = {}
            for item in rest.split(","):
                key, val = item.split("=")
                over[KEYS[key.strip()]] = float(val)
            links[str(int(k))] = over
        except (ValueError, KeyError):
            raise Fail("--link %r: expected K:latency=MS,rate=MBIT,jitter=MS,loss=PCT (any of them)" % spec)
    slow = {}
    for spec in a.slow_rank or []:
        try:
            k, pct = spec.split(":")
            slow[str(int(k))] = float(pct)
        except ValueError:
            raise Fail("--slow-rank %r: expected K:PCT (node K's processes get PCT%% of one CPU)" % spec)
        if not 1 <= slow[str(int(k))] <= 100 * os.cpu_count():
            raise Fail("--slow-rank %r: PCT between 1 and %d" % (spec, 100 * os.cpu_count()))
    return default, links, slow


def link_of(cfg, k):
    """Node k's link parameters (the defaults and its overrides); the head's link is unshaped."""
    if k == "head":
        return {"latency_ms": 0.0, "jitter_ms": 0.0, "rate_mbit": 0.0, "loss_pct": 0.0}
    p = dict(cfg["default"])
    p.update(cfg["links"].get(str(k), {}))
    return p


def describe(p):
    parts = []
    if p["latency_ms"]:
        parts.append("latency %g ms" % p["latency_ms"])
    if p["jitter_ms"]:
        parts.append("jitter %g ms" % p["jitter_ms"])
    if p["rate_mbit"]:
        parts.append("rate %g Mbit/s" % p["rate_mbit"])
    if p["loss_pct"]:
        parts.append("loss %g%%" % p["loss_pct"])
    return ", ".join(parts) or "unshaped"


# ----------------------------------------------------------------------------------------------
# kernel switch: veth pairs to a bridge, tc netem / tbf


def netem_available():
    """Whether this kernel has sch_netem: a netem qdisc on a throwaway namespace's loopback."""
    ns = "kattn-netem-probe-%d" % os.getpid()
    if sh("ip", "netns", "add", ns, check=False).returncode != 0:
        return False
    try:
        return sh("tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
                  check=False).returncode == 0
    finally:
        sh("ip", "netns", "del", ns, check=False)


def tc_shape(ns, dev, p, netem_ok):
    """One end of a link: half its latency and jitter (the other end adds the other half)."""
    sh("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
    delay, jitter = p["latency_ms"] / 2, p["jitter_ms"] / 2
    if delay or jitter or p["loss_pct"]:
        if not netem_ok:
            raise Fail("this kernel has no sch_netem (CONFIG_NET_SCH_NETEM): latency, jitter and loss need "
                       "--switch user")
        args = ["netem", "delay", "%gms" % delay]
        if jitter:
            args += ["%gms" % jitter]
        if p["loss_pct"]:
            args += ["loss", "%g%%" % (p["loss_pct"] / 2)]
        if p["rate_mbit"]:
            args += ["rate", "%gmbit" % p["rate_mbit"]]
        args += ["limit", "10000"]
    elif p["rate_mbit"]:
        # burst: at least one 64 KiB segment (GSO) and 1 ms at the rate.
        burst = max(65536 + 1500, int(p["rate_mbit"] * 1e6 / 8 / 1000))
        args = ["tbf", "rate", "%gmbit" % p["rate_mbit"], "burst", str(burst), "latency", "100ms"]
    else:
        return
    sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", *args)


def kernel_shape(cfg):
    netem_ok = cfg.get("netem", False)
    for k in range(cfg["nodes"]):
        p = link_of(cfg, k)
        tc_shape(node_ns(cfg["name"], k), IFNAME, p, netem_ok)
        tc_shape(switch_ns(cfg["name"]), "p%d" % k, p, netem_ok)


# ----------------------------------------------------------------------------------------------
# up / down


def require_root():
    if os.geteuid() != 0:
        raise Fail("needs root (network namespaces, TUN devices)")


def create_ns(cfg, ns):
    sh("ip", "netns", "add", ns)
    cfg["created"].append(ns)
    save(cfg)
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    # IPv4 only: no IPv6 neighbour discovery or router solicitations on the links.
    sh("ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; "
       "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6", check=False)


def endpoints(cfg):
    """(namespace, address) of every endpoint of the switch: the nodes, then the head."""
    eps = [(node_ns(cfg["name"], k), node_ip(k)) for k in range(cfg["nodes"])]
    eps.append((head_ns(cfg["name"]), "%s.%d" % (NET, HEAD_OCTET)))
    return eps


def cmd_up(a):
    require_root()
    if not 1 <= a.nodes <= 64:
        raise Fail("N between 1 and 64")
    d = state_dir(a.name)
    if os.path.exists(os.path.join(d, "config.json")):
        if not a.replace:
            raise Fail("cluster %r is already up (cluster.py down --name %s, or up --replace)" % (a.name, a.name))
        down(a.name, quiet=True)
    default, links, slow = shaping_from_args(a)
    for k in list(links) + list(slow):
        if int(k) >= a.nodes:
            raise Fail("node %s: the cluster has nodes 0 .. %d" % (k, a.nodes - 1))
    for ns in [head_ns(a.name), switch_ns(a.name)] + [node_ns(a.name, k) for k in range(a.nodes)]:
        if ns in namespaces():
            raise Fail("namespace %s exists but no state records it: `cluster.py down --name %s --all` "
                       "removes it" % (ns, a.name))
    os.makedirs(d, exist_ok=True)
    cfg = {"name": a.name, "nodes": a.nodes, "switch": a.switch, "mtu": a.mtu, "queue_bytes": int(a.queue * 1e6),
           "default": default, "links": links, "slow": slow, "created": [], "cgroups": [],
           "started": time.time(), "lifetime": a.lifetime, "script": SCRIPT}
    save(cfg)
    try:
        if a.switch == "kernel":
            cfg["netem"] = netem_available()
            save(cfg)
        for ns, _ in endpoints(cfg):
            create_ns(cfg, ns)
        if a.switch == "user":
            for ns, ip in endpoints(cfg):
                sh("ip", "-n", ns, "tuntap", "add", "dev", IFNAME, "mode", "tun")
                sh("ip", "-n", ns, "link", "set", IFNAME, "mtu", str(a.mtu))
                sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", IFNAME)
                sh("ip", "-n", ns, "link", "set", IFNAME, "up")
            start_switch(cfg)
        else:
            sw = switch_ns(a.name)
            create_ns(cfg, sw)
            sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", sw, "link", "set", "br0", "up")
            for i, (ns, ip) in enumerate(endpoints(cfg)):
                port = "p%d" % i if i < cfg["nodes"] else "phead"
                sh("ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", IFNAME, "netns", ns)
                sh("ip", "-n", sw, "link", "set", port, "mtu", str(a.mtu), "master", "br0", "up")
                sh("ip", "-n", ns, "link", "set", IFNAME, "mtu", str(a.mtu))
                sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", IFNAME)
                sh("ip", "-n", ns, "link", "set", IFNAME, "up")
            kernel_shape(cfg)
        make_cgroups(cfg)
        write_launch_files(cfg)
        check_reachable(cfg)
        if a.lifetime and a.switch == "kernel":
            start_reaper(cfg)
    except BaseException:
        down(a.name, quiet=True)
        raise
    print("cluster %s: %d nodes (%s .. %s), %s switch, links: %s" % (
        a.name, a.nodes, node_ns(a.name, 0), node_ns(a.name, a.nodes - 1), a.switch, describe(default)))
    for k, over in sorted(links.items(), key=lambda kv: int(kv[0])):
        print("  node %s's link: %s" % (k, describe(link_of(cfg, k))))
    for k, pct in sorted(slow.items(), key=lambda kv: int(kv[0])):
        print("  node %s: %g%% of one CPU" % (k, pct))
    return 0


def start_switch(cfg):
    d = state_dir(cfg["name"])
    ready = os.path.join(d, "switch.ready")
    log = open(os.path.join(d, "switch.log"), "ab")
    p = subprocess.Popen([sys.executable, SCRIPT, "_switch", "--name", cfg["name"]], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True, close_fds=True)
    cfg["switch_pid"] = p.pid
    save(cfg)
    t0 = time.time()
    while not os.path.exists(ready):
        if p.poll() is not None:
            with open(os.path.join(d, "switch.log")) as f:
                raise Fail("the switch exited (status %s): %s" % (p.returncode, f.read().strip()))
        if time.time() - t0 > 10:
            raise Fail("the switch did not start in 10 s: see %s" % os.path.join(d, "switch.log"))
        time.sleep(0.02)


def start_reaper(cfg):
    """Kernel switch: a detached process that takes the cluster down after its lifetime."""
    d = state_dir(cfg["name"])
    log = open(os.path.join(d, "reaper.log"), "ab")
    p = subprocess.Popen([sys.executable, SCRIPT, "_reaper", "--name", cfg["name"]], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True, close_fds=True)
    cfg["reaper_pid"] = p.pid
    save(cfg)


def cgroup_paths(name, k):
    """node k's cgroup for a CPU limit: (directory, quota file, cgroup version), or None."""
    v1 = "/sys/fs/cgroup/cpu"
    if os.path.exists(os.path.join(v1, "cpu.cfs_quota_us")):
        return os.path.join(v1, "%s-node%d" % (name, k)), "cpu.cfs_quota_us", 1
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return os.path.join("/sys/fs/cgroup", "%s-node%d" % (name, k)), "cpu.max", 2
    return None


def make_cgroups(cfg):
    for k, pct in cfg["slow"].items():
        paths = cgroup_paths(cfg["name"], int(k))
        if paths is None:
            raise Fail("--slow-rank: no cgroup cpu controller here (neither cgroup v1 cpu nor v2)")
        path, quota, version = paths
        if version == 2:
            try:
                with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
                    f.write("+cpu")
            except OSError as e:
                raise Fail("--slow-rank: cannot enable the cgroup v2 cpu controller: %s" % e)
        os.makedirs(path, exist_ok=True)
        cfg["cgroups"].append(path)
        save(cfg)
        period = 20000  # 20 ms: the throttle acts within a call of a few 100 ms
        with open(os.path.join(path, quota), "w") as f:
            if version == 1:
                with open(os.path.join(path, "cpu.cfs_period_us"), "w") as g:
                    g.write(str(period))
                f.write(str(int(pct / 100 * period)))
            else:
                f.write("%d %d" % (int(pct / 100 * period), period))


def write_launch_files(cfg, ranks_per_node=1, nodes=None):
    """The hostfile lists `nodes` (node numbers, in rank order; default all), ranks_per_node slots each."""
    d = state_dir(cfg["name"])
    with open(os.path.join(d, "hostfile"), "w") as f:
        for k in nodes or range(cfg["nodes"]):
            f.write("%s slots=%d\n" % (node_ip(k), ranks_per_node))
    agent = os.path.join(d, "agent")
    with open(agent, "w") as f:
        f.write("#!/bin/sh\n# mpirun's rsh agent: starts a node's orted in its namespace (cluster.py _agent)\n")
        f.write("exec %s %s _agent --name %s \"$@\"\n" % (shlex.quote(sys.executable), shlex.quote(SCRIPT),
                                                          shlex.quote(cfg["name"])))
    os.chmod(agent, 0o755)


def check_reachable(cfg):
    """Every node answers the head's ICMP echo (through the switch). Tries for 10 s: a device's
    queue starts when the kernel's link watch sees its carrier, up to a second after the switch
    attached, and packets sent before are dropped."""
    with Netns(head_ns(cfg["name"])):
        for k in range(cfg["nodes"]):
            t0 = time.time()
            rtts = []
            while not rtts and time.time() - t0 < 10:
                rtts = icmp_ping(node_ip(k), 1, 0.5)
            if not rtts:
                raise Fail("node %d (%s) does not answer through the switch" % (k, node_ip(k)))


def kill_ns_processes(name, nss, quiet):
    """Ends the processes left in our namespaces (orteds, ranks): TERM, then KILL."""
    pids = [p for ns in nss for p in ns_pids(ns) if p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        t0 = time.time()
        while any(pid_alive(p) for p in pids) and time.time() - t0 < 3:
            time.sleep(0.05)
        pids = [p for p in pids if pid_alive(p)]
        if not pids:
            break
    if pids and not quiet:
        print("cluster %s: processes %s did not end" % (name, pids), file=sys.stderr)


def down(name, quiet=False, sweep=False):
    """Removes what `up` recorded (and with sweep, every namespace named NAME-node*, -head, -switch)."""
    d = state_dir(name)
    try:
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
    except (FileNotFoundError, ValueError):
        cfg = {"created": [], "cgroups": []}
    ours = set(cfg.get("created", []))
    if sweep:
        for ns in namespaces():
            rest = ns[len(name) + 1:] if ns.startswith(name + "-") else None
            if rest is not None and (rest in ("head", "switch") or (rest.startswith("node") and rest[4:].isdigit())):
                ours.add(ns)
    ours &= set(namespaces())
    if (ours or cfg.get("switch_pid") or cfg.get("cgroups")) and os.geteuid() != 0:
        raise Fail("needs root to take cluster %r down" % name)
    kill_ns_processes(name, sorted(ours), quiet)
    for key in ("switch_pid", "reaper_pid"):
        pid = cfg.get(key)
        if pid and pid != os.getpid() and pid_alive(pid) and SCRIPT.split("/")[-1] in cmdline(pid):
            os.kill(pid, signal.SIGTERM)
            t0 = time.time()
            while pid_alive(pid) and time.time() - t0 < 3:
                time.sleep(0.02)
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    for ns in sorted(ours):
        sh("ip", "netns", "del", ns, check=False)
    for path in cfg.get("cgroups", []):
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            if not quiet:
                print("cluster %s: cgroup %s: %s" % (name, path, e), file=sys.stderr)
    left = ours & set(namespaces())
    if os.path.isdir(d):
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        os.rmdir(d)
    if left:
        raise Fail("namespaces left: %s" % ", ".join(sorted(left)))
    if not quiet:
        print("cluster %s: down%s" % (name, " (%d namespaces removed)" % len(ours) if ours else " (nothing was up)"))


def cmd_down(a):
    down(a.name, sweep=a.all)
    return 0


# ----------------------------------------------------------------------------------------------
# shape: new link parameters for a running cluster


def cmd_shape(a):
    require_root()
    cfg = load(a.name)
    default, links, slow = shaping_from_args(a)
    if slow:
        raise Fail("shape: --slow-rank is set by up (the node's processes join its cgroup at launch)")
    for k in links:
        if int(k) >= cfg["nodes"]:
            raise Fail("node %s: the cluster has nodes 0 .. %d" % (k, cfg["nodes"] - 1))
    cfg["default"], cfg["links"] = default, links
    save(cfg)
    if cfg["switch"] == "kernel":
        kernel_shape(cfg)
    else:
        os.kill(cfg["switch_pid"], signal.SIGHUP)
        # The switch acknowledges by rewriting switch.ready with the configuration's time.
        t0 = time.time()
        ready = os.path.join(state_dir(a.name), "switch.ready")
        while time.time() - t0 < 5:
            try:
                with open(ready) as f:
                    if float(f.read().strip() or 0) >= os.path.getmtime(os.path.join(state_dir(a.name), "config.json")):
                        break
            except (OSError, ValueError):
                pass
            time.sleep(0.01)
        else:
            raise Fail("the switch did not take the new configuration")
    print("cluster %s: links: %s" % (a.name, describe(default)))
    for k in sorted(links, key=int):
        print("  node %s's link: %s" % (k, describe(link_of(cfg, k))))
    return 0


# ----------------------------------------------------------------------------------------------
# run: mpirun in the head namespace, one orted per node namespace


def mpirun_command(cfg, a, args):
    d = state_dir(cfg["name"])
    btl = "self,tcp" + (",vader" if a.ranks_per_node > 1 else "")
    net = NET + ".0/24"
    mca = [("plm_rsh_agent", os.path.join(d, "agent")),
           ("plm_rsh_no_tree_spawn", "1"),       # every orted started from the head
           ("routed", "direct"),                 # and talking to it directly
           ("oob_tcp_if_include", net),
           ("pml", "ob1"),
           ("btl", btl),
           ("btl_tcp_if_include", net),
           ("mpi_yield_when_idle", "1"),         # ranks share 2 cores: yield while waiting
           ("orte_keep_fqdn_hostnames", "1")]
    # nsenter, not ip netns exec: only the network namespace, so mpirun and its rsh agent keep this
    # mount namespace's /sys (ip netns exec mounts a sysfs of its own, hiding /sys/fs/cgroup).
    cmd = ["nsenter", "--net=/run/netns/" + head_ns(cfg["name"]),
           "timeout", "--kill-after=5", str(a.timeout),
           "mpirun", "--hostfile", os.path.join(d, "hostfile")]
    for k, v in mca:
        cmd += ["--mca", k, v]
    cmd += ["-x", "OMP_NUM_THREADS=%s" % os.environ.get("OMP_NUM_THREADS", "1"), "-x", "OMP_PROC_BIND=false"]
    for var in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        if var in os.environ:
            cmd += ["-x", var]
    return cmd + args


def cmd_run(a):
    require_root()
    cfg = load(a.name)
    args = a.args
    if not args:
        raise Fail("run: nothing to run (cluster.py run [options] -- -np P program args)")
    try:
        nodes = [int(x) for x in a.hosts.split(",")] if "," in a.hosts else list(range(int(a.hosts or cfg["nodes"])))
    except ValueError:
        raise Fail("--nodes %r: a count M or a list K,L,..." % a.hosts)
    if not nodes or any(not 0 <= k < cfg["nodes"] for k in nodes) or len(set(nodes)) != len(nodes):
        raise Fail("--nodes %s: the cluster has nodes 0 .. %d" % (a.hosts, cfg["nodes"] - 1))
    write_launch_files(cfg, a.ranks_per_node, nodes)
    cmd = mpirun_command(cfg, a, args)
    if a.dry_run:
        print(" ".join(shlex.quote(c) for c in cmd))
        return 0
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    p = subprocess.run(cmd, env=env)
    # Whatever mpirun left behind in the node namespaces (an orted after a timeout) ends here.
    kill_ns_processes(cfg["name"], [node_ns(cfg["name"], k) for k in range(cfg["nodes"])] + [head_ns(cfg["name"])],
                      quiet=False)
    if p.returncode in (124, 137):
        print("cluster run: mpirun did not finish in %g s" % a.timeout, file=sys.stderr)
    return p.returncode


def cmd_agent(a):
    """mpirun's rsh agent: `agent HOST command...`, the command as ssh would hand it to a shell."""
    cfg = load(a.name)
    host, rest = a.host, a.args
    if not host.startswith(NET + "."):
        raise Fail("agent: unknown host %r" % host)
    k = int(host.rsplit(".", 1)[1]) - 1
    if not 0 <= k < cfg["nodes"]:
        raise Fail("agent: no node at %s" % host)
    if str(k) in cfg["slow"]:
        paths = cgroup_paths(cfg["name"], k)
        if not paths or not os.path.isdir(paths[0]):
            raise Fail("agent: node %d's cgroup is not visible from here" % k)
        with open(os.path.join(paths[0], "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    # Its own hostname too (a UTS namespace): Open MPI names shared-memory segments and session
    # directories by host name, and two nodes with one name would share them.
    ns = node_ns(cfg["name"], k)
    os.execvp("ip", ["ip", "netns", "exec", ns, "unshare", "--uts", "--", "sh", "-c",
                     'hostname "$0" && exec sh -c "$1"', ns, " ".join(rest)])


def cmd_exec(a):
    require_root()
    cfg = load(a.name)
    args = a.args
    if not args:
        raise Fail("exec: nothing to run (cluster.py exec [--timeout S] K -- command)")
    ns = head_ns(cfg["name"]) if a.node == "head" else node_ns(cfg["name"], int(a.node))
    return subprocess.run(["ip", "netns", "exec", ns, "timeout", "--kill-after=5", str(a.timeout)] + args).returncode


def cmd_session(a):
    """up, run, down: the cluster is taken down whatever happens (and by the switch after --lifetime)."""
    rc = 1
    try:
        cmd_up(a)
        rc = cmd_run(a)
    finally:
        try:
            down(a.name, quiet=True)
        except Fail as e:
            print("cluster: %s" % e, file=sys.stderr)
            rc = rc or 1
    return rc


# ----------------------------------------------------------------------------------------------
# probe: ICMP round trips between nodes


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def icmp_ping(dst, count, timeout, size=56, interval=0.0):
    """Round-trip times (s) of `count` ICMP echoes to dst from this thread's namespace."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    rtts = []
    try:
        for seq in range(count):
            payload = bytes(size)
            hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            pkt = struct.pack("!BBHHH", 8, 0, checksum(hdr + payload), ident, seq) + payload
            t0 = time.perf_counter()
            s.sendto(pkt, (dst, 0))
            deadline = t0 + timeout
            while True:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                r, _, _ = select.select([s], [], [], left)
                if not r:
                    break
                data = s.recv(65536)
                ihl = (data[0] & 0xF) * 4
                typ, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
                if typ == 0 and rid == ident and rseq == seq:
                    rtts.append(time.perf_counter() - t0)
                    break
            if interval:
                time.sleep(interval)
    finally:
        s.close()
    return rtts


def expected_one_way_ms(cfg, i, j):
    pi, pj = link_of(cfg, i), link_of(cfg, j)
    return pi["latency_ms"] / 2 + pj["latency_ms"] / 2


def cmd_probe(a):
    require_root()
    cfg = load(a.name)
    src = head_ns(cfg["name"]) if a.src == "head" else node_ns(cfg["name"], int(a.src))
    dst_k = "head" if a.dst == "head" else int(a.dst)
    dst = "%s.%d" % (NET, HEAD_OCTET) if dst_k == "head" else node_ip(dst_k)
    with Netns(src):
        rtts = icmp_ping(dst, a.count, 5.0, size=a.size, interval=0.01)
    if not rtts:
        print("probe %s -> %s: no answer" % (a.src, a.dst))
        return 1
    rtts.sort()
    med = rtts[len(rtts) // 2]
    exp = 2 * expected_one_way_ms(cfg, a.src, dst_k)
    out = {"from": a.src, "to": a.dst, "count": len(rtts), "size": a.size, "rtt_min_ms": rtts[0] * 1e3,
           "rtt_median_ms": med * 1e3, "rtt_max_ms": rtts[-1] * 1e3, "rtt_model_ms": exp}
    if a.json:
        print(json.dumps(out))
    else:
        print("probe %s -> %s: %d round trips of %d B: median %.3f ms (min %.3f, max %.3f); links' latency: %.3f ms"
              % (a.src, a.dst, len(rtts), a.size, med * 1e3, rtts[0] * 1e3, rtts[-1] * 1e3, exp))
    return 0


def cmd_stats(a):
    cfg = load(a.name)
    path = os.path.join(state_dir(a.name), "stats.json")
    if cfg["switch"] == "user":
        if a.reset:
            os.kill(cfg["switch_pid"], signal.SIGUSR1)
            time.sleep(0.3)
            return 0
        time.sleep(0.3)  # the switch writes its counters every 0.2 s
        with open(path) as f:
            print(f.read().strip())
    else:
        stats = {}
        for k in range(cfg["nodes"]):
            p = sh("ip", "-n", node_ns(cfg["name"], k), "-j", "-s", "link", "show", IFNAME)
            st = json.loads(p.stdout)[0]["stats64"]
            stats[str(k)] = {"tx_bytes": st["tx"]["bytes"], "rx_bytes": st["rx"]["bytes"],
                             "tx_packets": st["tx"]["packets"], "rx_packets": st["rx"]["packets"]}
        print(json.dumps(stats))
    return 0


def cmd_status(a):
    cfg = load(a.name)
    alive = cfg.get("switch_pid") and pid_alive(cfg["switch_pid"])
    print("cluster %s: %d nodes, %s switch%s, up %.0f s (lifetime %s s)" % (
        cfg["name"], cfg["nodes"], cfg["switch"],
        "" if cfg["switch"] == "kernel" else (" (pid %d)" % cfg["switch_pid"] if alive else " (NOT RUNNING)"),
        time.time() - cfg["started"], cfg["lifetime"] or "unlimited"))
    print("  links: %s" % describe(cfg["default"]))
    for k in sorted(cfg["links"], key=int):
        print("  node %s's link: %s" % (k, describe(link_of(cfg, k))))
    for k, pct in sorted(cfg["slow"].items()):
        print("  node %s: %g%% of one CPU" % (k, pct))
    return 0


# ----------------------------------------------------------------------------------------------
# the user-space switch


class Link:
    def __init__(self, p, queue_bytes):
        self.half_delay = p["latency_ms"] / 2e3
        self.half_jitter = p["jitter_ms"] / 2e3
        self.rate = p["rate_mbit"] * 1e6 / 8  # bytes per second, 0: unlimited
        self.loss = p["loss_pct"] / 100
        self.shaped = bool(self.half_delay or self.half_jitter or self.rate or self.loss)
        self.queue = queue_bytes  # bytes each direction holds before it drops (at its rate)


VNET_HDR = 10  # struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset


def open_tun(ns, ifname):
    """Attaches to the namespace's TUN device with offloads: the kernel hands over (and takes)
    TCP segments of up to 64 KiB with a virtio_net_hdr, as a NIC with TSO would, so the switch
    handles a few large packets instead of many MTU-sized ones."""
    with Netns(ns):
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", ifname.encode(), IFF_TUN | IFF_NO_PI | IFF_VNET_HDR))
        fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4)
    return fd


def wire_bytes(pkt):
    """Bytes a (GSO) packet puts on the wire: its segments' IP packets."""
    n = len(pkt) - VNET_HDR
    if pkt[1]:  # gso_type: a segment of gso_size payload bytes each behind hdr_len header bytes
        hdr_len, gso_size = struct.unpack_from("<HH", pkt, 2)
        if gso_size and n > hdr_len:
            segs = -(-(n - hdr_len) // gso_size)
            return n + (segs - 1) * hdr_len
    return n


def cmd_switch(a):
    """Forwards IPv4 packets between the namespaces' TUN devices, each after its links' shaping.

    A packet from i to j of w wire bytes: i's uplink sends it at i's rate after the packets
    before it (a FIFO), it travels i's half delay + j's half delay (+ jitter; a pair's packets
    stay in order), and j's downlink passes it on at j's rate, starting as its first bits arrive
    (cut through: a transfer between two links of one rate pays that rate once). Loss: on i's
    uplink. A link direction queues at most Link.queue bytes (tail drop)."""
    name = a.name
    d = state_dir(name)
    cfg = load(name)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (OSError, AttributeError):
        try:
            os.nice(-10)
        except OSError:
            pass
    try:
        ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK: 1 ns
    except (OSError, AttributeError):
        pass
    eps = endpoints(cfg)
    fds = [open_tun(ns, IFNAME) for ns, _ in eps]
    n = len(eps)
    head = n - 1
    addr = {socket.inet_aton(ip): i for i, (_, ip) in enumerate(eps)}
    flags = {"reload": True, "stop": False, "reset": False}

    def on_hup(*_):
        flags["reload"] = True

    def on_term(*_):
        flags["stop"] = True

    def on_usr1(*_):
        flags["reset"] = True

    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, on_usr1)
    rng = random.Random(1)
    links = []
    up_busy = [0.0] * n
    dn_busy = [0.0] * n
    last = {}
    heap = []
    seq = 0
    zero = lambda: {"tx_bytes": 0, "tx_packets": 0, "rx_bytes": 0, "rx_packets": 0, "dropped": 0}
    stats = [zero() for _ in range(n)]
    dirty = True
    next_stats = 0.0
    qbytes = cfg["queue_bytes"]
    select_fds = list(fds)
    fd_index = {fd: i for i, fd in enumerate(fds)}
    dead = set()
    cpu0 = 0.0

    def deliver(j, pkt, w):
        try:
            os.write(fds[j], pkt)
            stats[j]["rx_bytes"] += w
            stats[j]["rx_packets"] += 1
        except OSError:
            stats[j]["dropped"] += 1

    while not flags["stop"]:
        if flags["reload"]:
            flags["reload"] = False
            cfg = load(name)
            qbytes = cfg["queue_bytes"]
            links = [Link(link_of(cfg, k), qbytes) for k in range(cfg["nodes"])] + [Link(link_of(cfg, "head"), 0)]
            with open(os.path.join(d, "switch.ready.tmp"), "w") as f:
                f.write("%.6f\n" % time.time())
            os.replace(os.path.join(d, "switch.ready.tmp"), os.path.join(d, "switch.ready"))
        if flags["reset"]:
            flags["reset"] = False
            ru = resource.getrusage(resource.RUSAGE_SELF)
            cpu0 = ru.ru_utime + ru.ru_stime
            stats = [zero() for _ in range(n)]
            dirty = True
        # select wakes some 20-50 us late here: wake EARLY before the next packet is due and send
        # every packet due by EARLY from now, so packets leave within about +-25 us of their time.
        now = time.monotonic() + EARLY
        while heap and heap[0][0] <= now:
            _, _, j, pkt, w = heapq.heappop(heap)
            deliver(j, pkt, w)
            dirty = True
        if now >= next_stats:
            next_stats = now + 0.2
            if dirty:
                dirty = False
                tmp = os.path.join(d, "stats.json.tmp")
                with open(tmp, "w") as f:
                    out = {("head" if i == head else str(i)): st for i, st in enumerate(stats)}
                    ru = resource.getrusage(resource.RUSAGE_SELF)
                    out["switch_cpu_seconds"] = ru.ru_utime + ru.ru_stime - cpu0
                    json.dump(out, f)
                os.replace(tmp, os.path.join(d, "stats.json"))
            if cfg["lifetime"] and time.time() > cfg["started"] + cfg["lifetime"]:
                print("switch: lifetime of %s s over: taking cluster %s down" % (cfg["lifetime"], name), flush=True)
                try:
                    down(name, quiet=True)
                finally:
                    return 0
        timeout = 0.2
        if heap:
            timeout = min(timeout, max(0.0, heap[0][0] - time.monotonic() - EARLY))
        try:
            ready, _, _ = select.select(select_fds, [], [], timeout)
        except InterruptedError:
            continue
        for fd in ready:
            i = fd_index[fd]
            li = links[i]
            st = stats[i]
            for _ in range(64):
                try:
                    pkt = os.read(fd, 65536 + VNET_HDR)
                except BlockingIOError:
                    break
                except OSError as e:
                    # The device is gone (its namespace deleted): stop reading it.
                    print("switch: endpoint %d: %s" % (i, e), flush=True)
                    dead.add(fd)
                    break
                dirty = True
                w = wire_bytes(pkt)
                st["tx_bytes"] += w
                st["tx_packets"] += 1
                if len(pkt) < VNET_HDR + 20 or pkt[VNET_HDR] >> 4 != 4:
                    st["dropped"] += 1
                    continue
                j = addr.get(pkt[VNET_HDR + 16:VNET_HDR + 20])
                if j is None or j == i:
                    st["dropped"] += 1
                    continue
                lj = links[j]
                if not (li.shaped or lj.shaped):
                    deliver(j, pkt, w)
                    continue
                if li.loss and rng.random() < li.loss:
                    st["dropped"] += 1
                    continue
                now = time.monotonic()
                start = end = now
                if li.rate:
                    start = max(now, up_busy[i])
                    if (start - now) * li.rate > li.queue:
                        st["dropped"] += 1
                        continue
                    end = start + w / li.rate
                    up_busy[i] = end
                delay = li.half_delay + lj.half_delay
                jit = li.half_jitter + lj.half_jitter
                if jit:
                    delay = max(0.0, delay + rng.uniform(-jit, jit))
                t = end + delay
                if lj.rate:
                    dstart = max(start + delay, dn_busy[j])
                    if (dstart - start - delay) * lj.rate > lj.queue:  # the backlog it finds there
                        stats[j]["dropped"] += 1
                        continue
                    t = max(dstart + w / lj.rate, t)
                    dn_busy[j] = t
                t = max(t, last.get((i, j), 0.0))  # jitter never reorders a pair's packets
                last[(i, j)] = t
                seq += 1
                heapq.heappush(heap, (t, seq, j, pkt, w))
        if dead:
            select_fds = [fd for fd in select_fds if fd not in dead]
            if not select_fds:
                print("switch: every endpoint is gone: exiting", flush=True)
                return 0
    return 0


def cmd_reaper(a):
    cfg = load(a.name)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while time.time() < cfg["started"] + cfg["lifetime"]:
        time.sleep(1)
        if not os.path.exists(os.path.join(state_dir(a.name), "config.json")):
            return 0
    print("reaper: lifetime of %s s over: taking cluster %s down" % (cfg["lifetime"], a.name), flush=True)
    down(a.name, quiet=True)
    return 0


# ----------------------------------------------------------------------------------------------
# command line


def main(argv):
    ap = argparse.ArgumentParser(prog="cluster.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1] + "\nMore: docs/simulated-cluster.md",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default=os.environ.get("KATTN_CLUSTER", "kattn"),
                    help="the cluster's name: namespaces NAME-node0 .., NAME-head (default kattn)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    named = argparse.ArgumentParser(add_help=False)  # --name after the command as well
    named.add_argument("--name", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    add = sub.add_parser
    sub.add_parser = lambda *x, **kw: add(*x, parents=[named], **kw)

    def shaping(p):
        p.add_argument("--latency", type=float, default=0.0, metavar="MS",
                       help="one-way latency between two nodes, ms (each node's link adds half)")
        p.add_argument("--jitter", type=float, default=0.0, metavar="MS",
                       help="uniform jitter +-MS/2 per link (packets of a pair stay in order)")
        p.add_argument("--rate", type=float, default=0.0, metavar="MBIT",
                       help="each direction of each node's link, Mbit/s (0: unlimited)")
        p.add_argument("--loss", type=float, default=0.0, metavar="PCT", help="loss on each node's uplink, %%")
        p.add_argument("--link", action="append", metavar="K:key=val,..",
                       help="node K's link: latency=MS,rate=MBIT,jitter=MS,loss=PCT (repeatable)")

    def upflags(p):
        p.add_argument("nodes", type=int, metavar="N")
        shaping(p)
        p.add_argument("--slow-rank", action="append", metavar="K:PCT",
                       help="node K's processes get PCT%% of one CPU (cgroup cpu quota; repeatable)")
        p.add_argument("--switch", choices=("user", "kernel"), default="user",
                       help="user: TUN devices and this script's switch (default); kernel: veth, bridge, tc netem")
        p.add_argument("--mtu", type=int, default=9000, help="the links' MTU (default 9000)")
        p.add_argument("--queue", type=float, default=1.0, metavar="MB",
                       help="user switch: MB queued per direction of a rate-limited link before tail drop "
                            "(default 1, about netem's 1000 packets of 1500 B)")
        p.add_argument("--lifetime", type=float, default=4 * 3600, metavar="S",
                       help="the switch takes the cluster down after S seconds (default 4 h; 0: never)")
        p.add_argument("--replace", action="store_true", help="take a cluster of this name down first")

    def runflags(p):
        p.add_argument("--timeout", type=float, default=60, metavar="S", help="mpirun's limit (default 60 s)")
        p.add_argument("--ranks-per-node", type=int, default=1, metavar="R",
                       help="slots per node (default 1); above 1 ranks on one node also use shared memory")
        p.add_argument("--nodes", dest="hosts", default="", metavar="M|K,L,..",
                       help="the first M nodes only, or these nodes in this order (default: all); "
                            "-np P fills them in order, --ranks-per-node at a time")
        p.add_argument("--dry-run", action="store_true", help="print the mpirun command")


    p = sub.add_parser("up", help="create the namespaces, links and switch")
    upflags(p)
    p = sub.add_parser("shape", help="new link parameters for the running cluster")
    shaping(p)
    p.add_argument("--slow-rank", action="append", help=argparse.SUPPRESS)
    p = sub.add_parser("run", help="mpirun across the nodes, bounded by --timeout")
    runflags(p)
    p = sub.add_parser("session", help="up, run, down (always)")
    upflags(p)
    runflags(p)
    p = sub.add_parser("exec", help="a command in one node's namespace: exec [--timeout S] K -- command")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("node", help="K or head")
    p = sub.add_parser("probe", help="ICMP round trips between two nodes")
    p.add_argument("--from", dest="src", default="0")
    p.add_argument("--to", dest="dst", default="1")
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--size", type=int, default=56, help="ICMP payload bytes")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("stats", help="bytes and packets through each node's link")
    p.add_argument("--reset", action="store_true", help="zero the user switch's counters")
    sub.add_parser("status", help="what is up")
    p = sub.add_parser("down", help="remove the namespaces, switch and cgroups")
    p.add_argument("--all", action="store_true",
                   help="also namespaces named NAME-node*, NAME-head, NAME-switch that no state records")
    p = sub.add_parser("_switch")
    p = sub.add_parser("_reaper")
    p = sub.add_parser("_agent")
    p.add_argument("host")
    p.add_argument("args", nargs=argparse.REMAINDER)
    # run, session and exec take their command after `--` (argparse's REMAINDER would also take
    # the options before it); _agent takes mpirun's words as they come.
    tail = []
    if argv[:1] != ["_agent"] and "_agent" not in argv[:3] and "--" in argv:
        i = argv.index("--")
        argv, tail = argv[:i], argv[i + 1:]
    a = ap.parse_args(argv)
    if a.cmd in ("run", "session", "exec"):
        a.args = tail
    if not a.name.startswith("kattn") or "/" in a.name or len(a.name) > 40:
        ap.error("--name must start with 'kattn' (only kattn* namespaces are ever created or removed)")
    fn = {"up": cmd_up, "shape": cmd_shape, "run": cmd_run, "session": cmd_session, "exec": cmd_exec,
          "probe": cmd_probe, "stats": cmd_stats, "status": cmd_status, "down": cmd_down,
          "_switch": cmd_switch, "_reaper": cmd_reaper, "_agent": cmd_agent}[a.cmd]
    try:
        return fn(a)
    except Fail as e:
        print("cluster.py %s: %s" % (a.cmd, e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
