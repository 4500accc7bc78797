"""Starts pods through the CRI directly (Python's grpcio), for hack/bench-density.sh's DRIVER=grpc: N pods of one
container (`sleep 3600`, image myapp:latest) on P threads, each with its own channel, as crictl's
runp + create + start would make them, without a process start per call.

Usage: cri-start.py STUBS_DIR SOCKET N P TAG LOGS_DIR
STUBS_DIR holds v1_pb2.py and v1_pb2_grpc.py (grpc_tools.protoc of the CRI's v1.proto). Pod names carry TAG
(runtime and round) so rounds never collide. Exits non-zero, naming the call, on the first failure.
"""

import os
import sys
import threading

import grpc

sys.path.insert(0, sys.argv[1])
import v1_pb2 as cri  # noqa: E402
import v1_pb2_grpc as cri_grpc  # noqa: E402

socket, n, par, tag, logs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
failed = []


def start(rt, i):
    name = f"d{tag}-{i}"
    log_dir = os.path.join(logs, f"{tag}-{i}")
    os.makedirs(log_dir, exist_ok=True)
    pod = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name=name, uid=f"uid-{tag}-{i}", namespace="bench"),
        log_directory=log_dir,
        linux=cri.LinuxPodSandboxConfig(),
    )
    pod_id = rt.RunPodSandbox(cri.RunPodSandboxRequest(config=pod), timeout=120).pod_sandbox_id
    ctr = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="c"),
        image=cri.ImageSpec(image="myapp:latest"),
        command=["sleep", "3600"],
        log_path="c.log",
        linux=cri.LinuxContainerConfig(),
    )
    req = cri.CreateContainerRequest(pod_sandbox_id=pod_id, config=ctr, sandbox_config=pod)
    ctr_id = rt.CreateContainer(req, timeout=120).container_id
    rt.StartContainer(cri.StartContainerRequest(container_id=ctr_id), timeout=120)


def stream(mine):
    with grpc.insecure_channel("unix://" + socket) as channel:
        rt = cri_grpc.RuntimeServiceStub(channel)
        for i in mine:
            if failed:
                return
            try:
                start(rt, i)
            except grpc.RpcError as e:
                failed.append(f"pod {i}: {e.code()}: {e.details()}")
                return


threads = [threading.Thread(target=stream, args=(range(s, n, par),)) for s in range(par)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if failed:
    print("cri-start: " + failed[0], file=sys.stderr)
    sys.exit(1)
