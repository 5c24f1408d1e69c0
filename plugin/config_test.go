package plugin

import (
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/zclconf/go-cty/cty"

	"github.com/hetgpu/hetgpu/plugin/proto/hclspec"
)

type testFake struct {
	GPUs   []string `msgpack:"gpus"`
	Seed   int64    `msgpack:"seed"`
	Faults []struct {
		XID int `msgpack:"xid"`
	} `msgpack:"fault"`
}

type testConfig struct {
	Enabled bool              `msgpack:"enabled"`
	Ignored []string          `msgpack:"ignored_gpu_ids"`
	Period  time.Duration     `msgpack:"fingerprint_period"`
	Ratio   float64           `msgpack:"ratio"`
	Small   uint8             `msgpack:"small"`
	Labels  map[string]string `msgpack:"labels"`
	Fake    *testFake         `msgpack:"fake"`
	skipped int
}

func defaults() testConfig {
	return testConfig{Enabled: true, Period: time.Minute, Ratio: 0.5, Small: 7}
}

func testSchema() *hclspec.Spec {
	return Object(map[string]*hclspec.Spec{
		"enabled":            AttrDefault("enabled", "bool", "true"),
		"ignored_gpu_ids":    AttrDefault("ignored_gpu_ids", "list(string)", "[]"),
		"fingerprint_period": AttrDefault("fingerprint_period", "string", `"1m"`),
		"ratio":              Attr("ratio", "number", false),
		"small":              Attr("small", "number", false),
		"labels":             Attr("labels", "map(string)", false),
		"fake": Block("fake", false, Object(map[string]*hclspec.Spec{
			"gpus":  Attr("gpus", "list(string)", true),
			"seed":  AttrDefault("seed", "number", "1"),
			"fault": BlockList("fault", 0, 0, Object(map[string]*hclspec.Spec{"xid": Attr("xid", "number", true)})),
		})),
	})
}

