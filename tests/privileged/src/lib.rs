//! Privileged and cgroup-v2 test suites for crius; the tests live in `tests/`.
