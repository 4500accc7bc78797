//! Device access rules on cgroup v2: a small eBPF program of type `BPF_PROG_TYPE_CGROUP_DEVICE`, generated from
//! the OCI rules and attached to the container's cgroup, as runc and crun do.
//!
//! Rule semantics follow the OCI spec: the last matching rule decides; no match denies. The devices every
//! container gets (null, zero, full, random, urandom, tty, ptmx and /dev/pts/*) are allowed after the user rules,
//! and so is mknod (access `m` alone) of any char or block node, as runc allows it: the runtime makes the spec's
//! nodes from inside the cgroup, whatever access their rules give, and opening a node still needs a rule.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType};

/// The devices allowed in every container: (type, major, minor).
const DEFAULT_ALLOWED: &[(char, i64, i64)] = &[
    ('c', 1, 3),
    ('c', 1, 5),
    ('c', 1, 7),
    ('c', 1, 8),
    ('c', 1, 9),
    ('c', 5, 0),
    ('c', 5, 2),
    ('c', 136, -1),
];

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

const LDX_W: u8 = 0x61; // r_dst = *(u32 *)(r_src + off)
const AND_K: u8 = 0x57;
const RSH_K: u8 = 0x77;
const MOV_X: u8 = 0xbf;
const MOV_K: u8 = 0xb7;
const JNE_K: u8 = 0x55;
const EXIT: u8 = 0x95;

/// One rule in numeric form: type (0 = any), major/minor (-1 = any), access bits (mknod 1, read 2, write 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rule {
    allow: bool,
    typ: u32,
    major: i64,
    minor: i64,
    access: u32,
}

fn dev_type(t: char) -> u32 {
    match t {
        'b' => 1,
        'c' | 'u' => 2,
        _ => 0,
    }
}

fn convert(r: &LinuxDeviceCgroup) -> Result<Rule, String> {
    let typ = match r.typ() {
        None | Some(LinuxDeviceType::A) => 0,
        Some(LinuxDeviceType::B) => 1,
        Some(LinuxDeviceType::C | LinuxDeviceType::U) => 2,
        Some(LinuxDeviceType::P) => return Err("fifo (type p) rules are not enforceable on cgroup v2".into()),
    };
    // Letters other than r, w and m are dropped, as runc drops them (its update.bats writes "rwa").
    let mut access = 0;
    for ch in r.access().as_deref().unwrap_or("rwm").chars() {
        access |= match ch {
            'm' => 1,
            'r' => 2,
            'w' => 4,
            _ => 0,
        };
    }
    Ok(Rule {
        allow: r.allow(),
        typ,
        major: r.major().unwrap_or(-1),
        minor: r.minor().unwrap_or(-1),
        access,
    })
}

/// Generates the program: last matching rule wins, so rules are emitted in reverse and the first match returns.
fn program(rules: &[Rule]) -> Vec<Insn> {
    let mut p = vec![
        insn(LDX_W, 2, 1, 0, 0),      // r2 = access_type
        insn(AND_K, 2, 0, 0, 0xffff), // r2 = device type
        insn(LDX_W, 3, 1, 0, 0),
        insn(RSH_K, 3, 0, 0, 16), // r3 = requested access
        insn(LDX_W, 4, 1, 4, 0),  // r4 = major
        insn(LDX_W, 5, 1, 8, 0),  // r5 = minor
    ];
    for r in rules.iter().rev() {
        let mut checks = Vec::new();
        if r.typ != 0 {
            checks.push(vec![insn(JNE_K, 2, 0, 0, r.typ as i32)]);
        }
        if r.access & 7 != 7 {
            checks.push(vec![
                insn(MOV_X, 1, 3, 0, 0),
                insn(AND_K, 1, 0, 0, (!r.access & 7) as i32),
                insn(JNE_K, 1, 0, 0, 0),
            ]);
        }
        if r.major >= 0 {
            checks.push(vec![insn(JNE_K, 4, 0, 0, r.major as i32)]);
        }
        if r.minor >= 0 {
            checks.push(vec![insn(JNE_K, 5, 0, 0, r.minor as i32)]);
        }
        let unconditional = checks.is_empty();
        let mut block: Vec<Insn> = checks.into_iter().flatten().collect();
        block.push(insn(MOV_K, 0, 0, 0, i32::from(r.allow)));
        block.push(insn(EXIT, 0, 0, 0, 0));
        // Each conditional jump skips to the end of this block.
        let len = block.len();
        for (i, ins) in block.iter_mut().enumerate() {
            if ins.code == JNE_K {
                ins.off = (len - i - 1) as i16;
            }
        }
        p.extend(block);
        if unconditional {
            // Nothing after a rule that matches everything is reachable (the verifier refuses dead code).
            return p;
        }
    }
    p.push(insn(MOV_K, 0, 0, 0, 0));
    p.push(insn(EXIT, 0, 0, 0, 0));
    p
}

