package schedjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

func (p *parser) refs(what string) []ir.Ref {
	var out []ir.Ref
	p.array(what, func(k int, off int) {
		if k >= p.lim.list {
			p.tooMany(off, p.lim.list, what+" entries")
			return
		}
		if r, ok := p.ref(what); ok {
			out = append(out, r)
		}
	})
	return out
}

var refFields = []string{"buf", "off", "chan", "packet"}

const refHint = `write a ref as {"buf": "i", "off": 0} (optional "chan", "packet") or as a string like "i[0]", "@1:s[2]/pkt"`

// ref reads a buffer reference in object or compact string form.
func (p *parser) ref(what string) (ir.Ref, bool) {
	t, off, ok := p.next()
	if !ok {
		return ir.Ref{}, false
	}
	switch v := t.(type) {
	case string:
		r, err := ParseRef(v)
		if err != nil {
			p.errAt(diag.BadValue, off, refHint, "%s: %v", what, err)
			return ir.Ref{}, false
		}
		return r, true
	case json.Delim:
		if v == '{' {
			return p.refObject(off)
		}
	}
	p.errAt(diag.BadValue, off, refHint, "%s must be a ref object or string, not %s", what, kind(t))
	p.skipAfter(t)
	return ir.Ref{}, false
}

func (p *parser) refObject(start int) (ir.Ref, bool) {
	r := ir.Ref{Chan: -1}
	good := true
	seen := p.members("a ref", refFields, func(i int, off int) {
		switch i {
		case 0:
			s, off, ok := p.str("buf")
			if !ok {
				good = false
				return
			}
			b, err := ir.ParseBufKind(s)
			if err != nil {
				p.errAt(diag.BadValue, off, `use "i", "o" or "s"`, "%v", err)
				good = false
			}
			r.Buf = b
		case 1:
			v, _, ok := p.integer("off", domSize)
			good = good && ok
			r.Off = v
		case 2:
			v, _, ok := p.integer("chan", domIndex)
			good = good && ok
			r.Chan = int(v)
		case 3:
			b, _, ok := p.boolean("packet")
			good = good && ok
			r.Packet = b
		}
	})
	if p.fatal {
		return r, false
	}
	if seen&3 != 3 {
		p.errAt(diag.MissingField, start, refHint, "a ref needs \"buf\" and \"off\"")
		good = false
	}
	return r, good
}

// ParseRef parses the compact string form of a ref:
//
//	[@CHAN:]BUF[OFF][/pkt]
//
// BUF is i, o or s (input, output, scratch); OFF the first chunk (decimal,
// 0..2^63-1); @CHAN: names the buffer of the peer at the other end of this
// rank's channel CHAN (absent: the rank's own buffer); /pkt selects the LL
// packet layout. Examples: "i[3]", "@1:s[4]/pkt".
func ParseRef(s string) (ir.Ref, error) {
	r := ir.Ref{Chan: -1}
	rest := s
	if strings.HasPrefix(rest, "@") {
		colon := strings.IndexByte(rest, ':')
		if colon < 0 {
			return r, fmt.Errorf("ref %q: want @CHAN: before the buffer", s)
		}
		c, err := parseDigits(rest[1:colon], MaxIndex)
		if err != nil {
			return r, fmt.Errorf("ref %q: channel %v", s, err)
		}
		r.Chan = int(c)
		rest = rest[colon+1:]
	}
	if strings.HasSuffix(rest, "/pkt") {
		r.Packet = true
		rest = strings.TrimSuffix(rest, "/pkt")
	}
	if len(rest) < 4 || rest[1] != '[' || rest[len(rest)-1] != ']' {
		return r, fmt.Errorf("ref %q: want [@CHAN:]BUF[OFF][/pkt], e.g. \"i[3]\" or \"@1:s[4]/pkt\"", s)
	}
	b, err := ir.ParseBufKind(rest[:1])
	if err != nil {
		return r, fmt.Errorf("ref %q: %v", s, err)
	}
	r.Buf = b
	off, err := parseDigits(rest[2:len(rest)-1], 1<<63-1)
	if err != nil {
		return r, fmt.Errorf("ref %q: offset %v", s, err)
	}
	r.Off = off
	return r, nil
}

func parseDigits(s string, hi int64) (int64, error) {
	if s == "" {
		return 0, errors.New("is empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v > hi {
		return 0, fmt.Errorf("%s is out of range [0, %d]", s, hi)
	}
	return v, nil
}

// FormatRef writes r in the compact string form that ParseRef reads.
func FormatRef(r ir.Ref) string {
	var b strings.Builder
	if r.Chan >= 0 {
		fmt.Fprintf(&b, "@%d:", r.Chan)
	}
	fmt.Fprintf(&b, "%v[%d]", r.Buf, r.Off)
	if r.Packet {
		b.WriteString("/pkt")
	}
	return b.String()
}
