package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hetgpu/hetgpu/internal/version"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
)

// versionInfo is `hetgpu version --json`: the release, the commit, and the Go and HiGHS
// versions the binary was built with.
type versionInfo struct {
	version.Info
	HiGHS string `json:"highs"`
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	asJSON := fs.Bool("json", false, "print the version, commit, Go and HiGHS versions as JSON")
	setUsage(fs, `Usage: hetgpu version [--json]

Prints hetgpu's release version, the git commit it was built from, and the Go and HiGHS
versions linked into it. Also: hetgpu --version.`)
	if err := parseFlags(fs, args, "hetgpu version", ""); err != nil {
		return err
	}
	info := versionInfo{Info: version.Get(), HiGHS: place.HighsVersion()}
	if *asJSON {
		return writeJSON(stdout, info)
	}
	_, err := fmt.Fprintf(stdout, "hetgpu %s\ncommit %s\ngo     %s\nhighs  %s\n", info.Version, info.Commit, info.Go, info.HiGHS)
	return err
}
