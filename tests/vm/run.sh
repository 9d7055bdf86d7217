#!/usr/bin/env bash
# The real-host tier: vivariumd installed as a socket-activated systemd service in a
# Debian 12 guest (systemd PID 1, pure cgroup v2, kernel 6.1 with Landlock ABI 2) under
# QEMU, with the end-to-end checks of tests/vm/guest/check.sh. As root:
#
#   tests/vm/run.sh
#
# 1. installs qemu-system-x86, mmdebstrap and e2fsprogs if missing (tests/vm/host-tools.sh);
# 2. builds the release binaries (vivariumd, viv) and the daemon's unit-test binary on the
#    host (never in the guest);
# 3. builds the guest image from Debian packages (tests/vm/build-image.sh) unless the
#    cache holds one with the same content stamp (sha256 of packages.txt + build-image.sh);
# 4. boots it (TCG; -snapshot keeps the cached image pristine) with the payload shared
#    read-only over 9p and a writable results share; the guest installs the daemon with
#    dist/install.sh and runs the checks, then powers off;
# 5. prints the guest's `VIVARIUM-VM-RESULT: pass=N fail=M` line and exits 0 only when
#    the guest reported no failure.
#
# Environment: VIVARIUM_VM_CACHE (image cache, default /var/cache/vivarium-vm),
# VIVARIUM_VM_WORK (payload, results, serial log; default target/vm),
# VIVARIUM_VM_TIMEOUT (hard limit for boot + checks + power-off, default 1500 s),
# VIVARIUM_VM_REBUILD=1 (ignore the cached image), VIVARIUM_VM_MEM (MiB, 2048),
# VIVARIUM_VM_SMP (2). The serial console, each line prefixed with seconds since QEMU
# started, is in $VIVARIUM_VM_WORK/serial.log; the guest's own log in results/guest.log.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
CACHE=${VIVARIUM_VM_CACHE:-/var/cache/vivarium-vm}
WORK=${VIVARIUM_VM_WORK:-$repo/target/vm}
TIMEOUT=${VIVARIUM_VM_TIMEOUT:-1500}
MEM=${VIVARIUM_VM_MEM:-2048}
SMP=${VIVARIUM_VM_SMP:-2}
target=${CARGO_TARGET_DIR:-$repo/target}

[ "$(id -u)" = 0 ] || { echo "tests/vm/run.sh: needs root (apt, image build)" >&2; exit 1; }
t_start=$SECONDS
log() { echo "[vm $(date -u +%T)] $*" >&2; }
times=()
timed() { # timed NAME LIMIT_S CMD...: run with a timeout, record the wall time
  local name=$1 limit=$2 t0=$SECONDS rc=0
  shift 2
  timeout --kill-after=30 "$limit" "$@" || rc=$?
  times+=("$name=$((SECONDS - t0))s")
  if [ $rc != 0 ]; then
    [ $rc = 124 ] && log "FAILED: $name took longer than ${limit}s" || log "FAILED: $name (exit $rc)"
    echo "VIVARIUM-VM-RESULT: pass=0 fail=1 (host step $name failed)"
    exit 1
  fi
}

mkdir -p "$CACHE" "$WORK"
# One tier run at a time per cache (the image is replaced in place).
exec 9>"$CACHE/.lock"
flock -w 1800 9 || { echo "tests/vm/run.sh: cache $CACHE is locked by another run" >&2; exit 1; }

log "host tools"
timed tools 900 "$here/host-tools.sh"

log "host build: cargo build --release (vivariumd, viv) and the sandbox crate's unit-test binary (the cgroup kernel tests)"
timed build 2400 cargo build --release --locked -p vivariumd -p vivarium-client -p vivarium-zygote
# viv as dist/install.sh builds it: statically linked (the guest's checks run jobs with it).
timed build-viv 600 cargo rustc --release --locked -p vivarium-client --bin viv -- -C target-feature=+crt-static
timed test-build 2400 cargo test --locked -p vivarium-sandbox --lib --no-run
test_bin=$(cargo test --locked -p vivarium-sandbox --lib --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])')
[ -x "$test_bin" ] || { echo "VIVARIUM-VM-RESULT: pass=0 fail=1 (no sandbox test binary)"; exit 1; }

