package optable

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
)

// CData returns the encoded table b (Decode must accept it) as C
// definitions of constant arrays of the header's record types
// (cuda/kernel/optable.h), one per section, named by prefix: prefix+"hdr"
// (the header), prefix+"tbs", prefix+"ops", prefix+"refs", prefix+"deps"
// and prefix+"chan_list", each record written field by field in the
// header's field order. storage is what each definition starts with (a
// specialised kernel's `static __constant__ const`, a host test's `static
// const`). The arrays hold the sections' records exactly (a test compiles
// them for the host and compares their bytes with b); an empty section is
// one zero record, and prefix+"tbs" ends with one empty threadblock more
// than the header counts, for blocks past the table's own (a specialised
// kernel's). Errors: Decode's.
func CData(b []byte, prefix, storage string) ([]byte, error) {
	if _, err := Decode(b); err != nil {
		return nil, err
	}
	var h wireHeader
	h.get(b)
	var out bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&out, format, args...) }
	w("%s theseus_optable_header %shdr = %s;\n", storage, prefix, cRecord(reflect.ValueOf(h)))
	section := func(ctype, name string, n, off, size uint64, get func([]byte) any, extra int) {
		w("%s %s %s%s[%d] = {\n", storage, ctype, prefix, name, max(n+uint64(extra), 1))
		for i := range n {
			w("  %s,\n", cRecord(reflect.ValueOf(get(b[off+i*size:]))))
		}
		if n+uint64(extra) == 0 {
			w("  {0},\n")
		}
		for range extra {
			w("  {0, 0}, /* past the table's threadblocks */\n")
		}
		w("};\n")
	}
	section("theseus_tb", "tbs", uint64(h.NumTBs), h.OffTBs, TBBytes, func(r []byte) any { var x wireTB; x.get(r); return x }, 1)
	section("theseus_op", "ops", h.NumOps, h.OffOps, OpBytes, func(r []byte) any { var x wireOp; x.get(r); return x }, 0)
	section("theseus_ref", "refs", h.NumRefs, h.OffRefs, RefBytes, func(r []byte) any { var x wireRef; x.get(r); return x }, 0)
	section("theseus_dep", "deps", h.NumDeps, h.OffDeps, DepBytes, func(r []byte) any { var x wireDep; x.get(r); return x }, 0)
	w("%s int32_t %schan_list[%d] = {", storage, prefix, max(h.NumChanList, 1))
	for i := range h.NumChanList {
		if i > 0 {
			w(", ")
		}
		w("%d", int32(binary.LittleEndian.Uint32(b[h.OffChanList+i*ChanListBytes:])))
	}
	if h.NumChanList == 0 {
		w("0")
	}
	w("};\n")
	return out.Bytes(), nil
}

// cRecord is a wire record as a C aggregate initializer, its fields in
// order (arrays as nested braces), with the field names as comments.
func cRecord(v reflect.Value) string {
	var b bytes.Buffer
	b.WriteString("{")
	for i := 0; i < v.NumField(); i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		f := v.Field(i)
		fmt.Fprintf(&b, "/* %s */ ", v.Type().Field(i).Tag.Get("c"))
		if f.Kind() == reflect.Array {
			b.WriteString("{")
			for j := 0; j < f.Len(); j++ {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString(cInt(f.Index(j)))
			}
			b.WriteString("}")
			continue
		}
		b.WriteString(cInt(f))
	}
	b.WriteString("}")
	return b.String()
}

// cInt is an integer field as a C literal of its type's range.
func cInt(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Int32:
		if v.Int() == -1<<31 {
			return "(-2147483647 - 1)"
		}
		return fmt.Sprint(v.Int())
	case reflect.Int64:
		if v.Int() == -1<<63 {
			return "(-9223372036854775807LL - 1)"
		}
		return fmt.Sprintf("%dLL", v.Int())
	case reflect.Uint64:
		return fmt.Sprintf("%dULL", v.Uint())
	case reflect.Uint32:
		return fmt.Sprintf("%du", v.Uint())
	default:
		return fmt.Sprint(v.Uint())
	}
}
