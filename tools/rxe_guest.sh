#!/usr/bin/env bash
# Runs a command inside a QEMU guest whose kernel has soft-RoCE (rdma_rxe): real libibverbs, the
# real rxe provider and the kernel's RC transport, on a machine without RDMA hardware.
#
#   tools/rxe_guest.sh [--pair] [--cpus N] [--mem MIB] [--timeout S] [--] CMD [ARG...]
#
# The guest boots Debian's stock kernel (linux-image-amd64) under QEMU's TCG emulator, with this
# machine's / shared read-only over 9p and the current directory shared read-write (the command
# runs there, in this environment); /tmp, /run, /var/tmp and /dev/shm are empty tmpfs. It loads
# rdma_rxe and adds one device, rxe0 (on a dummy netdev, 198.18.0.1), or with --pair two, rxe1 and
# rxe2, on the ends of a veth pair (198.18.1.1, 198.18.1.2), routed so that their RoCE v2 traffic
# crosses the veth: two "hosts". RXE_GUEST_DEVICES names them for the command.
# Exit status: the command's; 77 when no guest can be booted here (why is printed: not root,
# missing packages or kernel); 124 when the guest did not finish within --timeout.
# Needs root (the tree is read over 9p as it is, and the guest is root). Debian packages:
# qemu-system-x86 linux-image-amd64 busybox-static rdma-core ibverbs-providers (tools/setup.sh
# installs them with GSYNC_SETUP_RXE=1). TCG runs user code 5-20x slower than the host: use it for
# functional checks, never for timings. Not KVM: this kind of machine's /dev/kvm boots only
# specially built kernels (../shared/design/soft-roce-guest.md).
set -euo pipefail

pair=0 cpus=2 mem=2048 limit=900
while [ $# -gt 0 ]; do
  case $1 in
    --pair) pair=1 ;;
    --cpus) cpus=$2; shift ;;
    --mem) mem=$2; shift ;;
    --timeout) limit=$2; shift ;;
    --) shift; break ;;
    -*) echo "rxe_guest.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
[ $# -gt 0 ] || { echo "usage: rxe_guest.sh [--pair] [--cpus N] [--mem MIB] [--timeout S] [--] CMD [ARG...]" >&2; exit 2; }

skip() { echo "rxe_guest.sh: SKIP: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (reads the tree over 9p as its owner, boots the guest as root)"
qemu=$(command -v qemu-system-x86_64) || skip "no qemu-system-x86_64 (Debian: qemu-system-x86)"
bb=$(command -v busybox) || skip "no busybox (Debian: busybox-static)"
file -L "$bb" 2>/dev/null | grep -q 'statically linked' || skip "$bb is not static (Debian: busybox-static)"
kernel=$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1) || true
[ -n "$kernel" ] || skip "no kernel in /boot (Debian: linux-image-amd64)"
kver=${kernel#/boot/vmlinuz-}
mods=/lib/modules/$kver
[ -n "$(find "$mods" -name 'rdma_rxe.ko*' 2>/dev/null | head -1)" ] || skip "kernel $kver has no rdma_rxe module"
command -v rdma >/dev/null || skip "no rdma tool (Debian: iproute2)"
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] || skip "no rxe provider (Debian: ibverbs-providers)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rxe_guest.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ctl" "$tmp/initrd/bin" "$tmp/initrd/m"
work=$(pwd -P)

# The initramfs: static busybox and the modules that mount 9p, in load order.
cp "$bb" "$tmp/initrd/bin/busybox"
for m in virtio_pci 9pnet_virtio 9p; do modprobe -S "$kver" --show-depends "$m"; done |
  awk '$1 == "insmod" && !seen[$2]++ {print $2}' >"$tmp/order"
[ -s "$tmp/order" ] || skip "modprobe found no 9p modules for $kver"
while read -r ko; do
  case $ko in
    *.ko) cp "$ko" "$tmp/initrd/m/" ;;
    *.ko.xz) xz -dc "$ko" >"$tmp/initrd/m/$(basename "${ko%.xz}")" ;;
    *.ko.zst) zstd -qdc "$ko" >"$tmp/initrd/m/$(basename "${ko%.zst}")" ;;
    *) skip "module $ko in an unknown format" ;;
  esac
  basename "${ko%.*}" | sed 's/\.ko$//' >>"$tmp/initrd/m/order"
done <"$tmp/order"

