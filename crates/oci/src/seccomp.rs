//! seccomp filters from the OCI `linux.seccomp` profile, compiled with libseccomp.
//!
//! The filter is built before the container process drops privileges (so errors surface at create time) and
//! loaded just before `execve`. Syscall names this libseccomp does not know are skipped, as runc does: profiles
//! list syscalls newer than the library. A profile with `SCMP_ACT_NOTIFY` rules needs `listenerPath`: loading
//! it gives a listener descriptor, which goes to the seccomp agent there ([`crate::notify`]).
//!
//! [`build`] is a pure function of the profile: libseccomp's program, exported as BPF, behind our own -ENOSYS
//! prelude (module `enosys`), with the flags to load it with. The result ([`Program`]) is plain data, so it can be
//! cached and cloned; [`load`] hands it to the kernel with `seccomp(2)` itself.

mod enosys;

use std::io::{Read, Seek};
use std::os::fd::{FromRawFd, OwnedFd};
use std::str::FromStr;

use libseccomp::{ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall};
use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction, LinuxSeccompOperator};

use crate::{Error, Result};

fn name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn action(a: LinuxSeccompAction, errno: Option<u32>, default_errno: u32) -> Result<ScmpAction> {
    Ok(match a {
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => ScmpAction::KillThread,
        LinuxSeccompAction::ScmpActKillProcess => ScmpAction::KillProcess,
        LinuxSeccompAction::ScmpActTrap => ScmpAction::Trap,
        LinuxSeccompAction::ScmpActErrno => ScmpAction::Errno(errno.unwrap_or(default_errno) as i32),
        LinuxSeccompAction::ScmpActTrace => ScmpAction::Trace(errno.unwrap_or(default_errno) as u16),
        LinuxSeccompAction::ScmpActAllow => ScmpAction::Allow,
        LinuxSeccompAction::ScmpActLog => ScmpAction::Log,
        LinuxSeccompAction::ScmpActNotify => ScmpAction::Notify,
    })
}

fn compare(op: LinuxSeccompOperator, value: u64, two: Option<u64>) -> (ScmpCompareOp, u64) {
    match op {
        LinuxSeccompOperator::ScmpCmpNe => (ScmpCompareOp::NotEqual, value),
        LinuxSeccompOperator::ScmpCmpLt => (ScmpCompareOp::Less, value),
        LinuxSeccompOperator::ScmpCmpLe => (ScmpCompareOp::LessOrEqual, value),
        LinuxSeccompOperator::ScmpCmpEq => (ScmpCompareOp::Equal, value),
        LinuxSeccompOperator::ScmpCmpGe => (ScmpCompareOp::GreaterEqual, value),
        LinuxSeccompOperator::ScmpCmpGt => (ScmpCompareOp::Greater, value),
        // OCI: value is the mask, valueTwo the value compared after masking.
        LinuxSeccompOperator::ScmpCmpMaskedEq => (ScmpCompareOp::MaskedEqual(value), two.unwrap_or(0)),
    }
}

/// Whether two of `args` compare the same argument.
fn same_argument_twice(args: &[oci_spec::runtime::LinuxSeccompArg]) -> bool {
    let mut seen = 0u64;
    args.iter().any(|a| {
        let bit = 1u64 << (a.index() % 64);
        let twice = seen & bit != 0;
        seen |= bit;
        twice
    })
}

/// Whether `profile` has `SCMP_ACT_NOTIFY` rules: loading it makes a listener for the seccomp agent.
pub fn notifies(profile: &LinuxSeccomp) -> bool {
    profile.default_action() == LinuxSeccompAction::ScmpActNotify
        || profile
            .syscalls()
            .iter()
            .flatten()
            .any(|r| r.action() == LinuxSeccompAction::ScmpActNotify)
}

/// One classic BPF instruction, laid out as the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset when the condition holds.
    pub jt: u8,
    /// Jump offset when it does not.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

/// A compiled profile: the whole BPF program (the -ENOSYS prelude, then libseccomp's filter) and the
/// `seccomp(2)` flags to load it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The instructions, prelude first.
    pub insns: Vec<Insn>,
    /// `SECCOMP_FILTER_FLAG_*`: `LOG`, `SPEC_ALLOW` from the profile's flags, `NEW_LISTENER` for notify rules.
    pub flags: libc::c_ulong,
}

