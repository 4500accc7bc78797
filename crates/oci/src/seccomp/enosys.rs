//! The -ENOSYS prelude: BPF put in front of libseccomp's filter so that a system call newer than every one the
//! profile names fails with `ENOSYS` rather than the profile's default action.
//!
//! A profile that denies by default (`SCMP_ACT_ERRNO`, `SCMP_ACT_KILL`, ...) and allows a list cannot name
//! the system calls that did not exist when it was written. New C libraries try such a call first (`clone3`,
//! `openat2`, `faccessat2`) and fall back to the old one only on `ENOSYS`: with `EPERM` they fail. As runc does,
//! every architecture the filter covers gets a check: a number above the highest one the profile names for that
//! architecture returns `ENOSYS`; any other goes on to libseccomp's program unchanged. On x86_64 the x32 ABI
//! (numbers with bit 30 set) has a bound of its own; i386 system calls made by a 64-bit process (`int 0x80`)
//! carry the i386 architecture and get the i386 bound.
//!
//! The profile's architectures count, and the native one always (libseccomp's filter always covers it; runc
//! 1.1 checks only the listed ones). Architectures without a known `AUDIT_ARCH_*` value here (MIPS, s390,
//! PA-RISC, ...) are not checked. Nothing is added when the default action lets calls through (allow, log,
//! trace) or already is `ENOSYS`.

use libseccomp::{ScmpArch, ScmpSyscall};
use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction};

use super::Insn;

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The x32 ABI's mark in the system call number.
const X32_BIT: u32 = 0x4000_0000;
/// What the prelude returns for a call above the bound.
pub const RET_ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

// Classic BPF opcodes (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

/// `AUDIT_ARCH_*` of a libseccomp architecture, and whether it is x86_64's x32 ABI.
fn audit_arch(a: ScmpArch) -> Option<(u32, bool)> {
    Some(match a {
        ScmpArch::X86 => (0x4000_0003, false),
        ScmpArch::X8664 => (0xC000_003E, false),
        ScmpArch::X32 => (0xC000_003E, true),
        ScmpArch::Arm => (0x4000_0028, false),
        ScmpArch::Aarch64 => (0xC000_00B7, false),
        ScmpArch::Ppc64Le => (0xC000_0015, false),
        ScmpArch::Ppc64 => (0x8000_0015, false),
        ScmpArch::Riscv64 => (0xC000_00F3, false),
        _ => return None,
    })
}

/// The bounds of one `AUDIT_ARCH_*`: the highest named number of its main ABI and, on x86_64, of x32.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// `AUDIT_ARCH_*`.
    pub arch: u32,
    /// Highest number the profile names for the main ABI (x86_64, i386, aarch64, ...).
    pub main: Option<u32>,
    /// Highest number for x32 (with [`X32_BIT`] set), x86_64 only.
    pub x32: Option<u32>,
}

/// Whether the profile's default action makes the prelude pointless.
fn default_passes(profile: &LinuxSeccomp) -> bool {
    use LinuxSeccompAction::*;
    match profile.default_action() {
        ScmpActAllow | ScmpActLog | ScmpActTrace => true,
        ScmpActErrno => profile.default_errno_ret() == Some(libc::ENOSYS as u32),
        _ => false,
    }
}

/// The bounds per architecture of `profile` (its `architectures`, resolved, plus the native one), in the order
/// first met, native first. Architectures with no named system call known to libseccomp are left out.
pub fn bounds(profile: &LinuxSeccomp, archs: &[ScmpArch]) -> Vec<Bounds> {
    let names: Vec<&str> = profile
        .syscalls()
        .iter()
        .flatten()
        .flat_map(|r| r.names().iter().map(String::as_str))
        .collect();
    let mut out: Vec<Bounds> = Vec::new();
    let mut seen: Vec<ScmpArch> = Vec::new();
    for &a in std::iter::once(&ScmpArch::native()).chain(archs) {
        let a = if a == ScmpArch::Native {
            ScmpArch::native()
        } else {
            a
        };
        if seen.contains(&a) {
            continue;
        }
        seen.push(a);
        let Some((audit, x32)) = audit_arch(a) else {
            continue;
        };
        let highest = names
            .iter()
            .filter_map(|n| ScmpSyscall::from_name_by_arch(n, a).ok())
            .map(i32::from)
            .filter(|&nr| nr >= 0)
            .max();
        let Some(highest) = highest else {
            continue;
        };
        let i = match out.iter().position(|b| b.arch == audit) {
            Some(i) => i,
            None => {
                out.push(Bounds {
                    arch: audit,
                    ..Bounds::default()
                });
                out.len() - 1
            }
        };
        if x32 {
            out[i].x32 = Some(highest as u32);
        } else {
            out[i].main = Some(highest as u32);
        }
    }
    out
}

