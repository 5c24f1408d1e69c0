// Package telemetry measures a task: its GPUs through NVML (energy, power, utilisation,
// sampled at 1 Hz) and its progress through a metrics source (a JSON-lines file the task
// appends to, or lines of its stdout matched by a regular expression).
package telemetry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MetricsFileEnv is the environment variable that tells the task where to append its
// metrics lines.
const MetricsFileEnv = "HETGPU_METRICS_FILE"

// maxLineBytes bounds one metrics line; longer lines are skipped, not buffered forever.
const maxLineBytes = 64 * 1024

// Line is one progress record: {"samples": 1280} (cumulative samples processed so far) or
// {"samples_per_sec": 812.5} (the task's own rate), optionally with "time" (RFC 3339 or
// Unix seconds). Both may be present.
type Line struct {
	Samples       float64
	SamplesPerSec float64
	HasSamples    bool
	HasRate       bool
	// Time is when the task measured it; zero when the line has no time.
	Time time.Time
}

// ParseLine decodes one metrics line. Unknown keys are ignored so tasks may log more.
func ParseLine(b []byte) (Line, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Line{}, fmt.Errorf("metrics line is not a JSON object: %w", err)
	}
	var l Line
	num := func(key string) (float64, bool, error) {
		v, ok := raw[key]
		if !ok || string(v) == "null" {
			return 0, false, nil
		}
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return 0, false, fmt.Errorf("metrics line: %q = %s, want a number", key, v)
		}
		if f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, false, fmt.Errorf("metrics line: %q = %s, want a finite number >= 0", key, v)
		}
		return f, true, nil
	}
	var err error
	if l.Samples, l.HasSamples, err = num("samples"); err != nil {
		return Line{}, err
	}
	if l.SamplesPerSec, l.HasRate, err = num("samples_per_sec"); err != nil {
		return Line{}, err
	}
	if !l.HasSamples && !l.HasRate {
		return Line{}, errors.New(`metrics line has neither "samples" nor "samples_per_sec"`)
	}
	if v, ok := raw["time"]; ok && string(v) != "null" {
		t, err := parseTime(v)
		if err != nil {
			return Line{}, err
		}
		l.Time = t
	}
	return l, nil
}

func parseTime(v json.RawMessage) (time.Time, error) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("metrics line: \"time\" = %q, want RFC 3339 like 2026-01-02T15:04:05Z", s)
		}
		return t, nil
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || f <= 0 || f > 1e11 {
		return time.Time{}, fmt.Errorf("metrics line: \"time\" = %s, want RFC 3339 or Unix seconds", v)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}

// Marshal encodes the line as one JSON line (with its trailing newline).
func (l Line) Marshal() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	sep := ""
	if l.HasSamples {
		b.WriteString(`"samples":` + strconv.FormatFloat(l.Samples, 'f', -1, 64))
		sep = ","
	}
	if l.HasRate {
		b.WriteString(sep + `"samples_per_sec":` + strconv.FormatFloat(l.SamplesPerSec, 'f', -1, 64))
		sep = ","
	}
	if !l.Time.IsZero() {
		b.WriteString(sep + `"time":"` + l.Time.UTC().Format(time.RFC3339Nano) + `"`)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// RegexExtractor turns stdout lines into metrics lines. The expression names what it
// captures with (?P<samples>...) and/or (?P<samples_per_sec>...).
type RegexExtractor struct {
	re          *regexp.Regexp
	samples     int
	samplesRate int
}

// NewRegexExtractor compiles expr; the error says what is wrong with it.
func NewRegexExtractor(expr string) (*RegexExtractor, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("metrics.regex %q: %w", expr, err)
	}
	x := &RegexExtractor{re: re, samples: re.SubexpIndex("samples"), samplesRate: re.SubexpIndex("samples_per_sec")}
	if x.samples < 0 && x.samplesRate < 0 {
		return nil, fmt.Errorf("metrics.regex %q: needs a named group (?P<samples>...) for cumulative samples or (?P<samples_per_sec>...) for a rate", expr)
	}
	return x, nil
}

// Extract returns the metrics in line, if the expression matches and its groups are numbers
// (thousands separators allowed).
func (x *RegexExtractor) Extract(line []byte) (Line, bool) {
	m := x.re.FindSubmatch(line)
	if m == nil {
		return Line{}, false
	}
	var l Line
	parse := func(i int) (float64, bool) {
		if i < 0 || m[i] == nil {
			return 0, false
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(string(m[i]), ",", ""), 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, false
		}
		return f, true
	}
	l.Samples, l.HasSamples = parse(x.samples)
	l.SamplesPerSec, l.HasRate = parse(x.samplesRate)
	return l, l.HasSamples || l.HasRate
}

