#!/bin/bash
# The VM tier's checks, run inside the Debian 12 guest (systemd PID 1, pure cgroup v2,
# kernel 6.1, Landlock ABI 2) as root by the image's boot runner, from the read-only
# payload share (/mnt/payload: dist/, profiles/, target/release/{vivariumd,viv},
# tests/vm/; binaries built on the host). Results go to stdout (the serial console) and
# /mnt/results. Every check prints `VMCHECK ok|FAIL <name> -- <detail>`; the last line
# is `VIVARIUM-VM-RESULT: pass=N fail=M`; the exit status is 0 only with no failure.
#
# Emulation (TCG) makes process start 10-30x slower than on the host: every step has a
# generous timeout, and nothing here is a timing assertion.
set -u
P=/mnt/payload
OUT=/mnt/results
[ -d "$OUT" ] && [ -w "$OUT" ] || OUT=$(mktemp -d)
SOCK=/run/vivarium/vivariumd.sock
UNIT_CG=/sys/fs/cgroup/system.slice/vivariumd.service
T=/tmp/vmcheck
mkdir -p "$T" && chmod 755 "$T"
pass=0 fail=0

ok() { pass=$((pass + 1)); echo "VMCHECK ok   $1${2:+ -- $2}"; }
bad() { fail=$((fail + 1)); echo "VMCHECK FAIL $1${2:+ -- $2}"; }
# check NAME CMD...: ok when CMD succeeds; its output (last 800 bytes) is the detail.
check() {
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then ok "$name" "$(tail -c 300 <<<"$out" | tr '\n' ' ')"; else bad "$name" "$(tail -c 800 <<<"$out" | tr '\n' ' ')"; fi
}
step() { echo "== $* (uptime $(cut -d' ' -f1 /proc/uptime))"; }
# A python expression over the JSON file $1 (as d); prints the value.
jq_() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }
# `viv` as a user, through the activated socket, with a per-call timeout.
viv_as() { local user=$1; shift; timeout 300 runuser -u "$user" -- /usr/local/bin/viv --socket "$SOCK" "$@"; }
script() { cat > "$T/$1.py"; chmod 644 "$T/$1.py"; }
# run_job NAME USER ARGS... : viv run --json ... $T/NAME.py > $T/NAME.json; sets $rc
run_job() { local n=$1 u=$2; shift 2; viv_as "$u" run --json "$@" "$T/$n.py" < "${STDIN_FROM:-/dev/null}" > "$T/$n.json" 2> "$T/$n.err"; rc=$?; cp "$T/$n.json" "$T/$n.err" "$OUT/" 2>/dev/null; return $rc; }
job_dirs() { find "$UNIT_CG" -mindepth 1 -maxdepth 1 -type d ! -name daemon ! -name '.*' 2>/dev/null; }  # .control is systemd's
# wait_for SECS CMD...: poll CMD until it succeeds or SECS seconds have passed.
wait_for() { local end=$((SECONDS + $1)); shift; while ((SECONDS < end)); do "$@" && return 0; sleep 0.3; done; "$@"; }
status_text() { systemctl show -p StatusText --value vivariumd.service; }

# Every compat outcome on this kernel must say what Landlock cannot enforce, in full.
outcome_common() {
  local f=$1 want_reason=$2 want_code=$3 got
  got=$(jq_ "$f" 'd["reason"], d["exit_code"], d["isolation"]["cgroup"], d["isolation"]["landlock"]') || { echo "no outcome in $f: $(cat "$f" "${f%.json}.err")"; return 1; }
  [ "$got" = "('$want_reason', $want_code, 'V2', 'PartiallyEnforced')" ] || { echo "got $got, want ('$want_reason', $want_code, 'V2', 'PartiallyEnforced'); detail: $(jq_ "$f" 'd["detail"]'); stdout: $(jq_ "$f" 'd["stdout"][-300:]'); stderr: $(jq_ "$f" 'd["stderr"][-300:]')"; return 1; }
  jq_ "$f" '"|".join(d["isolation"]["not_enforced"])' > "$T/ne" || return 1
  local abi
  for abi in "truncate control (ABI 3)" "TCP bind/connect rules (ABI 4)" "device ioctl control (ABI 5)" "abstract unix socket and signal scoping (ABI 6)"; do
    grep -qF "landlock: $abi" "$T/ne" || { echo "not_enforced lacks '$abi': $(cat "$T/ne")"; return 1; }
  done
  echo "reason=$want_reason exit=$want_code cgroup=V2 landlock=PartiallyEnforced not_enforced=[$(cat "$T/ne")]"
}