stamp=$(cat "$here/packages.txt" "$here/build-image.sh" | sha256sum | cut -d' ' -f1)
if [ "${VIVARIUM_VM_REBUILD:-0}" != 1 ] && [ -f "$CACHE/image.stamp" ] && [ "$(cat "$CACHE/image.stamp")" = "$stamp" ] \
   && [ -f "$CACHE/rootfs.img" ] && [ -f "$CACHE/vmlinuz" ] && [ -f "$CACHE/initrd.img" ]; then
  log "cached guest image $CACHE (stamp ${stamp:0:12})"
  times+=("image=cached")
else
  log "building the guest image into $CACHE (stamp ${stamp:0:12})"
  timed image 1200 "$here/build-image.sh" "$CACHE"
fi

# The payload mirrors the repository layout that dist/install.sh --no-build expects.
payload="$WORK/payload" results="$WORK/results"
rm -rf "$payload" "$results"
mkdir -p "$payload/target/release" "$payload/target/vm-tests" "$payload/tests" "$results"
cp -r "$repo/dist" "$repo/profiles" "$payload/"
cp -r "$here" "$payload/tests/vm"
cp "$target/release/vivariumd" "$target/release/viv" "$target/release/libvivarium_zygote.so" "$target/release/vivarium-zygote-init" "$payload/target/release/"
cp "$test_bin" "$payload/target/vm-tests/sandbox-lib"

serial="$WORK/serial.log"
qemu_pid=""
cleanup() {
  # Only the QEMU this script started, by its pid.
  if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
    log "killing QEMU $qemu_pid"
    kill -KILL "$qemu_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# Seconds since QEMU started on each serial line; checks and steps echoed live to stderr.
stamp_lines() {
  local s=${EPOCHREALTIME/[.,]/} line now d
  while IFS= read -r line; do
    line=${line//$'\r'/}
    now=${EPOCHREALTIME/[.,]/}
    d=$(((now - s) / 10000))
    printf -v line '%4d.%02d %s' $((d / 100)) $((d % 100)) "$line"
    echo "$line"
    case $line in *VMCHECK*|*"== "*|*VMRUN*|*VIVARIUM-VM-RESULT*|*"Kernel panic"*) echo "$line" >&2 ;; esac
  done
}

log "booting the guest (TCG, ${SMP} vCPUs, ${MEM} MiB, limit ${TIMEOUT}s); serial log $serial"
t0=$SECONDS
rm -f "$WORK/qemu.pid"
( set +e
  timeout --kill-after=10 "$TIMEOUT" qemu-system-x86_64 \
    -accel tcg,thread=multi -cpu max -m "$MEM" -smp "$SMP" -nographic -no-reboot \
    -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0,115200 quiet loglevel=3 systemd.show_status=0 panic=-1 mitigations=off" \
    -drive "file=$CACHE/rootfs.img,format=raw,if=virtio,cache=unsafe" -snapshot -nic none \
    -virtfs "local,path=$payload,mount_tag=payload,security_model=none,readonly=on" \
    -virtfs "local,path=$results,mount_tag=results,security_model=none" \
    -pidfile "$WORK/qemu.pid" </dev/null 2>&1
  echo "QEMU-EXIT rc=$?"
) | stamp_lines > "$serial" &
boot_job=$!
for _ in $(seq 100); do [ -s "$WORK/qemu.pid" ] && break; sleep 0.1; done
qemu_pid=$(cat "$WORK/qemu.pid" 2>/dev/null || true)
wait "$boot_job" || true
qemu_pid=""
times+=("boot+checks=$((SECONDS - t0))s")
times+=("total=$((SECONDS - t_start))s")

qemu_rc=$(sed -n 's/.*QEMU-EXIT rc=//p' "$serial" | tail -1)
result=$(grep -ho 'VIVARIUM-VM-RESULT: .*' "$serial" | tail -1 || true)
guest_rc=$(cat "$results/rc" 2>/dev/null || echo none)
log "times: ${times[*]} (QEMU exit ${qemu_rc:-?}, guest checks exit $guest_rc)"
if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
  echo "VIVARIUM-VM-RESULT: pass=0 fail=1 (the guest did not finish within ${TIMEOUT}s; see $serial)"
  exit 1
fi
if [ -z "$result" ]; then
  tail -30 "$serial" >&2
  echo "VIVARIUM-VM-RESULT: pass=0 fail=1 (no result line from the guest; see $serial)"
  exit 1
fi
grep 'VMCHECK FAIL' "$serial" >&2 || true
echo "$result"
[ "$guest_rc" = 0 ] && [ "$qemu_rc" = 0 ]
