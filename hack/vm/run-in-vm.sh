#!/bin/bash
# hack/vm/run-in-vm.sh - run a command inside a throw-away QEMU guest whose kernel has a
# pure cgroup v2 hierarchy (cpu, cpuset, io, memory, pids, hugetlb, ... enabled for children),
# with the host's root filesystem visible (read-only lower layer + tmpfs overlay, discarded).
#
# usage: hack/vm/run-in-vm.sh <command> [args...]
#   exit status = the command's exit status inside the guest
#   125 = the VM failed before the command's status came back (see message)
#   stdout+stderr of the command come out raw on stdout; stdin is /dev/null.
#
# Write-through paths (same path in the guest, writes land on the host), wherever they are,
# also under /tmp:
#   * the git top-level of the current directory (or the current directory if not in git)
#   * the cargo target dir: $CARGO_TARGET_DIR if set, else <top-level>/target
#   * $CARGO_HOME / $RUSTUP_HOME (default ~/.cargo, ~/.rustup), only if they sit under a guest
#     tmpfs path (normally they are under /root, visible read-only-ish through the overlay)
#   * every path in RUN_IN_VM_RW
# /tmp, /run and /var/tmp are otherwise fresh tmpfs in the guest (an overlayfs upperdir must sit
# there, not on the guest root, which is itself an overlay).
#
# Environment knobs (all optional):
#   RUN_IN_VM_TIMEOUT  seconds before the VM is killed and 125 returned (default: 900; 0 = none)
#   RUN_IN_VM_RW       colon-separated extra host directories that the guest may write through
#                      to (must exist on the host)
#   RUN_IN_VM_TMPFS    colon-separated guest paths to mount an extra empty tmpfs on
#                      (/tmp /run /var/tmp always get one)
#   RUN_IN_VM_KERNEL   guest kernel image   (default: newest /boot/vmlinuz-*, cloud flavour first)
#   RUN_IN_VM_MEM      guest RAM            (default: 2G; plain number = MiB; only touched pages
#                                            cost host RAM)
#   RUN_IN_VM_CPUS     guest vCPUs          (default: host nproc, max 4)
#   RUN_IN_VM_ACCEL    tcg | kvm | auto     (default: auto = kvm only if /dev/kvm is usable AND the
#                                            CPU advertises vmx/svm; PVM-style nested hosts -> tcg)
#   RUN_IN_VM_DEBUG=1  trace the guest init scripts, full kernel log; console.log goes to stderr
#   RUN_IN_VM_CPU      TCG CPU model (default: Nehalem = x86-64-v2; "max" adds AVX2 etc. but makes
#                      exec-heavy work ~2x slower under TCG)
#   RUN_IN_VM_APPEND   extra guest kernel command line
#   RUN_IN_VM_PVH=0    boot the bzImage instead of the extracted, cached vmlinux (PVH entry)
#   RUN_IN_VM_CACHE    where the extracted vmlinux is cached (default: /var/tmp/run-in-vm-cache)
#   RUN_IN_VM_KEEP=1   keep the job dir (console.log = guest kernel console, status, initrd)
#   RUN_IN_VM_DISK     size of an extra zero-reading virtio-blk disk /dev/vda for io.max tests
#                      (default: 1G; 0 = none)
#   RUN_IN_VM_INIT     sh (default): the command runs under a busybox PID 1, in the root cgroup;
#                      systemd: systemd (the host's /lib/systemd/systemd) is PID 1 and runs the
#                      command as the oneshot run-in-vm.service (in /system.slice), nothing else
#                      started but the D-Bus system bus (when dbus is installed); systemctl and
#                      systemd's D-Bus API work
#   RUN_IN_VM_MONITOR  a path for a QEMU monitor (HMP) unix socket: its command `stop` pauses the
#                      guest, its clocks with it (a long guest run can wait out a host measurement
#                      without its timeouts seeing the pause), `cont` resumes it
set -euo pipefail

die() { echo "run-in-vm: $*" >&2; exit 125; }
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | grep '^#' >&2; exit 125; }
[ "$(id -u)" = 0 ] || die "must run as root (virtiofsd needs it)"

