package trace

import (
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"sort"
	"strings"
)

//go:embed data/gavel-msr-seed0
var bundledFS embed.FS

// msrVCs are the Philly virtual clusters of Gavel's msr traces, bundled as bundled:msr-<vc>.
var msrVCs = []string{"0e4a51", "103959", "11cb48", "23dbec", "2869ce", "51b7ef", "6214e9", "6c71a0",
	"795a4c", "7f04ca", "925e2b", "b436b2", "e13805", "ed69ec", "ee9e8c"}

// window is a slice of one bundled trace: jobs [from, from+n) re-based to start at 0, with
// arrival gaps multiplied by compress (1 = as recorded).
type window struct {
	name, vc string
	from, n  int
	compress float64
	doc      string
}

// windows are the derived bundled traces, all with arrivals 2x denser than recorded (the msr
// traces are one virtual cluster's load; our clusters are shared by more users). Train and
// held-out windows come from different virtual clusters, so a policy trained on bundled:train is
// evaluated on users it never saw:
//
//	train:    train-0 (ee9e8c), train-1 (6c71a0), train-2 (6214e9), train-3 (11cb48)
//	          train-4 (103959), train-5 (23dbec), train-6 (51b7ef), train-7 (925e2b): 4x denser
//	validate: validate-0 (2869ce), validate-1 (e13805), validate-2 (ed69ec)
//	heldout:  heldout-0 (b436b2 jobs 500-999), heldout-1 (7f04ca), heldout-2 (0e4a51)
//
// train-4..7 come from virtual clusters whose load at 2x leaves our clusters nearly idle, so they
// are 4x denser: more load levels to learn from. The validation windows (the contended ones of
// the remaining virtual clusters) choose which trained policy is kept, so the held-out windows
// stay a test set that no decision of training looked at.
//
// bundled:default is b436b2's first 500 jobs, from a held-out virtual cluster, so the headline
// comparison (make run) is on data no trained policy was fitted to. On modern-mix it keeps the
// cluster 60-80 % busy with long queues under FIFO: a contended, heterogeneity-sensitive load.
func windows() []window {
	const c = 0.5
	return []window{
		{"default", "b436b2", 0, 500, c, "held-out VC b436b2, jobs 0-499, arrivals 2x denser"},
		{"train-0", "ee9e8c", 0, 500, c, "VC ee9e8c, jobs 0-499, arrivals 2x denser"},
		{"train-1", "6c71a0", 0, 500, c, "VC 6c71a0, jobs 0-499, arrivals 2x denser"},
		{"train-2", "6214e9", 0, 500, c, "VC 6214e9, jobs 0-499, arrivals 2x denser"},
		{"train-3", "11cb48", 0, 500, c, "VC 11cb48, jobs 0-499, arrivals 2x denser"},
		{"train-4", "103959", 0, 500, c / 2, "VC 103959, jobs 0-499, arrivals 4x denser"},
		{"train-5", "23dbec", 0, 500, c / 2, "VC 23dbec, jobs 0-499, arrivals 4x denser"},
		{"train-6", "51b7ef", 0, 500, c / 2, "VC 51b7ef, jobs 0-499, arrivals 4x denser"},
		{"train-7", "925e2b", 0, 500, c / 2, "VC 925e2b, jobs 0-499, arrivals 4x denser"},
		{"validate-0", "2869ce", 0, 500, c, "VC 2869ce, jobs 0-499, arrivals 2x denser"},
		{"validate-1", "e13805", 0, 500, c, "VC e13805, jobs 0-499, arrivals 2x denser"},
		{"validate-2", "ed69ec", 0, 500, c, "VC ed69ec, jobs 0-499, arrivals 2x denser"},
		{"heldout-0", "b436b2", 500, 500, c, "VC b436b2, jobs 500-999, arrivals 2x denser"},
		{"heldout-1", "7f04ca", 0, 500, c, "VC 7f04ca, jobs 0-499, arrivals 2x denser"},
		{"heldout-2", "0e4a51", 0, 500, c, "VC 0e4a51, jobs 0-499, arrivals 2x denser"},
	}
}

// TrainWindows and HeldOutWindows name the prioritiser's training and evaluation traces.
func TrainWindows() []string {
	return []string{"train-0", "train-1", "train-2", "train-3", "train-4", "train-5", "train-6", "train-7"}
}

// ValidateWindows choose among trained policies (see TrainWindows).
func ValidateWindows() []string { return []string{"validate-0", "validate-1", "validate-2"} }

// HeldOutWindows: see TrainWindows.
func HeldOutWindows() []string { return []string{"heldout-0", "heldout-1", "heldout-2"} }

