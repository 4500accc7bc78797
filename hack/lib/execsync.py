#!/usr/bin/python3
"""ExecSync of `true` through the CRI, timed (for hack/bench-exec.sh; grpcio, messages encoded by hand).

Usage: execsync.py SOCKET N
Runs N ExecSync calls of `true`, one after another, in the first container SOCKET's runtime lists; prints
"MEDIAN_MS P99_MS CPU_MS": the median and p99 latency of a call, and the machine's CPU time (all of /proc/stat
but idle and iowait, so the daemon, the shim, the runtime and the command alike) per call.
"""
import sys
import time

import grpc

SERVICE = "/runtime.v1.RuntimeService/"


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def fields(buf):
    """(number, value) of each field of a message: bytes for length-delimited ones, ints for varints."""
    i = 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = read_varint(buf, i)
        elif wire == 2:
            n, i = read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wire)
        yield num, v


def read_varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def busy_ticks():
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    return sum(cpu) - cpu[3] - cpu[4]


def main():
    sock, n = sys.argv[1], int(sys.argv[2])
    ch = grpc.insecure_channel("unix://" + sock)
    ident = lambda b: b
    list_containers = ch.unary_unary(SERVICE + "ListContainers", request_serializer=ident,
                                     response_deserializer=ident)
    exec_sync = ch.unary_unary(SERVICE + "ExecSync", request_serializer=ident, response_deserializer=ident)
    ids = [bytes(dict(fields(c)).get(1, b"")) for num, c in fields(list_containers(b"")) if num == 1]
    if not ids:
        sys.exit("no container on " + sock)
    req = field(1, ids[0]) + field(2, b"true") + varint(3 << 3) + varint(10)
    exec_sync(req)  # warm-up
    hz = 100.0
    times = []
    t0 = busy_ticks()
    for _ in range(n):
        s = time.perf_counter()
        resp = exec_sync(req)
        times.append((time.perf_counter() - s) * 1000)
        code = dict(fields(resp)).get(3, 0)
        if code:
            sys.exit("ExecSync of true: exit code %d" % code)
    cpu_ms = (busy_ticks() - t0) / hz * 1000 / n
    times.sort()
    mid = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    p99 = times[min(n - 1, int(n * 0.99))]
    print("%.1f %.1f %.1f" % (mid, p99, cpu_ms))


if __name__ == "__main__":
    main()
