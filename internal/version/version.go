// Package version carries the release version of every hetgpu binary. The version is written
// here and nowhere else: the GNUmakefile reads it for archive names, CHANGELOG.md's release
// section must name it (a test checks), and each binary prints it with `version`/`--version`.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is this release. Bump it together with a new CHANGELOG.md section.
var Version = "0.1.0"

// Commit is the git commit the binary was built from. The GNUmakefile sets it with
// -ldflags -X; without it, Go's own VCS stamp (go build in a git checkout) fills it in.
var Commit = ""

// Info is what a binary reports about itself.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
	// Modified says the working tree had uncommitted changes when built (from Go's VCS stamp).
	Modified bool `json:"modified,omitempty"`
}

// Get returns the version, commit and Go version of the running binary.
func Get() Info {
	info := Info{Version: Version, Commit: Commit, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
					if len(info.Commit) > 12 {
						info.Commit = info.Commit[:12]
					}
				}
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// String is "0.1.0 (commit abc1234, go1.26.8)", the line `--version` prints after the name.
func String() string {
	i := Get()
	dirty := ""
	if i.Modified {
		dirty = "+modified"
	}
	return fmt.Sprintf("%s (commit %s%s, %s)", i.Version, i.Commit, dirty, i.Go)
}

// IsVersionFlag reports whether args (os.Args[1:]) ask a plugin binary for its version
// instead of serving: exactly one of --version, -version, -v or version.
func IsVersionFlag(args []string) bool {
	if len(args) != 1 {
		return false
	}
	switch args[0] {
	case "--version", "-version", "-v", "version":
		return true
	}
	return false
}

// AnswerVersionFlag prints "<binary> <version>" on stdout when args (os.Args[1:]) ask a plugin
// binary for its version (IsVersionFlag), and reports whether they did: the binary then exits
// instead of serving.
func AnswerVersionFlag(binary string, args []string) bool {
	if !IsVersionFlag(args) {
		return false
	}
	fmt.Printf("%s %s\n", binary, String())
	return true
}
