package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/internal/doccheck"
)

// subcommands are the second words that select a subcommand's own flags.
var subcommands = map[string][]string{
	"train":   {"eval", "verdict", "ceiling"},
	"predict": {"eval", "train"},
	"state":   {"check", "repair"},
	"place":   {"bench"},
	"bench":   {"live"},
}

// docFlag is one flag as the command's -h lists it: whether it takes a value, and its type.
type docFlag struct {
	name, kind string
}

var flagLine = regexp.MustCompile(`^  -(\S+)(?: (\S+))?`)

// cliFlags runs `hetgpu PATH... -h` and reads the flags it lists (flag.PrintDefaults), so
// the check uses the real command's flag definitions.
func cliFlags(t *testing.T, path []string) (map[string]docFlag, bool) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append(append([]string{}, path...), "-h"), &out, &errb)
	if code != 0 {
		return nil, false
	}
	flags := map[string]docFlag{}
	for _, l := range strings.Split(errb.String()+out.String(), "\n") {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			flags[m[1]] = docFlag{name: m[1], kind: m[2]}
		}
	}
	return flags, true
}

// flagSet rebuilds a FlagSet of those flags with their types, to parse a command line.
func flagSet(flags map[string]docFlag) *flag.FlagSet {
	fs := flag.NewFlagSet("doc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range flags {
		switch f.kind {
		case "":
			fs.Bool(f.name, false, "")
		case "int":
			fs.Int(f.name, 0, "")
		case "uint":
			fs.Uint64(f.name, 0, "")
		case "float":
			fs.Float64(f.name, 0, "")
		case "duration":
			fs.Duration(f.name, 0, "")
		default:
			fs.String(f.name, "", "")
		}
	}
	return fs
}

// checkCommand returns what is wrong with one documented command line, or "".
func checkCommand(t *testing.T, c doccheck.Command, cache map[string]map[string]docFlag) string {
	if len(c.Args) == 0 {
		return "no subcommand"
	}
	path := []string{c.Args[0]}
	rest := c.Args[1:]
	if subs, ok := subcommands[c.Args[0]]; ok && len(rest) > 0 {
		for _, s := range subs {
			if rest[0] == s {
				path, rest = append(path, s), rest[1:]
				break
			}
		}
	}
	key := strings.Join(path, " ")
	flags, ok := cache[key]
	if !ok {
		var known bool
		if flags, known = cliFlags(t, path); !known {
			return "hetgpu " + key + " is not a command (hetgpu " + key + " -h fails)"
		}
		cache[key] = flags
	}
	if c.Synopsis {
		for _, w := range rest {
			w = strings.Trim(w, "[],")
			if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
			if _, ok := flags[name]; !ok && name != "h" && name != "help" {
				return "hetgpu " + key + " has no flag -" + name
			}
		}
		return ""
	}
	if err := flagSet(flags).Parse(rest); err != nil {
		return "hetgpu " + key + ": " + err.Error()
	}
	return ""
}

// TestDocsCommandsParse: every `hetgpu ...` command line in README.md and docs/ names a real
// subcommand and parses with that subcommand's flags; usage lines ([--flag X]) name only
// flags that exist.
func TestDocsCommandsParse(t *testing.T) {
	_, pages, docs := doccheck.LoadRepo(t, ".")
	cache := map[string]map[string]docFlag{}
	n := 0
	for _, p := range pages {
		for _, c := range docs[p].Commands {
			n++
			if msg := checkCommand(t, c, cache); msg != "" {
				t.Errorf("%s:%d: %q: %s", p, c.Line, c.Text, msg)
			}
		}
	}
	if n < 30 {
		t.Fatalf("found %d hetgpu command lines in %d pages; want the documentation's (>= 30)", n, len(pages))
	}
}

// TestCheckCommandFinds: stale flags, bad values and unknown subcommands are reported.
func TestCheckCommandFinds(t *testing.T) {
	cache := map[string]map[string]docFlag{}
	for _, tc := range []struct {
		line, want string
	}{
		{"hetgpu sim --cluster modern-mix --seed 2", ""},
		{"hetgpu sim --no-such-flag 1", "flag provided but not defined: -no-such-flag"},
		{"hetgpu sim --seed two", "invalid value \"two\" for flag -seed"},
		{"hetgpu train eval --json", ""},
		{"hetgpu train eval [--nope X]", "hetgpu train eval has no flag -nope"},
		{"hetgpu frobnicate", "hetgpu frobnicate is not a command"},
		{"hetgpu version --json", ""},
	} {
		d := doccheck.Parse("t.md", []byte("`"+tc.line+"`\n"))
		if len(d.Commands) != 1 {
			t.Fatalf("%q: %d commands", tc.line, len(d.Commands))
		}
		got := checkCommand(t, d.Commands[0], cache)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.line, got, tc.want)
		}
	}
}