QEMU=${RUN_IN_VM_QEMU:-qemu-system-x86_64}
VIRTIOFSD=${RUN_IN_VM_VIRTIOFSD:-}
if [ -z "$VIRTIOFSD" ]; then
  for c in /usr/libexec/virtiofsd /usr/lib/qemu/virtiofsd "$(command -v virtiofsd || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && { VIRTIOFSD=$c; break; }
  done
fi
command -v "$QEMU" >/dev/null || die "$QEMU not found (apt-get install qemu-system-x86)"
[ -n "$VIRTIOFSD" ] || die "virtiofsd not found (qemu-system-common on bookworm, package virtiofsd later)"
BUSYBOX=${RUN_IN_VM_BUSYBOX:-/bin/busybox}
file_is_static() { ! ldd "$1" >/dev/null 2>&1; }
[ -x "$BUSYBOX" ] && file_is_static "$BUSYBOX" || die "static busybox not found (apt-get install busybox-static)"

KERNEL=${RUN_IN_VM_KERNEL:-}
if [ -z "$KERNEL" ]; then
  KERNEL=$(ls /boot/vmlinuz-*-cloud-* 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$KERNEL" ] || KERNEL=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1 || true)
fi
[ -r "$KERNEL" ] || die "no guest kernel (apt-get install linux-image-cloud-amd64)"
KVER=${KERNEL##*/vmlinuz-}
MODDIR=/lib/modules/$KVER
[ -f "$MODDIR/modules.dep" ] || die "$MODDIR/modules.dep missing for kernel $KERNEL"

# Boot the uncompressed vmlinux through PVH when it can be extracted (skips the in-guest
# decompression: ~0.3 s per boot under TCG). Cached; falls back to the bzImage.
extract_vmlinux() { # $1 = bzImage; logic of linux/scripts/extract-vmlinux
  local img=$1 tmp=$2 pos
  try() {
    command -v "${3%% *}" >/dev/null || return 1
    for pos in $(tr "$1\n$2" "\n$2=" <"$img" | grep -abo "^$2"); do
      pos=${pos%%:*}
      tail -c+"$pos" "$img" | $3 >"$tmp" 2>/dev/null
      readelf -n "$tmp" 2>/dev/null | grep -q 'Xen.*0x00000012' && return 0
    done
    return 1
  }
  try '\002!L\030' xxx 'lz4 -d' || try '(\265/\375' xxx unzstd || try '\3757zXZ\000' abcde unxz ||
    try '\037\213\010' xy gunzip
}
BOOT_IMAGE=$KERNEL
if [ "${RUN_IN_VM_PVH:-1}" = 1 ] && command -v readelf >/dev/null; then
  CACHE=${RUN_IN_VM_CACHE:-/var/tmp/run-in-vm-cache}
  VMLINUX=$CACHE/vmlinux-$KVER-$(stat -c %s-%Y "$KERNEL")
  if [ ! -s "$VMLINUX" ] && [ ! -e "$VMLINUX.none" ] && mkdir -p "$CACHE" 2>/dev/null; then
    if extract_vmlinux "$KERNEL" "$VMLINUX.$$"; then mv -f "$VMLINUX.$$" "$VMLINUX"
    else rm -f "$VMLINUX.$$"; : >"$VMLINUX.none"; fi
  fi
  [ -s "$VMLINUX" ] && BOOT_IMAGE=$VMLINUX
fi

MEM=${RUN_IN_VM_MEM:-2G}
case $MEM in *[!0-9]*) ;; *) MEM=${MEM}M ;; esac
NCPU=$(nproc); [ "$NCPU" -gt 4 ] && NCPU=4
CPUS=${RUN_IN_VM_CPUS:-$NCPU}
DISK=${RUN_IN_VM_DISK:-1G}
TIMEOUT=${RUN_IN_VM_TIMEOUT:-900}
case $TIMEOUT in ''|*[!0-9]*) die "RUN_IN_VM_TIMEOUT must be a number of seconds" ;; esac
DEBUG=${RUN_IN_VM_DEBUG:-0}
INIT=${RUN_IN_VM_INIT:-sh}
case $INIT in
  sh) ;;
  systemd) [ -x /lib/systemd/systemd ] || die "RUN_IN_VM_INIT=systemd: /lib/systemd/systemd not found (apt-get install systemd)" ;;
  *) die "RUN_IN_VM_INIT must be sh or systemd" ;;