/// The full rule list for a container: user rules, then the default devices, then mknod of any node.
fn rules(user: &[LinuxDeviceCgroup]) -> Result<Vec<Rule>, String> {
    let mut out = user.iter().map(convert).collect::<Result<Vec<_>, _>>()?;
    out.extend(DEFAULT_ALLOWED.iter().map(|&(t, major, minor)| Rule {
        allow: true,
        typ: dev_type(t),
        major,
        minor,
        access: 7,
    }));
    out.extend(['c', 'b'].map(|t| Rule {
        allow: true,
        typ: dev_type(t),
        major: -1,
        minor: -1,
        access: 1,
    }));
    Ok(out)
}

fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> std::io::Result<i64> {
    // SAFETY: attr is a zero-padded buffer larger than every bpf_attr variant used here.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr)) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_DETACH: libc::c_long = 9;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u64 = 15;
const BPF_CGROUP_DEVICE: u64 = 6;
const BPF_F_ALLOW_MULTI: u64 = 2;

fn load(prog: &[Insn]) -> std::io::Result<OwnedFd> {
    let license = c"Apache-2.0";
    let mut attr = [0u64; 16];
    attr[0] = BPF_PROG_TYPE_CGROUP_DEVICE | ((prog.len() as u64) << 32);
    attr[1] = prog.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    let fd = match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => fd,
        Err(e) => {
            // Load again with the verifier's log, so the error says why.
            let mut log = vec![0u8; 64 * 1024];
            attr[3] = 1 | ((log.len() as u64) << 32);
            attr[4] = log.as_mut_ptr() as u64;
            let _ = bpf(BPF_PROG_LOAD, &mut attr);
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..end]);
            return Err(std::io::Error::new(
                e.kind(),
                format!("{e}; verifier: {}", text.trim()),
            ));
        }
    };
    // SAFETY: the kernel returned a new file descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Ids of the device programs attached directly to the cgroup.
fn attached(cg: &OwnedFd) -> std::io::Result<Vec<u32>> {
    let mut ids = [0u32; 64];
    let mut attr = [0u64; 16];
    attr[0] = cg.as_raw_fd() as u64 | (BPF_CGROUP_DEVICE << 32);
    // query_flags (u32) at byte 8, attach_flags at 12, prog_ids at 16, prog_cnt at 24.
    attr[2] = ids.as_mut_ptr() as u64;
    attr[3] = ids.len() as u64;
    bpf(BPF_PROG_QUERY, &mut attr)?;
    let n = (attr[3] & 0xffff_ffff) as usize;
    Ok(ids[..n.min(ids.len())].to_vec())
}

/// Replaces the device program of the cgroup at `dir` with one made from `user` rules.
pub fn apply(dir: &Path, user: &[LinuxDeviceCgroup]) -> crate::Result<()> {
    let prog = program(&rules(user).map_err(crate::Error::Msg)?);
    let cg: OwnedFd = std::fs::File::open(dir)
        .map_err(crate::Error::io("opening", dir))?
        .into();
    let old = attached(&cg).map_err(unpathed("querying attached programs"))?;
    let fd = load(&prog).map_err(unpathed("loading the eBPF device program"))?;
    let mut attr = [0u64; 16];
    attr[0] = cg.as_raw_fd() as u64 | ((fd.as_raw_fd() as u64) << 32);
    attr[1] = BPF_CGROUP_DEVICE | (BPF_F_ALLOW_MULTI << 32);
    bpf(BPF_PROG_ATTACH, &mut attr).map_err(unpathed("attaching the eBPF device program"))?;
    for id in old {
        let mut a = [0u64; 16];
        a[0] = u64::from(id);
        let Ok(old_fd) = bpf(BPF_PROG_GET_FD_BY_ID, &mut a) else {
            continue;
        };
        // SAFETY: a new fd returned by the kernel.
        let old_fd = unsafe { OwnedFd::from_raw_fd(old_fd as i32) };
        let mut d = [0u64; 16];
        d[0] = cg.as_raw_fd() as u64 | ((old_fd.as_raw_fd() as u64) << 32);
        d[1] = BPF_CGROUP_DEVICE;
        bpf(BPF_PROG_DETACH, &mut d).map_err(unpathed("detaching the previous device program"))?;
    }
    Ok(())
}

