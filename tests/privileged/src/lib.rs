//! Privileged and cgroup-v2 test suites for crius; the tests live in `tests/`. A suite whose cases need a pure
//! cgroup-v2 kernel has a VM twin, `tests/vm_<suite>.rs`, its own test binary that hack/test.sh runs inside
//! hack/vm. What a suite and its twin share is here; what every suite shares is in crius-test-support.

pub mod cri;
pub mod devnode;
pub mod engine;
pub mod handlers;
pub mod leftovers;
pub mod nri;
pub mod service;
pub mod shim;
