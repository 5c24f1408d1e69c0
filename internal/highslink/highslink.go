//go:build !hetgpu_release

package highslink

// #cgo LDFLAGS: -Wl,-rpath,${SRCDIR}/../../.deps/highs/lib
import "C"