// combined are the bundled traces made of others (merged, relabelled, cut short or laid end to
// end), with their one-line docs; Bundled builds them.
var combined = []struct{ name, doc string }{
	{"philly-15k", "all 15 Gavel msr traces merged: 15,264 Philly-derived jobs"},
	{"philly-tenants", "philly-15k with each job in the namespace of its Philly virtual cluster (vc-<id>): 15 tenants"},
	{"philly-tenants-2k", "the first 2,000 arrivals of philly-tenants: the 15 virtual clusters' first jobs, side by side"},
	{"philly-tenants-500", "the first 500 arrivals of philly-tenants: a quick slice of philly-tenants-2k"},
	{"train", "train-0..7 laid end to end"},
	{"validate", "validate-0..2 laid end to end"},
	{"heldout", "heldout-0..2 laid end to end"},
}

// BundledNames lists every name bundled: accepts, sorted.
func BundledNames() []string {
	var out []string
	for _, c := range combined {
		out = append(out, c.name)
	}
	for _, vc := range msrVCs {
		out = append(out, "msr-"+vc)
	}
	for _, w := range windows() {
		out = append(out, w.name)
	}
	sort.Strings(out)
	return out
}

// BundledDoc describes a bundled trace in one line.
func BundledDoc(name string) string {
	for _, c := range combined {
		if c.name == name {
			return c.doc
		}
	}
	if vc, ok := strings.CutPrefix(name, "msr-"); ok {
		return "Gavel msr trace of Philly VC " + vc
	}
	for _, w := range windows() {
		if w.name == name {
			return w.doc
		}
	}
	return ""
}

// Bundled returns an embedded trace by name (see BundledNames).
func Bundled(name string) (*Trace, error) {
	switch {
	case name == "philly-tenants-2k" || name == "philly-tenants-500":
		t, err := Bundled("philly-tenants")
		if err != nil {
			return nil, err
		}
		n := 2000
		if name == "philly-tenants-500" {
			n = 500
		}
		t.Jobs, t.Name = t.Jobs[:min(n, len(t.Jobs))], "bundled:"+name
		return t, nil
	case name == "philly-15k" || name == "philly-tenants":
		var all []Job
		for _, vc := range msrVCs {
			t, err := msr(vc)
			if err != nil {
				return nil, err
			}
			if name == "philly-tenants" {
				for i := range t.Jobs {
					t.Jobs[i].Namespace = "vc-" + vc
				}
			}
			all = append(all, t.Jobs...)
		}
		sortByArrival(all)
		return &Trace{Name: "bundled:" + name, Jobs: all}, nil
	case name == "train" || name == "validate" || name == "heldout":
		names := TrainWindows()
		switch name {
		case "validate":
			names = ValidateWindows()
		case "heldout":
			names = HeldOutWindows()
		}
		return concat("bundled:"+name, names)
	case strings.HasPrefix(name, "msr-"):
		t, err := msr(strings.TrimPrefix(name, "msr-"))
		if err != nil {
			return nil, err
		}
		t.Name = "bundled:" + name
		return t, nil
	}
	for _, w := range windows() {
		if w.name != name {
			continue
		}
		t, err := msr(w.vc)
		if err != nil {
			return nil, err
		}
		wt, err := t.Window("bundled:"+name, w.from, w.n)
		if err != nil {
			return nil, err
		}
		for i := range wt.Jobs {
			wt.Jobs[i].ArrivalS *= w.compress
		}
		return wt, nil
	}
	return nil, fmt.Errorf("bundled trace %q does not exist; bundled traces: %s", name, strings.Join(BundledNames(), ", "))
}

// concat lays windows end to end, each starting one hour after the previous one's last arrival.
func concat(name string, names []string) (*Trace, error) {
	out := &Trace{Name: name}
	offset := 0.0
	for _, n := range names {
		t, err := Bundled(n)
		if err != nil {
			return nil, err
		}
		last := 0.0
		for _, j := range t.Jobs {
			j.ArrivalS += offset
			j.ID = n + "/" + j.ID
			out.Jobs = append(out.Jobs, j)
			last = j.ArrivalS
		}
		offset = last + 3600
	}
	for i := range out.Jobs {
		out.Jobs[i].ID = strings.ReplaceAll(out.Jobs[i].ID, "/", "-")
	}
	return out, nil
}

func msr(vc string) (*Trace, error) {
	f, err := bundledFS.Open("data/gavel-msr-seed0/" + vc + ".trace.gz")
	if err != nil {
		return nil, fmt.Errorf("bundled trace msr-%s does not exist; bundled traces: %s", vc, strings.Join(BundledNames(), ", "))
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("bundled trace msr-%s: %w", vc, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("bundled trace msr-%s: %w", vc, err)
	}
	return ParseGavel(bytes.NewReader(data), vc+".trace")
}
