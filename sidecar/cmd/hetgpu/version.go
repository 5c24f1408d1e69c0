package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hetgpu/hetgpu/internal/version"
)

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stdout, "hetgpu %s\n", version.String())
	return err
}
