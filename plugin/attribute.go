package plugin

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

// Nomad's known attribute units (plugins/shared/structs/units.go). Any other non-empty unit fails
// Nomad's validation and gets the plugin killed. There is no unit for %, °C, counts or plain Hz.
const (
	UnitKiB = "KiB"
	UnitMiB = "MiB"
	UnitGiB = "GiB"
	UnitTiB = "TiB"
	UnitMB  = "MB"
	UnitGB  = "GB"

	UnitMiBPerSec = "MiB/s"
	UnitGiBPerSec = "GiB/s"
	UnitMBPerSec  = "MB/s"
	UnitGBPerSec  = "GB/s"

	UnitMHz = "MHz"
	UnitGHz = "GHz"

	UnitMilliWatt = "mW"
	UnitWatt      = "W"
	UnitKiloWatt  = "kW"
)

// KnownUnits returns every unit Nomad accepts on a device attribute.
func KnownUnits() []string {
	bytes := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "kB", "KB", "MB", "GB", "TB", "PB", "EB"}
	out := make([]string, 0, 2*len(bytes)+7)
	out = append(out, bytes...)
	for _, b := range bytes {
		out = append(out, b+"/s")
	}
	return append(out, "MHz", "GHz", "mW", "W", "kW", "MW", "GW")
}

// ValidUnit reports whether Nomad accepts u as an attribute unit ("" means no unit).
func ValidUnit(u string) bool {
	return u == "" || slices.Contains(KnownUnits(), u)
}

// IntAttribute, FloatAttribute, StringAttribute and BoolAttribute build one-valued attributes.
func IntAttribute(v int64, unit string) *structs.Attribute {
	return &structs.Attribute{Value: &structs.Attribute_IntVal{IntVal: v}, Unit: unit}
}

// FloatAttribute builds a float attribute with an optional unit.
func FloatAttribute(v float64, unit string) *structs.Attribute {
	return &structs.Attribute{Value: &structs.Attribute_FloatVal{FloatVal: v}, Unit: unit}
}

// StringAttribute builds a string attribute (strings take no unit).
func StringAttribute(v string) *structs.Attribute {
	return &structs.Attribute{Value: &structs.Attribute_StringVal{StringVal: v}}
}

// BoolAttribute builds a bool attribute (bools take no unit).
func BoolAttribute(v bool) *structs.Attribute {
	return &structs.Attribute{Value: &structs.Attribute_BoolVal{BoolVal: v}}
}

// ValidateAttribute applies Nomad's Attribute.Validate: exactly one value, and a unit only on an
// int or float and only from KnownUnits.
func ValidateAttribute(a *structs.Attribute) error {
	if a == nil || a.Value == nil {
		return errors.New("attribute has no value; exactly one of int, float, string, bool is required")
	}
	if a.Unit == "" {
		return nil
	}
	switch a.Value.(type) {
	case *structs.Attribute_IntVal, *structs.Attribute_FloatVal:
	default:
		return fmt.Errorf("unit %q is only allowed on int or float values", a.Unit)
	}
	if !ValidUnit(a.Unit) {
		return fmt.Errorf("unknown unit %q; want one of %s", a.Unit, strings.Join(KnownUnits(), " "))
	}
	return nil
}

// Attributes accumulates a group's attributes and reports every invalid one at Build, so a plugin
// cannot send a map that makes Nomad kill it.
type Attributes struct {
	m    map[string]*structs.Attribute
	errs []error
}

// NewAttributes starts an empty attribute set.
func NewAttributes() *Attributes { return &Attributes{m: map[string]*structs.Attribute{}} }

// Set adds a prebuilt attribute, validating it.
func (b *Attributes) Set(key string, a *structs.Attribute) *Attributes {
	if key == "" {
		b.errs = append(b.errs, errors.New("attribute with empty name"))
		return b
	}
	if err := ValidateAttribute(a); err != nil {
		b.errs = append(b.errs, fmt.Errorf("attribute %q: %w", key, err))
		return b
	}
	b.m[key] = a
	return b
}

// Int adds an integer attribute with an optional unit.
func (b *Attributes) Int(key string, v int64, unit string) *Attributes {
	return b.Set(key, IntAttribute(v, unit))
}

// Float adds a float attribute with an optional unit.
func (b *Attributes) Float(key string, v float64, unit string) *Attributes {
	return b.Set(key, FloatAttribute(v, unit))
}

// String adds a string attribute.
func (b *Attributes) String(key, v string) *Attributes { return b.Set(key, StringAttribute(v)) }

// Bool adds a bool attribute.
func (b *Attributes) Bool(key string, v bool) *Attributes { return b.Set(key, BoolAttribute(v)) }

// Build returns the attributes, or every validation error joined.
func (b *Attributes) Build() (map[string]*structs.Attribute, error) {
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}
	return b.m, nil
}

// ValidateGroup applies Nomad's DeviceGroup.Validate: non-empty vendor, type and name, every device
// with a non-empty ID, every attribute valid. One invalid group fails Nomad's whole fingerprint.
func ValidateGroup(g *device.DeviceGroup) error {
	if g == nil {
		return errors.New("nil device group")
	}
	var errs []error
	id := g.GetVendor() + "/" + g.GetDeviceType() + "/" + g.GetDeviceName()
	if g.GetVendor() == "" {
		errs = append(errs, errors.New("empty vendor"))
	}
	if g.GetDeviceType() == "" {
		errs = append(errs, errors.New("empty device type"))
	}
	if g.GetDeviceName() == "" {
		errs = append(errs, errors.New("empty device name"))
	}
	for i, d := range g.GetDevices() {
		if d.GetID() == "" {
			errs = append(errs, fmt.Errorf("device %d has an empty ID", i))
		}
	}
	for k, a := range g.GetAttributes() {
		if err := ValidateAttribute(a); err != nil {
			errs = append(errs, fmt.Errorf("attribute %q: %w", k, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("device group %s: %w", id, errors.Join(errs...))
	}
	return nil
}