export T SOCK UNIT_CG
export -f jq_ viv_as job_dirs wait_for status_text outcome_common

step "environment"
echo "kernel $(uname -r)"
check env_systemd_pid1 bash -c '[ "$(cat /proc/1/comm)" = systemd ] && echo systemd'
check env_pure_cgroup2 bash -c '[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && ! grep -q " cgroup " /proc/mounts && cat /sys/fs/cgroup/cgroup.controllers'
ABI=$(python3 -c '
import ctypes
libc = ctypes.CDLL(None, use_errno=True); libc.syscall.restype = ctypes.c_long
print(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))')
check env_landlock_abi_2 bash -c "[ '$ABI' = 2 ] && echo 'Landlock ABI $ABI'"

step "install (dist/install.sh --no-build, as docs/deployment.md says)"
check install bash -c "cd $P && timeout 600 dist/install.sh --no-build"
check socket_enabled_and_listening bash -c "systemctl is-enabled vivariumd.socket && systemctl is-active vivariumd.socket && stat -c '%A %U:%G %n' $SOCK | grep -x 'srw-rw---- root:vivarium $SOCK'"
check service_not_started_before_first_connection bash -c '! systemctl is-active vivariumd.service'
useradd -m -G vivarium alice && useradd -m mallory
check users bash -c 'id alice; id mallory'

# A warm pool on this kernel: compat (ABI 2+) with one sandbox kept ready. Written before
# the first connection, so the socket-activated daemon loads it at start.
sed -e 's/^description = .*/description = "compat with a warm pool (VM tier)"/' /etc/vivarium/profiles/compat.toml > /etc/vivarium/profiles/warmcompat.toml
printf '\n[warm]\npool = 1\nidle_secs = 10\n' >> /etc/vivarium/profiles/warmcompat.toml
# And a zygote: each job's sandbox forked from one interpreter (none kept ready).
sed -e 's/^description = .*/description = "compat with a zygote (VM tier)"/' /etc/vivarium/profiles/compat.toml > /etc/vivarium/profiles/zygcompat.toml
printf '\n[warm]\nzygote = true\npool = 0\nidle_secs = 10\n' >> /etc/vivarium/profiles/zygcompat.toml

step "first job: socket activation, as a member of vivarium"
script hello <<'EOF'
import os, sys
print("hello from the guest", os.getuid(), sys.version.split()[0])
EOF
run_job hello alice --profile compat
check first_job_through_activated_socket bash -c "outcome_common $T/hello.json Ok 0 && [ $rc = 0 ] && grep -q 'hello from the guest 1000' $T/hello.json"
check service_activated_and_ready bash -c 'systemctl is-active vivariumd.service && systemctl show -p Type,NotifyAccess,ActiveState,SubState,StatusText vivariumd.service | tr "\n" " " | grep "StatusText=0 jobs running, 0 queued"'

main=$(systemctl show -p MainPID --value vivariumd.service)
# systemd's sandboxing options mount things in the unit's namespace; one beneath a
# read-only bind source (/usr, /lib, ...) is locked in each job's user namespace.
check unit_mounts_nothing_beneath_bind_sources bash -c "! nsenter -t $main -m cat /proc/self/mountinfo | awk '\$5 ~ \"^/(usr|bin|lib|lib64|sbin)/\" {print \"beneath a bind source:\", \$5; bad=1} END {exit !bad}'"

