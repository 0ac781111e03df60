#!/usr/bin/env bash
# Builds Cortado's OCI image on this machine with no registry and no container daemon, then
# smoke-tests it (`make image`).
#
#   deploy/container/build-image.sh [--binary PATH] [--no-smoke] [--fresh] [--runner podman|chroot]
#
# The Containerfile needs a registry for its two base images (the Swift toolchain, Debian
# slim). This script makes the same image from Debian packages alone:
#   1. the binary: `swift build -c release --product cortado --static-swift-stdlib` on this
#      host, which is what the Containerfile's build stage runs (Debian 12, Swift 6.3.1);
#   2. the base layer: mmdebstrap makes a minbase Debian 12 root file system trimmed like
#      debian:bookworm-slim, with deploy/container/runtime-packages.txt, the user 10001 and
#      an empty /models;
#   3. the image: umoci adds the base and the binary as two layers to an OCI layout and sets
#      the config (user, entrypoint, cmd, ports, stop signal) read from the Containerfile, so
#      the two recipes cannot drift;
#   4. the smoke test: the image's root file system serves examples/repository, its health
#      command passes, examples/client.py (tritonclient) gets the iris answers, and SIGTERM
#      ends it with exit status 0. It runs under podman when podman can run containers here,
#      else in a chroot inside new mount and PID namespaces (unshare; cortado is PID 1 as in a
#      container), as user 10001 with the repository bind-mounted read-only. Both use the
#      host's network, on free ports.
#
# Output (OUT, default .build/image): oci/ (the OCI layout, tag cortado:VERSION),
# cortado-VERSION.oci.tar (for `podman load -i` / `skopeo copy oci-archive:`), bundle/ (the
# unpacked image the smoke test ran). Needs root (mmdebstrap, umoci unpack, chroot) and the
# network to Debian's package mirror, as configured for apt on this host.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=deploy/container
OUT=${OUT:-$ROOT/.build/image}
BINARY=""
SMOKE=1
FRESH=0
RUNNER=${RUNNER:-auto}
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BINARY=$2; shift 2 ;;
    --no-smoke) SMOKE=0; shift ;;
    --fresh) FRESH=1; shift ;;
    --runner) RUNNER=$2; shift 2 ;;
    *) echo "usage: $0 [--binary PATH] [--no-smoke] [--fresh] [--runner podman|chroot]" >&2; exit 2 ;;
  esac
done
log() { echo "build-image: $*" >&2; }

[ "$(id -u)" -eq 0 ] || { log "needs root (mmdebstrap, umoci unpack and chroot work on real file ownership)"; exit 1; }

# Tools, all from Debian 12. podman is optional: without it (or where it cannot start a
# container, e.g. inside another sandbox) the smoke test uses unshare + chroot.
need=(mmdebstrap umoci curl)
[ "$RUNNER" != chroot ] && need+=(podman)
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

VERSION=$(sed -n 's/.*public static let version = "\(.*\)"/\1/p' Sources/CortadoServer/CortadoServerApp.swift)
TAG=${TAG:-$VERSION}
# Reproducible timestamps: the last commit's time for the files mmdebstrap writes and the image.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
mkdir -p "$OUT"

# 1. The binary.
if [ -z "$BINARY" ]; then
  # The speed flags are the Makefile's (make -s swift-flags, plus -Ounchecked in release).
  flags="$(make -s swift-flags) -Xswiftc -Ounchecked"
  log "swift build -c release $flags --product cortado --static-swift-stdlib"
  # shellcheck disable=SC2086
  swift build -c release $flags --product cortado --static-swift-stdlib
  BINARY=.build/release/cortado
fi
[ -x "$BINARY" ] || { log "no executable at $BINARY"; exit 1; }
if ldd "$BINARY" | grep -q 'libswift\|libFoundation\|libdispatch'; then
  log "$BINARY links the Swift runtime dynamically: build it with --static-swift-stdlib"; exit 1
fi

