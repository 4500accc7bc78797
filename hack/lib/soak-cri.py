"""The CRI side of hack/soak.sh (Debian's python3-grpcio, stubs from grpc_tools.protoc of the CRI's v1.proto in
STUBS_DIR as v1_pb2.py and v1_pb2_grpc.py).

Usage:
  soak-cri.py STUBS_DIR SOCKET round R KEEP IMAGE LOGS_DIR CGROUP_PARENT
      One round of the churn: pod cR (CNI network, under CGROUP_PARENT) with one container printing a line a
      second; on every living pod: ExecSync, ContainerStats, and UpdateContainerResources (cpu shares 512 or
      1024 by the round's parity); ListContainerStats and ListPodSandboxStats; the new container's log rotated
      as kubelet rotates it (renamed, then ReopenContainerLog); then pod c(R-KEEP) stopped and removed, and its
      log directory too (kubelet's part). Prints nothing; exits non-zero naming the call on a failure.
  soak-cri.py STUBS_DIR SOCKET count
      Prints "SANDBOXES CONTAINERS": every record the runtime lists, whatever its state.
  soak-cri.py STUBS_DIR SOCKET clean
      Stops and removes every pod.
"""

import os
import shutil
import sys

import grpc

sys.path.insert(0, sys.argv[1])
import v1_pb2 as cri  # noqa: E402
import v1_pb2_grpc as cri_grpc  # noqa: E402

SOCKET, ACTION, ARGS = sys.argv[2], sys.argv[3], sys.argv[4:]
T = 60


def stub():
    return cri_grpc.RuntimeServiceStub(grpc.insecure_channel("unix://" + SOCKET))


def call(rt, name, req):
    try:
        return getattr(rt, name)(req, timeout=T)
    except grpc.RpcError as e:
        sys.exit(f"soak-cri: {name}: {e.code()}: {e.details()}")


def pods_named(rt, name):
    got = call(rt, "ListPodSandbox", cri.ListPodSandboxRequest()).items
    return [p.id for p in got if p.metadata.name == name]


def remove_pod(rt, pod):
    call(rt, "StopPodSandbox", cri.StopPodSandboxRequest(pod_sandbox_id=pod))
    call(rt, "RemovePodSandbox", cri.RemovePodSandboxRequest(pod_sandbox_id=pod))


def one_round(r, keep, image, logs, parent):
    rt = stub()
    name = f"c{r}"
    log_dir = os.path.join(logs, name)
    os.makedirs(log_dir, exist_ok=True)
    config = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name=name, uid=f"uid-soak-{r}", namespace="soak"),
        hostname=name,
        log_directory=log_dir,
        linux=cri.LinuxPodSandboxConfig(cgroup_parent=parent),
    )
    pod = call(rt, "RunPodSandbox", cri.RunPodSandboxRequest(config=config)).pod_sandbox_id
    ctr = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="c"),
        labels={"soak": "cri"},
        image=cri.ImageSpec(image=image),
        command=["sh", "-c", "trap 'exit 0' TERM; while :; do echo tick; sleep 1 & wait $!; done"],
        log_path="c/0.log",
        linux=cri.LinuxContainerConfig(resources=cri.LinuxContainerResources(cpu_shares=1024)),
    )
    new = call(rt, "CreateContainer", cri.CreateContainerRequest(pod_sandbox_id=pod, config=ctr, sandbox_config=config))
    call(rt, "StartContainer", cri.StartContainerRequest(container_id=new.container_id))

    shares = 512 if r % 2 else 1024
    mine = cri.ContainerFilter(state=cri.ContainerStateValue(state=cri.CONTAINER_RUNNING), label_selector={"soak": "cri"})
    for c in call(rt, "ListContainers", cri.ListContainersRequest(filter=mine)).containers:
        out = call(rt, "ExecSync", cri.ExecSyncRequest(container_id=c.id, cmd=["echo", "hi"], timeout=30))
        if out.exit_code != 0 or out.stdout != b"hi\n":
            sys.exit(f"soak-cri: ExecSync in {c.id}: exit {out.exit_code}, stdout {out.stdout!r}")
        call(rt, "ContainerStats", cri.ContainerStatsRequest(container_id=c.id))
        res = cri.LinuxContainerResources(cpu_shares=shares)
        call(rt, "UpdateContainerResources", cri.UpdateContainerResourcesRequest(container_id=c.id, linux=res))
    call(rt, "ListContainerStats", cri.ListContainerStatsRequest())  # every container, the pod service's too
    call(rt, "ListPodSandboxStats", cri.ListPodSandboxStatsRequest())

    # kubelet's rotation: the file renamed, the runtime told to open a new one.
    log = os.path.join(log_dir, "c", "0.log")
    if os.path.exists(log):
        os.rename(log, log + ".1")
        call(rt, "ReopenContainerLog", cri.ReopenContainerLogRequest(container_id=new.container_id))

    if r >= keep:
        old = f"c{r - keep}"
        for p in pods_named(rt, old):
            remove_pod(rt, p)
        shutil.rmtree(os.path.join(logs, old), ignore_errors=True)


def count():
    rt = stub()
    pods = call(rt, "ListPodSandbox", cri.ListPodSandboxRequest()).items
    ctrs = call(rt, "ListContainers", cri.ListContainersRequest()).containers
    print(len(pods), len(ctrs))


def clean():
    rt = stub()
    for p in call(rt, "ListPodSandbox", cri.ListPodSandboxRequest()).items:
        if p.metadata.namespace == "soak":
            remove_pod(rt, p.id)


if ACTION == "round":
    one_round(int(ARGS[0]), int(ARGS[1]), ARGS[2], ARGS[3], ARGS[4])
elif ACTION == "count":
    count()
elif ACTION == "clean":
    clean()
else:
    sys.exit(f"soak-cri: unknown action {ACTION!r}")