echo "the daemon's /dev and /tmp: $(nsenter -t "$main" -m cat /proc/self/mountinfo | awk '$5 == "/dev" || $5 == "/tmp" {print $5, $6}' | tr '\n' ';')"

step "authorization"
run_job hello mallory --profile compat
check outsider_refused_by_socket_permissions bash -c "[ $rc = 125 ] && grep -q 'Permission denied' $T/hello.err && cat $T/hello.err | head -1"
# Defence in depth: even with the socket opened to everyone, the daemon's own check
# (allow_groups = [\"vivarium\"]) refuses mallory with NotAuthorized.
chmod 0666 "$SOCK"
run_job hello mallory --profile compat
chmod 0660 "$SOCK"
check outsider_refused_by_daemon_not_authorized bash -c "[ $rc = 125 ] && [ \"\$(jq_ $T/hello.json 'd[\"error\"][\"code\"]')\" = NotAuthorized ] && jq_ $T/hello.json 'd[\"error\"][\"message\"]' && journalctl -u vivariumd.service --no-pager -o cat | grep 'peer not admitted'"

step "Landlock ABI 2 kernel: default (min ABI 6) refused, compat says what is missing"
run_job hello alice --profile default
check default_profile_refused_naming_the_abi bash -c "[ $rc = 125 ] && [ \"\$(jq_ $T/hello.json 'd[\"error\"][\"code\"]')\" = ProfileDisabled ] && jq_ $T/hello.json 'd[\"error\"][\"message\"]' | grep 'needs Landlock ABI 6 but the kernel offers 2'"
viv_as alice profiles --json > "$T/profiles.json" 2>&1
check profiles_listing_says_why bash -c "jq_ $T/profiles.json '[(p[\"name\"], p[\"disabled\"]) for p in d]' | tee /dev/stderr | grep -q \"('compat', None)\" && jq_ $T/profiles.json '[p[\"disabled\"] for p in d if p[\"name\"]==\"default\"][0]' | grep 'needs Landlock ABI 6 but the kernel offers 2'"

step "limits on cgroup v2"
script oom <<'EOF'
chunks = []
while True:
    chunks.append(b"x" * (8 << 20))  # written pages, not a lazy calloc
EOF
# The kernel's own count, independent of the daemon: memory.events is hierarchical, so the
# unit's cgroup counts the OOM kill in the job's (removed) cgroup.
oom_kills() { awk '$1 == "oom_kill" {print $2}' "$UNIT_CG/memory.events"; }
oom_before=$(oom_kills)
run_job oom alice --profile compat --memory 64M
oom_after=$(oom_kills)
check memory_limit_oom_from_memory_events bash -c "outcome_common $T/oom.json Oom 121 && jq_ $T/oom.json 'd[\"limits_hit\"], d[\"usage\"][\"peak_memory_bytes\"], d[\"detail\"]' | tee /dev/stderr | grep -q Memory && [ $oom_after -gt $oom_before ] && echo 'vivariumd.service memory.events oom_kill $oom_before -> $oom_after'"
script pids <<'EOF'
import os, time
kids = []
try:
    for _ in range(64):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        kids.append(pid)
except OSError as e:
    print("fork refused errno", e.errno, "after", len(kids), "children")
    raise SystemExit(1)
print("never refused")
EOF
run_job pids alice --profile compat --pids 6
check pids_limit bash -c "outcome_common $T/pids.json Pids 122 && grep -q 'fork refused errno 11' $T/pids.json && jq_ $T/pids.json 'd[\"limits_hit\"], d[\"stdout\"]'"
script spin <<'EOF'
while True:
    pass
