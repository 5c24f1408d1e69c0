// Command hetgpu-toy-train is a stand-in training job for demos and tests without a GPU. It
// "trains" for -steps steps of -step-time each, processing -batch samples per step, and
// reports progress the way the hetgpu task driver reads it: a JSON line {"samples": N,
// "time": ...} appended to $HETGPU_METRICS_FILE after every step, and a log line
// "step 10/100 loss 0.912 throughput 640.0 samples/s" on stdout every -log-every steps (for
// the driver's metrics.regex mode). It prints the GPUs it was given (NVIDIA_VISIBLE_DEVICES,
// CUDA_VISIBLE_DEVICES) first. SIGINT or SIGTERM stop it gracefully with exit status 0
// unless -ignore-signals is set; -exit-code sets the status of a normal finish.
//
// On a GPU slot (HETGPU_SLOT_IDS set by the hetgpu device plugin) it is an MPS client: every
// step takes longer by the fake GPUs' co-location model (internal/mpsshare.FakeSpeed) for the
// number of clients the driver lists in $CUDA_MPS_PIPE_DIRECTORY, so a test can measure
// interference.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hetgpu/hetgpu/internal/mpsshare"
	"github.com/hetgpu/hetgpu/internal/version"
)

type options struct {
	steps         int
	stepTime      time.Duration
	batch         int
	jitter        float64
	logEvery      int
	exitCode      int
	ignoreSignals bool
	metrics       string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("hetgpu-toy-train", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.steps, "steps", 100, "training steps to run")
	fs.DurationVar(&o.stepTime, "step-time", 100*time.Millisecond, "wall time of one step")
	fs.IntVar(&o.batch, "batch", 64, "samples per step")
	fs.Float64Var(&o.jitter, "jitter", 0.05, "relative random variation of the step time (0..0.9)")
	fs.IntVar(&o.logEvery, "log-every", 10, "print a progress line every N steps")
	fs.IntVar(&o.exitCode, "exit-code", 0, "exit status after the last step")
	fs.BoolVar(&o.ignoreSignals, "ignore-signals", false, "ignore SIGINT and SIGTERM (to test kill escalation)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&o.metrics, "metrics", os.Getenv("HETGPU_METRICS_FILE"), "JSON-lines metrics file (default $HETGPU_METRICS_FILE)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "hetgpu-toy-train %s\n", version.String())
		return 0
	}
	if o.steps < 0 || o.batch <= 0 || o.stepTime < 0 || o.logEvery <= 0 || o.jitter < 0 || o.jitter > 0.9 {
		fmt.Fprintln(stderr, "hetgpu-toy-train: -steps >= 0, -batch > 0, -step-time >= 0, -log-every > 0 and 0 <= -jitter <= 0.9 required")
		return 2
	}
	sigs := make(chan os.Signal, 1)
	if o.ignoreSignals {
		signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	} else {
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	}

	var metrics *os.File
	if o.metrics != "" {
		f, err := os.OpenFile(o.metrics, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "hetgpu-toy-train: metrics file: %v\n", err)
			return 1
		}
		defer f.Close()
		metrics = f
	}
	fmt.Fprintf(stdout, "visible GPUs: NVIDIA_VISIBLE_DEVICES=%q CUDA_VISIBLE_DEVICES=%q\n",
		os.Getenv("NVIDIA_VISIBLE_DEVICES"), os.Getenv("CUDA_VISIBLE_DEVICES"))
	pipe := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	shared := os.Getenv("HETGPU_SLOT_IDS") != "" && pipe != ""
	if shared {
		fmt.Fprintf(stdout, "MPS client: slots %s, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q CUDA_MPS_PIPE_DIRECTORY=%q\n",
			os.Getenv("HETGPU_SLOT_IDS"), os.Getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), os.Getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), pipe)
	}
	fmt.Fprintf(stdout, "training %d steps of %d samples, %v per step\n", o.steps, o.batch, o.stepTime)

	start := time.Now()
	samples := 0
	for step := 1; step <= o.steps; step++ {
		d := time.Duration(float64(o.stepTime) * (1 + o.jitter*(2*rand.Float64()-1)))
		if shared {
			d = time.Duration(float64(d) / mpsshare.FakeSpeed(len(mpsshare.Clients(pipe))))
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(stdout, "received %v at step %d/%d; checkpoint saved, stopping\n", s, step-1, o.steps)
			return 0
		case <-time.After(d):
		}
		samples += o.batch
		now := time.Now()
		if metrics != nil {
			line := `{"samples":` + strconv.Itoa(samples) + `,"time":"` + now.UTC().Format(time.RFC3339Nano) + `"}` + "\n"
			if _, err := metrics.WriteString(line); err != nil {
				fmt.Fprintf(stderr, "hetgpu-toy-train: metrics file: %v\n", err)
			}
		}
		if step%o.logEvery == 0 || step == o.steps {
			rate := float64(samples) / now.Sub(start).Seconds()
			loss := 2.5 * math.Exp(-3*float64(step)/float64(max(o.steps, 1)))
			fmt.Fprintf(stdout, "step %d/%d loss %.3f throughput %.1f samples/s\n", step, o.steps, loss, rate)
		}
	}
	fmt.Fprintf(stdout, "done: %d samples in %.1fs\n", samples, time.Since(start).Seconds())
	return o.exitCode
}
