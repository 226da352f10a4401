#!/usr/bin/env bash
# An emulated arm64 board to install the agent onto and qualify on.
#
#   scripts/arm64_board.sh up       build (once) and start the board, print its address
#   scripts/arm64_board.sh down     stop everything `up` started
#   scripts/arm64_board.sh status   say what runs
#   scripts/arm64_board.sh env      the board's settings as shell assignments (for scripts)
#
# The board is a Debian bookworm arm64 root file system (debootstrap --foreign,
# then its second stage run under qemu-user through binfmt_misc) with python3,
# python3-venv, python3-pip and openssh-server. `up` starts its OpenSSH server
# in a chroot, on 127.0.0.1 only, inside new PID and mount namespaces: /proc,
# /dev, /sys and /run of the board exist only in that mount namespace, and
# `down` kills the namespace's init, so every process the board ran (sshd, the
# sessions, an agent started in the background) ends with it.
#
# The root file system is built once and cached in $EDGEQUAL_ARM64_DIR
# (default /var/cache/edgequal-arm64/rootfs); the first build takes several
# minutes. The board reaches the package registries as this machine does:
# `up` copies this machine's CA certificates, resolver and the network parts
# of its pip configuration into the board.
#
# Needs root (debootstrap, chroot, namespaces, binfmt_misc). Installs
# debootstrap, qemu-user-static and binfmt-support with apt when missing.
# Exits 2, with one line, where the kernel refuses binfmt_misc.
#
# Settings (environment):
#   EDGEQUAL_ARM64_DIR     cache and state directory (/var/cache/edgequal-arm64)
#   EDGEQUAL_ARM64_PORT    SSH port on 127.0.0.1 (default: a free one)
#   EDGEQUAL_ARM64_USER    the board's login user (default: edge)
#   EDGEQUAL_ARM64_MIRROR  Debian mirror (default: the one this machine's apt uses)
#   EDGEQUAL_ARM64_SUITE   Debian suite (default: bookworm)
#   EDGEQUAL_ARM64_CPUINFO=aarch64
#                          show the board an aarch64 /proc/cpuinfo (Cortex-A76 cores, one
#                          per host CPU) instead of qemu-user's pass-through of this
#                          machine's x86 one, on which onnxruntime's import crashes
#                          (SIGSEGV); see docs/device-reach.md
set -euo pipefail

DIR=${EDGEQUAL_ARM64_DIR:-/var/cache/edgequal-arm64}
SUITE=${EDGEQUAL_ARM64_SUITE:-bookworm}
BOARD_USER=${EDGEQUAL_ARM64_USER:-edge}
ROOTFS=$DIR/rootfs
RUN=$DIR/run
PACKAGES=python3,python3-venv,python3-pip,openssh-server,openssh-sftp-server,ca-certificates,procps
BINFMT=/proc/sys/fs/binfmt_misc

say() { printf 'arm64-board: %s\n' "$*" >&2; }
die() { say "error: $1"; exit "${2:-1}"; }

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, namespaces, binfmt_misc); run it with sudo" 2
}

default_mirror() {
    local m
    m=$(grep -rhoE '^(URIs:|deb) *(\[[^]]*\] *)?https?://[^ ]+/debian/?( |$)' \
        /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
        grep -oE 'https?://[^ ]+' | head -n1 || true)
    echo "${m:-http://deb.debian.org/debian}"
}

ensure_tools() {
    local missing=()
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [ -e /usr/bin/qemu-aarch64-static ] || missing+=(qemu-user-static)
    command -v update-binfmts >/dev/null || missing+=(binfmt-support)
    command -v unshare >/dev/null || missing+=(util-linux)
    command -v ssh-keygen >/dev/null || missing+=(openssh-client)
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]} with apt"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >"$DIR/apt.log" 2>&1 || {
            apt-get update -q >>"$DIR/apt.log" 2>&1
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >>"$DIR/apt.log" 2>&1
        } || die "apt-get install ${missing[*]} failed; see $DIR/apt.log"
    fi
}