EOF
run_job spin alice --profile compat --cpu 2 --timeout 30
check cpu_time_limit bash -c "outcome_common $T/spin.json CpuLimit 124 && jq_ $T/spin.json 'd[\"usage\"], d[\"limits_hit\"]'"

script nap <<'EOF'
import time
time.sleep(60)
EOF
run_job nap alice --profile compat --timeout 3
check wall_time_limit bash -c "outcome_common $T/nap.json Timeout 124 && [ $rc = 124 ]"

step "the warm path on cgroup v2: a sandbox built ahead, deadlines and CPU from delivery"
script warm <<'EOF'
import sys
print('WARM' if '-c' in sys.orig_argv else 'COLD')
EOF
# The first job creates the pool (cold); a later one meets the ready sandbox.
for i in 1 2 3 4 5 6 7 8 9 10; do
  run_job warm alice --profile warmcompat
  grep -q '"stdout": "WARM' $T/warm.json && break
  sleep 3
done
check warm_job_in_a_ready_sandbox bash -c "outcome_common $T/warm.json Ok 0 && grep -q '\"stdout\": \"WARM' $T/warm.json && echo 'after $i jobs'"
script warmspin <<'EOF'
import sys
print('WARM' if '-c' in sys.orig_argv else 'COLD', flush=True)
while True:
    pass
EOF
sleep 5  # the pool refills
run_job warmspin alice --profile warmcompat --cpu 1 --timeout 30
check warm_cpu_limit_counts_from_delivery bash -c "outcome_common $T/warmspin.json CpuLimit 124 && grep -q '\"stdout\": \"WARM' $T/warmspin.json && jq_ $T/warmspin.json 'd[\"usage\"]' && [ \$(jq_ $T/warmspin.json 'd[\"usage\"][\"cpu_ms\"]') -lt 3000 ]"
# idle_secs = 10: with no demand, the pool empties and its sandbox's cgroup goes with it.
check warm_pool_empties_when_idle bash -c "wait_for 90 bash -c '[ -z \"\$(job_dirs)\" ]' && echo 'no job cgroup left under $UNIT_CG'"

step "the zygote on cgroup v2: sandboxes forked from one interpreter, attached through cgroup.procs"
script zyg <<'EOF'
import sys
print('ZYGOTE' if any(a.startswith('_vivarium_zygote') for a in sys.orig_argv) else 'OTHER', flush=True)
EOF
# The first job starts the zygote (and waits for it); every job is forked from it.
for i in 1 2 3 4 5 6 7 8 9 10; do
  run_job zyg alice --profile zygcompat
  grep -q '"stdout": "ZYGOTE' $T/zyg.json && break
  sleep 3
done
check zygote_job_forked bash -c "outcome_common $T/zyg.json Ok 0 && grep -q '\"stdout\": \"ZYGOTE' $T/zyg.json && jq_ $T/zyg.json 'd[\"isolation\"]' && echo 'after $i jobs'"
{ cat $T/zyg.py; cat $T/oom.py; } > $T/zygoom.py && chmod 644 $T/zygoom.py
run_job zygoom alice --profile zygcompat --memory 64M
check zygote_forked_job_oom_with_its_own_limit bash -c "outcome_common $T/zygoom.json Oom 121 && grep -q '\"stdout\": \"ZYGOTE' $T/zygoom.json"
{ cat $T/zyg.py; printf 'while True:\n    pass\n'; } > $T/zygspin.py && chmod 644 $T/zygspin.py
run_job zygspin alice --profile zygcompat --cpu 1 --timeout 30
check zygote_cpu_limit_counts_from_delivery bash -c "outcome_common $T/zygspin.json CpuLimit 124 && grep -q '\"stdout\": \"ZYGOTE' $T/zygspin.json && [ \$(jq_ $T/zygspin.json 'd[\"usage\"][\"cpu_ms\"]') -lt 3000 ]"
# idle_secs = 10: the zygote ends, and its cgroup with it.
check zygote_ends_when_idle bash -c "wait_for 90 bash -c '[ -z \"\$(job_dirs)\" ]' && ! pgrep -f '^/usr/bin/python3 .*_vivarium_zygote' && echo 'no zygote, no cgroup left under $UNIT_CG'"

