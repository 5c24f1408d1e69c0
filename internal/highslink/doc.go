// Package highslink makes development binaries and test executables that use HiGHS find the
// shared library `make deps` builds into .deps/highs without LD_LIBRARY_PATH: its cgo directive
// adds that folder to the run-time search path (rpath) of every program that links it, and
// cgo's LDFLAGS reach the final link from any package. Import it (blank) beside
// github.com/lanl/highs.
//
// Finding the headers and the link flags is lanl/highs's own `#cgo pkg-config: highs`, which
// needs PKG_CONFIG_PATH=$PWD/.deps/highs/lib/pkgconfig (the GNUmakefile sets it; nothing is
// registered system-wide, so no other checkout is affected).
//
// Release builds (`make release`, build tag hetgpu_release) link HiGHS's static library and
// leave this rpath out: a released binary names no folder of the checkout it was built in.
package highslink