impl Program {
    /// Whether loading gives a listener descriptor (the profile has `SCMP_ACT_NOTIFY` rules).
    pub fn notifies(&self) -> bool {
        self.flags & libc::SECCOMP_FILTER_FLAG_NEW_LISTENER != 0
    }
}

/// The kernel's limit on a filter's length (BPF_MAXINSNS).
const MAX_INSNS: usize = 4096;

/// The last profile compiled through [`build_cached`] and its program. The shim's exec server fills it before
/// it forks each worker ([`crate::direct`]), so the workers (and the processes they start, forks of theirs)
/// find their container's filter compiled once instead of compiling it for every exec.
static COMPILED: std::sync::Mutex<Option<(LinuxSeccomp, Program)>> = std::sync::Mutex::new(None);

/// [`build`], remembered: a profile equal to the last one compiled gets its program again without libseccomp.
pub fn build_cached(profile: &LinuxSeccomp) -> Result<Program> {
    let mut last = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((p, prog)) = last.as_ref()
        && p == profile
    {
        return Ok(prog.clone());
    }
    let prog = build(profile)?;
    *last = Some((profile.clone(), prog.clone()));
    Ok(prog)
}

/// Compiles `profile` into the program to load: the -ENOSYS prelude in front of libseccomp's filter.
pub fn build(profile: &LinuxSeccomp) -> Result<Program> {
    let ctx = context(profile)?;
    let archs: Vec<ScmpArch> = profile
        .architectures()
        .iter()
        .flatten()
        .filter_map(|a| ScmpArch::from_str(&name(a)).ok())
        .collect();
    let mut insns = enosys::for_profile(profile, &archs);
    insns.extend(export(&ctx)?);
    if insns.len() > MAX_INSNS {
        return Err(Error::config(
            "config.json",
            "linux.seccomp",
            format!(
                "the compiled filter has {} instructions, more than the kernel's {MAX_INSNS}",
                insns.len()
            ),
        ));
    }
    let mut flags = 0;
    for flag in profile.flags().iter().flatten() {
        match name(flag).as_str() {
            "SECCOMP_FILTER_FLAG_LOG" => flags |= libc::SECCOMP_FILTER_FLAG_LOG,
            "SECCOMP_FILTER_FLAG_SPEC_ALLOW" => flags |= libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW,
            _ => {}
        }
    }
    if notifies(profile) {
        flags |= libc::SECCOMP_FILTER_FLAG_NEW_LISTENER;
    }
    Ok(Program { insns, flags })
}

