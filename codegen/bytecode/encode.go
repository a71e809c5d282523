package bytecode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The binary form of a Program, as bundles carry it (docs/policy-language.md,
// "Binary form"). All integers are little-endian; "uvarint"/"varint" are Go's
// encoding/binary varints.
//
//	magic     "TSPB"
//	version   u8 (= Version)
//	result    u8 (Type)
//	maxstack  uvarint
//	flags     u8
//	imports   uvarint n, then n × {uvarint len, name bytes, u8 type, u8 origin, u8 path}
//	code      uvarint n, then n opcode bytes, then n varint operands
//	spans     uvarint m (0 or n), then m × {uvarint from, uvarint to}
//	ints      uvarint n, then n varints
//	floats    uvarint n, then n × 8-byte IEEE-754 bits
//	vectors   uvarint n, then n × {uvarint len, len × 8-byte IEEE-754 bits}
//	source    uvarint len, then the UTF-8 bytes
//
// Unmarshal rejects trailing bytes and runs Verify.

// Magic starts every encoded program.
const Magic = "TSPB"

// Version is the binary format version this package writes and reads.
const Version = 1

// ErrFormat is wrapped by every decoding error.
var ErrFormat = errors.New("bytecode: bad encoding")

// Marshal encodes p. It does not verify p.
func Marshal(p *Program) []byte {
	b := []byte(Magic)
	b = append(b, Version, byte(p.Result))
	b = binary.AppendUvarint(b, uint64(p.MaxStack))
	b = append(b, byte(p.Flags))
	b = binary.AppendUvarint(b, uint64(len(p.Imports)))
	for _, im := range p.Imports {
		b = binary.AppendUvarint(b, uint64(len(im.Name)))
		b = append(b, im.Name...)
		b = append(b, byte(im.Type), byte(im.Origin), byte(im.Path))
	}
	b = binary.AppendUvarint(b, uint64(len(p.Code)))
	for _, op := range p.Code {
		b = append(b, byte(op))
	}
	for _, a := range p.Args {
		b = binary.AppendVarint(b, int64(a))
	}
	b = binary.AppendUvarint(b, uint64(len(p.Spans)))
	for _, s := range p.Spans {
		b = binary.AppendUvarint(b, uint64(s.From))
		b = binary.AppendUvarint(b, uint64(s.To))
	}
	b = binary.AppendUvarint(b, uint64(len(p.Ints)))
	for _, v := range p.Ints {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(p.Floats)))
	for _, f := range p.Floats {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	b = binary.AppendUvarint(b, uint64(len(p.Vecs)))
	for _, v := range p.Vecs {
		b = binary.AppendUvarint(b, uint64(len(v)))
		for _, f := range v {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		}
	}
	b = binary.AppendUvarint(b, uint64(len(p.Source)))
	b = append(b, p.Source...)
	return b
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w at byte %d: %s", ErrFormat, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) byte1() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail("truncated")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad or truncated uvarint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad or truncated varint")
		return 0
	}
	r.off += n
	return v
}

// count reads a length and checks it against limit and against the bytes
// left (each element takes at least minBytes).
func (r *reader) count(what string, limit, minBytes int) int {
	v := r.uvarint()
	if r.err != nil {
		return 0
	}
	if v > uint64(limit) {
		r.fail("%d %s, over the limit of %d", v, what, limit)
		return 0
	}
	if minBytes > 0 && v*uint64(minBytes) > uint64(len(r.b)-r.off) {
		r.fail("%d %s do not fit in the %d bytes left", v, what, len(r.b)-r.off)
		return 0
	}
	return int(v)
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b)-r.off {
		r.fail("truncated")
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) f64() float64 {
	s := r.bytes(8)
	if s == nil {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(s))
}

// Unmarshal decodes a program written by Marshal and verifies it. Errors
// wrap ErrFormat (bad bytes) or are a *VerifyError (well-formed bytes, bad
// program). It never panics, whatever the input.
func Unmarshal(b []byte) (*Program, error) {
	r := &reader{b: b}
	if string(r.bytes(len(Magic))) != Magic {
		return nil, fmt.Errorf("%w: missing %q magic", ErrFormat, Magic)
	}
	if v := r.byte1(); v != Version && r.err == nil {
		return nil, fmt.Errorf("%w: version %d (this build reads %d)", ErrFormat, v, Version)
	}
	p := &Program{}
	p.Result = Type(r.byte1())
	if ms := r.uvarint(); ms > MaxStack {
		r.fail("stack depth %d over %d", ms, MaxStack)
	} else {
		p.MaxStack = int(ms)
	}
	p.Flags = Flags(r.byte1())
	if n := r.count("imports", MaxImports, 4); n > 0 {
		p.Imports = make([]Import, n)
		for i := range p.Imports {
			l := r.count("name bytes", 256, 1)
			p.Imports[i].Name = string(r.bytes(l))
			p.Imports[i].Type = Type(r.byte1())
			p.Imports[i].Origin = Origin(r.byte1())
			p.Imports[i].Path = ReqField(r.byte1())
		}
	}
	n := r.count("instructions", MaxCode, 2)
	if code := r.bytes(n); code != nil {
		p.Code = make([]Opcode, n)
		for i, c := range code {
			p.Code[i] = Opcode(c)
		}
		p.Args = make([]int32, n)
		for i := range p.Args {
			a := r.varint()
			if a < math.MinInt32 || a > math.MaxInt32 {
				r.fail("operand %d out of the int32 range", a)
			}
			p.Args[i] = int32(a)
		}
	}
	if m := r.count("spans", MaxCode, 2); m > 0 {
		p.Spans = make([]Span, m)
		for i := range p.Spans {
			from, to := r.uvarint(), r.uvarint()
			if from > MaxSource || to > MaxSource {
				r.fail("span beyond %d bytes", MaxSource)
			}
			p.Spans[i] = Span{int32(from), int32(to)}
		}
	}
	if k := r.count("int constants", MaxCode, 1); k > 0 {
		p.Ints = make([]int64, k)
		for i := range p.Ints {
			p.Ints[i] = r.varint()
		}
	}
	if k := r.count("float constants", MaxCode, 8); k > 0 {
		p.Floats = make([]float64, k)
		for i := range p.Floats {
			p.Floats[i] = r.f64()
		}
	}
	if k := r.count("vector constants", MaxCode, 1); k > 0 {
		p.Vecs = make([][]float64, k)
		for i := range p.Vecs {
			l := r.count("vector elements", MaxVectorLen, 8)
			v := make([]float64, l)
			for j := range v {
				v[j] = r.f64()
			}
			p.Vecs[i] = v
		}
	}
	l := r.count("source bytes", MaxSource, 1)
	p.Source = string(r.bytes(l))
	if r.err == nil && r.off != len(b) {
		r.fail("%d trailing bytes", len(b)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := Verify(p); err != nil {
		return nil, err
	}
	return p, nil
}
