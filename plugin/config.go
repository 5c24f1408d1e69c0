package plugin

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// ConfigError names the config field that was rejected, the value and what was expected.
type ConfigError struct {
	Field string // dotted path, e.g. "fake.gpus[1]"
	Value any
	Want  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("config field %q: got %s, want %s", e.Field, describe(e.Value), e.Want)
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", x)
	case []any:
		return fmt.Sprintf("list of %d", len(x))
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T %v", v, v)
}

// DecodeConfig decodes go-cty msgpack bytes (SetConfigRequest.msgpack_config or
// TaskConfig.msgpack_driver_config) into out, a pointer to a struct the caller has pre-filled with
// defaults. Struct fields are matched by their `msgpack:"name"` tag (else the Go field name).
// Null values leave the field's default in place; an empty input leaves out untouched. Numbers may
// arrive as int64, float64 or decimal strings (cty's encoding of big numbers); integer fields
// reject fractions and overflow. A time.Duration field takes a Go duration string ("1m").
func DecodeConfig(data []byte, out any) error {
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("plugin: DecodeConfig needs a non-nil pointer to a struct, got %T", out)
	}
	if len(data) == 0 {
		return nil
	}
	if len(data) > maxConfigBytes {
		return fmt.Errorf("config is %d bytes of msgpack; more than the %d a plugin config can sensibly be", len(data), maxConfigBytes)
	}
	// The interface decoder preallocates arrays by their declared length; walking the value once
	// with Skip (which allocates nothing) proves every length fits in the input first.
	if err := msgpack.NewDecoder(bytes.NewReader(data)).Skip(); err != nil {
		return fmt.Errorf("config is not valid msgpack: %w", err)
	}
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	dec.UseLooseInterfaceDecoding(true)
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("config is not valid msgpack: %w", err)
	}
	if raw == nil {
		return nil
	}
	if _, ok := raw.(map[string]any); !ok {
		return fmt.Errorf("config: got %s, want an object of config fields", describe(raw))
	}
	return assign(rv.Elem(), raw, "")
}

// maxConfigBytes bounds the input: real configs are a few hundred bytes.
const maxConfigBytes = 1 << 20

var durationType = reflect.TypeFor[time.Duration]()

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// assign sets dst from the loosely decoded msgpack value v; nil leaves dst as it is.
func assign(dst reflect.Value, v any, path string) error {
	if v == nil {
		return nil
	}
	if dst.Type() == durationType {
		s, ok := v.(string)
		if !ok {
			return &ConfigError{path, v, `a duration string such as "30s" or "1m"`}
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return &ConfigError{path, v, `a non-negative duration such as "30s" or "1m"`}
		}
		dst.SetInt(int64(d))
		return nil
	}
	switch dst.Kind() {
	case reflect.Pointer:
		if dst.IsNil() {
			dst.Set(reflect.New(dst.Type().Elem()))
		}
		return assign(dst.Elem(), v, path)
	case reflect.Interface:
		dst.Set(reflect.ValueOf(v))
		return nil
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return &ConfigError{path, v, "a block or object"}
		}
		t := dst.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := fieldName(f)
			if name == "" {
				continue
			}
			if err := assign(dst.Field(i), m[name], join(path, name)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			return &ConfigError{path, v, "a list"}
		}
		s := reflect.MakeSlice(dst.Type(), len(list), len(list))
		for i, e := range list {
			if err := assign(s.Index(i), e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		dst.Set(s)
		return nil
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok || dst.Type().Key().Kind() != reflect.String {
			return &ConfigError{path, v, "a map with string keys"}
		}
		out := reflect.MakeMapWithSize(dst.Type(), len(m))
		for k, e := range m {
			ev := reflect.New(dst.Type().Elem()).Elem()
			if err := assign(ev, e, fmt.Sprintf("%s[%q]", path, k)); err != nil {
				return err
			}
			out.SetMapIndex(reflect.ValueOf(k).Convert(dst.Type().Key()), ev)
		}
		dst.Set(out)
		return nil
	case reflect.String:
		return assignAs(v, path, "a string", dst.SetString)
	case reflect.Bool:
		return assignAs(v, path, "true or false", dst.SetBool)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return assignNumber(dst, v, path)
	}
	return fmt.Errorf("plugin: config field %q has unsupported Go type %s", path, dst.Type())
}

// assignAs sets a value decoded as a T with set; any other value is a ConfigError that says
// what was wanted.
func assignAs[T any](v any, path, want string, set func(T)) error {
	x, ok := v.(T)
	if !ok {
		return &ConfigError{path, v, want}
	}
	set(x)
	return nil
}

func fieldName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	tag := f.Tag.Get("msgpack")
	if tag == "-" {
		return ""
	}
	if name, _, _ := strings.Cut(tag, ","); name != "" {
		return name
	}
	return f.Name
}

// assignNumber accepts cty's three number encodings and checks the target's range.
func assignNumber(dst reflect.Value, v any, path string) error {
	var n *big.Float
	switch x := v.(type) {
	case int64:
		n = new(big.Float).SetInt64(x)
	case uint64:
		n = new(big.Float).SetUint64(x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return &ConfigError{path, v, "a finite number"}
		}
		n = big.NewFloat(x)
	case string:
		f, _, err := big.ParseFloat(x, 10, 256, big.ToNearestEven)
		if err != nil {
			return &ConfigError{path, v, "a number"}
		}
		n = f
	default:
		return &ConfigError{path, v, "a number"}
	}
	switch dst.Kind() {
	case reflect.Float32, reflect.Float64:
		f, _ := n.Float64()
		if dst.OverflowFloat(f) {
			return &ConfigError{path, v, "a number in range for " + dst.Type().String()}
		}
		dst.SetFloat(f)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, acc := n.Int64()
		if !n.IsInt() || acc != big.Exact || dst.OverflowInt(i) {
			return &ConfigError{path, v, "a whole number in range for " + dst.Type().String()}
		}
		dst.SetInt(i)
	default:
		u, acc := n.Uint64()
		if !n.IsInt() || acc != big.Exact || n.Sign() < 0 || dst.OverflowUint(u) {
			return &ConfigError{path, v, "a non-negative whole number in range for " + dst.Type().String()}
		}
		dst.SetUint(u)
	}
	return nil
}
