package constraint

import (
	"math"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func i64(v int64) *int64     { return &v }
func f64(v float64) *float64 { return &v }
func str(v string) *string   { return &v }
func boolean(v bool) *bool   { return &v }
func attrEq(a, b cluster.Attribute) bool {
	switch {
	case a.Unit != b.Unit:
		return false
	case a.Int != nil:
		return b.Int != nil && *a.Int == *b.Int && b.Float == nil && b.String == nil && b.Bool == nil
	case a.Float != nil:
		return b.Float != nil && (*a.Float == *b.Float || math.IsNaN(*a.Float) && math.IsNaN(*b.Float)) && b.Int == nil
	case a.Bool != nil:
		return b.Bool != nil && *a.Bool == *b.Bool
	case a.String != nil:
		return b.String != nil && *a.String == *b.String
	}
	return false
}

// TestParseAttribute follows §4.4: unit suffix longest first with optional space, then int,
// float, bool, else string.
func TestParseAttribute(t *testing.T) {
	tests := []struct {
		in   string
		want cluster.Attribute
	}{
		{"2 GiB", cluster.Attribute{Int: i64(2), Unit: "GiB"}},
		{"2GiB", cluster.Attribute{Int: i64(2), Unit: "GiB"}},
		{"16384", cluster.Attribute{Int: i64(16384)}},
		{"-3", cluster.Attribute{Int: i64(-3)}},
		{"1.5 GHz", cluster.Attribute{Float: f64(1.5), Unit: "GHz"}},
		{"900 MB/s", cluster.Attribute{Int: i64(900), Unit: "MB/s"}},
		{"5 KiB/s", cluster.Attribute{Int: i64(5), Unit: "KiB/s"}},
		{"3kW", cluster.Attribute{Int: i64(3), Unit: "kW"}},
		{"250 mW", cluster.Attribute{Int: i64(250), Unit: "mW"}},
		{"7 MW", cluster.Attribute{Int: i64(7), Unit: "MW"}},
		{"300W", cluster.Attribute{Int: i64(300), Unit: "W"}},
		{"1 KB", cluster.Attribute{Int: i64(1), Unit: "KB"}},
		{"1 kB", cluster.Attribute{Int: i64(1), Unit: "kB"}},
		{"2.5", cluster.Attribute{Float: f64(2.5)}},
		{"1e3", cluster.Attribute{Float: f64(1000)}},
		{"true", cluster.Attribute{Bool: boolean(true)}},
		{"F", cluster.Attribute{Bool: boolean(false)}},
		{"1", cluster.Attribute{Int: i64(1)}}, // int wins over bool
		{"", cluster.Attribute{String: str("")}},
		{"GiB", cluster.Attribute{String: str("GiB")}},           // a unit without a number
		{"100 Hz", cluster.Attribute{String: str("100 Hz")}},     // Hz is not a Nomad unit
		{"50%", cluster.Attribute{String: str("50%")}},           // no percent unit
		{"80 C", cluster.Attribute{String: str("80 C")}},         // no temperature unit
		{"16 gib", cluster.Attribute{String: str("16 gib")}},     // units are case-sensitive
		{"Tesla T4", cluster.Attribute{String: str("Tesla T4")}}, //
		{"trueGB", cluster.Attribute{String: str("trueGB")}},     // bool parse uses the whole input
		{"1,2", cluster.Attribute{String: str("1,2")}},           //
		{" 4 GiB", cluster.Attribute{Int: i64(4), Unit: "GiB"}},  // the number is trimmed when a unit matched
		{" 7", cluster.Attribute{String: str(" 7")}},             // ...and not otherwise
		{"4  GiB", cluster.Attribute{Int: i64(4), Unit: "GiB"}},  // spaces before the unit are
		{"GPU-aaa,GPU-b", cluster.Attribute{String: str("GPU-aaa,GPU-b")}},
	}
	for _, tt := range tests {
		got := ParseAttribute(tt.in)
		if !attrEq(got, tt.want) {
			t.Errorf("ParseAttribute(%q) = %s (unit %q), want %s (unit %q)", tt.in, String(got), got.Unit, String(tt.want), tt.want.Unit)
		}
	}
}

// TestCompare covers §4.4's comparison rules, including the Nomad quirks we keep on purpose.
func TestCompare(t *testing.T) {
	tests := []struct {
		a, b string
		want int
		ok   bool
	}{
		{"16 GiB", "16384", 0, false}, // unit vs none: never comparable
		{"16384", "16 GiB", 0, false}, //
		{"16 GiB", "16384 MiB", 0, true},
		{"16 GiB", "17179869184", 0, false},
		{"1 GiB", "1 GB", 1, true},
		{"1 KB", "1 kB", 0, true},
		{"1 GiB", "1 GiB/s", 0, false}, // byte vs byte rate
		{"1.5 GiB", "1536 MiB", 0, true},
		{"0.5 GB", "500 MB", 0, true},
		{"0.1 GB", "100 MB", 1, true}, // float64(0.1) is slightly above 0.1; 256-bit math sees it
		{"1500 mW", "1 W", 0, true},   // int scaling divides, truncating (Nomad)
		{"1500.0 mW", "1.5 W", 0, true},
		{"2 kW", "1999 W", 1, true},
		{"1 GHz", "1000 MHz", 1, true}, // Nomad: MHz = 1e3, GHz = 1e9 base units
		{"1 GHz", "1000000 MHz", 0, true},
		{"8", "16", -1, true},
		{"8", "8.0", 0, true},
		{"8.5", "8", 1, true},
		{"a", "b", -1, true},
		{"b", "a", 1, true},
		{"abc", "abc", 0, true},
		{"abc", "3", 0, false},
		{"3", "abc", 0, false},
		{"true", "true", 0, true},
		{"true", "false", 1, true}, // bools: 0 or +1, never -1
		{"false", "true", 1, true},
		{"true", "1", 0, false},
		{"NaN", "1", 0, false},
		{"Inf", "1", 1, true},
		{"9 EiB", "1", 0, false},
		{"9 EiB", "9223372036854775807 KiB", -1, true}, // no overflow here
	}
	for _, tt := range tests {
		got, ok := Compare(ParseAttribute(tt.a), ParseAttribute(tt.b))
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("Compare(%q, %q) = %d, %t; want %d, %t", tt.a, tt.b, got, ok, tt.want, tt.ok)
		}
	}
}

func TestUnitsTable(t *testing.T) {
	// §4.4 lists exactly these; anything else fails Nomad's validation.
	want := "KiB MiB GiB TiB PiB EiB kB KB MB GB TB PB EB KiB/s MiB/s GiB/s TiB/s PiB/s EiB/s " +
		"kB/s KB/s MB/s GB/s TB/s PB/s EB/s MHz GHz mW W kW MW GW"
	names := strings.Fields(want)
	if len(Units()) != len(names) {
		t.Fatalf("Units() has %d names, want %d", len(Units()), len(names))
	}
	for _, n := range names {
		if _, ok := LookupUnit(n); !ok {
			t.Errorf("unit %q missing", n)
		}
	}
	for _, n := range []string{"Hz", "B", "%", "C", "gib", "kiB"} {
		if _, ok := LookupUnit(n); ok {
			t.Errorf("unit %q must not exist", n)
		}
	}
	u := Units()
	for i := 1; i < len(u); i++ {
		if len(u[i]) > len(u[i-1]) {
			t.Fatalf("Units() not longest first: %q before %q", u[i-1], u[i])
		}
	}
}