/// An instruction, or a jump to a place known once the layout is.
enum Op {
    I(Insn),
    /// `ja` to the start of section N.
    ToSection(usize),
    /// `ja` to the first instruction after the prelude (libseccomp's program).
    ToFilter,
}

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Op {
    Op::I(Insn { code, jt, jf, k })
}

/// `nr > bound`: return ENOSYS; else on to the filter (3 instructions).
fn check(bound: u32, ops: &mut Vec<Op>) {
    ops.push(insn(JGT_K, 0, 1, bound));
    ops.push(insn(RET_K, 0, 0, RET_ENOSYS));
    ops.push(Op::ToFilter);
}

/// The section of one architecture: load the number, then its bound check(s).
fn section(b: &Bounds) -> Vec<Op> {
    let mut ops = vec![insn(LD_W_ABS, 0, 0, NR)];
    let is_x86_64 = b.arch == 0xC000_003E;
    match (b.main, b.x32) {
        (Some(main), Some(x32)) => {
            // x32 calls fall into the first check, x86_64 ones skip it (3 instructions).
            ops.push(insn(JSET_K, 0, 3, X32_BIT));
            check(x32, &mut ops);
            check(main, &mut ops);
        }
        (Some(main), None) => {
            if is_x86_64 {
                // x32 calls are not bounded: straight to the filter.
                ops.push(insn(JSET_K, 2, 0, X32_BIT));
            }
            check(main, &mut ops);
        }
        (None, Some(x32)) => {
            ops.push(insn(JSET_K, 0, 2, X32_BIT));
            check(x32, &mut ops);
        }
        (None, None) => ops.push(Op::ToFilter),
    }
    ops
}

/// The prelude for `bounds`: dispatch on the architecture, then one section per architecture. Every jump is
/// forward; conditional ones skip at most 3 instructions, the rest are `ja` with 32-bit offsets.
pub fn prelude(bounds: &[Bounds]) -> Vec<Insn> {
    if bounds.is_empty() {
        return Vec::new();
    }
    let mut ops = vec![insn(LD_W_ABS, 0, 0, ARCH)];
    for (i, b) in bounds.iter().enumerate() {
        ops.push(insn(JEQ_K, 0, 1, b.arch));
        ops.push(Op::ToSection(i));
    }
    ops.push(Op::ToFilter); // an architecture without a section
    let mut starts = Vec::with_capacity(bounds.len());
    for b in bounds {
        starts.push(ops.len());
        ops.extend(section(b));
    }
    let end = ops.len();
    let ja = |pc: usize, to: usize| Insn {
        code: JA,
        jt: 0,
        jf: 0,
        k: (to - pc - 1) as u32,
    };
    ops.into_iter()
        .enumerate()
        .map(|(pc, op)| match op {
            Op::I(i) => i,
            Op::ToSection(s) => ja(pc, starts[s]),
            Op::ToFilter => ja(pc, end),
        })
        .collect()
}

