package plugin

import (
	"errors"
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"

	"github.com/hetgpu/hetgpu/plugin/proto/hclspec"
)

// HCLDecSpec converts a schema to an hcldec spec the way the Nomad agent does before parsing a
// plugin's config block. It also checks the schema: a type or literal Nomad could not parse is an
// error here, not a plugin the agent refuses to load.
func HCLDecSpec(s *hclspec.Spec) (hcldec.Spec, error) {
	return convertSpec(s, "", "")
}

func convertSpec(s *hclspec.Spec, key, path string) (hcldec.Spec, error) {
	if s == nil || s.Block == nil {
		return nil, fmt.Errorf("schema %s: empty spec", where(path))
	}
	switch b := s.Block.(type) {
	case *hclspec.Spec_Object:
		obj := hcldec.ObjectSpec{}
		for k, sub := range b.Object.GetAttributes() {
			c, err := convertSpec(sub, k, join(path, k))
			if err != nil {
				return nil, err
			}
			obj[k] = c
		}
		return obj, nil
	case *hclspec.Spec_Array:
		tup := hcldec.TupleSpec{}
		for i, sub := range b.Array.GetValues() {
			c, err := convertSpec(sub, "", fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			tup = append(tup, c)
		}
		return tup, nil
	case *hclspec.Spec_Attr:
		name := b.Attr.GetName()
		if name == "" {
			name = key // inside an Object the key names the attribute
		}
		if name == "" {
			return nil, fmt.Errorf("schema %s: attribute without a name", where(path))
		}
		ty, err := parseType(b.Attr.GetType())
		if err != nil {
			return nil, fmt.Errorf("schema %s: attribute %q: %w", where(path), name, err)
		}
		return &hcldec.AttrSpec{Name: name, Type: ty, Required: b.Attr.GetRequired()}, nil
	case *hclspec.Spec_BlockValue:
		nested, err := convertNested(b.BlockValue.GetNested(), path)
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockSpec{TypeName: b.BlockValue.GetName(), Nested: nested, Required: b.BlockValue.GetRequired()}, nil
	case *hclspec.Spec_BlockAttrs:
		ty, err := parseType(b.BlockAttrs.GetType())
		if err != nil {
			return nil, fmt.Errorf("schema %s: block_attrs %q: %w", where(path), b.BlockAttrs.GetName(), err)
		}
		return &hcldec.BlockAttrsSpec{TypeName: b.BlockAttrs.GetName(), ElementType: ty, Required: b.BlockAttrs.GetRequired()}, nil
	case *hclspec.Spec_BlockList:
		return convertBlocks(b.BlockList, path, func(name string, nested hcldec.Spec, lo, hi int) hcldec.Spec {
			return &hcldec.BlockListSpec{TypeName: name, Nested: nested, MinItems: lo, MaxItems: hi}
		})
	case *hclspec.Spec_BlockSet:
		return convertBlocks(b.BlockSet, path, func(name string, nested hcldec.Spec, lo, hi int) hcldec.Spec {
			return &hcldec.BlockSetSpec{TypeName: name, Nested: nested, MinItems: lo, MaxItems: hi}
		})
	case *hclspec.Spec_BlockMap:
		nested, err := convertNested(b.BlockMap.GetNested(), path)
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockMapSpec{TypeName: b.BlockMap.GetName(), LabelNames: b.BlockMap.GetLabels(), Nested: nested}, nil
	case *hclspec.Spec_Default:
		primary, err := convertSpec(b.Default.GetPrimary(), key, path)
		if err != nil {
			return nil, err
		}
		def, err := convertSpec(b.Default.GetDefault(), key, path)
		if err != nil {
			return nil, err
		}
		return &hcldec.DefaultSpec{Primary: primary, Default: def}, nil
	case *hclspec.Spec_Literal:
		expr, diags := hclsyntax.ParseExpression([]byte(b.Literal.GetValue()), "literal", hcl.InitialPos)
		if diags.HasErrors() {
			return nil, fmt.Errorf("schema %s: literal %q: %w", where(path), b.Literal.GetValue(), diags)
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() {
			return nil, fmt.Errorf("schema %s: literal %q: %w", where(path), b.Literal.GetValue(), diags)
		}
		return &hcldec.LiteralSpec{Value: v}, nil
	}
	return nil, fmt.Errorf("schema %s: unsupported spec %T", where(path), s.Block)
}

// convertNested converts a block's body spec; a nil body is an empty object.
func convertNested(s *hclspec.Spec, path string) (hcldec.Spec, error) {
	if s == nil {
		return hcldec.ObjectSpec{}, nil
	}
	return convertSpec(s, "", path)
}

func parseType(src string) (cty.Type, error) {
	expr, diags := hclsyntax.ParseExpression([]byte(src), "type", hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilType, fmt.Errorf("type %q: %w", src, diags)
	}
	ty, diags := typeexpr.TypeConstraint(expr)
	if diags.HasErrors() {
		return cty.NilType, fmt.Errorf("type %q: %w", src, diags)
	}
	return ty, nil
}

func where(path string) string {
	if path == "" {
		return "root"
	}
	return fmt.Sprintf("at %q", path)
}

// ParseHCLConfig parses src, the body of an agent `config { ... }` block (or a task's config) in
// HCL native syntax, with the schema, applying defaults as the agent does.
func ParseHCLConfig(s *hclspec.Spec, src []byte) (cty.Value, error) {
	spec, err := HCLDecSpec(s)
	if err != nil {
		return cty.NilVal, err
	}
	f, diags := hclsyntax.ParseConfig(src, "config.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilVal, diags
	}
	val, diags := hcldec.Decode(f.Body, spec, nil)
	if diags.HasErrors() {
		return cty.NilVal, diags
	}
	return val, nil
}

// EncodeCty encodes a config value exactly as Nomad does: msgpack.Marshal(val, val.Type()).
func EncodeCty(val cty.Value) ([]byte, error) {
	if val == cty.NilVal {
		return nil, errors.New("plugin: EncodeCty of a nil value")
	}
	return ctymsgpack.Marshal(val, val.Type())
}

// EncodeHCLConfig is ParseHCLConfig then EncodeCty: the bytes Nomad would send in SetConfig.
func EncodeHCLConfig(s *hclspec.Spec, src []byte) ([]byte, error) {
	val, err := ParseHCLConfig(s, src)
	if err != nil {
		return nil, err
	}
	return EncodeCty(val)
}

// repeatedBlock is a block list or set of the schema.
type repeatedBlock interface {
	GetName() string
	GetNested() *hclspec.Spec
	GetMinItems() uint64
	GetMaxItems() uint64
}

// convertBlocks converts a block list or set: spec builds the hcldec spec of its kind.
func convertBlocks(b repeatedBlock, path string, spec func(name string, nested hcldec.Spec, lo, hi int) hcldec.Spec) (hcldec.Spec, error) {
	nested, err := convertNested(b.GetNested(), path)
	if err != nil {
		return nil, err
	}
	return spec(b.GetName(), nested, int(b.GetMinItems()), int(b.GetMaxItems())), nil
}