step "the daemon's cgroup layout under its delegated subtree, while a job runs"
script sleeper <<'EOF'
import time
print("sleeping", flush=True)
time.sleep(20)
print("woke")
EOF
run_job sleeper alice --profile compat & bg=$!
if wait_for 120 bash -c "[ -n \"\$(job_dirs)\" ] && [ -n \"\$(cat \$(job_dirs | head -1)/cgroup.procs)\" ]"; then
  echo "--- cgroup tree of vivariumd.service:"
  for d in $(find "$UNIT_CG" -type d | sort); do
    printf '%s procs=[%s] subtree_control=[%s]\n' "${d#/sys/fs/cgroup}" "$(tr '\n' ' ' < "$d/cgroup.procs")" "$(cat "$d/cgroup.subtree_control")"
  done
  job=$(job_dirs | head -1)
  for f in memory.max memory.swap.max memory.oom.group pids.max cpu.max; do printf '   %s %s=%s\n' "${job#/sys/fs/cgroup}" "$f" "$(cat "$job/$f")"; done
  main=$(systemctl show -p MainPID --value vivariumd.service)
  check cgroup_root_has_no_processes bash -c "[ -z \"\$(cat $UNIT_CG/cgroup.procs)\" ] && echo empty"
  check cgroup_daemon_leaf_holds_daemon_and_spawner bash -c "grep -qx $main $UNIT_CG/daemon/cgroup.procs && [ \$(wc -l < $UNIT_CG/daemon/cgroup.procs) = 2 ] && ps -o pid=,args= \$(cat $UNIT_CG/daemon/cgroup.procs) | tee /dev/stderr | grep -q __spawner"
  check cgroup_controllers_delegated bash -c "for c in memory pids cpu; do grep -qw \$c $UNIT_CG/cgroup.subtree_control || exit 1; done; cat $UNIT_CG/cgroup.subtree_control"
  check cgroup_job_limits_from_profile bash -c "[ \"\$(cat $job/memory.max):\$(cat $job/pids.max):\$(cat $job/cpu.max):\$(cat $job/memory.oom.group)\" = '536870912:64:100000 100000:1' ] && echo ok"
  pid=$(head -1 "$job/cgroup.procs")
  check cgroup_job_process_is_in_its_cgroup bash -c "cat /proc/$pid/cgroup | grep -x '0::/system.slice/vivariumd.service/${job##*/}'"
else
  bad cgroup_layout "no job cgroup with a process appeared under $UNIT_CG within 120 s: $(find "$UNIT_CG" 2>&1 | head -5 | tr '\n' ' ')"
fi
wait $bg; rc=$?
check sleeper_job_ok bash -c "outcome_common $T/sleeper.json Ok 0 && [ $rc = 0 ] && grep -q woke $T/sleeper.json"
check cleanup_no_job_cgroup_left bash -c "[ -z \"\$(job_dirs)\" ] && find $UNIT_CG -mindepth 1 -type d"

step "systemctl reload: a good profile change, then a bad one"
sed -e 's/^description = .*/description = "vm tier reload test"/' -e 's/^memory_bytes = .*/memory_bytes = 134_217_728/' \
  /etc/vivarium/profiles/compat.toml > /etc/vivarium/profiles/vmsmall.toml