func TestDecodeHCLConfig(t *testing.T) {
	tests := []struct {
		name  string
		hcl   string
		check func(t *testing.T, c testConfig)
	}{
		{"empty body keeps defaults", ``, func(t *testing.T, c testConfig) {
			if !c.Enabled || c.Period != time.Minute || c.Ratio != 0.5 || c.Small != 7 || c.Fake != nil || len(c.Ignored) != 0 {
				t.Errorf("got %+v", c)
			}
		}},
		{"values", `
enabled = false
ignored_gpu_ids = ["GPU-a", "GPU-b"]
fingerprint_period = "30s"
ratio = 0.25
small = 200
labels = { rack = "r1" }
fake {
  gpus = ["4x T4", "2x A100-SXM4-40GB"]
  fault { xid = 79 }
  fault { xid = 48 }
}`, func(t *testing.T, c testConfig) {
			if c.Enabled || c.Period != 30*time.Second || c.Ratio != 0.25 || c.Small != 200 ||
				strings.Join(c.Ignored, ",") != "GPU-a,GPU-b" || c.Labels["rack"] != "r1" {
				t.Errorf("got %+v", c)
			}
			if c.Fake == nil || strings.Join(c.Fake.GPUs, ";") != "4x T4;2x A100-SXM4-40GB" || c.Fake.Seed != 1 ||
				len(c.Fake.Faults) != 2 || c.Fake.Faults[1].XID != 48 {
				t.Errorf("fake = %+v", c.Fake)
			}
		}},
		{"huge integer stays exact", `fake {
  gpus = []
  seed = 9007199254740993
}`, func(t *testing.T, c testConfig) {
			if c.Fake.Seed != 9007199254740993 {
				t.Errorf("seed = %d", c.Fake.Seed)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := EncodeHCLConfig(testSchema(), []byte(tt.hcl))
			if err != nil {
				t.Fatal(err)
			}
			c := defaults()
			if err := DecodeConfig(data, &c); err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

// cty encodes numbers it cannot hold in int64/float64 exactly as decimal strings.
func TestDecodeNumberEncodings(t *testing.T) {
	bigExact, _, _ := big.ParseFloat("12345678901234567890123", 10, 512, big.ToNearestEven)
	tests := []struct {
		name    string
		val     cty.Value
		wantErr string
		check   func(c testConfig) bool
	}{
		{"int", cty.NumberIntVal(3), "", func(c testConfig) bool { return c.Ratio == 3 }},
		{"float", cty.NumberFloatVal(0.125), "", func(c testConfig) bool { return c.Ratio == 0.125 }},
		{"decimal string", cty.NumberVal(new(big.Float).SetPrec(512).Quo(big.NewFloat(1), big.NewFloat(3))), "",
			func(c testConfig) bool { return c.Ratio > 0.3333 && c.Ratio < 0.3334 }},
		{"big into float", cty.NumberVal(bigExact), "", func(c testConfig) bool { return c.Ratio > 1.2e22 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := cty.ObjectVal(map[string]cty.Value{"ratio": tt.val})
			data, err := EncodeCty(obj)
			if err != nil {
				t.Fatal(err)
			}
			c := defaults()
			if err := DecodeConfig(data, &c); err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("ratio = %v", c.Ratio)
			}
		})
	}
}

func TestDecodeConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		val  cty.Value
		want string
	}{
		{"fraction into int", cty.ObjectVal(map[string]cty.Value{"small": cty.NumberFloatVal(1.5)}), `config field "small": got float64 1.5, want a non-negative whole number`},
		{"overflow uint8", cty.ObjectVal(map[string]cty.Value{"small": cty.NumberIntVal(300)}), `config field "small"`},
		{"negative uint", cty.ObjectVal(map[string]cty.Value{"small": cty.NumberIntVal(-1)}), `config field "small"`},
		{"bad duration", cty.ObjectVal(map[string]cty.Value{"fingerprint_period": cty.StringVal("soon")}), `config field "fingerprint_period": got string "soon", want a non-negative duration`},
		{"negative duration", cty.ObjectVal(map[string]cty.Value{"fingerprint_period": cty.StringVal("-1s")}), `config field "fingerprint_period"`},
		{"string for bool", cty.ObjectVal(map[string]cty.Value{"enabled": cty.StringVal("yes")}), `config field "enabled": got string "yes", want true or false`},
		{"nested list element", cty.ObjectVal(map[string]cty.Value{"fake": cty.ObjectVal(map[string]cty.Value{
			"gpus": cty.TupleVal([]cty.Value{cty.StringVal("T4"), cty.True})})}), `config field "fake.gpus[1]": got bool true, want a string`},
		{"not a list", cty.ObjectVal(map[string]cty.Value{"ignored_gpu_ids": cty.StringVal("GPU-a")}), `config field "ignored_gpu_ids"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := EncodeCty(tt.val)
			if err != nil {
				t.Fatal(err)
			}
			c := defaults()
			err = DecodeConfig(data, &c)
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ConfigError containing %q", err, tt.want)
			}
		})
	}
}

func TestDecodeConfigNullsAndEmpty(t *testing.T) {
	c := defaults()
	if err := DecodeConfig(nil, &c); err != nil || c.Period != time.Minute {
		t.Fatalf("empty input: %v %+v", err, c)
	}
	data, err := EncodeCty(cty.ObjectVal(map[string]cty.Value{
		"enabled": cty.NullVal(cty.Bool), "ratio": cty.NullVal(cty.Number), "fake": cty.NullVal(cty.EmptyObject)}))
	if err != nil {
		t.Fatal(err)
	}
	if err := DecodeConfig(data, &c); err != nil || !c.Enabled || c.Ratio != 0.5 || c.Fake != nil {
		t.Fatalf("nulls must keep defaults: %v %+v", err, c)
	}
	if err := DecodeConfig(data, c); err == nil {
		t.Error("non-pointer accepted")
	}
	if err := DecodeConfig([]byte{0xc1}, &c); err == nil || !strings.Contains(err.Error(), "msgpack") {
		t.Errorf("invalid msgpack: %v", err)
	}
}

func TestSchemaNvidiaExample(t *testing.T) {
	// The facts document's nomad-device-nvidia schema, built with our helpers, parses like the agent would.
	s := Object(map[string]*hclspec.Spec{
		"enabled":            AttrDefault("enabled", "bool", "true"),
		"ignored_gpu_ids":    AttrDefault("ignored_gpu_ids", "list(string)", "[]"),
		"fingerprint_period": AttrDefault("fingerprint_period", "string", `"1m"`),
	})
	val, err := ParseHCLConfig(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !val.GetAttr("enabled").True() || val.GetAttr("fingerprint_period").AsString() != "1m" {
		t.Errorf("defaults not applied: %#v", val)
	}
	if _, err := ParseHCLConfig(s, []byte(`unknown = 1`)); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Errorf("unknown attribute accepted: %v", err)
	}
}

func TestHCLDecSpecErrors(t *testing.T) {
	tests := []struct {
		name string
		spec *hclspec.Spec
		want string
	}{
		{"bad type", Object(map[string]*hclspec.Spec{"a": Attr("a", "lisst(string)", false)}), `attribute "a"`},
		{"bad literal", Object(map[string]*hclspec.Spec{"a": AttrDefault("a", "string", `"unterminated`)}), `literal`},
		{"empty", Object(map[string]*hclspec.Spec{"a": {}}), `empty spec`},
	}
	for _, tt := range tests {
		if _, err := HCLDecSpec(tt.spec); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}
	// An Attr without a name inside an Object takes its key.
	val, err := ParseHCLConfig(Object(map[string]*hclspec.Spec{"k": Attr("", "number", true)}), []byte("k = 5"))
	if err != nil || val.GetAttr("k").AsBigFloat().String() != "5" {
		t.Errorf("unnamed attr: %v %v", val, err)
	}
}

func FuzzDecodeConfig(f *testing.F) {
	for _, src := range []string{``, `enabled = false`, `fake {
  gpus = ["1x T4"]
}`, `ratio = 1e400`} {
		if data, err := EncodeHCLConfig(testSchema(), []byte(src)); err == nil {
			f.Add(data)
		}
	}
	raw, _ := msgpack.Marshal(map[string]any{"small": "12", "ratio": "1.5", "fake": map[string]any{"gpus": []any{1}}})
	f.Add(raw)
	f.Add([]byte{0x80})
	// Declared lengths far beyond the input must fail fast, not allocate gigabytes.
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa1, 'a', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := defaults()
		err := DecodeConfig(data, &c)
		var ce *ConfigError
		if err != nil && errors.As(err, &ce) && ce.Field == "" {
			t.Errorf("config error without a field name: %v", err)
		}
	})
}
