package annot

import (
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		job, grp  map[string]string
		want      cluster.Annotations
		errKeys   []string // keys the error must name, in order
		errSubstr string
	}{
		{name: "empty", want: cluster.Annotations{}},
		{
			name: "all keys",
			job: map[string]string{
				KeyEnable: "true", KeyModel: "resnet/ResNet-50", KeyBatchSize: "64", KeyParams: "25.6M",
				KeyFramework: "PyTorch", KeyRuntime: "2h30m", KeySteps: "1e6", KeyMinThroughput: "400.5",
				KeyMaxNodes: "2", KeyEnergyWeight: "0.5", KeyPriorityClass: "High", KeyAllowSharing: "yes",
				"unrelated": "x",
			},
			want: cluster.Annotations{
				Enabled: true, ModelFamily: "resnet", ModelName: "ResNet-50", BatchSize: 64, ParamCount: 25.6e6,
				Framework: "pytorch", EstRuntime: 150 * time.Minute, MinThroughput: 400.5, MaxNodes: 2,
				EnergyWeight: 0.5, PriorityClass: "high", AllowSharing: true,
			},
		},
		{
			name: "group overrides job",
			job:  map[string]string{KeyEnable: "true", KeyBatchSize: "32", KeyModel: "BERT"},
			grp:  map[string]string{KeyBatchSize: "128", KeyModel: "transformer/BERT-base"},
			want: cluster.Annotations{Enabled: true, BatchSize: 128, ModelFamily: "transformer", ModelName: "BERT-base"},
		},
		{
			name: "group fixes a bad job value",
			job:  map[string]string{KeyBatchSize: "lots"},
			grp:  map[string]string{KeyBatchSize: " 16 "},
			want: cluster.Annotations{BatchSize: 16},
		},
		{name: "gang off", job: map[string]string{KeyGang: "false"}, want: cluster.Annotations{NoGang: true}},
		{name: "gang off in one group", job: map[string]string{KeyGang: "true"}, grp: map[string]string{KeyGang: "no"}, want: cluster.Annotations{NoGang: true}},
		{name: "gang on", job: map[string]string{KeyGang: "true"}, want: cluster.Annotations{}},
		{name: "bad gang", job: map[string]string{KeyGang: "all"}, errKeys: []string{KeyGang}, errSubstr: "true or false"},
		{name: "bad batch", job: map[string]string{KeyBatchSize: "0"}, errKeys: []string{KeyBatchSize}, errSubstr: "integer from 1"},
		{name: "bad bool", grp: map[string]string{KeyEnable: "maybe"}, errKeys: []string{KeyEnable}, errSubstr: `(group "g" meta)`},
		{name: "bad runtime", job: map[string]string{KeyRuntime: "90"}, errKeys: []string{KeyRuntime}, errSubstr: "Go duration"},
		{name: "negative runtime", job: map[string]string{KeyRuntime: "-1h"}, errKeys: []string{KeyRuntime}},
		{name: "ran", grp: map[string]string{KeyRan: "3h20m0s"}, want: cluster.Annotations{Ran: 200 * time.Minute}},
		{name: "ran nothing yet", grp: map[string]string{KeyRan: "0s"}, want: cluster.Annotations{}},
		{name: "negative ran", grp: map[string]string{KeyRan: "-5m"}, errKeys: []string{KeyRan}, errSubstr: "non-negative Go duration"},
		{name: "bad ran", grp: map[string]string{KeyRan: "ages"}, errKeys: []string{KeyRan}},
		{name: "nan throughput", job: map[string]string{KeyMinThroughput: "NaN"}, errKeys: []string{KeyMinThroughput}},
		{name: "inf weight", job: map[string]string{KeyEnergyWeight: "+Inf"}, errKeys: []string{KeyEnergyWeight}},
		{name: "weight too big", job: map[string]string{KeyEnergyWeight: "1001"}, errKeys: []string{KeyEnergyWeight}},
		{name: "max nodes zero", job: map[string]string{KeyMaxNodes: "0"}, errKeys: []string{KeyMaxNodes}},
		{name: "max nodes huge", job: map[string]string{KeyMaxNodes: "5000"}, errKeys: []string{KeyMaxNodes}},
		{name: "model empty family", job: map[string]string{KeyModel: "/ResNet"}, errKeys: []string{KeyModel}},
		{name: "model two slashes", job: map[string]string{KeyModel: "a/b/c"}, errKeys: []string{KeyModel}},
		{name: "framework spaces", job: map[string]string{KeyFramework: "py torch"}, errKeys: []string{KeyFramework}},
		{name: "priority unknown", job: map[string]string{KeyPriorityClass: "urgent"}, errKeys: []string{KeyPriorityClass}, errSubstr: "high, normal, low, best-effort"},
		{name: "samples zero", job: map[string]string{KeySteps: "0"}, errKeys: []string{KeySteps}},
		{name: "params hex", job: map[string]string{KeyParams: "0x10"}, errKeys: []string{KeyParams}},
		{name: "unknown key", job: map[string]string{"hetgpu.batchsize": "64"}, errKeys: []string{"hetgpu.batchsize"}, errSubstr: "documented keys"},
		{
			name:    "every bad key reported, good ones kept",
			job:     map[string]string{KeyMaxNodes: "x", KeyBatchSize: "-3", KeyModel: "GPT-2"},
			errKeys: []string{KeyBatchSize, KeyMaxNodes},
			want:    cluster.Annotations{ModelName: "GPT-2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.job, tt.grp, "g")
			errs := Errors(err)
			if len(errs) != len(tt.errKeys) {
				t.Fatalf("errors = %v, want keys %v", err, tt.errKeys)
			}
			for i, e := range errs {
				if e.Key != tt.errKeys[i] {
					t.Errorf("error %d key = %q, want %q", i, e.Key, tt.errKeys[i])
				}
				if e.Expected == "" || !strings.Contains(e.Error(), e.Key) || !strings.Contains(e.Error(), "expected") {
					t.Errorf("error %q must name the key, the value and what is expected", e.Error())
				}
				v := tt.job[e.Key]
				if gv, ok := tt.grp[e.Key]; ok {
					v = gv
				}
				if !strings.Contains(e.Error(), v) {
					t.Errorf("error %q does not show the value %q", e.Error(), v)
				}
			}
			if tt.errSubstr != "" && (err == nil || !strings.Contains(err.Error(), tt.errSubstr)) {
				t.Errorf("error %v does not contain %q", err, tt.errSubstr)
			}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestSteps(t *testing.T) {
	if got := Steps(map[string]string{KeySteps: "2.5k"}, nil, "g"); got != 2500 {
		t.Errorf("Steps = %v, want 2500", got)
	}
	if got := Steps(map[string]string{KeySteps: "2.5k"}, map[string]string{KeySteps: "bad"}, "g"); got != 0 {
		t.Errorf("Steps with a malformed group value = %v, want 0", got)
	}
}

func TestIsHold(t *testing.T) {
	for _, tt := range []struct {
		l, op, r string
		want     bool
	}{
		{HoldAttribute, "", HoldValue, true},
		{HoldAttribute, "=", HoldValue, true},
		{HoldAttribute, "==", HoldValue, true},
		{HoldAttribute, "is", HoldValue, true},
		{HoldAttribute, "!=", HoldValue, false},
		{HoldAttribute, "=", "waiting", false},
		{"${meta.queue}", "=", HoldValue, false},
	} {
		if got := IsHold(tt.l, tt.op, tt.r); got != tt.want {
			t.Errorf("IsHold(%q %q %q) = %v, want %v", tt.l, tt.op, tt.r, got, tt.want)
		}
	}
	h := Hold()
	if !IsHold(h.LTarget, h.Operand, h.RTarget) {
		t.Errorf("Hold() %v is not recognised by IsHold", h)
	}
}

func TestKeysDocumented(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Keys() {
		if k.Expected == "" || k.Example == "" || k.Type == "" {
			t.Errorf("%s is not fully documented: %+v", k.Key, k)
		}
		seen[k.Key] = true
		// The documented example must parse.
		if _, err := Parse(map[string]string{k.Key: k.Example}, nil, "g"); err != nil {
			t.Errorf("example of %s does not parse: %v", k.Key, err)
		}
	}
	for _, k := range []string{KeyEnable, KeyModel, KeyBatchSize, KeyParams, KeyFramework, KeyRuntime, KeySteps,
		KeyMinThroughput, KeyMaxNodes, KeyEnergyWeight, KeyPriorityClass, KeyAllowSharing, KeyPreemptible, KeyGang, KeyRan} {
		if !seen[k] {
			t.Errorf("key %s missing from Keys()", k)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(KeyBatchSize, "64", KeyModel, "resnet/ResNet-50")
	f.Add(KeyMinThroughput, "1e309", KeyRuntime, "1h")
	f.Add(KeyParams, "12.5B", KeyEnergyWeight, "-0")
	f.Add("hetgpu.x", "\x00", KeyMaxNodes, "1024")
	f.Add(KeyEnable, "TRUE", KeyPriorityClass, "best-effort")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		a, err := Parse(map[string]string{k1: v1}, map[string]string{k2: v2}, "g")
		for _, e := range Errors(err) {
			if !strings.HasPrefix(e.Key, Prefix) || e.Expected == "" {
				t.Fatalf("error without key or expectation: %+v", e)
			}
		}
		if a.BatchSize < 0 || a.MaxNodes < 0 || a.MaxNodes > MaxNodesLimit || a.EstRuntime < 0 ||
			a.MinThroughput < 0 || a.EnergyWeight < 0 || a.EnergyWeight > MaxEnergyWeight || a.ParamCount < 0 {
			t.Fatalf("out-of-range value accepted: %+v", a)
		}
		if a.MinThroughput != a.MinThroughput || a.ParamCount != a.ParamCount {
			t.Fatalf("NaN accepted: %+v", a)
		}
		if err == nil {
			// Everything valid must round-trip into a documented key.
			for _, k := range []string{k1, k2} {
				if strings.HasPrefix(k, Prefix) && expected(k) == "" {
					t.Fatalf("unknown key %q accepted", k)
				}
			}
		}
	})
}
