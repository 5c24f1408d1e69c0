package constraint

import (
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// BaseUnit groups units that compare with each other.
type BaseUnit int

// The base units Nomad knows (plugins/shared/structs/units.go). A unit-less number has no base.
const (
	BaseNone BaseUnit = iota
	BaseByte
	BaseByteRate
	BaseHertz
	BaseWatt
)

// Unit is one attribute unit: Value x Multiplier in the base unit, or Value / Multiplier when
// Inverse (mW).
type Unit struct {
	Name       string
	Base       BaseUnit
	Multiplier int64
	Inverse    bool
}

// unitTable lists Nomad's attribute units exactly. Nomad's hertz units are MHz = 1000 and GHz =
// 1000^3 base units, so "1 GHz" is not equal to "1000 MHz" in Nomad; we keep that, because the
// point of this package is to predict what Nomad will decide.
var unitTable = []Unit{
	{"KiB", BaseByte, 1 << 10, false}, {"MiB", BaseByte, 1 << 20, false}, {"GiB", BaseByte, 1 << 30, false},
	{"TiB", BaseByte, 1 << 40, false}, {"PiB", BaseByte, 1 << 50, false}, {"EiB", BaseByte, 1 << 60, false},
	{"kB", BaseByte, 1e3, false}, {"KB", BaseByte, 1e3, false}, {"MB", BaseByte, 1e6, false},
	{"GB", BaseByte, 1e9, false}, {"TB", BaseByte, 1e12, false}, {"PB", BaseByte, 1e15, false},
	{"EB", BaseByte, 1e18, false},
	{"KiB/s", BaseByteRate, 1 << 10, false}, {"MiB/s", BaseByteRate, 1 << 20, false},
	{"GiB/s", BaseByteRate, 1 << 30, false}, {"TiB/s", BaseByteRate, 1 << 40, false},
	{"PiB/s", BaseByteRate, 1 << 50, false}, {"EiB/s", BaseByteRate, 1 << 60, false},
	{"kB/s", BaseByteRate, 1e3, false}, {"KB/s", BaseByteRate, 1e3, false}, {"MB/s", BaseByteRate, 1e6, false},
	{"GB/s", BaseByteRate, 1e9, false}, {"TB/s", BaseByteRate, 1e12, false}, {"PB/s", BaseByteRate, 1e15, false},
	{"EB/s", BaseByteRate, 1e18, false},
	{"MHz", BaseHertz, 1e3, false}, {"GHz", BaseHertz, 1e9, false},
	{"mW", BaseWatt, 1e3, true}, {"W", BaseWatt, 1, false}, {"kW", BaseWatt, 1e3, false},
	{"MW", BaseWatt, 1e6, false}, {"GW", BaseWatt, 1e9, false},
}

// unitsLongestFirst is unitTable's names sorted by length, longest first, for suffix matching.
// It is computed once and never written after; it is a constant table, not mutable state.
var unitsLongestFirst = func() []string {
	names := make([]string, len(unitTable))
	for i, u := range unitTable {
		names[i] = u.Name
	}
	sort.SliceStable(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	return names
}()

// LookupUnit returns a known unit by exact (case-sensitive) name.
func LookupUnit(name string) (Unit, bool) {
	for _, u := range unitTable {
		if u.Name == name {
			return u, true
		}
	}
	return Unit{}, false
}

// Units lists every known unit name, longest first.
func Units() []string { return append([]string(nil), unitsLongestFirst...) }

// ParseAttribute turns a literal from a job (a constraint's value) into a typed attribute the way
// Nomad does: when the last byte is a letter, a known unit suffix is taken (longest match first)
// and the rest, trimmed of spaces, must be the number; then int, float, bool (strconv.ParseBool
// on the whole input), else the input is a string. "2 GiB" is Int 2 GiB, "2.5GHz" Float 2.5 GHz,
// "true" Bool, "GiB" the string "GiB".
func ParseAttribute(input string) cluster.Attribute {
	if input == "" {
		return cluster.Attribute{String: &input}
	}
	unit, numeric := "", input
	if unicode.IsLetter(rune(input[len(input)-1])) {
		for _, u := range unitsLongestFirst {
			if strings.HasSuffix(input, u) {
				unit = u
				numeric = strings.TrimSpace(strings.TrimSuffix(input, u))
				break
			}
		}
	}
	if i, err := strconv.ParseInt(numeric, 10, 64); err == nil {
		return cluster.Attribute{Int: &i, Unit: unit}
	}
	if f, err := strconv.ParseFloat(numeric, 64); err == nil {
		return cluster.Attribute{Float: &f, Unit: unit}
	}
	if b, err := strconv.ParseBool(input); err == nil {
		return cluster.Attribute{Bool: &b}
	}
	s := input
	return cluster.Attribute{String: &s}
}

// Comparable reports whether Nomad would compare a and b: a value with a known unit compares only
// with a value whose unit has the same base; a value with a unit never compares with one without;
// without units, strings compare with strings, bools with bools, numbers with numbers.
func Comparable(a, b cluster.Attribute) bool {
	ua, aok := LookupUnit(a.Unit)
	ub, bok := LookupUnit(b.Unit)
	switch {
	case aok && bok:
		return ua.Base == ub.Base && isNumber(a) && isNumber(b)
	case aok != bok:
		return false
	}
	switch {
	case a.String != nil:
		return b.String != nil
	case a.Bool != nil:
		return b.Bool != nil
	case isNumber(a):
		return isNumber(b)
	}
	return false
}

func isNumber(a cluster.Attribute) bool { return a.Int != nil || a.Float != nil }

// Compare orders a against b as Nomad's Attribute.Compare: -1, 0 or +1 and true, or false when
// they are not comparable. Quirks kept on purpose: bools give 0 when equal and +1 otherwise (so
// only = and != mean anything); two ints are compared after scaling to the base unit with integer
// division for inverse units (1500 mW == 1 W as ints, as in Nomad), any float through 256-bit
// big.Float. Deliberate differences, for values Nomad cannot handle: int scaling never overflows
// here (Nomad wraps above ~8 EiB) and NaN is not comparable (Nomad's big.Float would panic).
func Compare(a, b cluster.Attribute) (int, bool) {
	if !Comparable(a, b) {
		return 0, false
	}
	switch {
	case a.Bool != nil:
		if *a.Bool == *b.Bool {
			return 0, true
		}
		return 1, true
	case a.String != nil:
		return strings.Compare(*a.String, *b.String), true
	case a.Int != nil && b.Int != nil:
		return scaledInt(a).Cmp(scaledInt(b)), true
	}
	af, ok := bigFloat(a)
	if !ok {
		return 0, false
	}
	bf, ok := bigFloat(b)
	if !ok {
		return 0, false
	}
	return af.Cmp(bf), true
}

const floatPrec = 256

func scaledInt(a cluster.Attribute) *big.Int {
	i := big.NewInt(*a.Int)
	u, ok := LookupUnit(a.Unit)
	if !ok {
		return i
	}
	m := big.NewInt(u.Multiplier)
	if u.Inverse {
		return i.Quo(i, m) // truncates toward zero, as Go's int64 division in Nomad
	}
	return i.Mul(i, m)
}

func bigFloat(a cluster.Attribute) (*big.Float, bool) {
	f := new(big.Float).SetPrec(floatPrec)
	switch {
	case a.Int != nil:
		f.SetInt64(*a.Int)
	case a.Float != nil:
		if math.IsNaN(*a.Float) {
			return nil, false
		}
		f.SetFloat64(*a.Float)
	default:
		return nil, false
	}
	u, ok := LookupUnit(a.Unit)
	if !ok {
		return f, true
	}
	m := new(big.Float).SetPrec(floatPrec).SetInt64(u.Multiplier)
	if u.Inverse {
		m.Quo(new(big.Float).SetPrec(floatPrec).SetInt64(1), m)
	}
	return f.Mul(f, m), true
}

// String renders an attribute for messages ("16 GiB", "true", "\"Tesla T4\"").
func String(a cluster.Attribute) string {
	switch {
	case a.Int != nil:
		return strings.TrimSpace(strconv.FormatInt(*a.Int, 10) + " " + a.Unit)
	case a.Float != nil:
		return strings.TrimSpace(strconv.FormatFloat(*a.Float, 'g', -1, 64) + " " + a.Unit)
	case a.Bool != nil:
		return strconv.FormatBool(*a.Bool)
	case a.String != nil:
		return strconv.Quote(*a.String)
	}
	return "<unset>"
}