# binfmt_misc: mounted, and aarch64 ELF files handed to qemu. What this script
# mounted or registered itself is recorded, so `down` undoes only that.
ensure_binfmt() {
    if [ ! -e "$BINFMT/register" ]; then
        if ! mount -t binfmt_misc binfmt_misc "$BINFMT" 2>/dev/null; then
            say "the kernel refuses binfmt_misc (mount -t binfmt_misc failed): aarch64 programs cannot run here"
            exit 2
        fi
        echo "$BINFMT" >"$RUN/mounted-binfmt"
    fi
    if [ ! -e "$BINFMT/qemu-aarch64" ]; then
        update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
    fi
    if [ ! -e "$BINFMT/qemu-aarch64" ]; then
        # Register by hand (F: the interpreter is opened now, so the chroot needs no copy of it).
        local reg=':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:PF'
        if ! printf '%s' "$reg" >"$BINFMT/register" 2>/dev/null; then
            say "the kernel refuses to register qemu-aarch64 with binfmt_misc: aarch64 programs cannot run here"
            exit 2
        fi
        echo qemu-aarch64 >"$RUN/registered-binfmt"
    fi
    if [ "$(head -n1 "$BINFMT/qemu-aarch64")" != enabled ]; then
        echo 1 >"$BINFMT/qemu-aarch64" 2>/dev/null ||
            { say "binfmt_misc entry qemu-aarch64 is disabled and cannot be enabled"; exit 2; }
    fi
}

build_rootfs() {
    [ -e "$ROOTFS/.edgequal-board" ] && return 0
    local mirror=${EDGEQUAL_ARM64_MIRROR:-$(default_mirror)}
    local tmp=$DIR/rootfs.building log=$DIR/build.log start=$SECONDS
    rm -rf "$tmp"
    mkdir -p "$tmp"
    say "building a Debian $SUITE arm64 root file system in $ROOTFS (several minutes; log: $log)"
    : >"$log"
    debootstrap --arch=arm64 --foreign --variant=minbase --include="$PACKAGES" \
        "$SUITE" "$tmp" "$mirror" >>"$log" 2>&1 ||
        die "debootstrap (first stage) failed; see $log"
    say "first stage done in $((SECONDS - start)) s; second stage under qemu"
    # Kept inside too, for kernels whose binfmt entry lacks the F flag.
    cp /usr/bin/qemu-aarch64-static "$tmp/usr/bin/"
    chroot "$tmp" /debootstrap/debootstrap --second-stage >>"$log" 2>&1 ||
        die "debootstrap --second-stage (under qemu) failed; see $log"
    chroot "$tmp" /usr/sbin/useradd --create-home --shell /bin/bash "$BOARD_USER" >>"$log" 2>&1 ||
        die "useradd $BOARD_USER failed; see $log"
    # OpenSSH's own key generation at install time may have been skipped (no /proc yet).
    chroot "$tmp" /usr/bin/ssh-keygen -A >>"$log" 2>&1 || die "ssh-keygen -A failed; see $log"
    chroot "$tmp" /usr/bin/apt-get clean >>"$log" 2>&1 || true
    {
        echo "suite=$SUITE"
        echo "mirror=$mirror"
        echo "packages=$PACKAGES"
        echo "user=$BOARD_USER"
        echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "build_seconds=$((SECONDS - start))"
    } >"$tmp/.edgequal-board"
    mv "$tmp" "$ROOTFS"
    say "root file system built in $((SECONDS - start)) s"
}

board_user() { sed -n 's/^user=//p' "$ROOTFS/.edgequal-board"; }