/// The prelude `profile` needs ([`prelude`] of its [`bounds`]), empty when its default action lets calls
/// through. `archs` are the profile's architectures, resolved.
pub fn for_profile(profile: &LinuxSeccomp, archs: &[ScmpArch]) -> Vec<Insn> {
    if default_passes(profile) {
        return Vec::new();
    }
    prelude(&bounds(profile, archs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seccomp::{build, context, export};

    const ALLOW: u32 = 0x7fff_0000;
    const X86_64: u32 = 0xC000_003E;
    const I386: u32 = 0x4000_0003;
    const AARCH64: u32 = 0xC000_00B7;

    /// Runs classic BPF `prog` over a `seccomp_data` of (`arch`, `nr`, no arguments): the returned action.
    fn run(prog: &[Insn], arch: u32, nr: u32) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_ne_bytes());
        data[4..8].copy_from_slice(&arch.to_ne_bytes());
        let (mut a, mut x, mut mem, mut pc) = (0u32, 0u32, [0u32; 16], 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            let k = i.k;
            let jump = |cond: bool| if cond { i.jt as usize } else { i.jf as usize };
            match i.code {
                0x20 => {
                    let o = k as usize;
                    a = u32::from_ne_bytes(data[o..o + 4].try_into().unwrap());
                }
                0x00 => a = k,
                0x60 => a = mem[k as usize],
                0x61 => x = mem[k as usize],
                0x02 => mem[k as usize] = a,
                0x03 => mem[k as usize] = x,
                0x07 => x = a,
                0x87 => a = x,
                0x04 => a = a.wrapping_add(k),
                0x14 => a = a.wrapping_sub(k),
                0x44 => a |= k,
                0x54 => a &= k,
                0x05 => pc += k as usize,
                0x15 => pc += jump(a == k),
                0x25 => pc += jump(a > k),
                0x35 => pc += jump(a >= k),
                0x45 => pc += jump(a & k != 0),
                0x06 => return k,
                0x16 => return a,
                c => panic!("opcode {c:#x} at {} not in the test interpreter", pc - 1),
            }
        }
    }

    fn nr(name: &str, arch: ScmpArch) -> u32 {
        i32::from(ScmpSyscall::from_name_by_arch(name, arch).unwrap()) as u32
    }

    #[test]
    fn the_prelude_bounds_each_architecture_and_abi() {
        let b = [
            Bounds {
                arch: X86_64,
                main: Some(334),
                x32: Some(X32_BIT | 547),
            },
            Bounds {
                arch: I386,
                main: Some(386),
                x32: None,
            },
        ];
        let mut p = prelude(&b);
        p.push(Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: ALLOW,
        });
        for (arch, n, want) in [
            (X86_64, 0, ALLOW),
            (X86_64, 334, ALLOW),
            (X86_64, 335, RET_ENOSYS),
            (X86_64, 1000, RET_ENOSYS),
            (X86_64, X32_BIT | 547, ALLOW),
            (X86_64, X32_BIT | 548, RET_ENOSYS),
            (I386, 386, ALLOW),
            (I386, 435, RET_ENOSYS),
            (AARCH64, 5000, ALLOW),
        ] {
            assert_eq!(run(&p, arch, n), want, "arch {arch:#x} nr {n:#x}");
        }
        // x86_64 alone: x32 numbers pass unbounded.
        let mut p = prelude(&[Bounds {
            arch: X86_64,
            main: Some(10),
            x32: None,
        }]);
        p.push(Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: ALLOW,
        });
        assert_eq!(run(&p, X86_64, 11), RET_ENOSYS);
        assert_eq!(run(&p, X86_64, X32_BIT | 5000), ALLOW);
        // x32 alone: x86_64 numbers pass unbounded.
        let mut p = prelude(&[Bounds {
            arch: X86_64,
            main: None,
            x32: Some(X32_BIT | 10),
        }]);
        p.push(Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: ALLOW,
        });
        assert_eq!(run(&p, X86_64, X32_BIT | 11), RET_ENOSYS);
        assert_eq!(run(&p, X86_64, 5000), ALLOW);
        assert!(prelude(&[]).is_empty());
    }

    #[test]
    fn x32_numbers_carry_bit_30() {
        assert_eq!(nr("read", ScmpArch::X32), X32_BIT);
        assert_eq!(nr("getpid", ScmpArch::X86), 20);
    }

    #[test]
    fn a_deny_by_default_profile_gives_enosys_above_its_highest_syscall() {
        let p: LinuxSeccomp = serde_json::from_str(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86","SCMP_ARCH_X32"],
                "syscalls":[{"names":["read","write","getpid","exit_group","rseq"],"action":"SCMP_ACT_ALLOW"},
                            {"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}"#,
        )
        .unwrap();
        let prog = build(&p).unwrap();
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let eacces = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
        let x86_64 = ScmpArch::X8664;
        for (arch, a, n, want) in [
            // Above rseq, the highest named: clone3, openat2, a number nobody has.
            (X86_64, x86_64, nr("clone3", x86_64), RET_ENOSYS),
            (X86_64, x86_64, nr("openat2", x86_64), RET_ENOSYS),
            (X86_64, x86_64, 1000, RET_ENOSYS),
            // Named: their own action.
            (X86_64, x86_64, nr("getpid", x86_64), ALLOW),
            (X86_64, x86_64, nr("rseq", x86_64), ALLOW),
            (X86_64, x86_64, nr("mkdir", x86_64), eacces),
            // Below the highest, not named: the default action.
            (X86_64, x86_64, nr("acct", x86_64), eperm),
            (X86_64, x86_64, nr("unshare", x86_64), eperm),
            // i386, with its own numbers.
            (I386, ScmpArch::X86, nr("clone3", ScmpArch::X86), RET_ENOSYS),
            (I386, ScmpArch::X86, nr("getpid", ScmpArch::X86), ALLOW),
            (I386, ScmpArch::X86, nr("acct", ScmpArch::X86), eperm),
            // x32.
            (X86_64, ScmpArch::X32, nr("clone3", ScmpArch::X32), RET_ENOSYS),
            (X86_64, ScmpArch::X32, nr("getpid", ScmpArch::X32), ALLOW),
            (X86_64, ScmpArch::X32, nr("acct", ScmpArch::X32), eperm),
        ] {
            assert_eq!(run(&prog.insns, arch, n), want, "{a:?} nr {n}");
        }
        // An architecture the profile does not list: libseccomp's bad-architecture action (kill).
        assert_eq!(run(&prog.insns, AARCH64, 1000) & 0xffff_0000, 0);
        assert!(!prog.notifies());
    }

    #[test]
    fn the_native_architecture_is_bounded_without_architectures() {
        let p: LinuxSeccomp = serde_json::from_str(
            r#"{"defaultAction":"SCMP_ACT_KILL_PROCESS","syscalls":[{"names":["getpid"],"action":"SCMP_ACT_ALLOW"}]}"#,
        )
        .unwrap();
        let prog = build(&p).unwrap();
        let native = ScmpArch::native();
        let (arch, _) = audit_arch(native).unwrap();
        assert_eq!(run(&prog.insns, arch, nr("getpid", native)), ALLOW);
        assert_eq!(run(&prog.insns, arch, nr("getpid", native) + 1), RET_ENOSYS);
        assert_eq!(run(&prog.insns, arch, 0), 0x8000_0000, "below: kill process");
    }

    #[test]
    fn nothing_is_added_when_the_default_lets_calls_through() {
        for (default, want) in [
            (r#""SCMP_ACT_ALLOW""#, ALLOW),
            (r#""SCMP_ACT_LOG""#, 0x7ffc_0000),
            (r#""SCMP_ACT_ERRNO","defaultErrnoRet":38"#, RET_ENOSYS),
        ] {
            let p: LinuxSeccomp = serde_json::from_str(&format!(
                r#"{{"defaultAction":{default},"syscalls":[{{"names":["mkdir"],"action":"SCMP_ACT_KILL"}}]}}"#
            ))
            .unwrap();
            assert!(for_profile(&p, &[]).is_empty(), "{default}");
            let prog = build(&p).unwrap();
            let (arch, _) = audit_arch(ScmpArch::native()).unwrap();
            assert_eq!(run(&prog.insns, arch, 1000), want, "{default}");
            let prelude_less = export(&context(&p).unwrap()).unwrap();
            assert_eq!(prog.insns, prelude_less, "{default}");
        }
    }
}
