"""A CRI client on Python's grpcio with no generated stubs, for the any-:authority test (tests/privileged/tests/grpc_clients.rs).

Usage: raw_client.py SOCKET [AUTHORITY]
Calls Version and ListContainers with hand-encoded protobuf bytes over grpcio's own unix-socket channel (its
default :authority, or AUTHORITY when given) and prints one line per answer, after grpcio's version.
"""

import sys

import grpc


def fields(data):
    """The top-level fields of a protobuf message: (number, value) pairs, bytes for length-delimited ones."""
    i = 0

    def varint():
        nonlocal i
        n, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return n

    while i < len(data):
        key = varint()
        number, kind = key >> 3, key & 7
        if kind == 0:
            yield number, varint()
        elif kind == 2:
            n = varint()
            yield number, data[i : i + n]
            i += n
        elif kind == 1:
            i += 8
        elif kind == 5:
            i += 4
        else:
            raise ValueError(f"wire type {kind}")


options = [("grpc.default_authority", sys.argv[2])] if len(sys.argv) > 2 else []
print("grpcio", grpc.__version__)
with grpc.insecure_channel("unix://" + sys.argv[1], options=options) as channel:
    version = channel.unary_unary("/runtime.v1.RuntimeService/Version")
    # VersionRequest { version: "v1" }
    got = dict(fields(version(b"\x0a\x02v1", timeout=10)))
    print("version", got[2].decode(), got[4].decode())
    containers = channel.unary_unary("/runtime.v1.RuntimeService/ListContainers")
    # ListContainersRequest {}
    got = [n for n, _ in fields(containers(b"", timeout=10))]
    print("containers", got.count(1))
