package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
)

// parseFlags parses a subcommand's flags and rejects positional arguments, naming the
// subcommand (cmd) and adding hint, which says what the user may have meant, to the error.
func parseFlags(fs *flag.FlagSet, args []string, cmd, hint string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected argument %q%s", errUsage, cmd, fs.Arg(0), hint)
	}
	return nil
}

// writeJSON writes v as indented JSON, the --json output of the subcommands.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
