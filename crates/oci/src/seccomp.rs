//! seccomp filters from the OCI `linux.seccomp` profile, compiled with libseccomp.
//!
//! The filter is built before the container process drops privileges (so errors surface at create time) and
//! loaded just before `execve`. Syscall names this libseccomp does not know are skipped, as runc does: profiles
//! list syscalls newer than the library. A profile with `SCMP_ACT_NOTIFY` rules needs `listenerPath`: loading
//! it gives a listener descriptor, which goes to the seccomp agent there ([`crate::notify`]).

use std::os::fd::FromRawFd;
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

/// Compiles `profile` into a filter ready to load.
pub fn build(profile: &LinuxSeccomp) -> Result<ScmpFilterContext> {
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
    for flag in profile.flags().iter().flatten() {
        match name(flag).as_str() {
            "SECCOMP_FILTER_FLAG_LOG" => {
                ctx.set_ctl_log(true)
                    .map_err(|e| bad("linux.seccomp.flags", &e))?;
            }
            "SECCOMP_FILTER_FLAG_SPEC_ALLOW" => {
                ctx.set_ctl_ssb(true)
                    .map_err(|e| bad("linux.seccomp.flags", &e))?;
            }
            _ => {}
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

/// Loads a compiled filter into the calling thread; a filter with `SCMP_ACT_NOTIFY` rules (`notify`) gives
/// its listener descriptor to `listener` at once, before any other system call could wait on the agent.
pub fn load(ctx: &ScmpFilterContext, notify: bool, listener: &mut Listener<'_>) -> Result<()> {
    ctx.load()
        .map_err(|e| crate::err!("loading the seccomp filter: {e}"))?;
    if !notify {
        return Ok(());
    }
    let raw = ctx
        .get_notify_fd()
        .map_err(|e| crate::err!("the seccomp filter's listener descriptor: {e}"))?;
    // SAFETY: a descriptor the kernel made for this process (close-on-exec); libseccomp keeps no use for it.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
    match listener.take() {
        Some(give) => give(fd),
        None => Err(crate::err!(
            "the seccomp filter has a listener and nobody to give it to"
        )),
    }
}

/// Where a listener descriptor goes once the filter is loaded (called once).
pub type Listener<'a> = Option<Box<dyn FnOnce(std::os::fd::OwnedFd) -> Result<()> + 'a>>;

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
