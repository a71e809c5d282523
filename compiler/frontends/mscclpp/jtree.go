package mscclpp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// jkind is the JSON type of a node.
type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jObject
	jArray
)

var jkindNames = [...]string{"null", "a boolean", "a number", "a string", "an object", "an array"}

func (k jkind) String() string { return jkindNames[k] }

// jnode is one JSON value with the byte offset where it starts. Objects
// keep their members in source order.
type jnode struct {
	kind jkind
	off  int
	str  string // string value, or the literal text of a number
	b    bool
	mem  []jmember // object members
	arr  []*jnode  // array elements
}

type jmember struct {
	key    string
	keyOff int
	val    *jnode
}

// get returns the member called key (the first one, duplicates are
// reported when the tree is built), or nil.
func (n *jnode) get(key string) *jnode {
	if n == nil || n.kind != jObject {
		return nil
	}
	for i := range n.mem {
		if n.mem[i].key == key {
			return n.mem[i].val
		}
	}
	return nil
}

// has reports whether the object has member key.
func (n *jnode) has(key string) bool { return n.get(key) != nil }

// jerror is a failure to build the tree: a syntax error, a duplicate key
// or a limit, at byte offset off.
type jerror struct {
	off      int
	msg      string
	tooLarge bool
	dupKey   bool
}

// buildTree decodes data with encoding/json's token stream, keeping the
// start offset of every value. Between two tokens encoding/json consumes
// only white space, ',' and ':', so a value starts at the first other byte
// after the end of the previous token.
func buildTree(data []byte, maxDepth int) (*jnode, *jerror) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	startOf := func(end int) int {
		for end < len(data) {
			switch data[end] {
			case ' ', '\t', '\n', '\r', ',', ':':
				end++
				continue
			}
			break
		}
		return end
	}
	var parse func(depth int) (*jnode, *jerror)
	fail := func(err error) *jerror {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return &jerror{off: int(se.Offset), msg: se.Error()}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &jerror{off: len(data), msg: "unexpected end of input"}
		}
		return &jerror{off: int(dec.InputOffset()), msg: err.Error()}
	}
	parse = func(depth int) (*jnode, *jerror) {
		off := startOf(int(dec.InputOffset()))
		tok, err := dec.Token()
		if err != nil {
			return nil, fail(err)
		}
		n := &jnode{off: off}
		switch t := tok.(type) {
		case nil:
			n.kind = jNull
		case bool:
			n.kind, n.b = jBool, t
		case json.Number:
			n.kind, n.str = jNumber, string(t)
		case string:
			n.kind, n.str = jString, t
		case json.Delim:
			if depth >= maxDepth {
				return nil, &jerror{off: off, msg: "nesting deeper than the limit", tooLarge: true}
			}
			switch t {
			case '{':
				n.kind = jObject
				seen := map[string]bool{}
				for dec.More() {
					koff := startOf(int(dec.InputOffset()))
					kt, err := dec.Token()
					if err != nil {
						return nil, fail(err)
					}
					key, ok := kt.(string)
					if !ok {
						return nil, &jerror{off: koff, msg: "object key is not a string"}
					}
					if seen[key] {
						return nil, &jerror{off: koff, msg: "duplicate key \"" + key + "\"", dupKey: true}
					}
					seen[key] = true
					v, jerr := parse(depth + 1)
					if jerr != nil {
						return nil, jerr
					}
					n.mem = append(n.mem, jmember{key: key, keyOff: koff, val: v})
				}
				if _, err := dec.Token(); err != nil { // '}'
					return nil, fail(err)
				}
			case '[':
				n.kind = jArray
				for dec.More() {
					v, jerr := parse(depth + 1)
					if jerr != nil {
						return nil, jerr
					}
					n.arr = append(n.arr, v)
				}
				if _, err := dec.Token(); err != nil { // ']'
					return nil, fail(err)
				}
			default:
				return nil, &jerror{off: off, msg: "unexpected " + t.String()}
			}
		}
		return n, nil
	}
	root, jerr := parse(0)
	if jerr != nil {
		return nil, jerr
	}
	off := startOf(int(dec.InputOffset()))
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, fail(err)
		}
		return nil, &jerror{off: off, msg: "data after the top-level value"}
	}
	return root, nil
}
