package policy

import (
	"fmt"

	"github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/diag"
)

const (
	tInt    = bytecode.Int
	tFloat  = bytecode.Float
	tBool   = bytecode.Bool
	tVector = bytecode.Vector
	tBad    = bytecode.Invalid
)

type checker struct {
	r         *reporter
	attrs     Attrs
	rankLocal bool // a rank-local warning was already given
}

// Check type-checks a parsed tree against attrs and returns it annotated
// with types, with int→float conversions made explicit (KConvert). It
// returns nil and the diagnostics when the expression is ill-typed.
func Check(n *Node, src string, attrs Attrs, opt Options) (*Node, []diag.Diagnostic) {
	var list diag.List
	r := &reporter{src: src, opt: &opt, list: &list}
	n = check(r, n, attrs)
	return n, list.Items
}

func check(r *reporter, n *Node, attrs Attrs) *Node {
	c := &checker{r: r, attrs: attrs}
	n = c.node(n)
	if n.Type == tBad {
		return nil
	}
	switch r.opt.Want {
	case WantBool:
		if n.Type != tBool {
			r.errorf(diag.PolicyType, n.Span.From, "compare the value, e.g. x > 0", "%s must be bool, this one is %s", r.opt.what("a usability expression"), n.Type)
			return nil
		}
	case WantNumber:
		if !n.Type.Numeric() {
			r.errorf(diag.PolicyType, n.Span.From, "use a number, e.g. cond ? 1 : 0", "%s must be int or float, this one is %s", r.opt.what("a preference expression"), n.Type)
			return nil
		}
	default:
		if !n.Type.Scalar() {
			r.errorf(diag.PolicyVector, n.Span.From, "", "an expression must be int, float or bool, this one is %s", n.Type)
			return nil
		}
	}
	return n
}

func (c *checker) errorf(code diag.Code, n *Node, hint, format string, args ...any) {
	c.r.errorf(code, n.Span.From, hint, format, args...)
	n.Type = tBad
}

// toFloat wraps an int node in a conversion.
func toFloat(n *Node) *Node {
	if n.Type != tInt {
		return n
	}
	return &Node{Kind: KConvert, Kids: []*Node{n}, Span: n.Span, Type: tFloat}
}

// numeric unifies numeric operands: all ints stay ints, otherwise every
// int is converted to float. It reports the first non-numeric operand.
func (c *checker) numeric(n *Node, what string) bool {
	anyFloat := false
	for _, k := range n.Kids {
		switch k.Type {
		case tInt:
		case tFloat:
			anyFloat = true
		case tVector:
			c.errorf(diag.PolicyVector, k, "", "%s needs numbers, got a vector (use len, sum, minof, maxof, contains or v[i])", what)
			return false
		default:
			c.errorf(diag.PolicyType, k, "", "%s needs numbers, got %s", what, k.Type)
			return false
		}
	}
	n.Type = tInt
	if anyFloat {
		n.Type = tFloat
		for i, k := range n.Kids {
			n.Kids[i] = toFloat(k)
		}
	}
	return true
}

func anyBad(n *Node) bool {
	for _, k := range n.Kids {
		if k.Type == tBad {
			return true
		}
	}
	return false
}

func (c *checker) node(n *Node) *Node {
	for i, k := range n.Kids {
		n.Kids[i] = c.node(k)
	}
	if anyBad(n) {
		n.Type = tBad
		return n
	}
	switch n.Kind {
	case KInt:
		n.Type = tInt
	case KFloat:
		n.Type = tFloat
	case KBool:
		n.Type = tBool
	case KVec:
		n.Type = tVector
		lim := c.r.opt.MaxVectorLen
		if lim <= 0 {
			lim = DefaultMaxVectorLen
		}
		if len(n.V) > lim {
			c.errorf(diag.PolicyVector, n, "", "vector literal of %d elements is over THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH=%d", len(n.V), lim)
		}
	case KAttr:
		a, ok := c.attrs.LookupAttr(n.Name)
		if !ok {
			if functions[n.Name] {
				c.errorf(diag.PolicyUnknown, n, fmt.Sprintf("call it: %s(...)", n.Name), "%s is a function, not an attribute", n.Name)
			} else {
				c.errorf(diag.PolicyUnknown, n, "", "unknown attribute %q", n.Name)
			}
			return n
		}
		n.Attr = a
		n.Type = a.Type
		if a.Origin == bytecode.Endo {
			if a.Path >= bytecode.NumReqFields {
				c.errorf(diag.PolicyEndoPath, n, "", "attribute %q has an unsupported endogenous path", n.Name)
				return n
			}
			if a.Type != tInt {
				c.errorf(diag.PolicyType, n, "declare endo attributes with type int", "endo attribute %q is declared %s; request fields are ints", n.Name, a.Type)
				return n
			}
			if a.Path.RankLocal() && !c.rankLocal {
				c.rankLocal = true
				c.r.add(diag.Warning, diag.RankLocalPolicy, n.Span.From, "",
					"%q reads %s, which differs between ranks: every request this policy is evaluated for costs an agreement step", n.Name, a.Path)
			}
		}
		if n.Type == tBad || n.Type >= bytecode.NumTypes {
			c.errorf(diag.PolicyType, n, "", "attribute %q has an invalid type", n.Name)
		}
	case KUnary:
		k := n.Kids[0]
		switch n.Op {
		case "-":
			if c.numeric(n, "unary -") {
				n.Type = k.Type
			}
		case "!":
			if k.Type != tBool {
				c.errorf(diag.PolicyType, k, "compare it first, e.g. x != 0", "! needs a bool, got %s", k.Type)
			} else {
				n.Type = tBool
			}
		}
	case KBinary:
		c.binary(n)
	case KLogic:
		for _, k := range n.Kids {
			if k.Type != tBool {
				c.errorf(diag.PolicyType, k, "compare it first, e.g. x != 0", "%s needs bools, got %s", n.Op, k.Type)
				n.Type = tBad
				return n
			}
		}
		n.Type = tBool
	case KTernary:
		cond, a, b := n.Kids[0], n.Kids[1], n.Kids[2]
		if cond.Type != tBool {
			c.errorf(diag.PolicyType, cond, "compare it first, e.g. x != 0", "the condition of ?: must be bool, got %s", cond.Type)
			n.Type = tBad
			return n
		}
		switch {
		case a.Type == b.Type:
			n.Type = a.Type
		case a.Type.Numeric() && b.Type.Numeric():
			n.Type = tFloat
			n.Kids[1], n.Kids[2] = toFloat(a), toFloat(b)
		default:
			c.errorf(diag.PolicyType, n, "make both branches the same type", "the branches of ?: are %s and %s", a.Type, b.Type)
		}
	case KIndex:
		v, i := n.Kids[0], n.Kids[1]
		if v.Type != tVector {
			c.errorf(diag.PolicyVector, v, "", "only vectors can be indexed, this is %s", v.Type)
			return n
		}
		if i.Type != tInt {
			c.errorf(diag.PolicyType, i, "convert with floor(x)", "a vector index must be int, got %s", i.Type)
			return n
		}
		n.Type = tFloat
	case KCall:
		c.call(n)
	}
	return n
}