# A config change too: a longer drain grace period (reloadable), used by the stop step.
sed -i 's/^shutdown_grace_ms = .*/shutdown_grace_ms = 30000/' /etc/vivarium/vivariumd.toml
systemctl reload vivariumd.service
has_profile() { viv_as alice profiles --json 2>/dev/null | python3 -c 'import json,sys; sys.exit(0 if any(p["name"]==sys.argv[1] for p in json.load(sys.stdin)) else 1)' "$1"; }
export -f has_profile
check reload_good_adds_profile wait_for 120 has_profile vmsmall
run_job hello alice --profile vmsmall
check reload_good_profile_runs bash -c "outcome_common $T/hello.json Ok 0 && [ $rc = 0 ] && [ \"\$(jq_ $T/hello.json 'd[\"profile\"]')\" = vmsmall ]"
rm /etc/vivarium/profiles/vmsmall.toml
printf '[limits]\nwall_ms = "soon"\n' > /etc/vivarium/profiles/broken.toml
systemctl reload vivariumd.service
check reload_bad_says_why wait_for 120 bash -c "status_text | grep -q 'last reload failed, old config kept' && status_text && journalctl -u vivariumd.service --no-pager -o cat | grep -A0 'reload failed; keeping the previous config and profiles' | grep -q broken.toml"
check reload_bad_keeps_old_profiles has_profile vmsmall
run_job hello alice --profile vmsmall
check reload_bad_old_profile_still_runs bash -c "outcome_common $T/hello.json Ok 0 && [ $rc = 0 ]"
rm /etc/vivarium/profiles/broken.toml
# For the stop step: a profile whose wall and CPU limits outlast the drain grace period
# (compat's 30 s wall limit would end a "long" job by itself).
sed -e 's/^description = .*/description = "vm tier: long jobs for the drain check"/' \
  -e 's/^wall_ms = .*/wall_ms = 600_000/' -e 's/^cpu_ms = .*/cpu_ms = 600_000/' \
  /etc/vivarium/profiles/compat.toml > /etc/vivarium/profiles/vmlong.toml
systemctl reload vivariumd.service
check reload_fixed_clears_status wait_for 120 bash -c "! has_profile vmsmall && has_profile vmlong && ! status_text | grep -q 'reload failed' && status_text"

step "systemctl stop drains: a job that is still running finishes within the grace period, a 600 s one is cancelled"
# The short job blocks on its stdin (a FIFO this script holds open) and is released only
# once the daemon logs that it is draining: it is certainly running during the drain.
script short <<'EOF'
import sys
print("short started", flush=True)
line = sys.stdin.readline()
print("short done", line.strip())
EOF
script long <<'EOF'
import time
print("long started", flush=True)
time.sleep(600)
EOF
mkfifo "$T/short.in"
exec 7<>"$T/short.in"
drains_before=$(journalctl -u vivariumd.service --no-pager -o cat | grep -c 'draining')
STDIN_FROM="$T/short.in" run_job short alice --profile compat & bg_short=$!
run_job long alice --profile vmlong --timeout 600 & bg_long=$!
if wait_for 180 bash -c "status_text | grep -q '^2 jobs running'"; then
  echo "before stop: $(status_text); job cgroups: $(job_dirs | tr '\n' ' ')"
  main=$(systemctl show -p MainPID --value vivariumd.service)
  t0=$SECONDS
  timeout 300 systemctl stop vivariumd.service & stop_pid=$!
  wait_for 120 bash -c "[ \$(journalctl -u vivariumd.service --no-pager -o cat | grep -c 'draining') -gt $drains_before ]"
  drain_line=$(journalctl -u vivariumd.service --no-pager -o cat | grep 'draining' | tail -1)
  echo go >&7
  wait $stop_pid
  echo "systemctl stop took $((SECONDS - t0)) s"
  wait $bg_short; rc_short=$?
  wait $bg_long; rc_long=$?
  exec 7>&-
  journalctl -u vivariumd.service --no-pager -o cat | grep -E 'draining|grace|cancel' | tail -4
  check stop_drained_both_jobs bash -c "echo '$drain_line' | grep 'running=2 admitted=2 grace_ms=30000'"
  check stop_running_job_finished bash -c "outcome_common $T/short.json Ok 0 && [ $rc_short = 0 ] && grep -q 'short done go' $T/short.json"
  check stop_long_job_cancelled bash -c "outcome_common $T/long.json Cancelled 130 && [ $rc_long = 130 ] && jq_ $T/long.json 'd[\"detail\"]'"
  check stop_clean_exit bash -c "systemctl show -p Result,ExecMainStatus,ActiveState vivariumd.service | tr '\n' ' ' | grep 'Result=success ExecMainStatus=0 ActiveState=inactive' && ! kill -0 $main 2>/dev/null"
  check stop_leaves_no_cgroup bash -c "[ ! -e $UNIT_CG ] && echo gone"
