//! Raw system calls for the seccomp tests: `--syscalls N,M,...` makes each x86_64 system call N with zero
//! arguments, `--syscalls32 N,...` each i386 one (`int 0x80` from this 64-bit process, which the kernel and
//! seccomp see as the i386 architecture), and prints `<abi> <N> <result>` per call (a result below 0 is
//! `-errno`), then exits 0. Nothing else runs.

use std::io::Write;

fn each(list: &str, abi: &str, call: impl Fn(i64) -> i64) -> ! {
    let mut out = std::io::stdout().lock();
    for n in list.split(',').filter(|s| !s.is_empty()) {
        let nr: i64 = n
            .parse()
            .unwrap_or_else(|_| crate::usage("--syscalls: not a number"));
        let _ = writeln!(out, "{abi} {nr} {}", call(nr));
    }
    let _ = out.flush();
    std::process::exit(0)
}

/// `--syscalls LIST`.
pub fn native(list: &str) -> ! {
    each(list, "x86_64", |nr| {
        // SAFETY: the numbers come from the test; every argument is 0, so no call reads or writes memory.
        let r = unsafe { libc::syscall(nr, 0, 0, 0) };
        if r < 0 {
            -(std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64)
        } else {
            r
        }
    })
}

/// `--syscalls32 LIST`.
#[cfg(target_arch = "x86_64")]
pub fn i386(list: &str) -> ! {
    each(list, "i386", |nr| {
        let ret: u64;
        // SAFETY: an i386 system call with every argument 0 (ebx, ecx, edx); rbx is LLVM's, so it is swapped
        // in and out around the call; the compat entry clobbers r8-r11.
        unsafe {
            std::arch::asm!(
                "xchg {b}, rbx",
                "int 0x80",
                "xchg {b}, rbx",
                b = inout(reg) 0u64 => _,
                inlateout("rax") nr as u64 => ret,
                in("rcx") 0u64,
                in("rdx") 0u64,
                out("r8") _, out("r9") _, out("r10") _, out("r11") _,
            );
        }
        ret as u32 as i32 as i64
    })
}

/// `--syscalls32 LIST` where there is no i386 ABI.
#[cfg(not(target_arch = "x86_64"))]
pub fn i386(_: &str) -> ! {
    crate::usage("--syscalls32: only on x86_64")
}
