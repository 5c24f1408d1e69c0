package constraint

import (
	"math"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func setCount(a cluster.Attribute) int {
	n := 0
	for _, set := range []bool{a.Int != nil, a.Float != nil, a.String != nil, a.Bool != nil} {
		if set {
			n++
		}
	}
	return n
}

// FuzzParseAttribute checks the parser's invariants on any input: exactly one value; a unit
// only on a number, only a known one, only as a suffix of the input; strings keep the input;
// comparison is reflexive for non-NaN values, symmetric in comparability and antisymmetric in
// order for non-bools.
func FuzzParseAttribute(f *testing.F) {
	for _, s := range []string{"", "2 GiB", "16384", "1.5GHz", "true", "t", "Tesla T4", "100 Hz", "5 KiB/s",
		"250mW", "NaN", "-Inf", "1e309", "0x10", "GPU-a,GPU-b", " 7 W", "9 EiB", "\xc3", "1_000"} {
		f.Add(s, "1 GiB")
	}
	f.Fuzz(func(t *testing.T, in, other string) {
		a := ParseAttribute(in)
		if setCount(a) != 1 {
			t.Fatalf("ParseAttribute(%q) sets %d values", in, setCount(a))
		}
		if a.Unit != "" {
			if a.Int == nil && a.Float == nil {
				t.Fatalf("ParseAttribute(%q): unit %q on a non-number", in, a.Unit)
			}
			if _, ok := LookupUnit(a.Unit); !ok || !strings.HasSuffix(in, a.Unit) {
				t.Fatalf("ParseAttribute(%q): unit %q unknown or not a suffix", in, a.Unit)
			}
		}
		if a.String != nil && *a.String != in {
			t.Fatalf("ParseAttribute(%q) = string %q", in, *a.String)
		}
		nan := a.Float != nil && math.IsNaN(*a.Float)
		if v, ok := Compare(a, a); !nan && (!ok || v != 0) {
			t.Fatalf("Compare(%q, itself) = %d, %t", in, v, ok)
		}
		b := ParseAttribute(other)
		if Comparable(a, b) != Comparable(b, a) {
			t.Fatalf("Comparable(%q, %q) is not symmetric", in, other)
		}
		ab, ok1 := Compare(a, b)
		ba, ok2 := Compare(b, a)
		if ok1 != ok2 {
			t.Fatalf("Compare(%q, %q) ok=%t but reverse ok=%t", in, other, ok1, ok2)
		}
		if ok1 && a.Bool == nil && ab != -ba {
			t.Fatalf("Compare(%q, %q) = %d, reverse %d", in, other, ab, ba)
		}
	})
}
