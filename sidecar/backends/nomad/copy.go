package nomad

import (
	"reflect"
	"sync"
)

// deepCopy returns a copy of v that shares nothing it could change with v: every pointer,
// slice, map and interface reached through exported fields is copied (unexported fields, as in
// time.Time, are copied by value). It is what a JSON round trip gives for the api types,
// which have no custom (un)marshalling, at a fraction of the cost, and keeps what JSON would
// lose: nil and empty stay apart, numbers in interfaces keep their types. Not
// github.com/mitchellh/copystructure (Nomad's choice): on BenchmarkCopyJob's job it took 241 us
// and 889 allocations against 16 us and 103 here (81 us for the JSON round trip).
func deepCopy[T any](v *T) *T {
	if v == nil {
		return nil
	}
	out := new(T)
	rv := reflect.ValueOf(v).Elem()
	if deepFields(rv.Type()) == nil {
		*out = *v
		return out
	}
	copyInto(reflect.ValueOf(out).Elem(), rv)
	return out
}

// copyInto sets dst (settable, of src's type) to a deep copy of src.
func copyInto(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(src.Type().Elem())
		copyInto(p.Elem(), src.Elem())
		dst.Set(p)
	case reflect.Struct:
		dst.Set(src) // scalars and unexported fields
		for _, i := range deepFields(src.Type()) {
			copyInto(dst.Field(i), src.Field(i))
		}
	case reflect.Slice:
		if src.IsNil() {
			dst.Set(reflect.Zero(src.Type()))
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		if plain(src.Type().Elem()) {
			reflect.Copy(s, src)
		} else {
			for i := 0; i < src.Len(); i++ {
				copyInto(s.Index(i), src.Index(i))
			}
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			dst.Set(reflect.Zero(src.Type()))
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		kt, vt := src.Type().Key(), src.Type().Elem()
		plainK, plainV := plain(kt), plain(vt)
		it := src.MapRange()
		for it.Next() {
			k, v := it.Key(), it.Value()
			if !plainK {
				c := reflect.New(kt).Elem()
				copyInto(c, k)
				k = c
			}
			if !plainV {
				c := reflect.New(vt).Elem()
				copyInto(c, v)
				v = c
			}
			m.SetMapIndex(k, v)
		}
		dst.Set(m)
	case reflect.Interface:
		if src.IsNil() {
			dst.Set(reflect.Zero(src.Type()))
			return
		}
		e := src.Elem()
		c := reflect.New(e.Type()).Elem()
		copyInto(c, e)
		dst.Set(c)
	case reflect.Array:
		for i := 0; i < src.Len(); i++ {
			copyInto(dst.Index(i), src.Index(i))
		}
	default: // bool, numbers, strings; funcs and channels are shared (the api types have none)
		dst.Set(src)
	}
}

// deepTypes caches, by struct type, the indexes of the exported fields that need a deep copy
// (nil: none, the struct is plain).
var deepTypes sync.Map // reflect.Type -> []int

func deepFields(t reflect.Type) []int {
	if t.Kind() != reflect.Struct {
		return nil
	}
	if f, ok := deepTypes.Load(t); ok {
		return f.([]int)
	}
	var out []int
	for i := 0; i < t.NumField(); i++ {
		if f := t.Field(i); f.IsExported() && !plain(f.Type) {
			out = append(out, i)
		}
	}
	deepTypes.Store(t, out)
	return out
}

// plain reports a type whose values copy by assignment alone. Recursive struct types (a
// pointer back to themselves) are not plain: pointers never are.
func plain(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return false
	case reflect.Struct:
		return deepFields(t) == nil
	case reflect.Array:
		return plain(t.Elem())
	}
	return true
}