# The network parts of this machine's registry configuration, so the board
# reaches the same registries the same way: CA certificates (an egress proxy's
# CA included), the resolver, and pip's index URLs and timeout (not local
# find-links or file:// indexes: those are this machine's x86 wheels).
mirror_registry_config() {
    cp -L /etc/resolv.conf "$ROOTFS/etc/resolv.conf" 2>/dev/null || true
    if [ -d /usr/local/share/ca-certificates ]; then
        mkdir -p "$ROOTFS/usr/local/share/ca-certificates"
        cp -L /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/" 2>/dev/null || true
    fi
    # The host's bundle already holds the system and the local CAs.
    cp -L /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
    local conf=$ROOTFS/etc/pip.conf value
    {
        echo "# Written by scripts/arm64_board.sh from this machine's pip configuration"
        echo "[global]"
        echo "cert = /etc/ssl/certs/ca-certificates.crt"
        value=$(pip_config global.index-url)
        [ -n "$value" ] && echo "index-url = $value"
        value=$(pip_config global.extra-index-url | tr ' ' '\n' | grep -E '^https?://' | tr '\n' ' ' || true)
        [ -n "${value// /}" ] && echo "extra-index-url = $value"
        value=$(pip_config global.timeout)
        [ -z "$value" ] && value=${PIP_DEFAULT_TIMEOUT:-}
        [ -n "$value" ] && echo "timeout = $value"
        true
    } >"$conf"
}

pip_config() {
    local py
    for py in python3 python; do
        if command -v "$py" >/dev/null && "$py" -m pip --version >/dev/null 2>&1; then
            "$py" -m pip config get "$1" 2>/dev/null | head -n1 || true
            return 0
        fi
    done
}

