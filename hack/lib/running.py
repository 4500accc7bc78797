#!/usr/bin/python3
"""How many containers a CRI runtime has running (for hack/bench-probes.sh; grpcio, messages decoded by hand).

Usage: running.py SOCKET
Prints the number of containers in state CONTAINER_RUNNING that ListContainers gives.
"""
import sys

import grpc

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from execsync import fields  # noqa: E402


def main():
    ch = grpc.insecure_channel("unix://" + sys.argv[1])
    ident = lambda b: b
    list_containers = ch.unary_unary("/runtime.v1.RuntimeService/ListContainers", request_serializer=ident,
                                     response_deserializer=ident)
    # Container: field 6 is its state, 1 is CONTAINER_RUNNING.
    states = [dict(fields(c)).get(6, 0) for num, c in fields(list_containers(b"", timeout=30)) if num == 1]
    print(sum(1 for s in states if s == 1))


if __name__ == "__main__":
    main()