# The image config, from the Containerfile (one source of truth for both recipes).
eval "$(python3 - "$HERE/Containerfile" <<'PY'
import json, shlex, sys
lines, cont = [], ""
for raw in open(sys.argv[1]):
    line = raw.rstrip("\n")
    if line.lstrip().startswith("#") and not cont: continue
    if line.endswith("\\"): cont += line[:-1] + " "; continue
    lines.append(cont + line); cont = ""
final = lines[max(i for i, l in enumerate(lines) if l.startswith("FROM ")):]
cfg = {}
for l in final:
    word, _, rest = l.partition(" ")
    if word in ("USER", "WORKDIR", "STOPSIGNAL"): cfg[word] = rest.strip()
    elif word == "EXPOSE": cfg["EXPOSE"] = rest.split()
    elif word in ("ENTRYPOINT", "CMD"): cfg[word] = json.loads(rest)
    elif word == "HEALTHCHECK": cfg[word] = json.loads(rest.split(" CMD ", 1)[1])
print("IMG_USER=" + shlex.quote(cfg["USER"]))
print("IMG_WORKDIR=" + shlex.quote(cfg.get("WORKDIR", "/")))
print("IMG_STOPSIGNAL=" + shlex.quote(cfg["STOPSIGNAL"]))
print("IMG_EXPOSE=(" + " ".join(shlex.quote(p) for p in cfg["EXPOSE"]) + ")")
print("IMG_ENTRYPOINT=(" + " ".join(shlex.quote(a) for a in cfg["ENTRYPOINT"]) + ")")
print("IMG_CMD=(" + " ".join(shlex.quote(a) for a in cfg["CMD"]) + ")")
print("IMG_HEALTH=(" + " ".join(shlex.quote(a) for a in cfg["HEALTHCHECK"]) + ")")
PY
)"
IMG_UID=${IMG_USER%%:*}

# 2. The base layer. Mirrors: apt's own Debian sources on this host (a file argument is pasted
# into the chroot's sources as it is), or mmdebstrap's default.
mirrors=()
if [ -n "${MIRROR:-}" ]; then mirrors=("$MIRROR")
elif [ -s /etc/apt/sources.list.d/debian.sources ]; then mirrors=(/etc/apt/sources.list.d/debian.sources)
elif grep -q '^deb ' /etc/apt/sources.list 2>/dev/null; then mirrors=(/etc/apt/sources.list)
fi
packages=$(grep -v '^#' "$HERE/runtime-packages.txt" | paste -sd, -)
# The base takes minutes (a download and dpkg under mmdebstrap): it is kept and reused while
# its mmdebstrap command, the package list and the sources are unchanged. --fresh (or removing
# OUT) makes a new one, with Debian's latest updates.
base_key=$( (sed -n '/^mmdebstrap /,/^  bookworm /p' "$0"; echo "$IMG_UID"; cat "$HERE/runtime-packages.txt" "${mirrors[@]}") | sha256sum | cut -d' ' -f1)
if [ "$FRESH" -eq 0 ] && [ -s "$OUT/base.tar" ] && [ "$(cat "$OUT/base.key" 2>/dev/null)" = "$base_key" ]; then
  log "reusing $OUT/base.tar (same recipe and packages; --fresh to rebuild)"
else
rm -f "$OUT/base.key"
log "mmdebstrap: bookworm minbase + $packages"
# The path excludes are debian:bookworm-slim's (documentation, manuals, translations); the
# copyright files stay, as the licences ask.
# The merged-usr hook lays out /usr as Debian 12 does without the usrmerge package, which
# would pull perl (about 50 MB) into the image.
mmdebstrap --variant=minbase --quiet \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --include="$packages" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --customize-hook="chroot \"\$1\" useradd --uid $IMG_UID --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin cortado" \
  --customize-hook='mkdir -m 0755 "$1/models"' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
  bookworm "$OUT/base.tar" "${mirrors[@]}"
echo "$base_key" > "$OUT/base.key"
fi

