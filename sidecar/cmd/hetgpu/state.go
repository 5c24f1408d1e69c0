package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/sidecar/runtime/app"
)

// errStateDamaged makes `hetgpu state check` exit 1 on a damaged state directory.
var errStateDamaged = errors.New("state is damaged; run `hetgpu state repair` with the same flags")

func runState(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "check" && args[0] != "repair") {
		return fmt.Errorf("%w: hetgpu state check|repair [-config FILE] [-state-dir DIR] [-simulated] [-json]", errUsage)
	}
	sub := args[0]
	fs := newFlagSet("state "+sub, stderr)
	configPath := fs.String("config", "", "the sidecar's HCL configuration (for state_dir and the predictor window)")
	stateDir := fs.String("state-dir", "", "the directory holding sidecar.db and catalog.jsonl (default: the sidecar's)")
	simulated := fs.Bool("simulated", false, "the embedded simulated cluster's state (<state_dir>/simulated)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	force := fs.Bool("rebuild-catalog", false, "repair: rebuild the catalog from the store even when it reads fine")
	setUsage(fs, `Usage: hetgpu state check|repair [flags]

check inspects the sidecar's state file (sidecar.db) and the predictor's catalog
(catalog.jsonl) without changing them: bbolt's meta pages against the file size, every
page, key and record, and every catalog line's checksum. It exits 1 when something is damaged.
repair copies what can be read into a fresh state file (the damaged one is kept as
sidecar.db.corrupt-<time>) and rebuilds the catalog from the stored runs when it is damaged
or the store was repaired (the old one kept as catalog.jsonl.old-<time>).
Stop the sidecar first: it holds the state file locked.`)
	if err := parseFlags(fs, args[1:], "hetgpu state "+sub, ""); err != nil {
		return err
	}
	cfg, err := app.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	if *stateDir != "" {
		cfg.StateDir = *stateDir
	}
	if err := cfg.Finish(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	dir := cfg.StateDir
	if *simulated {
		dir = filepath.Join(dir, "simulated")
	}
	show := func(v any, text func()) {
		if *asJSON {
			_ = writeJSON(stdout, v)
			return
		}
		text()
	}
	if sub == "check" {
		rep, err := app.CheckState(dir)
		if err != nil {
			return err
		}
		show(rep, func() {
			s := rep.Store
			switch {
			case s.Missing:
				fmt.Fprintf(stdout, "store    %s: missing (a new one is created at start)\n", s.Path)
			case s.Empty:
				fmt.Fprintf(stdout, "store    %s: EMPTY (0 bytes): what it held is lost; the sidecar moves it aside and starts a new one\n", s.Path)
			case s.OK():
				fmt.Fprintf(stdout, "store    %s: ok, %d bytes, transaction %d, records %v\n", s.Path, s.Size, s.TxID, s.Records)
			default:
				fmt.Fprintf(stdout, "store    %s: DAMAGED\n", s.Path)
				for _, p := range s.Problems {
					fmt.Fprintf(stdout, "  - %s\n", p)
				}
			}
			c := rep.Catalog
			switch {
			case c.Missing:
				fmt.Fprintf(stdout, "catalog  %s: missing (rebuilt from the store at start)\n", c.Path)
			case c.Problem != "":
				fmt.Fprintf(stdout, "catalog  %s: DAMAGED: %s\n", c.Path, c.Problem)
			default:
				torn := ""
				if c.Torn {
					torn = "; torn last line (cut off at the next start)"
				}
				fmt.Fprintf(stdout, "catalog  %s: ok, %d records through store sequence %d%s\n", c.Path, c.Records, c.LearnedThrough, torn)
			}
		})
		if !rep.OK() {
			return errStateDamaged
		}
		return nil
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "hetgpu", Level: hclog.Warn, Output: stderr})
	rep, err := app.RepairState(ctx, dir, *cfg.Predictor, *force, log)
	if err != nil {
		return err
	}
	show(rep, func() {
		if rep.Store.KeptAs == "" {
			fmt.Fprintf(stdout, "store    %s: healthy, left as it is\n", filepath.Join(dir, app.StateFile))
		} else {
			fmt.Fprintf(stdout, "store    rebuilt: copied %v (%d observation records found by scanning); damaged file kept as %s\n",
				rep.Store.Copied, rep.Store.Scanned, rep.Store.KeptAs)
			for _, l := range rep.Store.Lost {
				fmt.Fprintf(stdout, "  lost: %s\n", l)
			}
		}
		if rep.Rebuilt {
			fmt.Fprintf(stdout, "catalog  rebuilt from %d stored runs", rep.CatalogRuns)
			if rep.CatalogKeptAs != "" {
				fmt.Fprintf(stdout, "; old one kept as %s", rep.CatalogKeptAs)
			}
			fmt.Fprintln(stdout)
		} else {
			fmt.Fprintln(stdout, "catalog  healthy, left as it is")
		}
	})
	return nil
}
