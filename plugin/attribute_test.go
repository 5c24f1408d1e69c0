package plugin

import (
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

func TestValidateAttribute(t *testing.T) {
	tests := []struct {
		name string
		a    *structs.Attribute
		want string // "" = valid
	}{
		{"int MiB", IntAttribute(40960, "MiB"), ""},
		{"int GB/s", IntAttribute(1555, "GB/s"), ""},
		{"float W", FloatAttribute(250.5, "W"), ""},
		{"int mW", IntAttribute(1, "mW"), ""},
		{"string", StringAttribute("ampere"), ""},
		{"bool", BoolAttribute(true), ""},
		{"no value", &structs.Attribute{Unit: "MiB"}, "no value"},
		{"nil", nil, "no value"},
		{"percent", IntAttribute(50, "%"), `unknown unit "%"`},
		{"Hz", IntAttribute(50, "Hz"), `unknown unit "Hz"`},
		{"celsius", IntAttribute(50, "C"), `unknown unit "C"`},
		{"unit on string", &structs.Attribute{Value: &structs.Attribute_StringVal{StringVal: "x"}, Unit: "MiB"}, "only allowed on int or float"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateAttribute(tt.a)
			if tt.want == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestKnownUnits(t *testing.T) {
	for _, u := range []string{"KiB", "EiB", "kB", "KB", "EB", "KiB/s", "kB/s", "EB/s", "MHz", "GHz", "mW", "W", "kW", "MW", "GW"} {
		if !ValidUnit(u) {
			t.Errorf("%q should be a known unit", u)
		}
	}
	for _, u := range []string{"Hz", "%", "B", "mib", "J", "C", "Gbps"} {
		if ValidUnit(u) {
			t.Errorf("%q should not be a known unit", u)
		}
	}
}

func TestAttributesBuilder(t *testing.T) {
	attrs, err := NewAttributes().Int("memory", 40960, UnitMiB).String("architecture", "ampere").Bool("mig", false).Build()
	if err != nil || len(attrs) != 3 || attrs["memory"].GetIntVal() != 40960 || attrs["memory"].Unit != "MiB" {
		t.Fatalf("attrs = %v, err = %v", attrs, err)
	}
	_, err = NewAttributes().Int("temp", 50, "C").Float("util", 1, "%").Int("", 1, "").Build()
	if err == nil {
		t.Fatal("want error")
	}
	for _, want := range []string{`attribute "temp"`, `attribute "util"`, "empty name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestValidateGroup(t *testing.T) {
	good := func() *device.DeviceGroup {
		return &device.DeviceGroup{Vendor: "nvidia", DeviceType: "gpu", DeviceName: "Tesla T4",
			Devices:    []*device.DetectedDevice{{ID: "GPU-1", Healthy: true}},
			Attributes: map[string]*structs.Attribute{"memory": IntAttribute(15360, "MiB")}}
	}
	if err := ValidateGroup(good()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*device.DeviceGroup)
		want   string
	}{
		{"vendor", func(g *device.DeviceGroup) { g.Vendor = "" }, "empty vendor"},
		{"type", func(g *device.DeviceGroup) { g.DeviceType = "" }, "empty device type"},
		{"name", func(g *device.DeviceGroup) { g.DeviceName = "" }, "empty device name"},
		{"id", func(g *device.DeviceGroup) { g.Devices[0].ID = "" }, "empty ID"},
		{"attr", func(g *device.DeviceGroup) { g.Attributes["x"] = IntAttribute(1, "%") }, `attribute "x"`},
	}
	for _, tt := range tests {
		g := good()
		tt.mutate(g)
		if err := ValidateGroup(g); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}
}
