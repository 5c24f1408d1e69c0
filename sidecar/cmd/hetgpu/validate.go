package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hetgpu/hetgpu/model/annot"
)

func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("validate", stderr)
	strict := fs.Bool("strict", false, "treat warnings as errors")
	setUsage(fs, `Usage: hetgpu validate [-strict] FILE...

Parses Nomad jobspecs (HCL2) and checks their hetgpu annotations and hold constraint: every
malformed hetgpu.* meta value is reported with its key, value and what is expected.`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: hetgpu validate needs at least one jobspec file", errUsage)
	}
	var errs, warns int
	for _, path := range fs.Args() {
		js, err := annot.ReadJobspec(path)
		if err != nil {
			fmt.Fprintf(stdout, "%v\n", err)
			errs++
			continue
		}
		findings := annot.Check(js)
		fe, fw := 0, 0
		for _, f := range findings {
			fmt.Fprintln(stdout, f.String())
			if f.Severity == "error" {
				fe++
			} else {
				fw++
			}
		}
		if fe == 0 && fw == 0 {
			held := 0
			for _, g := range js.Groups {
				if isHeld(js, g) {
					held++
				}
			}
			fmt.Fprintf(stdout, "%s: ok (job %q, %d group(s), %d held for hetgpu)\n", path, js.ID, len(js.Groups), held)
		}
		errs += fe
		warns += fw
	}
	if errs > 0 || (*strict && warns > 0) {
		return fmt.Errorf("%d error(s), %d warning(s)", errs, warns)
	}
	return nil
}

func isHeld(js *annot.Jobspec, g annot.SpecGroup) bool {
	for _, cs := range [][]annot.SpecConstraint{js.Constraints, g.Constraints} {
		for _, c := range cs {
			if annot.IsHold(c.LTarget, c.Operand, c.RTarget) {
				return true
			}
		}
	}
	return false
}