func (c *checker) binary(n *Node) {
	a, b := n.Kids[0], n.Kids[1]
	switch n.Op {
	case "+", "-", "*", "/", "%":
		c.numeric(n, n.Op)
	case "==", "!=":
		switch {
		case a.Type == tBool && b.Type == tBool:
			n.Type = tBool
		case a.Type.Numeric() && b.Type.Numeric():
			c.numeric(n, n.Op)
			n.Type = tBool
		case a.Type == tVector || b.Type == tVector:
			c.errorf(diag.PolicyVector, n, "compare elements v[i], or use contains(v, x)", "vectors cannot be compared with %s", n.Op)
		default:
			c.errorf(diag.PolicyType, n, "", "cannot compare %s with %s", a.Type, b.Type)
		}
	default: // < <= > >=
		if c.numeric(n, n.Op) {
			n.Type = tBool
		}
	}
}

type signature struct {
	min, max int // argument count; max -1 = variadic
}

var signatures = map[string]signature{
	"min": {2, -1}, "max": {2, -1}, "abs": {1, 1}, "floor": {1, 1}, "ceil": {1, 1}, "log2": {1, 1},
	"pow": {2, 2}, "clamp": {3, 3}, "len": {1, 1}, "sum": {1, 1}, "minof": {1, 1}, "maxof": {1, 1},
	"contains": {2, 2},
}

func (c *checker) call(n *Node) {
	sig, ok := signatures[n.Op]
	if !ok {
		c.errorf(diag.PolicyUnknown, n, "functions: min, max, abs, floor, ceil, log2, pow, clamp, len, sum, minof, maxof, contains", "unknown function %s", n.Op)
		return
	}
	if len(n.Kids) < sig.min || sig.max >= 0 && len(n.Kids) > sig.max {
		want := fmt.Sprint(sig.min)
		if sig.max < 0 {
			want = fmt.Sprintf("at least %d", sig.min)
		}
		c.errorf(diag.PolicyArity, n, "", "%s takes %s arguments, got %d", n.Op, want, len(n.Kids))
		return
	}
	switch n.Op {
	case "min", "max", "clamp", "abs":
		c.numeric(n, n.Op)
	case "floor", "ceil":
		if c.numeric(n, n.Op) {
			n.Type = tInt
		}
	case "log2", "pow":
		if c.numeric(n, n.Op) {
			for i, k := range n.Kids {
				n.Kids[i] = toFloat(k)
			}
			n.Type = tFloat
		}
	case "len", "sum", "minof", "maxof":
		if k := n.Kids[0]; k.Type != tVector {
			c.errorf(diag.PolicyVector, k, "", "%s needs a vector, got %s", n.Op, k.Type)
			return
		}
		n.Type = tFloat
		if n.Op == "len" {
			n.Type = tInt
		}
	case "contains":
		v, x := n.Kids[0], n.Kids[1]
		if v.Type != tVector {
			c.errorf(diag.PolicyVector, v, "", "contains needs a vector first, got %s", v.Type)
			return
		}
		if !x.Type.Numeric() {
			c.errorf(diag.PolicyType, x, "", "contains looks for a number, got %s", x.Type)
			return
		}
		n.Kids[1] = toFloat(x)
		n.Type = tBool
	}
}

// what is the name of the expression in messages: o.What, else def.
func (o *Options) what(def string) string {
	if o.What != "" {
		return o.What
	}
	return def
}
