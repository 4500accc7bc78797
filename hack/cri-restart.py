"""The CRI client of hack/bench-restart.sh (Debian's python3-grpcio, stubs from grpc_tools.protoc of the CRI's
v1.proto in STUBS_DIR as v1_pb2.py and v1_pb2_grpc.py).

Usage:
  cri-restart.py STUBS_DIR SOCKET make PODS RUNNING EXITED PAR LOGS_DIR
      PODS host-network pods; RUNNING containers `sleep 3600` and EXITED containers `sleep 0` (exit at once)
      spread over them, created and started on PAR threads (each with its own channel); returns once every
      EXITED one has exited.
  cri-restart.py STUBS_DIR SOCKET list OUT
      Every container as "id pod name attempt state", sorted, into OUT; prints the count per state.
  cri-restart.py STUBS_DIR SOCKET poll
      Waits for the socket to answer Version, then ListContainers (a fresh channel per try, so no reconnect
      backoff is timed); prints "VERSION_NS LIST_NS COUNT" (wall-clock ns since the epoch when each answered).
  cri-restart.py STUBS_DIR SOCKET clean PAR
      Stops and removes every pod.
Exits non-zero, naming the call, on a failure.
"""

import collections
import os
import sys
import threading
import time

import grpc

sys.path.insert(0, sys.argv[1])
import v1_pb2 as cri  # noqa: E402
import v1_pb2_grpc as cri_grpc  # noqa: E402

SOCKET, ACTION, ARGS = sys.argv[2], sys.argv[3], sys.argv[4:]
NODE = 2


def channel():
    return grpc.insecure_channel("unix://" + SOCKET)


def on_threads(par, items, work):
    """work(stub, item) for each item, on par threads with a channel each; the first failure ends the run."""
    failed = []

    def stream(mine):
        with channel() as ch:
            rt = cri_grpc.RuntimeServiceStub(ch)
            for item in mine:
                if failed:
                    return
                try:
                    work(rt, item)
                except grpc.RpcError as e:
                    failed.append(f"{item}: {e.code()}: {e.details()}")
                    return

    threads = [threading.Thread(target=stream, args=(items[s::par],)) for s in range(par)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        sys.exit("cri-restart: " + failed[0])


def make(pods, running, exited, par, logs):
    def pod_config(i):
        log_dir = os.path.join(logs, f"p{i}")
        os.makedirs(log_dir, exist_ok=True)
        return cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=f"p{i}", uid=f"uid-restart-{i}", namespace="bench"),
            log_directory=log_dir,
            linux=cri.LinuxPodSandboxConfig(
                security_context=cri.LinuxSandboxSecurityContext(
                    namespace_options=cri.NamespaceOption(network=NODE)
                )
            ),
        )

    ids = {}

    def run_pod(rt, i):
        ids[i] = rt.RunPodSandbox(cri.RunPodSandboxRequest(config=pod_config(i)), timeout=120).pod_sandbox_id

    on_threads(par, list(range(pods)), run_pod)
    # Container j: in pod j % pods, running for the first RUNNING, then exited ones.
    def container(rt, j):
        i = j % pods
        up = j < running
        ctr = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="up" if up else "done", attempt=j // pods),
            image=cri.ImageSpec(image="docker.io/library/busybox:latest"),
            command=["sleep", "3600" if up else "0"],
            log_path=f"{j}.log",
            linux=cri.LinuxContainerConfig(),
        )
        req = cri.CreateContainerRequest(pod_sandbox_id=ids[i], config=ctr, sandbox_config=pod_config(i))
        cid = rt.CreateContainer(req, timeout=120).container_id
        rt.StartContainer(cri.StartContainerRequest(container_id=cid), timeout=120)

    on_threads(par, list(range(running + exited)), container)
    with channel() as ch:
        rt = cri_grpc.RuntimeServiceStub(ch)
        deadline = time.time() + 300
        while True:
            states = collections.Counter(c.state for c in rt.ListContainers(cri.ListContainersRequest()).containers)
            if states[cri.CONTAINER_EXITED] >= exited:
                return
            if time.time() > deadline:
                sys.exit(f"cri-restart: containers not exited after 300 s: {dict(states)}")
            time.sleep(0.5)


def listing(out):
    with channel() as ch:
        rt = cri_grpc.RuntimeServiceStub(ch)
        got = rt.ListContainers(cri.ListContainersRequest(), timeout=120).containers
    lines = sorted(
        f"{c.id} {c.pod_sandbox_id} {c.metadata.name} {c.metadata.attempt} {cri.ContainerState.Name(c.state)}"
        for c in got
    )
    with open(out, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    counts = collections.Counter(line.rsplit(" ", 1)[1] for line in lines)
    print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))


def answered(call, request):
    """Tries `call` on fresh channels until it answers (300 s at most); the answer."""
    deadline = time.time() + 300
    while time.time() < deadline:
        if os.path.exists(SOCKET):
            with channel() as ch:
                try:
                    return getattr(cri_grpc.RuntimeServiceStub(ch), call)(request, timeout=30)
                except grpc.RpcError:
                    pass
        time.sleep(0.002)
    sys.exit(f"cri-restart: {call} did not answer in 300 s")


def poll():
    answered("Version", cri.VersionRequest(version="v1"))
    version_ns = time.time_ns()
    n = len(answered("ListContainers", cri.ListContainersRequest()).containers)
    print(version_ns, time.time_ns(), n)


def clean(par):
    with channel() as ch:
        pods = [p.id for p in cri_grpc.RuntimeServiceStub(ch).ListPodSandbox(cri.ListPodSandboxRequest()).items]

    def remove(rt, pod):
        rt.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=pod), timeout=120)
        rt.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=pod), timeout=120)

    on_threads(par, pods, remove)


if ACTION == "make":
    make(int(ARGS[0]), int(ARGS[1]), int(ARGS[2]), int(ARGS[3]), ARGS[4])
elif ACTION == "list":
    listing(ARGS[0])
elif ACTION == "poll":
    poll()
elif ACTION == "clean":
    clean(int(ARGS[0]))
else:
    sys.exit(f"cri-restart: unknown action {ACTION!r}")
