#!/usr/bin/env bash
# Install vivariumd as a socket-activated system service:
#   sudo dist/install.sh            build, install and start
#   sudo dist/install.sh --no-build install an already-built target/release/vivariumd
#   dist/install.sh --user          install and start the per-user (rootless) units
#   sudo dist/install.sh --with-mcp-http  also vivarium-mcp over HTTP: the binary, the
#                                   vivarium-mcp user, /etc/vivarium/mcp-http.toml and
#                                   vivarium-mcp-http.service (not enabled: edit first)
# Environment: PREFIX (default /usr/local), SYSCONFDIR (default /etc),
# UNITDIR (default /etc/systemd/system), PROFILES_SRC (default <repo>/profiles).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${PREFIX:-/usr/local}"
SYSCONFDIR="${SYSCONFDIR:-/etc}"
UNITDIR="${UNITDIR:-/etc/systemd/system}"
PROFILES_SRC="${PROFILES_SRC:-$repo/profiles}"
build=1
mode=system
mcp_http=0
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --user) mode=user ;;
    --with-mcp-http) mcp_http=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

# viv, statically linked, into target/release/viv: every `viv run` pays its start. On
# musl where Rust has that target (`rustup target add x86_64-unknown-linux-musl`): glibc's
# start-up probes the CPU with CPUID, which traps on a VM, and a static glibc viv takes
# ~0.77 ms of CPU per `viv run` on the 2-core VM of docs/PERFORMANCE.md against ~0.46 ms
# on musl ("What viv adds over the library"). Else a static-pie glibc build (`cargo
# rustc` applies the flag to the final binary only: build scripts and proc macros cannot
# be static; viv uses no NSS lookups, the usual catch of a static glibc), ~0.5 ms
# cheaper than the dynamically linked one.
build_static_viv() {
  if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
    (cd "$repo" && cargo build --locked --release --target x86_64-unknown-linux-musl \
      -p vivarium-client --bin viv &&
      install -m 0755 target/x86_64-unknown-linux-musl/release/viv target/release/)
  else
    (cd "$repo" && cargo rustc --locked --release -p vivarium-client --bin viv -- \
      -C target-feature=+crt-static)
  fi
}

# The zygote jobs' init, exec'd once per forked job: static, and on musl where Rust has
# that target, into target/release/vivarium-zygote-init. glibc's start-up probes the CPU
# with CPUID, which traps on a VM: ~0.4 ms of every exec on the 2-core VM of
# docs/PERFORMANCE.md ("One copy per zygote job"), ~0.05 ms with musl.
build_zygote_init() {
  if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
    (cd "$repo" && cargo build --locked --release --target x86_64-unknown-linux-musl \
      -p vivarium-zygote --bin vivarium-zygote-init &&
      install -m 0755 target/x86_64-unknown-linux-musl/release/vivarium-zygote-init target/release/)
  else
    (cd "$repo" && cargo rustc --locked --release -p vivarium-zygote --bin vivarium-zygote-init -- \
      -C target-feature=+crt-static)
  fi
}

if [ "$mode" = user ] && [ "$mcp_http" = 1 ]; then
  echo "install.sh: --with-mcp-http is a system service (not with --user)" >&2
  exit 2
fi

if [ "$mode" = user ]; then
  # Per-user units: the daemon from ~/.cargo/bin, config in ~/.config/vivarium.
  [ "$build" = 1 ] && cargo install --locked --path "$repo/daemon"
  if [ "$build" = 1 ]; then
    build_static_viv
    install -D -m 0755 "$repo/target/release/viv" "${CARGO_HOME:-$HOME/.cargo}/bin/viv"
  fi
  conf="${XDG_CONFIG_HOME:-$HOME/.config}/vivarium"
  units="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
  install -d -m 0755 "$conf" "$conf/profiles" "$units"
  cp -rn "$PROFILES_SRC/." "$conf/profiles/"
  if [ ! -e "$conf/vivariumd.toml" ]; then
    sed -e "s|^profiles_dir = .*|profiles_dir = \"profiles\"|" \
        -e "s|^allow_groups = .*|allow_groups = []|" \
        "$repo/dist/vivariumd.toml" > "$conf/vivariumd.toml"
  fi
  install -m 0644 "$repo/dist/systemd/user/vivariumd.socket" "$repo/dist/systemd/user/vivariumd.service" "$units/"
  systemctl --user daemon-reload
  systemctl --user enable --now vivariumd.socket
  echo "installed and started the user units: viv run FILE (socket \$XDG_RUNTIME_DIR/vivarium/vivariumd.sock)."
  echo "without a delegated cgroup v2 subtree only the 'rootless' profile is enabled: viv run --profile rootless FILE"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "install.sh: the system service install needs root (or use --user)" >&2
  exit 1
fi

