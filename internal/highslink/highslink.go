// Package highslink makes binaries and test executables that use HiGHS find the library
// `make deps` builds into .deps/highs without LD_LIBRARY_PATH or CGO_LDFLAGS: its cgo
// directive adds that folder to the run-time search path (rpath) of every program that links
// it, and cgo's LDFLAGS reach the final link from any package. Import it (blank) beside
// github.com/lanl/highs.
//
// Finding the headers and the link flags is lanl/highs's own `#cgo pkg-config: highs`;
// `make deps` registers .deps/highs's highs.pc where pkg-config looks by default when it
// may write there (see scripts/deps-highs.sh), else PKG_CONFIG_PATH must name it.
package highslink

// #cgo LDFLAGS: -Wl,-rpath,${SRCDIR}/../../.deps/highs/lib
import "C"
