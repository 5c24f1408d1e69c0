package telemetry

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/internal/wanterr"
)

func TestParseLine(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in      string
		want    Line
		wantErr string
	}{
		{in: `{"samples": 1280}`, want: Line{Samples: 1280, HasSamples: true}},
		{in: `{"samples_per_sec": 812.5}`, want: Line{SamplesPerSec: 812.5, HasRate: true}},
		{in: `{"samples": 10, "samples_per_sec": 2, "loss": 0.3}`, want: Line{Samples: 10, HasSamples: true, SamplesPerSec: 2, HasRate: true}},
		{in: `{"samples": 5, "time": "2026-01-02T03:04:05Z"}`, want: Line{Samples: 5, HasSamples: true, Time: ts}},
		{in: `{"samples": 5, "time": 1767323045}`, want: Line{Samples: 5, HasSamples: true, Time: ts}},
		{in: `{"loss": 0.3}`, wantErr: "neither"},
		{in: `{"samples": "many"}`, wantErr: `"samples" = "many", want a number`},
		{in: `{"samples": -1}`, wantErr: "finite number >= 0"},
		{in: `{"samples": 1, "time": "yesterday"}`, wantErr: "RFC 3339"},
		{in: `[1,2]`, wantErr: "not a JSON object"},
		{in: `samples=5`, wantErr: "not a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseLine([]byte(tc.in))
			if wanterr.Done(t, err, tc.wantErr) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Time.Equal(tc.want.Time) {
				t.Errorf("time = %v, want %v", got.Time, tc.want.Time)
			}
			got.Time, tc.want.Time = time.Time{}, time.Time{}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{`{"samples": 1280}`, `{"samples_per_sec": 812.5}`, `{"samples": 1, "time": "2026-01-02T03:04:05Z"}`,
		`{"samples": 1e400}`, `{}`, `null`, `{"time": 0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLine(data)
		if err != nil {
			return
		}
		if !l.HasSamples && !l.HasRate {
			t.Fatal("accepted a line without metrics")
		}
		// What we accept survives our own encoding.
		back, err := ParseLine(l.Marshal())
		if err != nil {
			t.Fatalf("re-parse %q: %v", l.Marshal(), err)
		}
		if back.HasSamples != l.HasSamples || back.HasRate != l.HasRate || back.Samples != l.Samples || back.SamplesPerSec != l.SamplesPerSec {
			t.Fatalf("round trip %+v -> %+v", l, back)
		}
	})
}

func TestRegexExtractor(t *testing.T) {
	if _, err := NewRegexExtractor(`throughput ([0-9.]+)`); err == nil || !strings.Contains(err.Error(), "named group") {
		t.Errorf("unnamed group accepted: %v", err)
	}
	if _, err := NewRegexExtractor(`(?P<samples>[0-9`); err == nil || !strings.Contains(err.Error(), "metrics.regex") {
		t.Errorf("bad regex error = %v", err)
	}
	x, err := NewRegexExtractor(`step \d+ samples=(?P<samples>[0-9,]+)( rate=(?P<samples_per_sec>[0-9.]+))?`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in   string
		ok   bool
		want Line
	}{
		{"step 3 samples=1,280 rate=812.5", true, Line{Samples: 1280, HasSamples: true, SamplesPerSec: 812.5, HasRate: true}},
		{"step 3 samples=64", true, Line{Samples: 64, HasSamples: true}},
		{"epoch done", false, Line{}},
	}
	for _, tc := range tests {
		got, ok := x.Extract([]byte(tc.in))
		if ok != tc.ok || got != tc.want {
			t.Errorf("Extract(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestTailIncremental(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.jsonl")
	tail := NewTail(path)
	if l, errs := tail.Poll(); len(l) != 0 || len(errs) != 0 {
		t.Fatalf("missing file: %v %v", l, errs)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("{\"samples\": 10}\n{\"samples\": 2")
	l, errs := tail.Poll()
	if len(l) != 1 || l[0].Samples != 10 || len(errs) != 0 {
		t.Fatalf("first poll: %+v %v", l, errs)
	}
	f.WriteString("0}\nnot json\n\n")
	l, errs = tail.Poll()
	if len(l) != 1 || l[0].Samples != 20 || len(errs) != 1 {
		t.Fatalf("second poll: %+v %v", l, errs)
	}
	// Resume in a new driver process from the saved offset.
	off := tail.Offset()
	f.WriteString("{\"samples\": 30}\n")
	t2 := NewTail(path)
	t2.SetOffset(off)
	if l, _ := t2.Poll(); len(l) != 1 || l[0].Samples != 30 {
		t.Fatalf("resumed poll: %+v", l)
	}
	// An over-long line is skipped without eating the next one.
	f.WriteString(strings.Repeat("x", maxLineBytes+10))
	t2.Poll()
	f.WriteString("\n{\"samples\": 40}\n")
	l, errs = t2.Poll()
	if len(l) != 1 || l[0].Samples != 40 || len(errs) != 1 {
		t.Fatalf("after long line: %+v %v", l, errs)
	}
}

func TestProgressThroughput(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		name  string
		lines []Line
		now   []time.Time
		want  float64
		ok    bool
	}{
		{"none", nil, nil, 0, false},
		{"one count: since start", []Line{{Samples: 500, HasSamples: true}}, []time.Time{at(10)}, 50, true},
		{"counts: warm-up excluded", []Line{{Samples: 100, HasSamples: true}, {Samples: 900, HasSamples: true}},
			[]time.Time{at(30), at(40)}, 80, true},
		{"line times win over read times", []Line{{Samples: 0, HasSamples: true, Time: at(5)}, {Samples: 800, HasSamples: true, Time: at(15)}},
			[]time.Time{at(20), at(20)}, 80, true},
		{"rates averaged", []Line{{SamplesPerSec: 800, HasRate: true}, {SamplesPerSec: 825, HasRate: true}},
			[]time.Time{at(1), at(2)}, 812.5, true},
		{"counter restart rebases", []Line{{Samples: 1000, HasSamples: true}, {Samples: 100, HasSamples: true}, {Samples: 600, HasSamples: true}},
			[]time.Time{at(10), at(20), at(30)}, 50, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewProgress(start)
			for i, l := range tc.lines {
				p.Add(l, tc.now[i])
			}
			got, ok := p.Throughput()
			if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("throughput = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
			r := RestoreProgress(p.State())
			if g2, ok2 := r.Throughput(); g2 != got || ok2 != ok {
				t.Errorf("after restore %v, %v", g2, ok2)
			}
		})
	}
}