esac
ACCEL=${RUN_IN_VM_ACCEL:-auto}
if [ "$ACCEL" = auto ]; then
  if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then ACCEL=kvm; else ACCEL=tcg; fi
fi
case $ACCEL in
  kvm) ACCEL_ARGS=(-accel kvm -cpu host) ;;
  tcg) ACCEL_ARGS=(-accel tcg,thread=multi -cpu "${RUN_IN_VM_CPU:-Nehalem}") ;;
  *) die "RUN_IN_VM_ACCEL must be tcg, kvm or auto" ;;
esac

# ---------------------------------------------------------------- write-through paths
# Paths bound from the host into the guest at the same path (after the guest's /tmp, /run,
# /var/tmp tmpfs are mounted, so a checkout or target dir under /tmp stays visible).
# Host paths are canonicalised (no symlinks) so that the guest-side mkdir cannot be misled.
under() { case $1 in "$2" | "$2"/*) return 0 ;; esac; return 1; } # $1 is $2 or below it
TOP=$(git -c safe.directory='*' rev-parse --show-toplevel 2>/dev/null) || TOP=$PWD
TOP=$(realpath -e "$TOP") || die "cannot resolve $TOP"
TGT=${CARGO_TARGET_DIR:-$TOP/target}
case $TGT in /*) ;; *) TGT=$PWD/$TGT ;; esac # cargo resolves it against the cwd
TGT=$(realpath -m "$TGT")
# cargo would create the target dir anyway; it must exist to be bound
if [ ! -d "$TGT" ] && ! under "$TGT" "$TOP"; then mkdir -p "$TGT" || die "cannot create $TGT"; fi
BIND_CAND=("$TOP" "$TGT")
GUEST_TMPFS=(/tmp /run /var/tmp)
IFS=: read -r -a _x <<<"${RUN_IN_VM_TMPFS:-}"; GUEST_TMPFS+=("${_x[@]}")
GUEST_ENV=()
for v in CARGO_HOME RUSTUP_HOME; do
  d=${!v:-}
  if [ -z "$d" ]; then [ $v = CARGO_HOME ] && d=${HOME:-/root}/.cargo || d=${HOME:-/root}/.rustup; fi
  [ -d "$d" ] || continue
  d=$(realpath -e "$d")
  GUEST_ENV+=("$v=$d") # the guest's HOME is /root: point cargo/rustup at the host's dirs
  for t in "${GUEST_TMPFS[@]}"; do [ -n "$t" ] && under "$d" "$t" && { BIND_CAND+=("$d"); break; }; done
done
IFS=: read -r -a _x <<<"${RUN_IN_VM_RW:-}"
for d in "${_x[@]}"; do
  [ -n "$d" ] || continue
  [ -d "$d" ] || die "RUN_IN_VM_RW path $d is not a directory on the host"
  BIND_CAND+=("$(realpath -e "$d")")
done
for d in "${BIND_CAND[@]}" "${GUEST_TMPFS[@]}"; do
  case $d in *$'\t'* | *$'\n'*) die "path with a tab or newline is not supported: $d" ;; esac
  case $d in '' | /*) ;; *) die "guest paths must be absolute: $d" ;; esac
done
# sorted, so parents come first; drop "/" and paths already covered by a bound parent
BINDS=()
while IFS= read -r -d '' d; do
  [ "$d" = / ] && continue
  for k in ${BINDS[@]+"${BINDS[@]}"}; do under "$d" "$k" && continue 2; done
  BINDS+=("$d")
done < <(printf '%s\0' "${BIND_CAND[@]}" | LC_ALL=C sort -zu)
# Guest mounts, one "path<TAB>kind" line each, sorted by path (parents first); the stable sort
# keeps a tmpfs before a bind of the same path.
MOUNTS=$( {
  printf '%s\ttmpfs=1777\n' /tmp /var/tmp
  printf '%s\ttmpfs=0755\n' /run
  for d in "${GUEST_TMPFS[@]:3}"; do [ -n "$d" ] && printf '%s\ttmpfs=0755\n' "$d"; done
  for d in ${BINDS[@]+"${BINDS[@]}"}; do printf '%s\tbind\n' "$d"; done
} | LC_ALL=C sort -s -t $'\t' -k1,1)

# ---------------------------------------------------------------- job dir and cleanup
JOB='' VFS_PID='' QEMU_PID=''
# kill a process we started but that is not our child (qemu under timeout), identified by its
# pid file and by its command line containing our job dir (guards against pid reuse)
kill_qemu_by_pidfile() {
  local p i
  [ -n "$JOB" ] && [ -s "$JOB/qemu.pid" ] || return 0
  p=$(cat "$JOB/qemu.pid" 2>/dev/null) || return 0
  for i in $(seq 50); do
    grep -qF "$JOB" "/proc/$p/cmdline" 2>/dev/null || return 0
    [ "$i" = 1 ] && kill "$p" 2>/dev/null
    sleep 0.1
  done
  kill -9 "$p" 2>/dev/null || true
}
cleanup() {
  set +e
  trap '' INT TERM HUP
  if [ -n "$QEMU_PID" ]; then kill "$QEMU_PID" 2>/dev/null; wait "$QEMU_PID" 2>/dev/null; fi
  kill_qemu_by_pidfile
  if [ -n "$VFS_PID" ]; then kill "$VFS_PID" 2>/dev/null; wait "$VFS_PID" 2>/dev/null; fi
  QEMU_PID='' VFS_PID=''
  [ -n "$JOB" ] || return 0
  if [ "${RUN_IN_VM_KEEP:-0}" = 1 ]; then echo "run-in-vm: kept $JOB" >&2; else rm -rf "$JOB"; fi
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP
JOB=$(mktemp -d "${TMPDIR:-/tmp}/run-in-vm.XXXXXX")

# ---------------------------------------------------------------- initramfs
# busybox + the few modules needed to mount the virtiofs root, plus a tiny init.
IR=$JOB/ir
mkdir -p "$IR/bin" "$IR/mods"
cp "$BUSYBOX" "$IR/bin/busybox"
declare -A SEEN=()
MODS=()
add_mod() { # $1 = module name; appends it and its deps (deps first) to MODS
  local name=$1 rel dep line
  line=$(grep -E "(^|/)${name//_/[_-]}\.ko(\.xz|\.zst|\.gz)?:" "$MODDIR/modules.dep" | head -1 || true)
  if [ -z "$line" ]; then
    grep -qE "(^|/)${name//_/[_-]}\.ko" "$MODDIR/modules.builtin" 2>/dev/null && return 0
    die "module $name not found for $KVER"
  fi
  rel=${line%%:*}
  [ -n "${SEEN[$rel]:-}" ] && return 0
  SEEN[$rel]=1
  for dep in ${line#*:}; do add_mod "$(basename "${dep%%.ko*}")"; done
  MODS+=("$rel")
}
for m in virtio_pci virtiofs overlay virtio_blk; do add_mod "$m"; done
i=0
for rel in "${MODS[@]}"; do
  out=$(printf '%s/mods/%02d-%s' "$IR" $i "$(basename "${rel%%.ko*}").ko")
  case $rel in
    *.ko.xz) xz -dc "$MODDIR/$rel" >"$out" ;;
    *.ko.zst) zstd -qdc "$MODDIR/$rel" >"$out" ;;
    *.ko.gz) gzip -dc "$MODDIR/$rel" >"$out" ;;
    *) cp "$MODDIR/$rel" "$out" ;;
  esac
  i=$((i + 1))
done

cat >"$IR/init" <<'EOF'
#!/bin/busybox sh
B=/bin/busybox
$B mkdir -p /proc /sys /dev /host /newroot /up
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
JOB=; DEBUG=0
for a in $($B cat /proc/cmdline); do
  case $a in runinvm.job=*) JOB=${a#*=} ;; runinvm.debug=1) DEBUG=1 ;; esac
done
[ "$DEBUG" = 1 ] && set -x
fail() { echo "run-in-vm init: $*" >&2; echo "init-failed" >/dev/ttyS2; $B poweroff -f; }
for m in /mods/*.ko; do $B insmod "$m" || fail "insmod $m"; done
$B mount -t virtiofs hostroot /host || fail "mount virtiofs"
. "/host$JOB/params" || fail "no params"
$B mount -t tmpfs -o mode=0755 tmpfs /up
$B mkdir -p /up/upper /up/work
$B mount -t overlay overlay -o lowerdir=/host,upperdir=/up/upper,workdir=/up/work /newroot \
  || fail "mount overlay"
N=/newroot
$B mount --move /proc $N/proc
$B mount --move /sys $N/sys
$B mount --move /dev $N/dev
$B mkdir -p $N/dev/pts $N/dev/shm $N/dev/mqueue
$B mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts $N/dev/pts
$B ln -sf pts/ptmx $N/dev/ptmx 2>/dev/null
$B mount -t tmpfs -o mode=1777,nosuid,nodev shm $N/dev/shm
$B mount -t mqueue mqueue $N/dev/mqueue
$B mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 $N/sys/fs/cgroup || fail "cgroup2"
# securityfs: AppArmor's policy interface (/sys/kernel/security/apparmor), where the kernel has it
$B mount -t securityfs securityfs $N/sys/kernel/security 2>/dev/null || :
# tmpfs (/tmp /run /var/tmp + RUN_IN_VM_TMPFS) and write-through binds from the host, sorted
# by path so parents are mounted first: a checkout under /tmp lands on top of the guest's /tmp
TAB=$($B printf '\t')
while IFS=$TAB read -r d kind; do
  [ -n "$d" ] || continue
  $B mkdir -p "$N$d" 2>/dev/null || [ -e "$N$d" ] || fail "mkdir $d"
  case $kind in
    bind) $B mount --bind "/host$d" "$N$d" || fail "bind $d" ;;
    tmpfs=*) $B mount -t tmpfs -o "mode=${kind#tmpfs=}" tmpfs "$N$d" || fail "tmpfs $d" ;;
  esac
done <<MOUNTS_END
$MOUNTS
MOUNTS_END
$B mkdir -p $N/run/run-in-vm
$B cp /bin/busybox "/host$JOB/stage2.sh" $N/run/run-in-vm/ || fail "copy stage2"
exec $B switch_root $N /run/run-in-vm/busybox sh /run/run-in-vm/stage2.sh
EOF
chmod +x "$IR/init"
(cd "$IR" && find . | cpio -o -H newc --quiet) >"$JOB/initrd.cpio"

# ---------------------------------------------------------------- job files
# POSIX single-quote quoting (safe for busybox ash, any bytes except NUL)
q() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
{
  printf 'MOUNTS='; q "$MOUNTS"; echo
} >"$JOB/params"
# stage2 runs as PID 1 (busybox sh) in the switched root; the command is its child.
{
  echo '#!/run/run-in-vm/busybox sh'
  echo 'B=/run/run-in-vm/busybox'
  [ "$DEBUG" = 1 ] && echo 'set -x'
  # ttyS0 = command output (host stdout); raw output: no \n -> \r\n translation
  echo '$B stty -F /dev/ttyS0 -opost -echo 2>/dev/null'
  echo '$B hostname run-in-vm; $B ip link set lo up 2>/dev/null'
  # enable every available controller for children of the root cgroup
  echo 'for c in $($B cat /sys/fs/cgroup/cgroup.controllers); do echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control || echo "run-in-vm: cannot enable $c" >&2; done'
  if [ "$INIT" = systemd ]; then
    # systemd as PID 1: the command runs as a oneshot service, the only unit pulled in, and powers the VM
    # off itself when it is done (cmd.sh, the rest of this script).
    echo '$B mkdir -p /run/systemd/system'
    echo '$B sed -n "/^#CMD-START/,\$p" "$0" > /run/run-in-vm/cmd.sh'
    echo 'printf "%s\n" "[Unit]" "Description=run-in-vm command" "DefaultDependencies=no" "[Service]" "Type=oneshot" "StandardInput=null" "StandardOutput=null" "StandardError=null" "ExecStart=/run/run-in-vm/busybox sh /run/run-in-vm/cmd.sh" > /run/systemd/system/run-in-vm.service'
    # The D-Bus system bus too, where dbus is installed (systemd's D-Bus API for clients such as runc): the
    # bus and its socket without their default dependencies, which would pull in the whole sysinit.target.
    echo 'if [ -e /lib/systemd/system/dbus.socket ]; then'
    echo '  for u in dbus.socket dbus.service; do $B mkdir -p /run/systemd/system/$u.d; printf "%s\n" "[Unit]" "DefaultDependencies=no" > /run/systemd/system/$u.d/run-in-vm.conf; done'
    echo '  printf "%s\n" "[Unit]" "Wants=dbus.socket dbus.service" "After=dbus.socket dbus.service" > /run/systemd/system/run-in-vm.service.d.conf'
    echo '  $B mkdir -p /run/systemd/system/run-in-vm.service.d; $B mv /run/systemd/system/run-in-vm.service.d.conf /run/systemd/system/run-in-vm.service.d/dbus.conf'
    echo 'fi'
    echo 'exec /lib/systemd/systemd --unit=run-in-vm.service --log-target=kmsg'
  fi
  echo '#CMD-START'
  echo 'B=/run/run-in-vm/busybox'
  # environment: host's exported variables minus host-session specific ones
  while IFS= read -r -d '' kv; do
    k=${kv%%=*}
    case $k in
      ''|*[!A-Za-z0-9_]*|[0-9]*|BASH*|SHLVL|PWD|OLDPWD|_|TERM|TERMCAP|SSH_*|DISPLAY|XDG_*|TMPDIR|COLUMNS|LINES|RUN_IN_VM_*) continue ;;
    esac
    printf 'export %s=' "$k"; q "${kv#*=}"; echo
  done < <(env -0)
  printf 'export HOME=/root TERM=dumb\n'
  for kv in ${GUEST_ENV[@]+"${GUEST_ENV[@]}"}; do printf 'export %s=' "${kv%%=*}"; q "${kv#*=}"; echo; done
  printf '(cd '; q "$PWD"; printf ' 2>/dev/null || cd '; q "$(pwd -P)"
  printf ' 2>/dev/null || { echo "run-in-vm: cwd %s is not visible in the guest" >&2; exit 125; }; exec ' "${PWD//[\'\"\\\$\`%]/?}"
  # resolve the command through PATH here: stage2's busybox ash would otherwise run its own applet
  # for names like sh, ls, mount or ps instead of the host's binaries
  cmd=$1; case $cmd in */*) ;; *) cmd=$(type -P -- "$cmd") || cmd=$1 ;; esac
  q "$cmd"; printf ' '
  for a in "${@:2}"; do q "$a"; printf ' '; done; echo ') </dev/null >/dev/ttyS0 2>&1'
  echo 'rc=$?'
  echo 'echo "exit=$rc" > /dev/ttyS2'
  echo '$B sync'
  echo '$B poweroff -f'
} >"$JOB/stage2.sh"