# What a Cortex-A76 (Raspberry Pi 5) shows, one entry per CPU of this machine.
write_aarch64_cpuinfo() {
    local i n
    n=$(nproc)
    for ((i = 0; i < n; i++)); do
        printf 'processor\t: %d\nBogoMIPS\t: 108.00\n' "$i"
        printf 'Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\n'
        printf 'CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: 0xd0b\nCPU revision\t: 1\n\n'
    done
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

running_pid() {
    local pid
    pid=$(cat "$RUN/board.pid" 2>/dev/null) || return 1
    # /proc rather than kill -0, so `status` works without root too.
    [ -n "$pid" ] && grep -q unshare "/proc/$pid/cmdline" 2>/dev/null &&
        echo "$pid"
}

write_client_files() {
    local port=$1 user=$2
    local hostkey
    hostkey=$(cut -d' ' -f1,2 "$ROOTFS/etc/ssh/ssh_host_ed25519_key.pub")
    echo "[127.0.0.1]:$port $hostkey" >"$RUN/known_hosts"
    cat >"$RUN/ssh_config" <<EOF
# The emulated arm64 board (scripts/arm64_board.sh); use with ssh -F or Include
Host arm64-board
    HostName 127.0.0.1
    Port $port
    User $user
    IdentityFile $RUN/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $RUN/known_hosts
EOF
    cat >"$RUN/board.env" <<EOF
EDGEQUAL_ARM64_SSH=ssh://$user@127.0.0.1:$port
EDGEQUAL_ARM64_HOST=127.0.0.1
EDGEQUAL_ARM64_PORT=$port
EDGEQUAL_ARM64_USER=$user
EDGEQUAL_ARM64_KEY=$RUN/id_ed25519
EDGEQUAL_ARM64_KNOWN_HOSTS=$RUN/known_hosts
EDGEQUAL_ARM64_SSH_CONFIG=$RUN/ssh_config
EDGEQUAL_ARM64_ROOTFS=$ROOTFS
EOF
}

cmd_up() {
    need_root
    mkdir -p "$DIR" "$RUN"
    exec 9>"$DIR/.lock"
    flock -w 1800 9 || die "another arm64_board.sh holds $DIR/.lock"
    if pid=$(running_pid); then
        say "already running (pid $pid)"
        print_address
        return 0
    fi
    ensure_tools
    ensure_binfmt
    build_rootfs
    local user port
    user=$(board_user)
    port=${EDGEQUAL_ARM64_PORT:-$(free_port)}
    mirror_registry_config

    # The client key (on this machine) is the board user's only authorized key.
    [ -e "$RUN/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C edgequal-arm64-board -f "$RUN/id_ed25519"
    local home=$ROOTFS/home/$user uid gid
    uid=$(awk -F: -v u="$user" '$1 == u {print $3}' "$ROOTFS/etc/passwd")
    gid=$(awk -F: -v u="$user" '$1 == u {print $4}' "$ROOTFS/etc/passwd")
    mkdir -p "$home/.ssh"
    cp "$RUN/id_ed25519.pub" "$home/.ssh/authorized_keys"
    chmod 700 "$home/.ssh"
    chmod 600 "$home/.ssh/authorized_keys"
    chown -R "$uid:$gid" "$home/.ssh"
    # A new account's password is "!" (locked), which sshd without PAM refuses even for
    # keys; "*" means no password, key logins only.
    sed -i "s/^$user:![^:]*:/$user:*:/" "$ROOTFS/etc/shadow"

    cat >"$ROOTFS/etc/ssh/sshd_config.edgequal" <<EOF
# Written by scripts/arm64_board.sh
ListenAddress 127.0.0.1
Port $port
HostKey /etc/ssh/ssh_host_ed25519_key
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin no
AllowUsers $user
PidFile /run/sshd.pid
Subsystem sftp internal-sftp
AcceptEnv LANG LC_*
EOF
    # Validate the configuration before the board starts (under qemu, as it will run).
    mkdir -p "$ROOTFS/run/sshd"
    chroot "$ROOTFS" /usr/sbin/sshd -t -f /etc/ssh/sshd_config.edgequal ||
        die "sshd refuses its configuration"

    # New PID and mount namespaces; --kill-child: when unshare dies (down), the
    # namespace's init is killed, and with it every process inside.
    local log=$RUN/sshd.log cpuinfo=""
    : >"$log"
    case "${EDGEQUAL_ARM64_CPUINFO:-}" in
    "" | host | 0) ;;
    aarch64 | 1)
        cpuinfo=$RUN/cpuinfo
        write_aarch64_cpuinfo >"$cpuinfo"
        ;;
    *) die "EDGEQUAL_ARM64_CPUINFO must be aarch64 or empty, not ${EDGEQUAL_ARM64_CPUINFO}" 2 ;;
    esac
    setsid unshare --pid --mount --propagation private --kill-child=SIGKILL -- \
        /bin/sh -c '
            set -e
            R=$1
            mount -t proc proc "$R/proc"
            if [ -n "$2" ]; then mount --bind "$2" "$R/proc/cpuinfo"; fi
            mount --rbind /dev "$R/dev"
            mount --rbind /sys "$R/sys"
            mount -t tmpfs -o mode=755 tmpfs "$R/run"
            mkdir -p "$R/run/sshd"
            chmod 755 "$R/run/sshd"
            mkdir -p "$R/tmp" && chmod 1777 "$R/tmp"
            exec chroot "$R" /usr/sbin/sshd -D -e -f /etc/ssh/sshd_config.edgequal
        ' board "$ROOTFS" "$cpuinfo" >>"$log" 2>&1 </dev/null 9>&- &
    local pid=$!
    echo "$pid" >"$RUN/board.pid"
    echo "$port" >"$RUN/port"
    echo "${cpuinfo:+aarch64 (Cortex-A76, bind-mounted)}" >"$RUN/cpuinfo-mode"
    write_client_files "$port" "$user"

    # Wait until sshd accepts connections (sshd under qemu starts in a few seconds).
    local i
    for i in $(seq 120); do
        if ! kill -0 "$pid" 2>/dev/null; then
            say "error: the board's sshd exited; its log:"
            sed 's/^/  /' "$log" >&2
            rm -f "$RUN/board.pid"
            exit 3
        fi
        if ssh-keyscan -T 2 -p "$port" -t ed25519 127.0.0.1 2>/dev/null | grep -q ssh-ed25519; then
            break
        fi
        sleep 0.5
    done
    [ "$i" -lt 120 ] || die "the board's sshd did not answer on 127.0.0.1:$port within 60 s; see $log" 3
    say "up: Debian $(sed -n 's/^suite=//p' "$ROOTFS/.edgequal-board") arm64 board, sshd pid namespace under pid $pid"
    print_address
}