else
  bad stop_drain "the daemon did not report 2 jobs running within 180 s: $(status_text); $(job_dirs | tr '\n' ' ')"
  exec 7>&-
  wait $bg_short $bg_long
fi
check socket_still_listening systemctl is-active vivariumd.socket
run_job hello alice --profile compat
check reactivated_after_stop bash -c "outcome_common $T/hello.json Ok 0 && [ $rc = 0 ] && systemctl is-active vivariumd.service"

step "crash: the daemon SIGKILLed mid-job is restarted by systemd (Restart=on-failure)"
run_job sleeper alice --profile compat & bg=$!
if wait_for 120 bash -c "[ -n \"\$(job_dirs)\" ] && [ -n \"\$(cat \$(job_dirs | head -1)/cgroup.procs)\" ]"; then
  main=$(systemctl show -p MainPID --value vivariumd.service)
  systemctl kill -s KILL --kill-who=main vivariumd.service
  wait $bg; rc=$?
  echo "viv after the crash: exit $rc, $(head -c 300 "$T/sleeper.err" | tr '\n' ' ')"
  check crash_restarted wait_for 120 bash -c "[ \$(systemctl show -p NRestarts --value vivariumd.service) -ge 1 ] && systemctl is-active vivariumd.service && [ \$(systemctl show -p MainPID --value vivariumd.service) != $main ] && systemctl show -p NRestarts,MainPID vivariumd.service | tr '\n' ' '"
  run_job hello alice --profile compat
  check crash_then_job_runs bash -c "outcome_common $T/hello.json Ok 0 && [ $rc = 0 ]"
  check crash_left_nothing bash -c "[ -z \"\$(job_dirs)\" ] && [ -z \"\$(cat $UNIT_CG/cgroup.procs)\" ] && [ \$(wc -l < $UNIT_CG/daemon/cgroup.procs) = 2 ] && echo 'only the new daemon and spawner'"
else
  bad crash_restart "no job started within 120 s"
  wait $bg
fi

# (At least one test must have run: a filter that matches nothing also says "ok".)
step "the cgroup v2 kernel tests of vivarium-sandbox (host-built test binary)"
if [ -x "$P/target/vm-tests/sandbox-lib" ]; then
  check kernel_v2_tests bash -c "cd /tmp && VIVARIUM_REQUIRE_CGROUP2=1 timeout 600 $P/target/vm-tests/sandbox-lib --test-threads=1 cgroup::kernel_tests::kernel_v2 2>&1 | tail -15 | tee $OUT/kernel-tests.txt | grep -Eq 'test result: ok\\. [1-9][0-9]* passed'"
else
  bad kernel_v2_tests "no test binary in the payload"
fi

step "end state"
check final_no_job_cgroup bash -c "[ -z \"\$(job_dirs)\" ] && echo none"
echo "--- vivariumd journal (last 40 lines):"
journalctl -u vivariumd.service -u vivariumd.socket --no-pager -o short-monotonic | tail -40
echo "VIVARIUM-VM-RESULT: pass=$pass fail=$fail"
echo "pass=$pass fail=$fail" > "$OUT/result"
[ "$fail" = 0 ] && [ "$pass" -gt 0 ]
