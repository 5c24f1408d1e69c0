package annot

import (
	"maps"

	"github.com/hashicorp/go-cty-funcs/cidr"
	"github.com/hashicorp/go-cty-funcs/crypto"
	"github.com/hashicorp/go-cty-funcs/encoding"
	"github.com/hashicorp/go-cty-funcs/filesystem"
	"github.com/hashicorp/go-cty-funcs/uuid"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	ctyyaml "github.com/zclconf/go-cty-yaml"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// functions are the HCL functions of Nomad's jobspec under Nomad's names (cty's standard
// library, HCL's try, can and convert, go-cty-funcs' cidr, crypto, encoding and uuid functions,
// YAML), so that a value or for_each written with one evaluates as Nomad evaluates it. The
// file functions (file, fileset, abspath, ...) come only with a baseDir, which ReadJobspec sets
// to "." as `nomad job run` does (relative paths are read from the working directory); without
// one (a jobspec given as bytes) what calls them stays inexact, as a variable without a default
// does. md5 and sha1 are there as in a Nomad built without FIPS 140 mode.
func functions(baseDir string) map[string]function.Function {
	fs := pureFunctions()
	if baseDir != "" {
		maps.Copy(fs, map[string]function.Function{
			"abspath": filesystem.AbsPathFunc, "basename": filesystem.BasenameFunc,
			"dirname": filesystem.DirnameFunc, "pathexpand": filesystem.PathExpandFunc,
			"file": filesystem.MakeFileFunc(baseDir, false), "filebase64": filesystem.MakeFileFunc(baseDir, true),
			"fileexists": filesystem.MakeFileExistsFunc(baseDir), "fileset": filesystem.MakeFileSetFunc(baseDir),
		})
	}
	return fs
}

func pureFunctions() map[string]function.Function {
	return map[string]function.Function{
		"base64decode": encoding.Base64DecodeFunc, "base64encode": encoding.Base64EncodeFunc,
		"urlencode": encoding.URLEncodeFunc, "bcrypt": crypto.BcryptFunc, "rsadecrypt": crypto.RsaDecryptFunc,
		"md5": crypto.Md5Func, "sha1": crypto.Sha1Func, "sha256": crypto.Sha256Func, "sha512": crypto.Sha512Func,
		"cidrhost": cidr.HostFunc, "cidrnetmask": cidr.NetmaskFunc, "cidrsubnet": cidr.SubnetFunc,
		"cidrsubnets": cidr.SubnetsFunc, "uuidv4": uuid.V4Func, "uuidv5": uuid.V5Func,
		"yamldecode": ctyyaml.YAMLDecodeFunc, "yamlencode": ctyyaml.YAMLEncodeFunc,
		"abs": stdlib.AbsoluteFunc, "can": tryfunc.CanFunc, "ceil": stdlib.CeilFunc,
		"chomp": stdlib.ChompFunc, "chunklist": stdlib.ChunklistFunc, "coalesce": stdlib.CoalesceFunc,
		"coalescelist": stdlib.CoalesceListFunc, "compact": stdlib.CompactFunc, "concat": stdlib.ConcatFunc,
		"contains": stdlib.ContainsFunc, "convert": typeexpr.ConvertFunc, "csvdecode": stdlib.CSVDecodeFunc,
		"distinct": stdlib.DistinctFunc, "element": stdlib.ElementFunc, "flatten": stdlib.FlattenFunc,
		"floor": stdlib.FloorFunc, "format": stdlib.FormatFunc, "formatdate": stdlib.FormatDateFunc,
		"formatlist": stdlib.FormatListFunc, "indent": stdlib.IndentFunc, "index": stdlib.IndexFunc,
		"join": stdlib.JoinFunc, "jsondecode": stdlib.JSONDecodeFunc, "jsonencode": stdlib.JSONEncodeFunc,
		"keys": stdlib.KeysFunc, "length": stdlib.LengthFunc, "log": stdlib.LogFunc,
		"lookup": stdlib.LookupFunc, "lower": stdlib.LowerFunc, "max": stdlib.MaxFunc,
		"merge": stdlib.MergeFunc, "min": stdlib.MinFunc, "parseint": stdlib.ParseIntFunc,
		"pow": stdlib.PowFunc, "range": stdlib.RangeFunc, "reverse": stdlib.ReverseFunc,
		"replace": stdlib.ReplaceFunc, "regex_replace": stdlib.RegexReplaceFunc,
		"setintersection": stdlib.SetIntersectionFunc, "setproduct": stdlib.SetProductFunc,
		"setunion": stdlib.SetUnionFunc, "signum": stdlib.SignumFunc, "slice": stdlib.SliceFunc,
		"sort": stdlib.SortFunc, "split": stdlib.SplitFunc, "strlen": stdlib.StrlenFunc,
		"strrev": stdlib.ReverseFunc, "substr": stdlib.SubstrFunc, "timeadd": stdlib.TimeAddFunc,
		"title": stdlib.TitleFunc, "trim": stdlib.TrimFunc, "trimprefix": stdlib.TrimPrefixFunc,
		"trimspace": stdlib.TrimSpaceFunc, "trimsuffix": stdlib.TrimSuffixFunc, "try": tryfunc.TryFunc,
		"upper": stdlib.UpperFunc, "values": stdlib.ValuesFunc, "zipmap": stdlib.ZipmapFunc,
	}
}