/// libseccomp's program for `ctx`, through a memfd (`seccomp_export_bpf` writes to a descriptor).
fn export(ctx: &ScmpFilterContext) -> Result<Vec<Insn>> {
    let fail =
        |what: &str, e: &dyn std::fmt::Display| crate::err!("exporting the seccomp filter: {what}: {e}");
    // SAFETY: memfd_create with a NUL-terminated name; the descriptor is owned at once.
    let raw = unsafe { libc::memfd_create(c"crius-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(fail("memfd_create", &std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just made and owned by nobody else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    ctx.export_bpf(&file)
        .map_err(|e| fail("seccomp_export_bpf", &e))?;
    let mut bytes = Vec::new();
    file.rewind()
        .and_then(|_| file.read_to_end(&mut bytes))
        .map_err(|e| fail("reading it back", &e))?;
    if bytes.len() % 8 != 0 {
        return Err(fail(
            "length",
            &format!("{} bytes is not whole instructions", bytes.len()),
        ));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| Insn {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}

/// libseccomp's filter for `profile`.
fn context(profile: &LinuxSeccomp) -> Result<ScmpFilterContext> {
    let bad = |field: &str, e: &dyn std::fmt::Display| Error::config("config.json", field, e.to_string());
    if notifies(profile) {
        if profile
            .listener_path()
            .as_ref()
            .is_none_or(|p| p.as_os_str().is_empty())
        {
            return Err(bad(
                "linux.seccomp.listenerPath",
                &"SCMP_ACT_NOTIFY needs the seccomp agent's socket here",
            ));
        }
        // The runtime's own last steps write (the exec fifo, error reports): they must not wait on the agent.
        let write = profile.syscalls().iter().flatten().position(|r| {
            r.action() == LinuxSeccompAction::ScmpActNotify && r.names().iter().any(|n| n == "write")
        });
        if let Some(i) = write {
            return Err(bad(
                &format!("linux.seccomp.syscalls[{i}]"),
                &"SCMP_ACT_NOTIFY cannot be used for the write syscall",
            ));
        }
    }
    let default_errno = profile.default_errno_ret().unwrap_or(libc::EPERM as u32);
    let default = action(profile.default_action(), None, default_errno)?;
    let mut ctx = ScmpFilterContext::new(default).map_err(|e| bad("linux.seccomp.defaultAction", &e))?;
    // The runtime sets no_new_privs itself when the config asks; libseccomp must not force it.
    ctx.set_ctl_nnp(false).map_err(|e| bad("linux.seccomp", &e))?;
    for (i, arch) in profile.architectures().iter().flatten().enumerate() {
        let a = ScmpArch::from_str(&name(arch))
            .map_err(|e| bad(&format!("linux.seccomp.architectures[{i}]"), &e))?;
        if a != ScmpArch::native() {
            ctx.add_arch(a)
                .map_err(|e| bad(&format!("linux.seccomp.architectures[{i}]"), &e))?;
        }
    }
    for (i, rule) in profile.syscalls().iter().flatten().enumerate() {
        let field = format!("linux.seccomp.syscalls[{i}]");
        let act = action(rule.action(), rule.errno_ret(), default_errno)?;
        if act == default {
            continue; // libseccomp refuses rules equal to the default action
        }
        let conds: Vec<ScmpArgCompare> = rule
            .args()
            .iter()
            .flatten()
            .map(|a| {
                let (op, datum) = compare(a.op(), a.value(), a.value_two());
                ScmpArgCompare::new(a.index() as u32, op, datum)
            })
            .collect();
        // libseccomp refuses two comparisons of one argument in one rule. As runc does, such a rule becomes
        // one rule per comparison: the action then applies when any of them holds.
        let groups: Vec<&[ScmpArgCompare]> =
            if same_argument_twice(rule.args().as_deref().unwrap_or_default()) {
                conds.chunks(1).collect()
            } else {
                vec![&conds[..]]
            };
        for sc in rule.names() {
            let Ok(nr) = ScmpSyscall::from_name(sc) else {
                continue;
            };
            for group in &groups {
                let added = if group.is_empty() {
                    ctx.add_rule(act, nr)
                } else {
                    ctx.add_rule_conditional(act, nr, group)
                };
                added.map_err(|e| bad(&field, &format!("syscall {sc}: {e}")))?;
            }
        }
    }
    Ok(ctx)
}

/// The version of the libseccomp crius runs with (`2.5.4`), for `crius-runc -v`.
pub fn library_version() -> Option<String> {
    libseccomp::ScmpVersion::current()
        .ok()
        .map(|v| format!("{}.{}.{}", v.major, v.minor, v.micro))
}

/// Loads a compiled program into the calling thread with `seccomp(2)`; a program with `SCMP_ACT_NOTIFY` rules
/// gives its listener descriptor to `listener` at once, before any other system call could wait on the agent.
pub fn load(p: &Program, listener: &mut Listener<'_>) -> Result<()> {
    let prog = libc::sock_fprog {
        len: p.insns.len() as u16,
        filter: p.insns.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `len` instructions laid out as `struct sock_filter`, alive for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            p.flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if r < 0 {
        return Err(crate::err!(
            "loading the seccomp filter ({} instructions, flags {:#x}): {}",
            p.insns.len(),
            p.flags,
            std::io::Error::last_os_error()
        ));
    }
    if !p.notifies() {
        return Ok(());
    }
    // SAFETY: the listener descriptor the kernel just made for this process (close-on-exec).
    let fd = unsafe { OwnedFd::from_raw_fd(r as i32) };
    match listener.take() {
        Some(give) => give(fd),
        None => Err(crate::err!(
            "the seccomp filter has a listener and nobody to give it to"
        )),
    }
}

/// Where a listener descriptor goes once the filter is loaded (called once).
pub type Listener<'a> = Option<Box<dyn FnOnce(OwnedFd) -> Result<()> + 'a>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_profile_and_skips_unknown_syscalls() {
        let p: LinuxSeccomp = serde_json::from_str(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86"],
                "syscalls":[{"names":["mkdir","no_such_syscall_xyz"],"action":"SCMP_ACT_ERRNO","errnoRet":1},
                            {"names":["personality"],"action":"SCMP_ACT_ERRNO",
                             "args":[{"index":0,"value":255,"valueTwo":8,"op":"SCMP_CMP_MASKED_EQ"}]}]}"#,
        )
        .unwrap();
        build(&p).unwrap();
    }

    #[test]
    fn a_cached_program_is_the_one_its_profile_builds() {
        let profile = |errno: u32| -> LinuxSeccomp {
            serde_json::from_str(&format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],
                    "syscalls":[{{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":{errno}}}]}}"#
            ))
            .unwrap()
        };
        let (a, b) = (profile(1), profile(2));
        let built = build(&a).unwrap();
        assert_eq!(build_cached(&a).unwrap(), built);
        assert_eq!(build_cached(&a).unwrap(), built, "from the cache");
        // Another profile is compiled, not served the last one's program.
        assert_eq!(build_cached(&b).unwrap(), build(&b).unwrap());
        assert_ne!(build_cached(&b).unwrap(), built);
        assert_eq!(build_cached(&a).unwrap(), built);
    }

    #[test]
    fn notify_needs_a_listener_path_and_never_takes_write() {
        let with = |extra: &str, names: &str| -> std::result::Result<(), String> {
            let p: LinuxSeccomp = serde_json::from_str(&format!(
                r#"{{"defaultAction":"SCMP_ACT_ALLOW"{extra},
                    "syscalls":[{{"names":[{names}],"action":"SCMP_ACT_NOTIFY"}}]}}"#
            ))
            .unwrap();
            assert!(notifies(&p));
            build(&p).map(drop).map_err(|e| e.to_string())
        };
        let e = with("", r#""mkdir""#).unwrap_err();
        assert!(e.contains("linux.seccomp.listenerPath"), "{e}");
        let e = with(r#","listenerPath":"""#, r#""mkdir""#).unwrap_err();
        assert!(e.contains("listenerPath"), "{e}");
        let e = with(r#","listenerPath":"/run/agent.sock""#, r#""mkdir","write""#).unwrap_err();
        assert!(e.contains("cannot be used for the write syscall"), "{e}");
        with(
            r#","listenerPath":"/run/agent.sock","listenerMetadata":"m""#,
            r#""mkdir""#,
        )
        .unwrap();
    }

    #[test]
    fn two_comparisons_of_one_argument_become_a_rule_each() {
        // runc's seccomp.bats: one syscall, argument 0 compared twice (libseccomp alone refuses the pair).
        let p: LinuxSeccomp = serde_json::from_str(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdirat"],"action":"SCMP_ACT_ERRNO",
                "args":[{"index":0,"value":1,"op":"SCMP_CMP_GE"},{"index":0,"value":100,"op":"SCMP_CMP_LE"},
                        {"index":1,"value":5,"op":"SCMP_CMP_EQ"}]}]}"#,
        )
        .unwrap();
        build(&p).unwrap();
        assert!(same_argument_twice(
            p.syscalls().as_ref().unwrap()[0].args().as_ref().unwrap()
        ));
        let one: LinuxSeccomp = serde_json::from_str(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdirat"],"action":"SCMP_ACT_ERRNO",
                "args":[{"index":0,"value":1,"op":"SCMP_CMP_GE"},{"index":1,"value":5,"op":"SCMP_CMP_EQ"}]}]}"#,
        )
        .unwrap();
        assert!(!same_argument_twice(
            one.syscalls().as_ref().unwrap()[0].args().as_ref().unwrap()
        ));
    }
}