print_address() {
    # shellcheck disable=SC1091
    . "$RUN/board.env"
    echo "address:     $EDGEQUAL_ARM64_SSH"
    echo "known_hosts: $(cat "$EDGEQUAL_ARM64_KNOWN_HOSTS")"
    echo "key:         $EDGEQUAL_ARM64_KEY"
    echo "ssh:         ssh -F $EDGEQUAL_ARM64_SSH_CONFIG arm64-board"
    echo "edgequal:    edgequal agent install $EDGEQUAL_ARM64_SSH --ssh-key $EDGEQUAL_ARM64_KEY --known-hosts $EDGEQUAL_ARM64_KNOWN_HOSTS"
}

cmd_down() {
    need_root
    mkdir -p "$RUN"
    exec 9>"$DIR/.lock"
    flock -w 10 9 || die "another arm64_board.sh holds $DIR/.lock"
    local pid
    if pid=$(running_pid); then
        # unshare blocks SIGTERM while it waits for its child, so it gets SIGKILL; its
        # --kill-child (PR_SET_PDEATHSIG) then kills the namespace's init, and the
        # kernel every other process in that PID namespace.
        kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        say "stopped the board (pid $pid and its PID namespace)"
    else
        say "the board was not running"
    fi
    rm -f "$RUN/board.pid"
    # Anything left whose root is the board's root file system (there should be none).
    local p left=0
    for p in /proc/[0-9]*; do
        if [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOTFS" ]; then
            kill -KILL "${p#/proc/}" 2>/dev/null && left=$((left + 1))
        fi
        true
    done
    [ "$left" = 0 ] || say "killed $left process(es) left in the board's root"
    # binfmt: undo only what `up` did.
    if [ -e "$RUN/registered-binfmt" ]; then
        echo -1 >"$BINFMT/qemu-aarch64" 2>/dev/null || true
        rm -f "$RUN/registered-binfmt"
    fi
    if [ -e "$RUN/mounted-binfmt" ]; then
        umount "$BINFMT" 2>/dev/null || say "binfmt_misc still in use; left mounted"
        rm -f "$RUN/mounted-binfmt"
    fi
}

cmd_status() {
    local pid rc=0
    if [ -e "$ROOTFS/.edgequal-board" ]; then
        echo "rootfs:  $ROOTFS ($(tr '\n' ' ' <"$ROOTFS/.edgequal-board"))"
    else
        echo "rootfs:  not built ($ROOTFS)"
    fi
    if [ -e "$BINFMT/qemu-aarch64" ]; then
        echo "binfmt:  qemu-aarch64 $(head -n1 "$BINFMT/qemu-aarch64"), $(sed -n 's/^interpreter //p' "$BINFMT/qemu-aarch64")"
    else
        echo "binfmt:  qemu-aarch64 not registered"
    fi
    if pid=$(running_pid); then
        local procs
        procs=$(for p in /proc/[0-9]*; do
            if [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOTFS" ]; then echo "${p#/proc/}"; fi
        done | wc -l)
        echo "board:   running (pid $pid, $procs process(es) in the board)"
        echo "cpuinfo: $(cat "$RUN/cpuinfo-mode" 2>/dev/null | grep . || echo "this machine's, passed through by qemu-user")"
        print_address
    else
        echo "board:   not running"
        rc=3
    fi
    return $rc
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
env) [ -e "$RUN/board.env" ] && running_pid >/dev/null && cat "$RUN/board.env" || die "the board is not running" 3 ;;
*)
    echo "usage: $0 up|down|status|env" >&2
    exit 2
    ;;
esac