# ---------------------------------------------------------------- virtiofsd
# parent-death signal: if this script is SIGKILLed, virtiofsd, timeout(1) and qemu die with it
PDS=(); setpriv --help 2>/dev/null | grep -q -- --pdeathsig && PDS=(setpriv --pdeathsig KILL --)
SOCK=$JOB/vfs.sock
${PDS[@]+"${PDS[@]}"} "$VIRTIOFSD" --socket-path="$SOCK" -o source=/ -o cache=auto -o sandbox=chroot \
  -o log_level=err >"$JOB/virtiofsd.log" 2>&1 &
VFS_PID=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done
[ -S "$SOCK" ] || { cat "$JOB/virtiofsd.log" >&2; die "virtiofsd did not start"; }

# ---------------------------------------------------------------- qemu
APPEND="panic=-1 rdinit=/init cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 runinvm.job=$JOB"
# ttyS0 -> our stdout (command output); ttyS1 -> $JOB/console.log (kernel console + init trace,
# shown on failure); ttyS2 -> $JOB/status ("exit=N" written by the guest's PID 1)
if [ "$DEBUG" = 1 ]; then APPEND+=" console=ttyS1 runinvm.debug=1 loglevel=7"; else APPEND+=" console=ttyS1 loglevel=4"; fi
# systemd's boot status lines would land on the command's output
[ "$INIT" = systemd ] && APPEND+=" systemd.show_status=0"
APPEND+=" edd=off tsc=reliable no_timer_check cryptomgr.notests mitigations=off"
# Under tcg the guest calibrates its TSC against the emulated PIT/HPET at boot; on a loaded host that
# measurement can be off several times over (a CI run's guest clock once ran ~6x fast, so 30 s test deadlines
# passed in seconds). HPET counts host time whatever the load: keep time by it.
[ "$ACCEL" = tcg ] && APPEND+=" clocksource=hpet"
APPEND+=" ${RUN_IN_VM_APPEND:-}"
QARGS=(-nodefaults -no-user-config -display none -no-reboot "${ACCEL_ARGS[@]}"
  -machine q35 -bios "${RUN_IN_VM_BIOS:-/usr/share/qemu/qboot.rom}" -smp "$CPUS" -m "$MEM"
  -object memory-backend-memfd,id=mem,size="$MEM",share=on -numa node,memdev=mem
  -chardev socket,id=vfs,path="$SOCK" -device vhost-user-fs-pci,chardev=vfs,tag=hostroot,queue-size=1024
  -chardev stdio,id=out,signal=on -serial chardev:out
  -serial file:"$JOB/console.log" -serial file:"$JOB/status"
  -pidfile "$JOB/qemu.pid" -kernel "$BOOT_IMAGE" -initrd "$JOB/initrd.cpio" -append "$APPEND")