cat >"$tmp/initrd/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc 2>/dev/null || { mkdir -p /proc; mount -t proc proc /proc; }
mkdir -p /sys /dev /newroot; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in \$(cat /m/order); do insmod /m/\$m.ko || echo "rxe_guest: insmod \$m failed"; done
o=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o \$o,ro,cache=loose hostroot /newroot || { echo "rxe_guest: cannot mount the host's root"; echo o >/proc/sysrq-trigger; }
# Fresh tmpfs for /tmp, /var/tmp and /run; the host's directories under /tmp and /var/tmp stay
# visible in them, read-only (a tree cloned into /tmp, as CI's may be).
for d in tmp var/tmp; do
  mkdir -p /hold/\$d; mount -o bind /newroot/\$d /hold/\$d
  mount -t tmpfs -o mode=1777 tmpfs /newroot/\$d
  for e in /hold/\$d/*; do
    [ -d "\$e" ] && [ ! -L "\$e" ] || continue
    mkdir -p "/newroot/\$d/\${e##*/}" && mount -o bind "\$e" "/newroot/\$d/\${e##*/}"
  done
done
mount -t tmpfs tmpfs /newroot/run
mount -t devtmpfs dev /newroot/dev; mkdir -p /newroot/dev/shm /newroot/dev/pts
mount -t tmpfs -o mode=1777 shm /newroot/dev/shm; mount -t devpts devpts /newroot/dev/pts
mount -t proc proc /newroot/proc; mount -t sysfs sys /newroot/sys
mkdir -p /newroot/run/rxe-guest
mount -t 9p -o \$o,cache=mmap ctl /newroot/run/rxe-guest
mount -t 9p -o \$o,cache=mmap work "/newroot$work"
# The host's root becomes the guest's, so that the kernel loads modules on demand from it.
exec switch_root /newroot /bin/bash /run/rxe-guest/inner.sh
EOF
chmod +x "$tmp/initrd/init"
(cd "$tmp/initrd" && find . | cpio -o -H newc --quiet | gzip -1) >"$tmp/initrd.gz"

# The caller's environment and command, and the guest's network and devices.
export -p | grep -v -E '^declare -x (BASH_[A-Z_]*|SHELLOPTS|BASHOPTS|EUID|PPID|UID|SHLVL|OLDPWD|PWD|TERM|TMPDIR)=' >"$tmp/ctl/env"
printf '%q ' "$@" >"$tmp/ctl/cmd"
cat >"$tmp/ctl/inner.sh" <<EOF
set -u
source /run/rxe-guest/env
export TMPDIR=/tmp
# Process 1: the guest powers off when it ends.
trap 'sync; echo o >/proc/sysrq-trigger; sleep 10 2>/dev/null' EXIT
fail() { echo "rxe_guest: \$*" >&2; echo 77 >/run/rxe-guest/rc; exit 0; }
ip link set lo up
modprobe rdma_rxe || fail "modprobe rdma_rxe failed"
if [ $pair = 1 ]; then
  # Both ends in one namespace (rxe listens on UDP 4791 in the initial one only): what arrives on
  # a veth end is local, what goes to the other end's address leaves through this end.
  ip link add va type veth peer name vb
  ip addr add 198.18.1.1/32 dev va; ip addr add 198.18.1.2/32 dev vb
  ip link set va up; ip link set vb up
  for c in all default va vb; do
    sysctl -qw net.ipv4.conf.\$c.rp_filter=0 net.ipv4.conf.\$c.accept_local=1
  done
  ip rule add pref 10 iif va lookup local; ip rule add pref 11 iif vb lookup local
  ip rule add pref 20 to 198.18.1.2 lookup 101; ip rule add pref 21 to 198.18.1.1 lookup 102
  ip rule add pref 100 lookup local; ip rule del pref 0 lookup local
  ip route add 198.18.1.2 dev va table 101; ip route add 198.18.1.1 dev vb table 102
  rdma link add rxe1 type rxe netdev va || fail "rdma link add rxe1 failed"
  rdma link add rxe2 type rxe netdev vb || fail "rdma link add rxe2 failed"
  export RXE_GUEST_DEVICES="rxe1 rxe2"
else
  ip link add d0 type dummy; ip addr add 198.18.0.1/24 dev d0; ip link set d0 up
  rdma link add rxe0 type rxe netdev d0 || fail "rdma link add rxe0 failed"
  export RXE_GUEST_DEVICES=rxe0
fi
ulimit -l unlimited
cd "$work"
eval "\$(cat /run/rxe-guest/cmd)"
echo \$? >/run/rxe-guest/rc
EOF

# TCG: /dev/kvm here is PVM, which boots only PVM-enlightened kernels.
echo "rxe_guest.sh: booting $kver under TCG ($cpus vCPUs, $mem MiB)$([ $pair = 1 ] && echo ', two rxe devices')" >&2
rc=0
timeout --kill-after=10 "$limit" "$qemu" -accel tcg,thread=multi -cpu max -smp "$cpus" -m "$mem" \
  -nodefaults -no-user-config -display none -no-reboot \
  -chardev stdio,id=con,signal=off -serial chardev:con \
  -kernel "$kernel" -initrd "$tmp/initrd.gz" -append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init" \
  -fsdev local,id=f0,path=/,security_model=none,readonly=on,multidevs=remap -device virtio-9p-pci,fsdev=f0,mount_tag=hostroot \
  -fsdev local,id=f1,path="$tmp/ctl",security_model=none -device virtio-9p-pci,fsdev=f1,mount_tag=ctl \
  -fsdev local,id=f2,path="$work",security_model=none -device virtio-9p-pci,fsdev=f2,mount_tag=work \
  </dev/null || rc=$?
[ $rc = 124 ] || [ $rc = 137 ] && { echo "rxe_guest.sh: the guest did not finish within $limit s" >&2; exit 124; }
[ -s "$tmp/ctl/rc" ] || { echo "rxe_guest.sh: the guest stopped without the command's status (qemu exit $rc)" >&2; exit 1; }
exit "$(cat "$tmp/ctl/rc")"
