package plugin

import (
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

// Stat value builders. Stat units are free-form ("%", "C", "W", "J", "#") and not validated by Nomad.

// IntStat is a single integer reading.
func IntStat(v int64, unit, desc string) *structs.StatValue {
	return &structs.StatValue{IntNumeratorVal: wrapperspb.Int64(v), Unit: unit, Desc: desc}
}

// IntRatioStat is "used / total" as integers (the CLI prints "num / den unit").
func IntRatioStat(num, den int64, unit, desc string) *structs.StatValue {
	return &structs.StatValue{IntNumeratorVal: wrapperspb.Int64(num), IntDenominatorVal: wrapperspb.Int64(den), Unit: unit, Desc: desc}
}

// FloatStat is a single float reading.
func FloatStat(v float64, unit, desc string) *structs.StatValue {
	return &structs.StatValue{FloatNumeratorVal: wrapperspb.Double(v), Unit: unit, Desc: desc}
}

// FloatRatioStat is "used / total" as floats.
func FloatRatioStat(num, den float64, unit, desc string) *structs.StatValue {
	return &structs.StatValue{FloatNumeratorVal: wrapperspb.Double(num), FloatDenominatorVal: wrapperspb.Double(den), Unit: unit, Desc: desc}
}

// StringStat is a string reading (also used for "N/A" when a query is unsupported).
func StringStat(v, desc string) *structs.StatValue {
	return &structs.StatValue{StringVal: wrapperspb.String(v), Desc: desc}
}

// BoolStat is a bool reading.
func BoolStat(v bool, desc string) *structs.StatValue {
	return &structs.StatValue{BoolVal: wrapperspb.Bool(v), Desc: desc}
}