// Tail reads a metrics file incrementally: each Poll returns the complete lines appended
// since the last one.
type Tail struct {
	path    string
	offset  int64
	partial []byte
	skip    bool // inside an over-long line
}

// NewTail follows path, which need not exist yet.
func NewTail(path string) *Tail { return &Tail{path: path} }

// Offset is how far the file has been read; SetOffset resumes there (after a restart).
func (t *Tail) Offset() int64 { return t.offset - int64(len(t.partial)) }

// SetOffset resumes reading at a line boundary previously returned by Offset.
func (t *Tail) SetOffset(off int64) { t.offset, t.partial, t.skip = off, nil, false }

// Poll returns new lines and the parse errors of malformed ones (which are skipped).
func (t *Tail) Poll() ([]Line, []error) {
	f, err := os.Open(t.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, []error{err}
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() < t.offset {
		t.SetOffset(0) // truncated or replaced: start over
	}
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		return nil, []error{err}
	}
	data, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return nil, []error{err}
	}
	t.offset += int64(len(data))
	var lines []Line
	var errs []error
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !t.skip {
				t.partial = append(t.partial, data...)
				if len(t.partial) > maxLineBytes {
					t.partial, t.skip = nil, true
				}
			}
			break
		}
		chunk := data[:i]
		data = data[i+1:]
		if t.skip {
			t.skip = false
			errs = append(errs, fmt.Errorf("metrics line longer than %d bytes skipped", maxLineBytes))
			continue
		}
		full := append(t.partial, chunk...)
		t.partial = nil
		if len(bytes.TrimSpace(full)) == 0 {
			continue
		}
		l, err := ParseLine(full)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		lines = append(lines, l)
	}
	return lines, errs
}

// Progress turns metrics lines into the task's throughput.
type Progress struct {
	start time.Time
	// Cumulative counts: the first and the latest observation.
	nCum          int
	firstT, lastT time.Time
	firstS, lastS float64
	nRate         int
	rateSum       float64
}

// NewProgress starts tracking a task that started at start.
func NewProgress(start time.Time) *Progress { return &Progress{start: start} }

// Add records a line; now stands in for lines without their own time.
func (p *Progress) Add(l Line, now time.Time) {
	t := l.Time
	if t.IsZero() {
		t = now
	}
	if l.HasSamples {
		if p.nCum == 0 || l.Samples < p.lastS {
			// First observation, or the counter restarted (task restarted its loop): rebase.
			p.nCum, p.firstT, p.firstS = 0, t, l.Samples
		}
		p.nCum++
		p.lastT, p.lastS = t, l.Samples
	}
	if l.HasRate {
		p.nRate++
		p.rateSum += l.SamplesPerSec
	}
}

// Throughput is samples per second: from cumulative counts the rate between the first and
// the latest observation (which leaves start-up out), from one count the rate since the task
// started, else the mean of the rates the task reported.
func (p *Progress) Throughput() (float64, bool) {
	if p.nCum >= 2 {
		if d := p.lastT.Sub(p.firstT).Seconds(); d > 0 {
			return (p.lastS - p.firstS) / d, true
		}
	}
	if p.nCum == 1 && !p.start.IsZero() {
		if d := p.lastT.Sub(p.start).Seconds(); d > 0 {
			return p.lastS / d, true
		}
	}
	if p.nRate > 0 {
		return p.rateSum / float64(p.nRate), true
	}
	return 0, false
}

// Samples is the latest cumulative count, when the task reports one.
func (p *Progress) Samples() (float64, bool) { return p.lastS, p.nCum > 0 }

// ProgressState is Progress in a form that can be saved and restored.
type ProgressState struct {
	Start   time.Time `json:"start"`
	NCum    int       `json:"n_cum"`
	FirstT  time.Time `json:"first_t,omitzero"`
	LastT   time.Time `json:"last_t,omitzero"`
	FirstS  float64   `json:"first_s"`
	LastS   float64   `json:"last_s"`
	NRate   int       `json:"n_rate"`
	RateSum float64   `json:"rate_sum"`
}

// State returns a snapshot for a checkpoint.
func (p *Progress) State() ProgressState {
	return ProgressState{Start: p.start, NCum: p.nCum, FirstT: p.firstT, LastT: p.lastT, FirstS: p.firstS,
		LastS: p.lastS, NRate: p.nRate, RateSum: p.rateSum}
}

// RestoreProgress rebuilds a Progress from a checkpoint.
func RestoreProgress(s ProgressState) *Progress {
	return &Progress{start: s.Start, nCum: s.NCum, firstT: s.FirstT, lastT: s.LastT, firstS: s.FirstS,
		lastS: s.LastS, nRate: s.NRate, rateSum: s.RateSum}
}
