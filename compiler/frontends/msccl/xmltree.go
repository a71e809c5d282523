package msccl

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// xattr is one attribute with the byte offset of its name.
type xattr struct {
	name  string
	value string
	off   int
}

// xelem is an element of the four levels MSCCL reads (algo, gpu, tb, step)
// with its attributes in source order and the byte offset of its '<'.
type xelem struct {
	name  string
	off   int
	attrs []xattr
	kids  []*xelem
}

// attr returns the attribute called name, if present.
func (e *xelem) attr(name string) (xattr, bool) {
	for _, a := range e.attrs {
		if a.name == name {
			return a, true
		}
	}
	return xattr{}, false
}

// children returns the kids named name.
func (e *xelem) children(name string) []*xelem {
	var out []*xelem
	for _, k := range e.kids {
		if k.name == name {
			out = append(out, k)
		}
	}
	return out
}

// known element nesting: which child elements each level keeps.
var xmlChildren = map[string]string{"": "algo", "algo": "gpu", "gpu": "tb", "tb": "step"}

// readTree decodes the document with encoding/xml and returns a synthetic
// document node whose kids are the top-level elements. Elements outside
// the algo/gpu/tb/step nesting are reported and skipped. It returns nil
// after a syntax error or a size limit.
func (p *parser) readTree() *xelem {
	dec := xml.NewDecoder(bytes.NewReader(p.data))
	dec.Strict = true
	doc := &xelem{}
	stack := []*xelem{doc}
	nsteps, ntbs := 0, 0
	for {
		off := int(dec.InputOffset())
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			pos := inputPos(dec)
			msg := err.Error()
			var se *xml.SyntaxError
			if errors.As(err, &se) {
				msg = se.Msg
			}
			p.errorAt(diag.Syntax, pos, -1, -1, -1, "", "malformed XML: %s", msg)
			return nil
		}
		switch t := tok.(type) {
		case xml.StartElement:
			// The token starts at off; skip anything before its '<' (never
			// more than whitespace, but stay robust).
			if i := bytes.IndexByte(p.data[off:], '<'); i >= 0 {
				off += i
			}
			parent := stack[len(stack)-1]
			name := t.Name.Local
			if t.Name.Space != "" {
				name = t.Name.Space + ":" + t.Name.Local
			}
			want := xmlChildren[parent.name]
			if name != want {
				p.unknownElement(parent, name, off)
				if err := dec.Skip(); err != nil {
					p.errorAt(diag.Syntax, inputPos(dec), -1, -1, -1, "",
						"malformed XML inside <%s>: %v", name, err)
					return nil
				}
				continue
			}
			switch name {
			case "step":
				nsteps++
				if nsteps > MaxSteps {
					p.errorAt(diag.TooLarge, p.li.Pos(off), -1, -1, -1, "",
						"more than %d <step> elements", MaxSteps)
					return nil
				}
			case "tb":
				ntbs++
				if ntbs > MaxThreadblocks {
					p.errorAt(diag.TooLarge, p.li.Pos(off), -1, -1, -1, "",
						"more than %d <tb> elements", MaxThreadblocks)
					return nil
				}
			}
			e := &xelem{name: name, off: off}
			end := int(dec.InputOffset())
			offs := attrOffsets(p.data[off:end])
			for i, a := range t.Attr {
				an := a.Name.Local
				if a.Name.Space != "" {
					an = a.Name.Space + ":" + a.Name.Local
				}
				ao := 0 // the element's '<' when the scan disagrees
				if i < len(offs) && (offs[i].name == an || offs[i].name == a.Name.Local ||
					strings.HasSuffix(offs[i].name, ":"+a.Name.Local)) {
					ao = offs[i].off
				}
				e.attrs = append(e.attrs, xattr{name: an, value: a.Value, off: off + ao})
			}
			parent.kids = append(parent.kids, e)
			stack = append(stack, e)
		case xml.EndElement:
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				if i := firstNonSpace(p.data, off); i >= 0 {
					off = i
				}
				p.errorAt(diag.Syntax, p.li.Pos(off), -1, -1, -1,
					"MSCCL XML holds only elements; remove the text",
					"text %q outside any attribute (the MSCCL parser rejects it)", clip(string(bytes.TrimSpace(t)), 24))
			}
		}
	}
	return doc
}

// inputPos is the decoder's position, at least 1:1 (encoding/xml reports
// column 0 right after a newline).
func inputPos(dec *xml.Decoder) ir.Pos {
	line, col := dec.InputPos()
	return ir.Pos{Line: int32(max(line, 1)), Col: int32(max(col, 1))}
}

// unknownElement reports a child element MSCCL does not read.
func (p *parser) unknownElement(parent *xelem, name string, off int) {
	pos := p.li.Pos(off)
	switch {
	case parent.name == "tb" && name == "op":
		p.errorAt(diag.UnknownField, pos, -1, -1, -1,
			"regenerate the file with msccl-tools' old (runtime) format, which writes <step s=...>",
			"<op> is the msccl-tools non-runtime format; the MSCCL executor ignores it and would run this threadblock without steps")
	case parent.name == "":
		p.errorAt(diag.UnknownField, pos, -1, -1, -1, "the file must hold one <algo> element",
			"unexpected top-level element <%s>", name)
	case parent.name == "step":
		p.warnAt(diag.UnknownField, pos, -1, -1, -1, "remove the element",
			"<step> has no child elements; <%s> is ignored", name)
	default:
		p.warnAt(diag.UnknownField, pos, -1, -1, -1, "remove the element or check its spelling",
			"unknown element <%s> inside <%s> is ignored (MSCCL ignores it too)", name, parent.name)
	}
}

// attrOffset is an attribute name as written and its offset in the tag.
type attrOffset struct {
	name string
	off  int
}

// attrOffsets scans the raw bytes of a start tag ("<name a="1" ...>") and
// returns, in source order, each attribute name with its byte offset
// relative to the tag. encoding/xml has already validated the tag, so the
// scan only needs to find names, skip '=' and quoted values.
func attrOffsets(tag []byte) []attrOffset {
	var out []attrOffset
	i := 1 // skip '<'
	for i < len(tag) && !isSpace(tag[i]) && tag[i] != '>' && tag[i] != '/' {
		i++
	}
	for i < len(tag) {
		for i < len(tag) && isSpace(tag[i]) {
			i++
		}
		if i >= len(tag) || tag[i] == '>' || tag[i] == '/' {
			break
		}
		start := i
		for i < len(tag) && tag[i] != '=' && !isSpace(tag[i]) && tag[i] != '>' {
			i++
		}
		out = append(out, attrOffset{string(tag[start:i]), start})
		for i < len(tag) && (isSpace(tag[i]) || tag[i] == '=') {
			i++
		}
		if i < len(tag) && (tag[i] == '"' || tag[i] == '\'') {
			q := tag[i]
			i++
			for i < len(tag) && tag[i] != q {
				i++
			}
			i++
		}
	}
	return out
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func firstNonSpace(data []byte, off int) int {
	for i := off; i < len(data); i++ {
		if !isSpace(data[i]) {
			return i
		}
	}
	return -1
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