# The binary's layer: one file, stripped as in the Containerfile, owned by root, mode 0755,
# with a fixed time.
rm -rf "$OUT/app" && install -D -s -m 0755 "$BINARY" "$OUT/app/usr/local/bin/cortado"
tar --create --file "$OUT/app.tar" --directory "$OUT/app" --owner=0 --group=0 --numeric-owner \
  --mtime="@$SOURCE_DATE_EPOCH" --sort=name usr

# 3. The OCI image.
IMAGE="$OUT/oci:$TAG"
rm -rf "$OUT/oci"
umoci init --layout "$OUT/oci"
umoci new --image "$IMAGE"
umoci raw add-layer --image "$IMAGE" --history.created "$CREATED" --history.created_by "mmdebstrap bookworm minbase + $packages" "$OUT/base.tar"
umoci raw add-layer --image "$IMAGE" --history.created "$CREATED" --history.created_by "cortado $VERSION (--static-swift-stdlib)" "$OUT/app.tar"
config=(--config.user "$IMG_USER" --config.workingdir "$IMG_WORKDIR" --config.stopsignal "$IMG_STOPSIGNAL"
        --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        --config.label "org.opencontainers.image.title=cortado" --config.label "org.opencontainers.image.version=$VERSION"
        --config.label "org.opencontainers.image.licenses=Apache-2.0" --created "$CREATED" --history.created "$CREATED")
for a in "${IMG_ENTRYPOINT[@]}"; do config+=(--config.entrypoint "$a"); done
for a in "${IMG_CMD[@]}"; do config+=(--config.cmd "$a"); done
for p in "${IMG_EXPOSE[@]}"; do config+=(--config.exposedports "$p/tcp"); done
umoci config --image "$IMAGE" "${config[@]}"
umoci gc --layout "$OUT/oci"
rm -f "$OUT/cortado-$TAG.oci.tar"
tar --create --file "$OUT/cortado-$TAG.oci.tar" --directory "$OUT/oci" .
log "image: $IMAGE ($(du -sh "$OUT/cortado-$TAG.oci.tar" | cut -f1) as an OCI archive)"

[ "$SMOKE" -eq 1 ] || exit 0

# 4. The smoke test, on the image as unpacked from the layout (not on mmdebstrap's output).
rm -rf "$OUT/bundle"
umoci unpack --image "$IMAGE" "$OUT/bundle"
ROOTFS=$OUT/bundle/rootfs
log "root file system: $(du -sh "$ROOTFS" | cut -f1)"
# Every shared library the binary needs is in the image (the list in runtime-packages.txt is enough).
if chroot "$ROOTFS" /usr/lib64/ld-linux-x86-64.so.2 --list /usr/local/bin/cortado | tee "$OUT/ldd.txt" | grep 'not found'; then
  log "libraries missing from the image (add their packages to $HERE/runtime-packages.txt)"; exit 1
fi
chroot --userspec="$IMG_USER" "$ROOTFS" /usr/local/bin/cortado --version

read -r PORT METRICS < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
SERVE=(serve --models /models --host 127.0.0.1 --port "$PORT" --metrics-port "$METRICS")
# The Containerfile's HEALTHCHECK command as it is, pointed at this run's metrics port.
HEALTH=(env "CORTADO_METRICS_PORT=$METRICS" "${IMG_HEALTH[@]}")
PY=.venv/bin/python; [ -x "$PY" ] || PY=python3

use_podman=0
if [ "$RUNNER" != chroot ] && command -v podman >/dev/null; then
  if podman load --quiet --input "$OUT/cortado-$TAG.oci.tar" >"$OUT/podman-load.txt" 2>&1 &&
     loaded=$(sed -n 's/^Loaded image: //p' "$OUT/podman-load.txt" | tail -1) &&
     podman tag "$loaded" "localhost/cortado:$TAG" 2>>"$OUT/podman-load.txt" &&
     { [ "$loaded" = "localhost/cortado:$TAG" ] || podman untag "localhost/cortado:$TAG" "$loaded" >/dev/null 2>&1 || true; } &&
     podman run --rm --pull=never --network host "localhost/cortado:$TAG" --version >>"$OUT/podman-load.txt" 2>&1; then
    use_podman=1
  else
    log "podman cannot run the image here ($(tail -1 "$OUT/podman-load.txt")); using unshare + chroot"
    [ "$RUNNER" = podman ] && exit 1
  fi
