// Command hetgpu is the scheduler sidecar for Nomad and its tools: the simulator, the
// placement benchmark, the predictor's evaluation and the prioritiser's training.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists every subcommand; each lives in its own file of this package.
func commands() []command {
	return []command{
		{"version", "print the version, commit, Go and HiGHS versions (also: hetgpu --version)", runVersion},
		{"train", "train the job prioritiser (PPO) in the simulator; `train eval` checks it on held-out traces, `train verdict` judges it, `train ceiling` measures it against the exact-runtime oracle over seeds", runTrain},
		{"predict", "evaluate or train the throughput and power predictor", runPredict},
		{"sim", "replay a trace on a simulated GPU cluster under each policy and compare them", runSim},
		{"sidecar", "run the scheduler sidecar (Nomad, or the embedded simulated cluster)", runSidecar},
		{"release", "hand a held job back to plain Nomad scheduling", runRelease},
		{"validate", "check a jobspec's hetgpu annotations and hold constraint", runValidate},
		{"state", "check or repair the sidecar's state file and catalog: `state check`, `state repair`", runState},
		{"place", "placement engine tools: `place bench` times the MILP on a random cluster", runPlace},
		{"bench", "`bench live` measures the sidecar's rounds on the Nomad backend against a fake Nomad API at fleet scale", runBench},
	}
}

// errUsage marks an error whose message is already a usage text; exit code 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		args = []string{"version"}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range cmds {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				fmt.Fprintln(stderr, err)
				return 2
			default:
				fmt.Fprintf(stderr, "hetgpu %s: %v\n", c.name, err)
				return 1
			}
		}
	}
	fmt.Fprintf(stderr, "hetgpu: unknown command %q\n\n", args[0])
	usage(stderr, cmds)
	return 2
}

func usage(w io.Writer, cmds []command) {
	var b strings.Builder
	b.WriteString("Usage: hetgpu <command> [flags]\n\nCommands:\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'hetgpu <command> -h' for a command's flags.\n")
	io.WriteString(w, b.String())
}

// newFlagSet returns a FlagSet that reports errors instead of exiting.
// setUsage makes -h (and a usage error) print text, then the flags with their defaults.
func setUsage(fs *flag.FlagSet, text string) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), text+"\n\nFlags:\n")
		fs.PrintDefaults()
	}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("hetgpu "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