[ -n "${RUN_IN_VM_MONITOR:-}" ] && QARGS+=(-monitor "unix:$RUN_IN_VM_MONITOR,server=on,wait=off")
[ "$DISK" != 0 ] && QARGS+=(-drive if=none,id=scratch,driver=null-co,size="$DISK",read-zeroes=on -device virtio-blk-pci,drive=scratch)
TO=(); [ "$TIMEOUT" != 0 ] && TO=(${PDS[@]+"${PDS[@]}"} timeout -k 5 "$TIMEOUT")
set +e
# qemu runs in the background so that a signal to this script runs cleanup() at once;
# timeout(1) forwards the TERM from cleanup() to qemu, and cleanup() also checks qemu.pid
${TO[@]+"${TO[@]}"} ${PDS[@]+"${PDS[@]}"} "$QEMU" "${QARGS[@]}" </dev/null &
QEMU_PID=$!
wait "$QEMU_PID"
qrc=$?
QEMU_PID=''
set -e
[ "$DEBUG" = 1 ] && cat "$JOB/console.log" >&2
st=$(tr -d '\r' <"$JOB/status" 2>/dev/null | grep -E '^(exit=|init-failed)' | tail -1 || true)
case $st in
  exit=*) exit "${st#exit=}" ;;
  init-failed) tail -n 40 "$JOB/console.log" >&2; die "guest init failed (rerun with RUN_IN_VM_DEBUG=1)" ;;
  *) tail -n 40 "$JOB/console.log" >&2 2>/dev/null
     [ "$qrc" = 124 ] && die "timed out after ${TIMEOUT}s"
     die "VM ended without a command status (qemu rc=$qrc; rerun with RUN_IN_VM_DEBUG=1)" ;;
esac