fi

cleanup() { :; }
trap 'cleanup' EXIT
if [ "$use_podman" -eq 1 ]; then
  log "smoke test under podman (--read-only, --network host, user $IMG_USER)"
  NAME=cortado-smoke-$$
  podman run -d --pull=never --name "$NAME" --network host --read-only \
    -v "$ROOT/examples/repository:/models:ro" "localhost/cortado:$TAG" "${SERVE[@]}" >/dev/null
  cleanup() { podman rm -f "$NAME" >/dev/null 2>&1 || true; }
  in_image() { podman exec "$NAME" "$@"; }
  stop_server() { podman stop -t 45 "$NAME" >/dev/null; STOP_RC=$(podman inspect -f '{{.State.ExitCode}}' "$NAME"); }
  logs() { podman logs "$NAME" 2>&1 | tail -20; }
else
  log "smoke test in unshare + chroot (user $IMG_USER, /models read-only, host network)"
  # New mount and PID namespaces, as a container has: cortado runs as PID 1, to which the
  # kernel delivers only signals it handles, and SIGTERM comes from outside the namespace, as
  # a container runtime sends it. unshare forks bash, which execs chroot, which execs cortado;
  # the mounts and the process vanish with the namespaces (--kill-child if this script dies).
  unshare --mount --pid --fork --kill-child --propagation private bash -c '
    set -e
    rootfs=$1 repo=$2; shift 2
    mount --bind "$repo" "$rootfs/models" && mount -o remount,bind,ro "$rootfs/models"
    mount -t proc proc "$rootfs/proc"
    mount -t tmpfs tmpfs "$rootfs/tmp"
    exec chroot --userspec='"$IMG_USER"' "$rootfs" "$@"
  ' smoke "$ROOTFS" "$ROOT/examples/repository" "${IMG_ENTRYPOINT[@]}" "${SERVE[@]}" >"$OUT/server.log" 2>&1 &
  SERVER=$!
  cleanup() { kill "$SERVER" 2>/dev/null || true; }
  in_image() { chroot --userspec="$IMG_USER" "$ROOTFS" "$@"; }
  # Not in a subshell: only this shell can wait for unshare, which exits with cortado's status.
  stop_server() {
    local pid1; pid1=$(pgrep -P "$SERVER" | head -1)
    [ "$(sed -n 's/^NSpid:.*[[:space:]]//p' "/proc/$pid1/status")" = 1 ] || log "warning: cortado is not PID 1 of its namespace"
    kill -TERM "$pid1"; STOP_RC=0; wait "$SERVER" || STOP_RC=$?
  }
  logs() { tail -20 "$OUT/server.log"; }
fi

ok=0
for _ in $(seq 1 60); do
  if curl -fsS "http://127.0.0.1:$METRICS/readyz" >/dev/null 2>&1; then ok=1; break; fi
  sleep 1
done
[ "$ok" -eq 1 ] || { log "the server did not become ready in 60 s"; logs; exit 1; }
in_image "${HEALTH[@]}" || { log "the image's health command failed"; logs; exit 1; }
log "health command: ok"
"$PY" examples/client.py --url "127.0.0.1:$PORT" | tee "$OUT/client.txt"
grep -q "species: \['setosa', 'virginica'\]" "$OUT/client.txt" || { log "unexpected answers from the image"; logs; exit 1; }
stop_server
[ "$STOP_RC" = 0 ] || { log "SIGTERM: exit status $STOP_RC, expected 0"; logs; exit 1; }
log "SIGTERM: drained, exit 0"
logs | grep -i 'drain' >&2 || true
cleanup() { :; }
[ "$use_podman" -eq 1 ] && podman rm -f "$NAME" >/dev/null 2>&1 || true
echo "image smoke test passed ($([ "$use_podman" -eq 1 ] && echo podman || echo 'unshare + chroot')): $IMAGE"
