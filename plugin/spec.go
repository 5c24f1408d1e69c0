package plugin

import (
	"github.com/hetgpu/hetgpu/plugin/proto/hclspec"
)

// Builders for config schemas (ConfigSchema / TaskConfigSchema answers). Attribute types are HCL
// type expressions: "string", "number", "bool", "list(string)", "map(string)", "object({...})".
// Literals are HCL expressions: `"1m"` (quoted string), "true", "[]", "5".

// Object is a block body whose keys are the output attribute names.
func Object(attrs map[string]*hclspec.Spec) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Object{Object: &hclspec.Object{Attributes: attrs}}}
}

// Attr is an attribute of the given HCL type.
func Attr(name, typ string, required bool) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Attr{Attr: &hclspec.Attr{Name: name, Type: typ, Required: required}}}
}

// Default uses def when primary is absent or null.
func Default(primary, def *hclspec.Spec) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Default{Default: &hclspec.Default{Primary: primary, Default: def}}}
}

// Literal is a constant given as an HCL expression.
func Literal(expr string) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Literal{Literal: &hclspec.Literal{Value: expr}}}
}

// AttrDefault is the common optional attribute with a default: Default(Attr(name, typ, false), Literal(def)).
func AttrDefault(name, typ, def string) *hclspec.Spec {
	return Default(Attr(name, typ, false), Literal(def))
}

// Block is a single nested block `name { ... }`.
func Block(name string, required bool, nested *hclspec.Spec) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_BlockValue{BlockValue: &hclspec.Block{Name: name, Required: required, Nested: nested}}}
}

// BlockAttrs is a block whose arbitrary attributes all have type typ, decoded as a map.
func BlockAttrs(name, typ string, required bool) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_BlockAttrs{BlockAttrs: &hclspec.BlockAttrs{Name: name, Type: typ, Required: required}}}
}

// BlockList is a repeatable block decoded as a list; max 0 means unlimited.
func BlockList(name string, minItems, maxItems uint64, nested *hclspec.Spec) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_BlockList{BlockList: &hclspec.BlockList{
		Name: name, MinItems: minItems, MaxItems: maxItems, Nested: nested}}}
}

// BlockSet is a repeatable block decoded as a set; max 0 means unlimited.
func BlockSet(name string, minItems, maxItems uint64, nested *hclspec.Spec) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_BlockSet{BlockSet: &hclspec.BlockSet{
		Name: name, MinItems: minItems, MaxItems: maxItems, Nested: nested}}}
}

// BlockMap is a labelled block `name "label" { ... }` decoded as a map keyed by the labels.
func BlockMap(name string, labels []string, nested *hclspec.Spec) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_BlockMap{BlockMap: &hclspec.BlockMap{Name: name, Labels: labels, Nested: nested}}}
}

// Array is a tuple of specs.
func Array(values ...*hclspec.Spec) *hclspec.Spec {
	return &hclspec.Spec{Block: &hclspec.Spec_Array{Array: &hclspec.Array{Values: values}}}
}
