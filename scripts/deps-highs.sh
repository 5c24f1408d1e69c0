#!/usr/bin/env bash
# Builds HiGHS (the MILP solver behind github.com/lanl/highs) from Debian's trixie source
# package into a project-local prefix. This Debian release ships no HiGHS package, so we take
# the upstream tarball Debian redistributes, verify it against the signed Sources index and
# build it once; later runs find it with pkg-config and return at once.
set -euo pipefail

PREFIX=${1:?usage: deps-highs.sh PREFIX}
VERSION=1.10.0+ds
SUITE=trixie
ORIG="highs_${VERSION}.orig.tar.xz"

step() { printf '==> highs: %s\n' "$*" >&2; }
die() { printf 'highs: step "%s" failed: %s\n' "$1" "$2" >&2; exit 1; }

# Plain `go build` and `go test` (without the GNUmakefile's PKG_CONFIG_PATH) find HiGHS through
# pkg-config's default path, so register the prefix's highs.pc in the first folder of it under
# /usr/local that we may write, with an rpath so programs find the library at run time too.
# internal/highslink adds .deps/highs/lib to the rpath of our own programs either way.
register() {
  local pc="$PREFIX/lib/pkgconfig/highs.pc" d
  [ -f "$pc" ] || return 0
  # A registration whose library folder still exists (this checkout's or another's) is kept.
  local cur
  cur=$(env -u PKG_CONFIG_PATH pkg-config --variable=libdir highs 2>/dev/null || true)
  [ -n "$cur" ] && [ -d "$cur" ] && return 0
  for d in $(env -u PKG_CONFIG_PATH pkg-config --variable pc_path pkg-config | tr : ' '); do
    case $d in /usr/local/*) ;; *) continue ;; esac
    if mkdir -p "$d" 2>/dev/null && [ -w "$d" ]; then
      sed -E 's|^Libs:(.*)$|Libs: -Wl,-rpath,${libdir}\1|' "$pc" >"$d/highs.pc"
      step "registered $pc as $d/highs.pc: plain go build and go test find HiGHS"
      return 0
    fi
  done
  step "pkg-config's default path is not writable: plain go build and go test need PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig (make sets it)"
}

# Only this checkout's own prefix counts as built: a HiGHS that pkg-config finds elsewhere (say,
# another checkout registered above) would tie this one to files it does not own.
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
if [ -f "$PREFIX/lib/pkgconfig/highs.pc" ]; then
  register
  exit 0
fi

need_pkg() { # command, Debian package
  command -v "$1" >/dev/null 2>&1 && return 0
  step "installing Debian package $2"
  if [ "$(id -u)" = 0 ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; } ||
      die "install $2" "apt-get install $2 failed; install it by hand and re-run make deps"
  else
    die "install $2" "$1 is missing and we are not root; run: sudo apt-get install $2"
  fi
}
need_pkg cmake cmake
need_pkg g++ g++
need_pkg pkg-config pkg-config

# The mirror this machine already uses, read from its apt sources (deb822 or one-line form).
mirror_uri() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    uri=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) {print $i; exit}}' "$f")
    [ -n "$uri" ] && { echo "${uri%/}"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    uri=$(awk '$1 ~ /^deb(-src)?$/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\// && $i ~ /\/debian\/?$/) {print $i; exit}}' "$f")
    [ -n "$uri" ] && { echo "${uri%/}"; return; }
  done
}
MIRROR=$(mirror_uri)
[ -n "$MIRROR" ] || die "find mirror" "no Debian mirror URI (ending in /debian) in /etc/apt/sources.list{,.d}; add your mirror and re-run"
step "using the configured Debian mirror $MIRROR, suite $SUITE"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hetgpu-highs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/src"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
echo "deb-src [signed-by=$KEYRING] $MIRROR $SUITE main" >"$WORK/sources.list"
APT=(-o "Dir::Etc::SourceList=$WORK/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
     -o "Dir::State::Lists=$WORK/lists" -o "Dir::Cache=$WORK/cache" -o "Debug::NoLocking=1"
     -o "APT::Sandbox::User=root")

step "fetching the $SUITE Sources index (private apt state in $WORK)"
apt-get "${APT[@]}" -qq update || die "apt-get update" "could not read $MIRROR $SUITE Sources; check the network and the keyring $KEYRING"

WANT=$(apt-cache "${APT[@]}" showsrc highs 2>/dev/null |
  awk -v f="$ORIG" '/^Checksums-Sha256:/ {c = 1; next} /^[^ ]/ {c = 0} c && $3 == f {print $1; exit}')
[ -n "$WANT" ] || die "read checksum" "the $SUITE Sources index has no $ORIG entry"

step "downloading $ORIG with apt-get source"
# The mirror may 404 the .dsc and .debian.tar.xz; the upstream tarball is all we build from.
(cd "$WORK/src" && apt-get "${APT[@]}" -qq source --download-only "highs=${VERSION}-1" >/dev/null 2>&1) || true
[ -f "$WORK/src/$ORIG" ] || die "apt-get source" "$ORIG was not downloaded from $MIRROR"

GOT=$(sha256sum "$WORK/src/$ORIG" | cut -d' ' -f1)
[ "$GOT" = "$WANT" ] || die "verify sha256" "$ORIG has sha256 $GOT, the Sources index says $WANT; refusing to build"
step "sha256 $GOT matches the Sources index"

tar -C "$WORK/src" -xJf "$WORK/src/$ORIG" || die "unpack" "tar could not unpack $ORIG"
SRC=$(find "$WORK/src" -mindepth 1 -maxdepth 1 -type d | head -1)

step "building with cmake (Release, FAST_BUILD, no tests) into $PREFIX; about 3 minutes on 2 cores"
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DFAST_BUILD=ON -DBUILD_TESTING=OFF \
  -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib \
  -DCMAKE_INSTALL_RPATH="$PREFIX/lib" >"$WORK/cmake.log" 2>&1 ||
  { tail -20 "$WORK/cmake.log" >&2; die "cmake configure" "see the log above"; }
cmake --build "$WORK/build" --parallel "$(nproc)" >"$WORK/build.log" 2>&1 ||
  { tail -30 "$WORK/build.log" >&2; die "cmake build" "see the log above"; }
cmake --install "$WORK/build" >"$WORK/install.log" 2>&1 ||
  { tail -20 "$WORK/install.log" >&2; die "cmake install" "see the log above"; }
pkg-config --exists highs || die "pkg-config" "installed, but $PREFIX/lib/pkgconfig/highs.pc is missing"
step "installed HiGHS $(pkg-config --modversion highs) into $PREFIX"
register