# 1. The binaries: vivariumd (the daemon) and viv (the client), and the zygote library
#    and its jobs' init program (profiles with `warm.zygote`; the daemon looks for both
#    in ../lib/vivarium/).
if [ "$build" = 1 ]; then
  cargo install --locked --root "$PREFIX" --path "$repo/daemon"
  build_static_viv
  install -D -m 0755 "$repo/target/release/viv" "$PREFIX/bin/viv"
  (cd "$repo" && cargo build --locked --release -p vivarium-zygote --lib)
  build_zygote_init
else
  install -D -m 0755 "$repo/target/release/vivariumd" "$PREFIX/bin/vivariumd"
  install -D -m 0755 "$repo/target/release/viv" "$PREFIX/bin/viv"
fi
if [ -f "$repo/target/release/libvivarium_zygote.so" ] && [ -f "$repo/target/release/vivarium-zygote-init" ]; then
  install -D -m 0644 "$repo/target/release/libvivarium_zygote.so" "$PREFIX/lib/vivarium/libvivarium_zygote.so"
  install -D -m 0755 "$repo/target/release/vivarium-zygote-init" "$PREFIX/lib/vivarium/vivarium-zygote-init"
else
  echo "install.sh: no target/release/libvivarium_zygote.so or vivarium-zygote-init: profiles with warm.zygote will start their sandboxes cold" >&2
fi

# 2. The group whose members may connect (socket 0660 root:vivarium).
getent group vivarium >/dev/null || groupadd --system vivarium

# 3. Config and profiles; existing files are kept.
install -d -m 0755 "$SYSCONFDIR/vivarium" "$SYSCONFDIR/vivarium/profiles"
if [ ! -e "$SYSCONFDIR/vivarium/vivariumd.toml" ]; then
  sed "s|^profiles_dir = .*|profiles_dir = \"$SYSCONFDIR/vivarium/profiles\"|" \
    "$repo/dist/vivariumd.toml" > "$SYSCONFDIR/vivarium/vivariumd.toml"
  chmod 0644 "$SYSCONFDIR/vivarium/vivariumd.toml"
fi
cp -rn "$PROFILES_SRC/." "$SYSCONFDIR/vivarium/profiles/"

# 4. The units, with ExecStart pointing at where the daemon was installed.
sed "s|/usr/local/bin/vivariumd|$PREFIX/bin/vivariumd|; s|/etc/vivarium/vivariumd.toml|$SYSCONFDIR/vivarium/vivariumd.toml|" \
  "$repo/dist/systemd/vivariumd.service" > "$UNITDIR/vivariumd.service"
install -m 0644 "$repo/dist/systemd/vivariumd.socket" "$UNITDIR/vivariumd.socket"
chmod 0644 "$UNITDIR/vivariumd.service"

# 5. Check, then start listening (the daemon starts on the first connection).
"$PREFIX/bin/vivariumd" --config "$SYSCONFDIR/vivarium/vivariumd.toml" --check
systemctl daemon-reload
systemctl enable --now vivariumd.socket
echo "vivariumd.socket is listening on /run/vivarium/vivariumd.sock."
echo "add users to the vivarium group (usermod -aG vivarium NAME) to let them run jobs."

# 6. Optional: vivarium-mcp over HTTP (docs/deployment.md, "MCP over HTTP"), as its own
#    unprivileged user in the vivarium group. Installed, not started: the example config
#    names mcp.example.com and needs your authorization server and certificate.
if [ "$mcp_http" = 1 ]; then
  if [ "$build" = 1 ]; then
    cargo install --locked --root "$PREFIX" --path "$repo/mcp-frontend"
  else
    install -D -m 0755 "$repo/target/release/vivarium-mcp" "$PREFIX/bin/vivarium-mcp"
  fi
  getent group vivarium-mcp >/dev/null || groupadd --system vivarium-mcp
  getent passwd vivarium-mcp >/dev/null ||
    useradd --system --gid vivarium-mcp --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin vivarium-mcp
  if [ ! -e "$SYSCONFDIR/vivarium/mcp-http.toml" ]; then
    install -m 0640 -g vivarium-mcp "$repo/dist/mcp-http.toml" "$SYSCONFDIR/vivarium/mcp-http.toml"
  fi
  install -d -m 0750 -g vivarium-mcp "$SYSCONFDIR/vivarium/tls"
  sed "s|/usr/local/bin/vivarium-mcp|$PREFIX/bin/vivarium-mcp|; s|/etc/vivarium|$SYSCONFDIR/vivarium|g" \
    "$repo/dist/systemd/vivarium-mcp-http.service" > "$UNITDIR/vivarium-mcp-http.service"
  chmod 0644 "$UNITDIR/vivarium-mcp-http.service"
  systemctl daemon-reload
  echo "installed vivarium-mcp-http.service (not enabled). Edit $SYSCONFDIR/vivarium/mcp-http.toml"
  echo "(resource, [auth], [tls] files in $SYSCONFDIR/vivarium/tls/), then:"
  echo "  systemctl enable --now vivarium-mcp-http.service"
fi