/// An [`crate::Error::Io`] of `op` on no path, for `map_err`.
fn unpathed(op: &'static str) -> impl FnOnce(std::io::Error) -> crate::Error {
    move |source| crate::Error::Io {
        op: op.into(),
        path: None,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny interpreter for the instructions we emit, to check the program's decisions without a kernel.
    fn run(prog: &[Insn], typ: u32, access: u32, major: u32, minor: u32) -> u64 {
        let ctx = [(access << 16) | typ, major, minor];
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        loop {
            let i = prog[pc];
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            pc += 1;
            match i.code {
                LDX_W => r[dst] = u64::from(ctx[i.off as usize / 4]),
                AND_K => r[dst] &= i.imm as u32 as u64,
                RSH_K => r[dst] >>= i.imm,
                MOV_X => r[dst] = r[src],
                MOV_K => r[dst] = i.imm as u64,
                JNE_K => {
                    if r[dst] != i.imm as u32 as u64 {
                        pc += i.off as usize;
                    }
                }
                EXIT => return r[0],
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    fn rule(json: &str) -> LinuxDeviceCgroup {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn deny_all_then_defaults() {
        let prog = program(&rules(&[rule(r#"{"allow":false,"access":"rwm"}"#)]).unwrap());
        assert_eq!(run(&prog, 2, 2, 1, 3), 1, "/dev/null readable");
        assert_eq!(run(&prog, 2, 6, 136, 7), 1, "/dev/pts/7 read+write");
        assert_eq!(run(&prog, 1, 2, 8, 0), 0, "block 8:0 denied");
        assert_eq!(run(&prog, 2, 2, 10, 200), 0, "tun denied");
        assert_eq!(run(&prog, 1, 1, 8, 0), 1, "block 8:0 may be made (mknod)");
        assert_eq!(run(&prog, 2, 1, 10, 229), 1, "char 10:229 may be made (mknod)");
        assert_eq!(run(&prog, 2, 2, 10, 229), 0, "but not opened for reading");
    }

    #[test]
    fn last_rule_wins_and_access_subset() {
        let user = [
            rule(r#"{"allow":false,"access":"rwm"}"#),
            rule(r#"{"allow":true,"type":"b","major":7,"access":"r"}"#),
            rule(r#"{"allow":false,"type":"b","major":7,"minor":3,"access":"rwm"}"#),
        ];
        let prog = program(&rules(&user).unwrap());
        assert_eq!(run(&prog, 1, 2, 7, 0), 1, "loop0 read allowed");
        assert_eq!(run(&prog, 1, 4, 7, 0), 0, "loop0 write denied");
        assert_eq!(run(&prog, 1, 2, 7, 3), 0, "loop3 denied by the later rule");
        assert_eq!(run(&prog, 2, 2, 7, 0), 0, "char 7:0 is another device");
    }

    #[test]
    fn allow_all() {
        let prog = program(&rules(&[rule(r#"{"allow":true,"access":"rwm"}"#)]).unwrap());
        assert_eq!(run(&prog, 1, 7, 8, 0), 1);
        // Unknown letters are dropped, as runc drops them: "rx" is "r".
        let rx = convert(&rule(r#"{"allow":true,"access":"rx"}"#)).unwrap();
        assert_eq!(
            rx.access,
            convert(&rule(r#"{"allow":true,"access":"r"}"#)).unwrap().access
        );
    }
}
