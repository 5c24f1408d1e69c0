// Package version carries the build's version, set by the GNUmakefile through -ldflags.
package version

// Version is overwritten at build time: -X github.com/hetgpu/hetgpu/internal/version.Version=...
var Version = "0.1.0-dev"

// Commit is the git commit the binary was built from, when known.
var Commit = ""

// String is "0.1.0-dev (abc1234)" or just the version.
func String() string {
	if Commit == "" {
		return Version
	}
	return Version + " (" + Commit + ")"
}
