package policy

import (
	"github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/diag"
)

// Attr is an attribute declaration of the attribute manifest, as the checker
// sees it (docs/selection-context.md, "attribute_manifest.jsonl").
type Attr struct {
	Name   string
	Type   bytecode.Type
	Origin bytecode.Origin
	Path   bytecode.ReqField // for Endo attributes
}

// Attrs resolves attribute names. The selector implements it over the
// attribute manifest it has read.
type Attrs interface {
	LookupAttr(name string) (Attr, bool)
}

// AttrMap is an Attrs backed by a map (tests, tools).
type AttrMap map[string]Attr

// LookupAttr implements Attrs.
func (m AttrMap) LookupAttr(name string) (Attr, bool) {
	a, ok := m[name]
	return a, ok
}

// Want is the result type an expression must have.
type Want uint8

const (
	WantAny    Want = iota // int, float or bool
	WantBool               // usability expressions
	WantNumber             // preference expressions: int or float
)

// DefaultMaxVectorLen is THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH's default.
const DefaultMaxVectorLen = 1024

// Options control one compilation.
type Options struct {
	Want Want
	// What names the expression in type errors ("" : "a usability
	// expression" for WantBool, "a preference expression" for
	// WantNumber), e.g. "channels".
	What string
	// File, Line and Col place the expression's first byte in the file it
	// came from (1-based; 0 means 1), so diagnostics point into that file.
	// Columns after the first line of the expression are its own.
	File      string
	Line, Col int
	// MaxVectorLen bounds vector literals (0: DefaultMaxVectorLen).
	MaxVectorLen int
	// NoFold skips constant folding (tests compare folded and unfolded
	// programs).
	NoFold bool
}

// Compile parses, checks, folds and compiles src. It returns the verified
// program and every diagnostic (warnings included, e.g. TS0212 for
// rank-local reads); the program is nil when any diagnostic is an error.
// Codes: TS0300 syntax, TS0301 unknown attribute or function, TS0302 type,
// TS0303 arity, TS0304 vector misuse or length, TS0305 endo path, TS0306
// size/nesting limits, TS0307 constant-folding fault, TS0212 rank-local
// (warning).
func Compile(src string, attrs Attrs, opt Options) (*bytecode.Program, []diag.Diagnostic) {
	var list diag.List
	r := &reporter{src: src, opt: &opt, list: &list}
	n := parse(r)
	if n == nil {
		return nil, list.Items
	}
	n = check(r, n, attrs)
	if n == nil || list.HasErrors() {
		return nil, list.Items
	}
	if !opt.NoFold {
		n = fold(r, n)
		if list.HasErrors() {
			return nil, list.Items
		}
	}
	p := compile(n, src)
	if err := bytecode.Verify(p); err != nil {
		// A compiler bug, never the user's: report it rather than panic.
		r.errorf(diag.PolicySyntax, 0, "report this as a Theseus bug", "internal error: compiled program fails verification: %v", err)
		return nil, list.Items
	}
	return p, list.Items
}

// Function names, reserved: attributes may not use them.
var functions = map[string]bool{
	"min": true, "max": true, "abs": true, "floor": true, "ceil": true, "log2": true, "pow": true,
	"clamp": true, "len": true, "sum": true, "minof": true, "maxof": true, "contains": true,
}

// Reserved reports whether name is a keyword or function name, which
// attribute names may not be.
func Reserved(name string) bool { return functions[name] || name == "true" || name == "false" }

// ValidName reports whether name can name an attribute: an identifier
// [A-Za-z_][A-Za-z0-9_]* of at most 64 bytes that is not Reserved.
func ValidName(name string) bool {
	if name == "" || len(name) > 64 || Reserved(name) {
		return false
	}
	for i, c := range name {
		switch {
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
