#!/usr/bin/env bash
# Install what the VM tier needs on the host: qemu-system-x86, mmdebstrap, mkfs.ext4.
# Nothing under /etc/apt is changed. On machines where qemu-utils already comes from
# bookworm-backports (it Breaks bookworm's qemu-system-common 7.2), qemu-system-x86 is
# taken from bookworm-backports too, through a temporary apt sources directory that is
# removed again; apt's package lists are then refreshed from the machine's own sources.
set -euo pipefail
command -v qemu-system-x86_64 >/dev/null && command -v mmdebstrap >/dev/null \
  && command -v mkfs.ext4 >/dev/null && exit 0

export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -q -o DPkg::Lock::Timeout=600)
mirror() {
  local m
  m=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
  [ -n "$m" ] || { echo "host-tools: no Debian mirror in the apt sources" >&2; exit 1; }
  echo "$m"
}
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
"${APT[@]}" update >/dev/null
if ! command -v qemu-system-x86_64 >/dev/null \
   && dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null | grep -q 'bpo'; then
  parts=$(mktemp -d /tmp/vivarium-vm-apt.XXXXXX)
  trap 'rm -rf "$parts"' EXIT
  cp /etc/apt/sources.list.d/*.sources "$parts/" 2>/dev/null || true
  printf 'Types: deb\nURIs: %s\nSuites: %s-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$(mirror)" "$suite" > "$parts/zz-backports.sources"
  O=(-o "Dir::Etc::SourceParts=$parts")
  "${APT[@]}" "${O[@]}" update >/dev/null
  "${APT[@]}" "${O[@]}" install -y --no-install-recommends -t "$suite-backports" qemu-system-x86 >/dev/null
  rm -rf "$parts"
  "${APT[@]}" update >/dev/null   # back to the machine's own package lists
fi
"${APT[@]}" install -y --no-install-recommends --no-upgrade qemu-system-x86 mmdebstrap e2fsprogs >/dev/null
command -v qemu-system-x86_64 >/dev/null && command -v mmdebstrap >/dev/null
