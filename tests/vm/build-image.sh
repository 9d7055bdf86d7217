#!/usr/bin/env bash
# Build the VM tier's guest image: Debian 12 (bookworm) from Debian packages only
# (mmdebstrap, minbase + tests/vm/packages.txt), systemd as PID 1, pure cgroup v2 (the
# bookworm default), and a boot runner that mounts the host's 9p shares, runs
# /mnt/payload/tests/vm/guest/check.sh and powers the guest off.
#
#   tests/vm/build-image.sh CACHE_DIR
#
# Writes CACHE_DIR/{rootfs.img,vmlinuz,initrd.img,image.stamp}. The stamp is the sha256
# of packages.txt and this script: run.sh rebuilds when it differs. The image is built
# into a temporary directory next to the cache and renamed into place, so an interrupted
# build never leaves a half image behind. No loop device, no mount: mkfs.ext4 -d.
# Learned from the measured recipe in the workplace notes (vm-guest/NOTES.md).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache=${1:?usage: build-image.sh CACHE_DIR}
mkdir -p "$cache"
suite=bookworm
image_size=2G
packages=$(grep -v '^#' "$here/packages.txt" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')

mirror() {
  local m
  m=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
  [ -n "$m" ] || { echo "build-image: no Debian mirror in the apt sources" >&2; exit 1; }
  echo "$m"
}

tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
R="$tmp/rootfs"

# A small initramfs (virtio-blk + ext4 only, ~6.5 MB instead of ~36 MB): written before
# the kernel package is installed, by mmdebstrap's setup hook. Not conffiles.
initramfs_conf() {
  mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"
  echo MODULES=list > "$1/etc/initramfs-tools/conf.d/vm-guest.conf"
  printf 'virtio_pci\nvirtio_blk\next4\n' > "$1/usr/share/initramfs-tools/modules.d/vm-guest"
}

m=$(mirror)
t0=$SECONDS
# The log goes through sed so the mirror's name is not written to disk.
if ! mmdebstrap --variant=minbase --include="$packages" --dpkgopt=force-unsafe-io \
    --setup-hook="$(declare -f initramfs_conf); initramfs_conf \"\$1\"" \
    "$suite" "$R" "deb $m $suite main" 2>&1 | sed "s|$m|<mirror>|g" > "$tmp/bootstrap.log"; then
  tail -30 "$tmp/bootstrap.log" >&2
  exit 1
fi
echo "build-image: mmdebstrap took $((SECONDS - t0)) s" >&2

# Guard: every path below is "$R/..."; an empty or wrong R would hit the host.
[ -n "$R" ] && [ "$R" != / ] && [ -d "$R/usr" ] && [ -d "$R/boot" ] || { echo "bad rootfs $R" >&2; exit 1; }
echo vmguest > "$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 vmguest\n' > "$R/etc/hosts"
# No fstab entry for /: the kernel mounts it rw (root=/dev/vda rw); an entry makes boot
# wait 10-20 s for dev-vda.device under emulation.
printf '# root is mounted rw by the kernel (root=/dev/vda rw)\n' > "$R/etc/fstab"
mkdir -p "$R/mnt/payload" "$R/mnt/results"
# No login prompts on the consoles; no timers or scrubbers in a throwaway VM.
for u in serial-getty@ttyS0.service getty@tty1.service apt-daily.timer \
         apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer e2scrub_reap.service; do
  ln -sf /dev/null "$R/etc/systemd/system/$u"
done

# The boot runner: after multi-user.target, mount the payload (read-only) and results
# shares, run the payload's check script, print everything to the serial console, power
# off whatever happened.
cat > "$R/etc/systemd/system/vivarium-vm-runner.service" <<'UNIT'
[Unit]
Description=Vivarium VM tier runner (ttyS0, then power off)
After=multi-user.target
[Service]
Type=simple
ExecStart=/usr/local/sbin/vivarium-vm-runner
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no
[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/vivarium-vm-runner.service \
  "$R/etc/systemd/system/multi-user.target.wants/vivarium-vm-runner.service"
cat > "$R/usr/local/sbin/vivarium-vm-runner" <<'RUNNER'
#!/bin/bash
# Runs once per boot (see vivarium-vm-runner.service).
echo "VMRUN-BEGIN uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r)"
rc=0
o=trans=virtio,version=9p2000.L,msize=512000
if ! mount -t 9p -o "$o,ro" payload /mnt/payload || ! mount -t 9p -o "$o" results /mnt/results; then
  echo "VMRUN-ERROR cannot mount the 9p shares"; rc=2
elif [ ! -x /mnt/payload/tests/vm/guest/check.sh ]; then
  echo "VMRUN-ERROR no /mnt/payload/tests/vm/guest/check.sh"; rc=2
else
  /mnt/payload/tests/vm/guest/check.sh 2>&1 | tee /mnt/results/guest.log
  rc=${PIPESTATUS[0]}
fi
echo "$rc" > /mnt/results/rc 2>/dev/null
sync
echo "VMRUN-END rc=$rc uptime=$(cut -d' ' -f1 /proc/uptime)"
umount /mnt/results /mnt/payload 2>/dev/null
systemctl poweroff --no-block
RUNNER
chmod 755 "$R/usr/local/sbin/vivarium-vm-runner"

# Small image: no .debs, lists, docs, man pages, locales; no apt sources (they name the
# mirror, and the guest has no network); machine-id made by systemd at first boot.
rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/* \
       "$R"/usr/share/doc/* "$R"/usr/share/man/* "$R"/usr/share/locale/*
rm -f "$R/etc/apt/sources.list" "$R/etc/apt/sources.list.d/"*
: > "$R/etc/machine-id"

kver=$(ls "$R/boot" | sed -n 's/^vmlinuz-//p' | sort -V | tail -1)
cp "$R/boot/vmlinuz-$kver" "$tmp/vmlinuz"
cp "$R/boot/initrd.img-$kver" "$tmp/initrd.img"
mkfs.ext4 -q -F -L vmroot -d "$R" "$tmp/rootfs.img" "$image_size"
rm -rf "$R"
for f in vmlinuz initrd.img rootfs.img; do mv -f "$tmp/$f" "$cache/$f"; done
cat "$here/packages.txt" "$here/build-image.sh" | sha256sum | cut -d' ' -f1 > "$cache/image.stamp"
echo "build-image: image built in $((SECONDS - t0)) s (kernel $kver, $(du -h "$cache/rootfs.img" | cut -f1) on disk)" >&2
