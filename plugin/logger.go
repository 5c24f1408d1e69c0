package plugin

import (
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
)

// NewLogger returns the logger a plugin main must create before anything else: JSON lines at
// Trace on the process's real stderr. go-plugin later replaces os.Stderr with a pipe; the logger
// keeps the original file, and Nomad parses each JSON line and re-logs it at its level. Nomad
// filters by its own log level, so Trace here loses nothing.
func NewLogger(name string) hclog.Logger {
	return newLogger(name, os.Stderr)
}

func newLogger(name string, w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.Trace,
		JSONFormat: true,
		Output:     w,
	})
}
