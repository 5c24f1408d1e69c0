#!/usr/bin/env bash
# Builds the release archives: DIST/hetgpu_VERSION_linux_ARCH.tar.gz and DIST/SHA256SUMS.
#
#   release.sh DIST VERSION COMMIT ARCH...       (make release runs it with amd64 arm64)
#
# Each archive unpacks to hetgpu_VERSION_linux_ARCH/ with
#   bin/hetgpu                 the scheduler sidecar and CLI; HiGHS linked in statically
#   bin/hetgpu-toy-train       the no-GPU demo workload the example jobspecs run
#   plugins/nomad-device-hetgpu, plugins/nomad-driver-hetgpu   for each Nomad client's plugin_dir
#   jobspecs/                  the sidecar's Nomad job and the example jobs
#   README.md CHANGELOG.md docs/install.md
# The sidecar links HiGHS's static library from .deps/highs-static (make highs-static), or for
# arm64 from .deps/highs-static-arm64 with aarch64-linux-gnu-g++ (make highs-static-arm64); an
# arch whose C++ cross toolchain is missing gets the plugins and the toy workload only, and the
# script says so. Release binaries carry no rpath: nothing in them names this checkout.
set -euo pipefail

DIST=${1:?usage: release.sh DIST VERSION COMMIT ARCH...}
VERSION=${2:?}
COMMIT=${3:?}
shift 3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PKG=github.com/hetgpu/hetgpu
LDFLAGS="-s -w -X $PKG/internal/version.Version=$VERSION -X $PKG/internal/version.Commit=$COMMIT"

step() { printf '==> release: %s\n' "$*" >&2; }
die() { printf 'release: %s\n' "$*" >&2; exit 1; }

mkdir -p "$DIST"
cd "$ROOT"
for ARCH in "$@"; do
  case $ARCH in
    amd64) CC=gcc; CXX=g++; STATIC=.deps/highs-static; TARGET=highs-static ;;
    arm64) CC=aarch64-linux-gnu-gcc; CXX=aarch64-linux-gnu-g++; STATIC=.deps/highs-static-arm64; TARGET=highs-static-arm64 ;;
    *) die "architecture \"$ARCH\": expected amd64 or arm64" ;;
  esac
  NAME=hetgpu_${VERSION}_linux_${ARCH}
  STAGE=$(mktemp -d "${TMPDIR:-/tmp}/hetgpu-release.XXXXXX")
  trap 'rm -rf "$STAGE"' EXIT
  OUT=$STAGE/$NAME
  mkdir -p "$OUT/bin" "$OUT/plugins" "$OUT/jobspecs" "$OUT/docs"
  command -v "$CC" >/dev/null || die "$ARCH: the C compiler $CC is missing (Debian: apt-get install gcc-${CC%-gcc}); the plugins need cgo for NVML"

  # The common environment: cgo for NVML, no rpath and no pkg-config path from the caller.
  build() { # output, package, extra go flags...
    local out=$1 pkg=$2
    shift 2
    env -u CGO_LDFLAGS -u PKG_CONFIG_PATH CGO_ENABLED=1 GOOS=linux GOARCH="$ARCH" CC="$CC" CXX="$CXX" \
      CGO_CFLAGS="-O2 -Wno-deprecated-declarations" "$@" \
      go build -trimpath -buildvcs=false -tags hetgpu_release -ldflags "$LDFLAGS" -o "$out" "$pkg"
  }
  step "$ARCH: node plugins and the toy workload"
  build "$OUT/plugins/nomad-device-hetgpu" ./device/cmd/nomad-device-hetgpu
  build "$OUT/plugins/nomad-driver-hetgpu" ./driver/cmd/nomad-driver-hetgpu
  build "$OUT/bin/hetgpu-toy-train" ./driver/cmd/hetgpu-toy-train

  if [ -f "$STATIC/lib/libhighs.a" ] && command -v "$CXX" >/dev/null; then
    step "$ARCH: the sidecar, with HiGHS $(PKG_CONFIG_PATH=$ROOT/$STATIC/lib/pkgconfig pkg-config --modversion highs) from $STATIC linked in"
    # libstdc++ and libgcc go in statically too: the host needs only libc, libm and the loader.
    build "$OUT/bin/hetgpu" ./sidecar/cmd/hetgpu \
      PKG_CONFIG_PATH="$ROOT/$STATIC/lib/pkgconfig" \
      CGO_LDFLAGS="-static-libstdc++ -static-libgcc -Wl,-Bstatic -lstdc++ -Wl,-Bdynamic -lm"
  else
    step "$ARCH: no sidecar (needs $STATIC/lib/libhighs.a and $CXX: make $TARGET); the archive holds the node plugins only"
  fi

  cp jobspecs/*.hcl "$OUT/jobspecs/"
  cp README.md CHANGELOG.md "$OUT/"
  cp docs/install.md "$OUT/docs/"
  # Reproducible archive: sorted names, fixed owner and time (the commit's), no extra attributes.
  MTIME=$(git log -1 --format=%cI 2>/dev/null || echo 2026-01-01T00:00:00Z)
  tar -C "$STAGE" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$MTIME" \
    -cf - "$NAME" | gzip -9n >"$DIST/$NAME.tar.gz"
  rm -rf "$STAGE"
  trap - EXIT
  step "wrote $DIST/$NAME.tar.gz ($(du -h "$DIST/$NAME.tar.gz" | cut -f1))"
done
(cd "$DIST" && sha256sum hetgpu_"${VERSION}"_linux_*.tar.gz >SHA256SUMS)
step "wrote $DIST/SHA256SUMS"
