#!/usr/bin/env bash
# Builds HiGHS (the MILP solver behind github.com/lanl/highs) from Debian's trixie source
# package into a prefix inside the checkout. This Debian release ships no HiGHS package, so we
# take the upstream tarball Debian redistributes, verify it against the signed Sources index and
# build it once; later runs find the prefix and return at once.
#
#   deps-highs.sh PREFIX                     shared library, for development (make build, make test)
#   deps-highs.sh PREFIX static              static library, linked into release binaries
#   deps-highs.sh PREFIX static TRIPLET      the same, cross-compiled (TRIPLET-g++, e.g. aarch64-linux-gnu)
#
# Nothing is written outside PREFIX and the tarball cache beside it (PREFIX/../src): no file under
# /usr/local or $HOME points into this checkout, so creating or deleting one checkout never changes
# what another builds against. Plain `go build` outside make needs one export (docs/install.md):
#   export PKG_CONFIG_PATH=$PWD/.deps/highs/lib/pkgconfig
set -euo pipefail

PREFIX=${1:?usage: deps-highs.sh PREFIX [shared|static] [TRIPLET]}
KIND=${2:-shared}
TRIPLET=${3:-}
VERSION=1.10.0+ds
SUITE=trixie
ORIG="highs_${VERSION}.orig.tar.xz"
CACHE="$(dirname "$PREFIX")/src"

step() { printf '==> highs (%s%s): %s\n' "$KIND" "${TRIPLET:+ $TRIPLET}" "$*" >&2; }
die() { printf 'highs: step "%s" failed: %s\n' "$1" "$2" >&2; exit 1; }

case $KIND in
  shared) SHARED=ON ;;
  static) SHARED=OFF ;;
  *) die "arguments" "kind is \"$KIND\"; expected shared or static" ;;
esac
[ -z "$TRIPLET" ] || [ "$KIND" = static ] || die "arguments" "a cross build (TRIPLET $TRIPLET) must be static"

# Only this prefix counts as built: a HiGHS that pkg-config finds elsewhere would tie this
# checkout to files it does not own.
if [ -f "$PREFIX/lib/pkgconfig/highs.pc" ]; then
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
[ -z "$TRIPLET" ] || need_pkg "$TRIPLET-g++" "g++-$TRIPLET"

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

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hetgpu-highs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$CACHE"

# The tarball is verified once against the Sources index and cached with its digest; the shared,
# static and cross builds all start from the same verified file.
if [ -f "$CACHE/$ORIG" ] && [ -f "$CACHE/$ORIG.sha256" ] &&
   [ "$(sha256sum "$CACHE/$ORIG" | cut -d' ' -f1)" = "$(cat "$CACHE/$ORIG.sha256")" ]; then
  step "using the verified $CACHE/$ORIG"
else
  MIRROR=$(mirror_uri)
  [ -n "$MIRROR" ] || die "find mirror" "no Debian mirror URI (ending in /debian) in /etc/apt/sources.list{,.d}; add your mirror and re-run"
  step "using the configured Debian mirror $MIRROR, suite $SUITE"
  mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/dl"
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
  (cd "$WORK/dl" && apt-get "${APT[@]}" -qq source --download-only "highs=${VERSION}-1" >/dev/null 2>&1) || true
  [ -f "$WORK/dl/$ORIG" ] || die "apt-get source" "$ORIG was not downloaded from $MIRROR"

  GOT=$(sha256sum "$WORK/dl/$ORIG" | cut -d' ' -f1)
  [ "$GOT" = "$WANT" ] || die "verify sha256" "$ORIG has sha256 $GOT, the Sources index says $WANT; refusing to build"
  step "sha256 $GOT matches the Sources index"
  mv "$WORK/dl/$ORIG" "$CACHE/$ORIG"
  echo "$GOT" >"$CACHE/$ORIG.sha256"
fi

mkdir -p "$WORK/src"
tar -C "$WORK/src" -xJf "$CACHE/$ORIG" || die "unpack" "tar could not unpack $ORIG"
SRC=$(find "$WORK/src" -mindepth 1 -maxdepth 1 -type d | head -1)

ARGS=(-DCMAKE_BUILD_TYPE=Release -DFAST_BUILD=ON -DBUILD_TESTING=OFF -DZLIB=OFF
      -DBUILD_SHARED_LIBS=$SHARED -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib)
if [ "$SHARED" = ON ]; then
  ARGS+=(-DCMAKE_INSTALL_RPATH="$PREFIX/lib")
else
  # Position-independent, so the Go linker may put it into any kind of executable.
  ARGS+=(-DCMAKE_POSITION_INDEPENDENT_CODE=ON)
fi
if [ -n "$TRIPLET" ]; then
  ARGS+=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR="${TRIPLET%%-*}"
         -DCMAKE_C_COMPILER="$TRIPLET-gcc" -DCMAKE_CXX_COMPILER="$TRIPLET-g++")
fi

step "building with cmake (Release, FAST_BUILD, no tests) into $PREFIX; about 3 minutes on 2 cores"
cmake -S "$SRC" -B "$WORK/build" "${ARGS[@]}" >"$WORK/cmake.log" 2>&1 ||
  { tail -20 "$WORK/cmake.log" >&2; die "cmake configure" "see the log above"; }
cmake --build "$WORK/build" --parallel "$(nproc)" >"$WORK/build.log" 2>&1 ||
  { tail -30 "$WORK/build.log" >&2; die "cmake build" "see the log above"; }
cmake --install "$WORK/build" >"$WORK/install.log" 2>&1 ||
  { tail -20 "$WORK/install.log" >&2; die "cmake install" "see the log above"; }
PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --exists highs ||
  die "pkg-config" "installed, but $PREFIX/lib/pkgconfig/highs.pc is missing"
step "installed HiGHS $(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --modversion highs) into $PREFIX"
